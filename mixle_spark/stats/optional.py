"""Missing values: ``OptionalDistribution(dist, p)``.

A record is missing when it is ``None`` (a null in Arrow) or, for numbers, a float NaN. With ``p``
(the probability of missing) a missing row scores ``log p`` and a present one
``log(1 - p) + dist.log_density(x)``; with ``p=None`` missing rows are marginalized out (they score
0 and leave the child's statistics untouched), which is what imputation-free EM over incomplete
records needs.

The encoding is ``OptionalEncoded(n, present_index, child)``: the child sees only the present rows,
so leaves never deal with nulls, and a child's error is re-mapped to the row of the enclosing batch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mixle_spark.errors import FieldError
from mixle_spark.stats._accumulator import widening_target
from mixle_spark.stats._embed import scatter_rows
from mixle_spark.stats._product import as_record_list
from mixle_spark.stats._validate import as_arrow_array
from mixle_spark.stats.base import (
    Accumulator,
    Distribution,
    Encoder,
    Estimator,
    Parameter,
    RowRandom,
    Sampler,
    check_parameter,
    estimator_option,
    option,
    part,
    register_distribution,
    register_estimator,
    seq_update_with_ll,
)

__all__ = [
    "OptionalAccumulator",
    "OptionalDistribution",
    "OptionalEncoded",
    "OptionalEncoder",
    "OptionalEstimator",
    "is_missing",
]


class OptionalEncoded(NamedTuple):
    """``n`` rows of which those at ``present_index`` (int64, increasing) are encoded in ``child``."""

    n: int
    present_index: np.ndarray
    child: Any


def is_missing(x: Any) -> bool:
    """True for ``None`` and float NaN (how pandas spells a missing number)."""
    return x is None or (isinstance(x, (float, np.floating)) and math.isnan(x))


def _log(p: float) -> float:
    return math.log(p) if p > 0.0 else -math.inf


@register_distribution("optional")
class OptionalDistribution(Distribution):
    """A child distribution over present values, and the probability ``p`` of a missing value.

    Parameters
    ----------
    dist : Distribution
        Model of the present values.
    p : float in [0, 1], optional
        Probability that a value is missing; None marginalizes missing values (they score 0).
    """

    parameters = (part("dist"), Parameter("p", default=None))

    def __init__(self, dist: Distribution, p: float | None = None) -> None:
        check_parameter(
            isinstance(dist, Distribution), "OptionalDistribution", "dist", dist, "a Distribution"
        )
        check_parameter(
            p is None or (isinstance(p, (int, float)) and 0.0 <= p <= 1.0),
            "OptionalDistribution",
            "p",
            p,
            "a probability in [0, 1] or None",
        )
        self.dist = dist
        self.p = None if p is None else float(p)
        self._log_missing = 0.0 if p is None else _log(self.p)  # type: ignore[arg-type]
        self._log_present = 0.0 if p is None else _log(1.0 - self.p)  # type: ignore[operator]

    def sampling_parts(self) -> list[Distribution]:
        return [self.dist]

    def draw_with(self, sampler: Sampler, size: int | None = None) -> Any:
        """``None`` with probability ``p`` (never when ``p`` is None), else a draw of ``dist``."""
        rng, (child,) = sampler.rng, sampler.parts
        p = self.p or 0.0
        if size is None:
            return None if rng.random() < p else child.sample()
        missing = rng.random(size) < p
        present = as_record_list(child.sample(int(size - missing.sum())))
        out: list[Any] = [None] * size
        for i, value in zip(np.flatnonzero(~missing), present, strict=True):
            out[i] = value
        return out

    def log_density(self, x: Any) -> float:
        if is_missing(x):
            return self._log_missing
        return self._log_present + self.dist.log_density(x)

    def seq_log_density(self, enc: OptionalEncoded) -> np.ndarray:
        out = np.full(enc.n, self._log_missing)
        if len(enc.present_index):
            out[enc.present_index] = self._log_present + self.dist.seq_log_density(enc.child)
        return out

    def estimator(self, pseudo_count: float | None = None) -> OptionalEstimator:
        return OptionalEstimator(
            self.dist.estimator(pseudo_count), pseudo_count=pseudo_count, model_missing=self.p is not None
        )

    def encoder(self) -> OptionalEncoder:
        return OptionalEncoder(self.dist.encoder())

    def n_free_parameters(self) -> int:
        return self.estimator().n_free_parameters(self)


class OptionalEncoder(Encoder):
    """Finds the missing rows (None / NaN; Arrow nulls and floating NaN) and encodes the rest with
    the child encoder."""

    def __init__(self, child: Encoder) -> None:
        self.child = child

    def _split(self, records: Sequence[Any]) -> tuple[int, np.ndarray, Any]:
        n = len(records)
        if isinstance(records, np.ndarray) and records.ndim == 1 and records.dtype.kind == "f":
            present = np.flatnonzero(~np.isnan(records))
            return n, present, records[present]
        mask = np.fromiter((not is_missing(x) for x in records), dtype=bool, count=n)
        present = np.flatnonzero(mask)
        if isinstance(records, np.ndarray):
            return n, present, records[present]
        return n, present, [records[i] for i in present.tolist()]

    def _split_arrow(self, data: Any) -> tuple[int, np.ndarray, Any]:
        if isinstance(data, (pa.Table, pa.RecordBatch)):  # a table row is never null as a whole
            return data.num_rows, np.arange(data.num_rows, dtype=np.int64), data
        array = data
        if isinstance(data, pa.ChunkedArray):
            array = data.chunk(0) if data.num_chunks == 1 else data.combine_chunks()
        mask = array.is_valid()
        if pa.types.is_floating(array.type):
            mask = pc.and_(mask, pc.invert(pc.fill_null(pc.is_nan(array), False)))
        n = len(array)
        keep = np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
        present = np.flatnonzero(keep)
        if len(present) == n:  # nothing missing: hand the child the original buffers
            return n, present, array
        return n, present, array.filter(mask)

    def _child_call(self, method: str, n: int, present: np.ndarray, values: Any) -> Any:
        try:
            return getattr(self.child, method)(values)
        except FieldError as err:
            raise err.in_rows(present, n) from err

    def encode(self, records: Sequence[Any]) -> OptionalEncoded:
        n, present, values = self._split(records)
        return OptionalEncoded(n, present, self._child_call("encode", n, present, values))

    def from_arrow(self, data: Any) -> OptionalEncoded:
        n, present, values = self._split_arrow(data)
        return OptionalEncoded(n, present, self._child_call("from_arrow", n, present, values))

    def narrow(self, enc: OptionalEncoded, dtype: Any) -> OptionalEncoded:
        """The present values narrowed by the child encoder (the row index stays int64)."""
        return enc._replace(child=self.child.narrow(enc.child, dtype))

    def with_unseen(self, unseen: str) -> OptionalEncoder:
        child = self.child.with_unseen(unseen)
        return self if child is self.child else OptionalEncoder(child)

    def unseen_rows(self, enc: OptionalEncoded) -> np.ndarray | None:
        present = self.child.unseen_rows(enc.child)
        if present is None:
            return None
        rows = np.zeros(enc.n, dtype=bool)
        rows[enc.present_index] = present
        return rows

    @property
    def compacts(self) -> bool:
        return self.child.compacts

    def compact_arrow(self, data: Any) -> Any:
        """The child's compact form of the present values, with nulls where values are missing."""
        if not self.child.compacts or isinstance(data, (pa.Table, pa.RecordBatch)):
            return self.child.compact_arrow(data) if self.child.compacts else data
        n, present, values = self._split_arrow(data)
        compact = as_arrow_array(self._child_call("compact_arrow", n, present, values))
        if len(present) == n:
            return compact
        index = np.zeros(n, dtype=np.int64)
        index[present] = np.arange(len(present))
        missing = np.ones(n, dtype=bool)
        missing[present] = False
        return compact.take(pa.array(index, mask=missing))

    def column_names(self) -> list[str] | None:
        # A table row is never missing as a whole, so an Optional record reads its child's columns.
        return self.child.column_names()

    def check_arrow_type(self, arrow_type: Any) -> None:
        self.child.check_arrow_type(arrow_type)

    def expected_arrow(self) -> str:
        return f"{self.child.expected_arrow()}, nullable"

    @property
    def needs_scan(self) -> bool:
        return self.child.needs_scan

    def scan(self, records: Sequence[Any]) -> Any:
        if not self.needs_scan:
            return None
        n, present, values = self._split(records)
        return self._child_call("scan", n, present, values)

    def scan_arrow(self, data: Any) -> Any:
        if not self.needs_scan:
            return None
        n, present, values = self._split_arrow(data)
        return self._child_call("scan_arrow", n, present, values)

    def merge_scans(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return self.child.merge_scans(a, b)

    @property
    def rebases(self) -> bool:
        return self.child.rebases

    def rebase(self, enc: OptionalEncoded) -> OptionalEncoded:
        return OptionalEncoded(enc.n, enc.present_index, self.child.rebase(enc.child))

    def union(self, other: Encoder) -> Encoder:
        if not isinstance(other, OptionalEncoder):
            raise TypeError(f"cannot combine encoders {self!r} and {other!r}")
        return OptionalEncoder(self.child.union(other.child))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OptionalEncoder) and other.child == self.child

    def __hash__(self) -> int:
        return hash(("OptionalEncoder", hash(self.child)))

    def __repr__(self) -> str:
        return f"OptionalEncoder({self.child!r})"

    def embedding_scales(self) -> np.ndarray:
        return self.child.embedding_scales()

    def embedding_groups(self) -> np.ndarray:
        return self.child.embedding_groups()

    def embed(self, enc: Any) -> np.ndarray:
        width = len(self.child.embedding_scales())
        present = self.child.embed(enc.child) if len(enc.present_index) else np.zeros((0, width))
        return scatter_rows(enc.n, enc.present_index, present)


