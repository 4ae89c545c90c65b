"""Variable-length sequences: ``SequenceDistribution(dist, len_dist=None)``.

A record is a list (or 1-D numpy array) of elements drawn independently from ``dist``; its length
is scored by ``len_dist`` when given:
``log p(x) = Σ_j dist.log_density(x[j]) + len_dist.log_density(len(x))``.

In Arrow a sequence is a ``list`` / ``large_list`` column: the encoder reads its offsets and the
flattened values without copying (sliced arrays included), so all elements of a batch are scored in
one vectorized call and summed back per row with ``np.bincount``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from mixle_spark.errors import DataTypeError, DataValueError, FieldError, SchemaError
from mixle_spark.stats._accumulator import widening_target
from mixle_spark.stats._embed import length_scales, segment_mean, with_length
from mixle_spark.stats._encoder import any_unseen, unseen_owners
from mixle_spark.stats._lengths import (
    LengthAccumulation,
    LengthEncoding,
    LengthEstimation,
    LengthModel,
    check_length_model,
    draw_lengths,
)
from mixle_spark.stats._product import as_record_list
from mixle_spark.stats._validate import as_arrow_array, first_true
from mixle_spark.stats.base import (
    Accumulator,
    Distribution,
    Encoder,
    Estimator,
    RowRandom,
    Sampler,
    check_parameter,
    estimator_option,
    free_parameters,
    part,
    register_distribution,
    register_estimator,
    seq_update_with_ll,
)

__all__ = [
    "SequenceAccumulator",
    "SequenceDistribution",
    "SequenceEncoded",
    "SequenceEncoder",
    "SequenceEstimator",
]


class SequenceEncoded(NamedTuple):
    """``n`` rows; ``lengths`` (int64, shape (n,)); ``owner`` (row of each element, shape (m,));
    ``values`` the child encoding of all m elements; ``len_enc`` the length encoding or None."""

    n: int
    lengths: np.ndarray
    owner: np.ndarray
    values: Any
    len_enc: Any


def _row_sums(owner: np.ndarray, element_values: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(owner, weights=element_values, minlength=n).astype(np.float64, copy=False)


@register_distribution("sequence")
class SequenceDistribution(LengthModel, Distribution):
    """Independent elements from ``dist``, and optionally a length model ``len_dist``.

    Parameters
    ----------
    dist : Distribution
        Model of each element.
    len_dist : Distribution, optional
        Model of the length (a count family, e.g. Poisson). Required for sampling.
    """

    parameters = (part("dist"), part("len_dist", optional=True))

    def __init__(self, dist: Distribution, len_dist: Distribution | None = None) -> None:
        check_parameter(
            isinstance(dist, Distribution), "SequenceDistribution", "dist", dist, "a Distribution"
        )
        check_length_model("SequenceDistribution", len_dist)
        self.dist = dist
        self.len_dist = len_dist

    def sampling_parts(self) -> list[Distribution]:
        return [self.sampled_lengths(), self.dist]

    def draw_with(self, sampler: Sampler, size: int | None = None) -> Any:
        """A length from ``len_dist``, then that many elements; records are lists."""
        lengths_sampler, elements = sampler.parts
        lengths = draw_lengths(lengths_sampler, 1 if size is None else size)
        total = int(lengths.sum())
        values = as_record_list(elements.sample(total)) if total else []
        ends = np.cumsum(lengths)
        out = [values[e - k : e] for e, k in zip(ends.tolist(), lengths.tolist(), strict=True)]
        return out[0] if size is None else out

    def log_density(self, x: Sequence[Any]) -> float:
        total = 0.0
        for value in x:
            total += self.dist.log_density(value)
        if self.len_dist is not None:
            total += self.len_dist.log_density(len(x))
        return total

    def seq_log_density(self, enc: SequenceEncoded) -> np.ndarray:
        out = _row_sums(enc.owner, self.dist.seq_log_density(enc.values), enc.n)
        if self.len_dist is not None:
            out += self.length_log_density(enc.len_enc, enc.lengths)
        return out

    def estimator(self, pseudo_count: float | None = None) -> SequenceEstimator:
        return SequenceEstimator(self.dist.estimator(pseudo_count), self.length_estimator(pseudo_count))

    def encoder(self) -> SequenceEncoder:
        return SequenceEncoder(self.dist.encoder(), self.length_encoder())

    def n_free_parameters(self) -> int:
        return self.estimator().n_free_parameters(self)


class SequenceEncoder(LengthEncoding, Encoder):
    """Reads lists / arrays of elements, or an Arrow ``list`` / ``large_list`` column."""

    def __init__(self, child: Encoder, len_encoder: Encoder | None = None) -> None:
        self.child = child
        self.len_encoder = len_encoder

    def _flatten(self, records: Sequence[Any]) -> tuple[int, np.ndarray, Any]:
        n = len(records)
        for i, r in enumerate(records):
            if r is None:
                raise DataValueError(
                    "expected a sequence (a missing value needs OptionalEstimator)",
                    value=None,
                    row=i,
                    n_rows=n,
                )
            if isinstance(r, (str, bytes, Mapping)) or not isinstance(r, (Sequence, np.ndarray)):
                raise DataTypeError(
                    "expected a sequence (list or array) of elements", value=r, row=i, n_rows=n
                )
        lengths = np.fromiter((len(r) for r in records), dtype=np.int64, count=n)
        if n and all(isinstance(r, np.ndarray) and r.ndim == 1 for r in records):
            values: Any = np.concatenate(records)
        else:
            values = list(itertools.chain.from_iterable(records))
        return n, lengths, values

    def _flatten_arrow(self, data: Any) -> tuple[int, np.ndarray, Any]:
        array = data
        if isinstance(data, (pa.Table, pa.RecordBatch)):
            if data.num_columns != 1:
                raise SchemaError(f"expected one list column for SequenceEstimator, got {data.schema.names}")
            array = data.column(0)
        if isinstance(array, pa.ChunkedArray):
            array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
        if not isinstance(array, (pa.ListArray, pa.LargeListArray)):
            typ = getattr(array, "type", type(array).__name__)
            raise SchemaError(f"expected a list column for SequenceEstimator, got Arrow type {typ}")
        n = len(array)
        if array.null_count:
            mask = np.asarray(array.is_null().to_numpy(zero_copy_only=False))
            raise DataValueError(
                "expected a sequence (a missing list needs OptionalEstimator)",
                value=None,
                row=first_true(mask),
                n_rows=n,
                count=int(mask.sum()),
            )
        offsets = np.asarray(array.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        start, stop = int(offsets[0]), int(offsets[-1])
        # ``values`` ignores the slice of a sliced array; ``offsets`` do not, so cut the values to match.
        values = array.values.slice(start, stop - start)
        return n, np.diff(offsets), values

    def narrow(self, enc: SequenceEncoded, dtype: Any) -> SequenceEncoded:
        """The elements narrowed by the element encoder; lengths, owners and the length encoding (a count
        family's) stay as they are."""
        return enc._replace(values=self.child.narrow(enc.values, dtype))

    def _build(self, method: str, n: int, lengths: np.ndarray, values: Any) -> SequenceEncoded:
        owner = np.repeat(np.arange(n, dtype=np.int64), lengths)
        try:
            child = getattr(self.child, method)(values)
        except FieldError as err:
            raise err.in_rows(owner, n) from err
        len_enc = self.encoded_lengths(lengths)
        return SequenceEncoded(n, lengths, owner, child, len_enc)

    def encode(self, records: Sequence[Any]) -> SequenceEncoded:
        return self._build("encode", *self._flatten(records))

    def from_arrow(self, data: Any) -> SequenceEncoded:
        return self._build("from_arrow", *self._flatten_arrow(data))

    def with_unseen(self, unseen: str) -> SequenceEncoder:
        child = self.child.with_unseen(unseen)
        len_encoder = self.lengths_with_unseen(unseen)
        if child is self.child and len_encoder is self.len_encoder:
            return self
        return SequenceEncoder(child, len_encoder)

    def unseen_rows(self, enc: SequenceEncoded) -> np.ndarray | None:
        elements = unseen_owners(self.child.unseen_rows(enc.values), enc.owner, enc.n)
        return any_unseen((elements, self.unseen_lengths(enc.len_enc)))

    @property
    def compacts(self) -> bool:
        return self.child.compacts

    def compact_arrow(self, data: Any) -> Any:
        """The same lists with their elements in the child's compact form."""
        if not self.child.compacts:
            return data
        n, lengths, values = self._flatten_arrow(data)
        try:
            compact = as_arrow_array(self.child.compact_arrow(values))
        except FieldError as err:
            raise err.in_rows(np.repeat(np.arange(n), lengths), n) from err
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        out = pa.LargeListArray if len(compact) > np.iinfo(np.int32).max else pa.ListArray
        lists = out.from_arrays(
            pa.array(offsets, pa.int64() if out is pa.LargeListArray else pa.int32()), compact
        )
        if isinstance(data, (pa.Table, pa.RecordBatch)):
            return type(data).from_arrays([lists], names=[data.schema.names[0]])
        return lists

    def check_arrow_type(self, arrow_type: Any) -> None:
        if not (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)):
            raise SchemaError(f"expected a list column for SequenceEstimator, got Arrow type {arrow_type}")
        try:
            self.child.check_arrow_type(arrow_type.value_type)
        except SchemaError as err:
            raise SchemaError(f"list element: {err}") from err

    def expected_arrow(self) -> str:
        return f"a list column of ({self.child.expected_arrow()})"

    @property
    def needs_scan(self) -> bool:
        return self.child.needs_scan or self.lengths_need_scan

    def _scan(self, method: str, n: int, lengths: np.ndarray, values: Any) -> Any:
        if not self.needs_scan:
            return None
        child_scan = None
        if self.child.needs_scan:
            try:
                child_scan = getattr(self.child, method)(values)
            except FieldError as err:
                raise err.in_rows(np.repeat(np.arange(n), lengths), n) from err
        return (child_scan, self.scan_lengths(lengths))

    def scan(self, records: Sequence[Any]) -> Any:
        return self._scan("scan", *self._flatten(records))

    def scan_arrow(self, data: Any) -> Any:
        return self._scan("scan_arrow", *self._flatten_arrow(data))

    def merge_scans(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a

        child = b[0] if a[0] is None else a[0] if b[0] is None else self.child.merge_scans(a[0], b[0])
        return (child, self.merge_length_scans(a[1], b[1]))

    @property
    def rebases(self) -> bool:
        return self.child.rebases and (self.len_encoder is None or self.len_encoder.rebases)

    def rebase(self, enc: SequenceEncoded) -> SequenceEncoded:
        len_enc = enc.len_enc if self.len_encoder is None else self.len_encoder.rebase(enc.len_enc)
        return SequenceEncoded(enc.n, enc.lengths, enc.owner, self.child.rebase(enc.values), len_enc)

    def union(self, other: Encoder) -> Encoder:
        if not isinstance(other, SequenceEncoder):
            raise TypeError(f"cannot combine encoders {self!r} and {other!r}")
        return SequenceEncoder(self.child.union(other.child), self.union_lengths(other))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, SequenceEncoder)
            and other.child == self.child
            and other.len_encoder == self.len_encoder
        )

    def __hash__(self) -> int:
        return hash(("SequenceEncoder", hash(self.child)))

    def __repr__(self) -> str:
        return f"SequenceEncoder({self.child!r}, {self.len_encoder!r})"

    def embedding_scales(self) -> np.ndarray:
        return length_scales(self.child.embedding_scales(), self.len_encoder is not None)

    def embedding_groups(self) -> np.ndarray:
        groups = np.asarray(self.child.embedding_groups(), dtype=np.int64)
        if self.len_encoder is None:
            return groups
        return np.append(groups, int(groups.max()) + 1 if len(groups) else 0)  # the length

    def embed(self, enc: Any) -> np.ndarray:
        """The mean of the elements' embeddings (label frequencies for labels), then ``log1p(length)``
        when the model has a length distribution."""
        width = len(self.child.embedding_scales())
        elements = self.child.embed(enc.values) if len(enc.owner) else np.zeros((0, width))
        return with_length(
            segment_mean(enc.n, enc.owner, elements), None if self.len_encoder is None else enc.lengths
        )


