"""The length model of the list families (sequence, hidden Markov, Markov chain, multinomial), one mixin
per role: :class:`LengthModel` (the distribution's optional ``len_dist``: scoring, sampling, its
estimator and encoder), :class:`LengthEncoding` (the encoder's optional ``len_encoder``, with its scan,
unseen rows and union), :class:`LengthAccumulation` (the accumulator's optional ``len_acc``, whose
statistics are one entry of the family's value, None without a length model) and
:class:`LengthEstimation` (the estimator's optional ``len_estimator``)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from mixle_spark.errors import DataValueError, FieldError, SpecError
from mixle_spark.stats._accumulator import Accumulator, seq_update_with_ll
from mixle_spark.stats._encoder import Encoder
from mixle_spark.stats._product import as_record_list
from mixle_spark.stats._random import RowRandom
from mixle_spark.stats._sampler import Sampler
from mixle_spark.stats.base import Distribution, Estimator, check_parameter

__all__ = [
    "LengthAccumulation",
    "LengthEncoding",
    "LengthEstimation",
    "LengthModel",
    "check_length_model",
    "draw_lengths",
    "encode_lengths",
]


def check_length_model(family: str, len_dist: Any) -> None:
    """Raise SpecError naming ``family`` and the value unless ``len_dist`` is a Distribution or None."""
    ok = len_dist is None or isinstance(len_dist, Distribution)
    check_parameter(ok, family, "len_dist", len_dist, "a Distribution or None")


def draw_lengths(lengths: Sampler, size: int) -> np.ndarray:
    """``size`` lengths from the length model's sampler, as int64; a DataValueError names a draw
    that is not a non-negative integer."""
    raw = np.asarray(as_record_list(lengths.sample(size)), dtype=np.float64)
    bad = (raw < 0) | (raw != np.floor(raw))
    if bad.any():
        raise DataValueError("len_dist must draw non-negative integer lengths", value=float(raw[bad][0]))
    return raw.astype(np.int64)


def encode_lengths(len_encoder: Encoder, lengths: Any, what: str = "sequence length") -> Any:
    """The lengths (an array, or an encoded batch's ``lengths``) encoded by ``len_encoder``; an
    error names ``what`` was being read."""
    lengths = np.asarray(getattr(lengths, "lengths", lengths)).astype(np.int64)
    try:
        return len_encoder.from_arrow(pa.array(lengths, type=pa.int64()))
    except FieldError as err:
        raise type(err)(
            f"{what}: {err.detail}",
            value=err.value,
            row=err.row,
            n_rows=err.n_rows,
            count=err.count,
            path=err.path,
        ) from err


class LengthEncoding:
    """Mixin of the encoders with an optional length encoder (``len_encoder``)."""

    len_encoder: Encoder | None
    length_name: ClassVar[str] = "sequence length"

    def encoded_lengths(self, lengths: Any) -> Any:
        return (
            None if self.len_encoder is None else encode_lengths(self.len_encoder, lengths, self.length_name)
        )

    @property
    def lengths_need_scan(self) -> bool:
        return self.len_encoder is not None and self.len_encoder.needs_scan

    def scan_lengths(self, lengths: np.ndarray) -> Any:
        if not self.lengths_need_scan:
            return None
        return self.len_encoder.scan_arrow(pa.array(lengths, type=pa.int64()))  # type: ignore[union-attr]

    def merge_length_scans(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        return self.len_encoder.merge_scans(a, b)  # type: ignore[union-attr]

    def lengths_with_unseen(self, unseen: str) -> Encoder | None:
        return None if self.len_encoder is None else self.len_encoder.with_unseen(unseen)

    def unseen_lengths(self, len_enc: Any) -> np.ndarray | None:
        return None if self.len_encoder is None else self.len_encoder.unseen_rows(len_enc)

    def union_lengths(self, other: LengthEncoding) -> Encoder | None:
        if self.len_encoder is None or other.len_encoder is None:
            return self.len_encoder or other.len_encoder
        return self.len_encoder.union(other.len_encoder)


class LengthModel:
    """Mixin of the distributions with an optional length model ``len_dist``."""

    len_dist: Distribution | None
    length_name: ClassVar[str] = "sequence length"

    def length_log_density(self, len_enc: Any, lengths: Any) -> np.ndarray | float:
        """``len_dist``'s log-density of each row's length, as float64 (0.0 without ``len_dist``):
        ``len_enc`` is the batch's length encoding, None when its encoder had no length encoder (then
        ``lengths`` are encoded now)."""
        if self.len_dist is None:
            return 0.0
        if len_enc is None:
            len_enc = encode_lengths(self.len_dist.encoder(), lengths, self.length_name)
        return np.asarray(self.len_dist.seq_log_density(len_enc), dtype=np.float64)

    def sampled_lengths(self) -> Distribution:
        """``len_dist``, which sampling needs: a SpecError naming the family when it is None."""
        if self.len_dist is None:
            raise SpecError(
                f"{type(self).__name__}: sampling needs len_dist (the distribution of the "
                f"{self.length_name}), got None"
            )
        return self.len_dist

    def length_estimator(self, pseudo_count: float | None) -> Estimator | None:
        return None if self.len_dist is None else self.len_dist.estimator(pseudo_count)

    def length_encoder(self) -> Encoder | None:
        return None if self.len_dist is None else self.len_dist.encoder()


class LengthAccumulation:
    """Mixin of the accumulators with an optional length accumulator ``len_acc``."""

    len_acc: Accumulator | None
    length_name: ClassVar[str] = "sequence length"

    def length_encoding(self, len_enc: Any, lengths: Any, encoder: Encoder | None = None) -> Any:
        """The batch's length encoding ``len_enc``, or, when its encoder had no length encoder,
        ``lengths`` encoded now by ``encoder`` (default: the length accumulator's)."""
        if len_enc is not None:
            return len_enc
        if encoder is None:
            encoder = self.len_acc.make_encoder()  # type: ignore[union-attr]
        return encode_lengths(encoder, lengths, self.length_name)

    def update_lengths(
        self, len_enc: Any, lengths: Any, weights: np.ndarray, len_dist: Distribution | None
    ) -> np.ndarray | float:
        """Add the weighted lengths to ``len_acc`` (when there is one) and return ``len_dist``'s
        log-density of them (0.0 without ``len_dist``), scoring them once."""
        if self.len_acc is None:
            if len_dist is None:
                return 0.0
            len_enc = self.length_encoding(len_enc, lengths, len_dist.encoder())
            return np.asarray(len_dist.seq_log_density(len_enc), dtype=np.float64)
        len_enc = self.length_encoding(len_enc, lengths)
        if len_dist is None:
            self.len_acc.seq_update(len_enc, weights, None)
            return 0.0
        return seq_update_with_ll(self.len_acc, len_enc, weights, len_dist)

    def initialize_lengths(self, len_enc: Any, lengths: Any, weights: np.ndarray, rng: RowRandom) -> None:
        """Randomised initial length statistics (from ``rng.child("len")``), when there is a length model."""
        if self.len_acc is not None:
            self.len_acc.seq_initialize(self.length_encoding(len_enc, lengths), weights, rng.child("len"))

    def length_value(self) -> Any:
        return None if self.len_acc is None else self.len_acc.value()

    def combine_lengths(self, len_value: Any) -> None:
        if self.len_acc is not None:
            self.len_acc.combine(len_value)

    def lengths_from_value(self, len_value: Any) -> None:
        if self.len_acc is not None:
            self.len_acc.from_value(len_value)

    def length_parts(self) -> list[Accumulator]:
        return [] if self.len_acc is None else [self.len_acc]

    def scale_lengths(self, factor: float) -> None:
        if self.len_acc is not None:
            self.len_acc._scale(factor)

    def widened_lengths(self, target: LengthAccumulation) -> Any:
        """The length statistics over ``target``'s length vocabulary (None without a length model)."""
        mine, theirs = self.len_acc, target.len_acc
        if mine is not None and theirs is not None:
            return mine.widened(theirs)
        if mine is None and theirs is None:
            return None
        raise SpecError(
            f"{type(self).__name__}.widened: the target {'lacks' if theirs is None else 'has'} a length "
            f"model that this accumulator {'has' if theirs is None else 'lacks'}"
        )

    def fresh_lengths(self) -> Accumulator | None:
        return None if self.len_acc is None else self.len_acc.make()

    def length_encoder(self) -> Encoder | None:
        return None if self.len_acc is None else self.len_acc.make_encoder()


class LengthEstimation:
    """Mixin of the estimators with an optional length estimator ``len_estimator``."""

    len_estimator: Estimator | None

    def length_accumulator(self) -> Accumulator | None:
        return None if self.len_estimator is None else self.len_estimator.accumulator()

    def length_encoder(self) -> Encoder | None:
        return None if self.len_estimator is None else self.len_estimator.encoder()

    def length_with_scan(self, len_scan: Any) -> Estimator | None:
        """The length estimator with the length scan ``len_scan`` applied (when both exist)."""
        if len_scan is None or self.len_estimator is None:
            return self.len_estimator
        return self.len_estimator.with_scan(len_scan)

    def length_estimate(self, row_weight: float, len_value: Any) -> Distribution | None:
        """The fitted length model (None without a length estimator)."""
        if self.len_estimator is None:
            return None
        return self.len_estimator.estimate(float(row_weight), len_value)

    def length_min_rows(self) -> int:
        return 1 if self.len_estimator is None else self.len_estimator.min_rows()