class OptionalAccumulator(Accumulator):
    """Missing weight, present weight and the child's statistics of the present rows.

    Value: ``(missing_weight, present_weight, child_value)``.
    """

    def __init__(self, child: Accumulator, keys: Any = None) -> None:
        self.child = child
        self.keys = keys
        self.missing = 0.0
        self.present = 0.0

    def _count(self, enc: OptionalEncoded, weights: np.ndarray) -> np.ndarray:
        w_present = weights[enc.present_index]
        present = float(w_present.sum())
        self.present += present
        self.missing += float(weights.sum()) - present
        return w_present

    def seq_update(self, enc: OptionalEncoded, weights: np.ndarray, estimate: Any) -> np.ndarray | None:
        w_present = self._count(enc, weights)
        if estimate is None:
            self.child.seq_update(enc.child, w_present, None)
            return None
        ll = np.full(enc.n, estimate._log_missing)
        child_ll = seq_update_with_ll(self.child, enc.child, w_present, estimate.dist)
        if len(enc.present_index):
            ll[enc.present_index] = estimate._log_present + child_ll
        return ll

    def seq_initialize(self, enc: OptionalEncoded, weights: np.ndarray, rng: RowRandom) -> None:
        w_present = self._count(enc, weights)
        self.child.seq_initialize(enc.child, w_present, rng.take(enc.present_index))

    def combine(self, value: Any) -> OptionalAccumulator:
        missing, present, child_value = value
        self.missing += float(missing)
        self.present += float(present)
        self.child.combine(child_value)
        return self

    def value(self) -> tuple[float, float, Any]:
        return (self.missing, self.present, self.child.value())

    def _scale(self, factor: float) -> None:
        self.missing *= factor
        self.present *= factor
        self.child._scale(factor)

    def widened(self, target: Accumulator) -> tuple[float, float, Any]:
        return (self.missing, self.present, self.child.widened(widening_target(self, target).child))

    def from_value(self, value: Any) -> OptionalAccumulator:
        missing, present, child_value = value
        self.missing, self.present = float(missing), float(present)
        self.child.from_value(child_value)
        return self

    def make_encoder(self) -> OptionalEncoder:
        return OptionalEncoder(self.child.make_encoder())

    def parts(self) -> list[Accumulator]:
        return [self.child]

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.child.make(), self.keys)