class SequenceAccumulator(LengthAccumulation, Accumulator):
    """Element statistics (each element weighted by its row's weight) and length statistics.

    Value: ``(row_weight, element_weight, element_value, length_value or None)``.
    """

    def __init__(self, child: Accumulator, len_acc: Accumulator | None = None, keys: Any = None) -> None:
        self.child = child
        self.len_acc = len_acc
        self.keys = keys
        self.row_weight = 0.0
        self.element_weight = 0.0

    def _count(self, enc: SequenceEncoded, weights: np.ndarray) -> np.ndarray:
        self.row_weight += float(weights.sum())
        self.element_weight += float(np.dot(weights, enc.lengths))
        return weights[enc.owner]

    def seq_update(self, enc: SequenceEncoded, weights: np.ndarray, estimate: Any) -> np.ndarray | None:
        w_elem = self._count(enc, weights)
        if estimate is None:
            self.child.seq_update(enc.values, w_elem, None)
            self.update_lengths(enc.len_enc, enc.lengths, weights, None)
            return None
        ll = _row_sums(enc.owner, seq_update_with_ll(self.child, enc.values, w_elem, estimate.dist), enc.n)
        if self.len_acc is not None or estimate.len_dist is not None:
            ll += self.update_lengths(enc.len_enc, enc.lengths, weights, estimate.len_dist)
        return ll

    def seq_initialize(self, enc: SequenceEncoded, weights: np.ndarray, rng: RowRandom) -> None:
        w_elem = self._count(enc, weights)
        self.child.seq_initialize(enc.values, w_elem, rng.expand(enc.lengths))
        self.initialize_lengths(enc.len_enc, enc.lengths, weights, rng)

    def combine(self, value: Any) -> SequenceAccumulator:
        row_weight, element_weight, child_value, len_value = value
        self.row_weight += float(row_weight)
        self.element_weight += float(element_weight)
        self.child.combine(child_value)
        self.combine_lengths(len_value)
        return self

    def value(self) -> tuple[float, float, Any, Any]:
        return (self.row_weight, self.element_weight, self.child.value(), self.length_value())

    def _scale(self, factor: float) -> None:
        self.row_weight *= factor
        self.element_weight *= factor
        self.child._scale(factor)
        self.scale_lengths(factor)

    def widened(self, target: Accumulator) -> tuple[float, float, Any, Any]:
        other = widening_target(self, target)
        child = self.child.widened(other.child)
        return (self.row_weight, self.element_weight, child, self.widened_lengths(other))

    def from_value(self, value: Any) -> SequenceAccumulator:
        row_weight, element_weight, child_value, len_value = value
        self.row_weight, self.element_weight = float(row_weight), float(element_weight)
        self.child.from_value(child_value)
        self.lengths_from_value(len_value)
        return self

    def make_encoder(self) -> SequenceEncoder:
        return SequenceEncoder(self.child.make_encoder(), self.length_encoder())

    def parts(self) -> list[Accumulator]:
        return [self.child, *self.length_parts()]

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.child.make(), self.fresh_lengths(), self.keys)