@register_estimator("optional")
@dataclass(eq=False, repr=False)
class OptionalEstimator(Estimator):
    """Fits the child to the present rows and, when ``model_missing``, the missing probability.

    Parameters
    ----------
    estimator : Estimator
        Estimator of the present values.
    pseudo_count : float, optional
        ``p = (missing + pseudo_count / 2) / (total + pseudo_count)``: shrinks ``p`` towards 1/2 and
        keeps it strictly inside (0, 1). With zero total weight and no pseudo-count, ``p = 0.5``.
    model_missing : bool
        False gives ``p=None``: missing values are marginalized (score 0).
    name, keys : str, optional
        ``keys`` ties the missing probability and the child statistics across sites.
    """

    estimator: Estimator = estimator_option(required=True)
    pseudo_count: float | None = None
    model_missing: bool = option(True, read=bool)
    name: str | None = None
    keys: str | None = None

    def accumulator_factory(self) -> OptionalAccumulator:
        return OptionalAccumulator(self.estimator.accumulator(), self.keys)

    def estimate(self, nobs: float | None, value: Any) -> OptionalDistribution:
        missing, present, child_value = value
        child = self.estimator.estimate(present, child_value)
        if not self.model_missing:
            return OptionalDistribution(child, None)
        pc_ = self.pseudo_count or 0.0
        total = missing + present + pc_
        p = (missing + 0.5 * pc_) / total if total > 0.0 else 0.5
        return OptionalDistribution(child, min(max(p, 0.0), 1.0))

    def encoder(self) -> OptionalEncoder:
        return OptionalEncoder(self.estimator.encoder())

    def with_scan(self, scan: Any) -> OptionalEstimator:
        if scan is None:
            return self
        return dataclasses.replace(self, estimator=self.estimator.with_scan(scan))

    def min_rows(self) -> int:
        return self.estimator.min_rows()

    def _free_parameters(self, model: Any, tied: set[Any]) -> int:
        missing = 0 if model.p is None else 1  # the probability of a missing value
        return missing + self.estimator.n_free_parameters(model.dist, tied)