@register_estimator("sequence")
@dataclass(eq=False, repr=False)
class SequenceEstimator(LengthEstimation, Estimator):
    """Fits the element model to all elements (weighted by their row's weight) and, when given,
    the length model to the lengths.

    Parameters
    ----------
    estimator : Estimator
        Element estimator.
    len_estimator : Estimator, optional
        Length estimator (a count family); without it the fitted model has ``len_dist=None``.
    name, keys : str, optional
    """

    estimator: Estimator = estimator_option(required=True)
    len_estimator: Estimator | None = estimator_option()
    name: str | None = None
    keys: str | None = None

    def accumulator_factory(self) -> SequenceAccumulator:
        return SequenceAccumulator(self.estimator.accumulator(), self.length_accumulator(), self.keys)

    def estimate(self, nobs: float | None, value: Any) -> SequenceDistribution:
        row_weight, element_weight, child_value, len_value = value
        dist = self.estimator.estimate(element_weight, child_value)
        return SequenceDistribution(dist, self.length_estimate(row_weight, len_value))

    def encoder(self) -> SequenceEncoder:
        return SequenceEncoder(self.estimator.encoder(), self.length_encoder())

    def with_scan(self, scan: Any) -> SequenceEstimator:
        if scan is None:
            return self
        child_scan, len_scan = scan
        est = self.estimator if child_scan is None else self.estimator.with_scan(child_scan)
        return dataclasses.replace(self, estimator=est, len_estimator=self.length_with_scan(len_scan))

    def min_rows(self) -> int:
        return max(self.estimator.min_rows(), self.length_min_rows())

    def _free_parameters(self, model: Any, tied: set[Any]) -> int:
        elements = self.estimator.n_free_parameters(model.dist, tied)
        return elements + free_parameters(self.len_estimator, model.len_dist, tied)
