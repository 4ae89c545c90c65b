"""Categorical distribution over a range of integers: ``IntegerCategoricalDistribution(min_val, p_vec)``.

The support is ``min_val .. min_val + len(p_vec) - 1``; other values have log-density ``-inf``.
Records are integers (integral floats are accepted; other numbers are a DataValueError).

The encoded batch (:class:`IntegerCategoricalBatch`) holds int64 codes ``x - min_val`` and the
``min_val`` they are relative to, so a model scores batches encoded with any offset. Statistics are a
count vector over a range ``(min_val, counts)``; values over other ranges are re-aligned to the
union range when combined. Estimators without a fixed range learn it with a scan ``(min, max)``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.errors import DataValueError, EmptyDataError, SchemaError
from mixle_spark.stats._embed import label_width, one_hot, scales
from mixle_spark.stats._labels import min_prob_option
from mixle_spark.stats._validate import (
    arrow_float_values,
    as_arrow_array,
    check_integer,
    first_true,
    float_values,
    unit_sum,
)
from mixle_spark.stats.base import (
    Accumulator,
    Distribution,
    Encoder,
    Estimator,
    Parameter,
    check_parameter,
    option,
    register_distribution,
    register_estimator,
)

__all__ = [
    "IntegerCategoricalAccumulator",
    "IntegerCategoricalBatch",
    "IntegerCategoricalDistribution",
    "IntegerCategoricalEncoder",
    "IntegerCategoricalEstimator",
]

_EXPECTED = "expected an integer for IntegerCategoricalEstimator"


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


class IntegerCategoricalBatch:
    """An encoded batch: int64 ``codes = x - min_val``, shape (n,)."""

    __slots__ = ("codes", "min_val")

    def __init__(self, codes: np.ndarray, min_val: int) -> None:
        self.codes = codes
        self.min_val = min_val

    def __len__(self) -> int:
        return len(self.codes)


@register_distribution("integer_categorical")
class IntegerCategoricalDistribution(Distribution):
    """Probability ``p_vec[x - min_val]`` for integers ``x`` in ``min_val .. min_val + len(p_vec) - 1``.

    Examples
    --------
    >>> d = IntegerCategoricalDistribution(1, [0.5, 0.25, 0.25])
    >>> round(d.log_density(2), 6)
    -1.386294
    """

    parameters = (Parameter("min_val"), Parameter("p_vec"))

    def __init__(self, min_val: int, p_vec: Sequence[float] | np.ndarray) -> None:
        fam = "IntegerCategoricalDistribution"
        check_parameter(_is_int(min_val), fam, "min_val", min_val, "an integer")
        try:
            p = np.array(p_vec, dtype=np.float64)
        except (TypeError, ValueError):
            p = np.array([math.nan])
        check_parameter(
            p.ndim == 1 and len(p) > 0 and bool(np.all(np.isfinite(p)) and np.all(p >= 0)),
            fam,
            "p_vec",
            p_vec,
            "a non-empty vector of finite non-negative probabilities",
        )
        total = float(p.sum())
        check_parameter(
            abs(total - 1.0) <= 1e-9, fam, "p_vec", p_vec, f"probabilities summing to 1 (sum {total!r})"
        )
        self.min_val = int(min_val)
        self.p_vec = unit_sum(p)
        self.max_val = self.min_val + len(p) - 1
        with np.errstate(divide="ignore"):
            # A trailing -inf is what out-of-range codes are pointed at.
            self._log_p = np.append(np.log(self.p_vec), -math.inf)

    def draw(self, rng: np.random.Generator, size: int | None = None) -> Any:
        """One record is an int; a batch an int64 array."""
        draws = self.min_val + rng.choice(len(self.p_vec), size=1 if size is None else size, p=self.p_vec)
        return int(draws[0]) if size is None else draws.astype(np.int64)

    def log_density(self, x: Any) -> float:
        if isinstance(x, (bool, np.bool_)):
            return -math.inf
        if _is_int(x):
            k = int(x)
        elif isinstance(x, (float, np.floating)) and math.isfinite(x) and float(x).is_integer():
            k = int(x)
        else:
            return -math.inf
        if not self.min_val <= k <= self.max_val:
            return -math.inf
        return float(self._log_p[k - self.min_val])

    def seq_log_density(self, enc: IntegerCategoricalBatch) -> np.ndarray:
        idx = enc.codes + (enc.min_val - self.min_val)
        size = len(self.p_vec)
        idx = np.where((idx >= 0) & (idx < size), idx, size)
        return self._log_p[idx]

    def estimator(self, pseudo_count: float | None = None) -> IntegerCategoricalEstimator:
        if pseudo_count is None:
            return IntegerCategoricalEstimator()
        return IntegerCategoricalEstimator(pseudo_count=pseudo_count, suff_stat=(self.min_val, self.p_vec))

    def encoder(self) -> IntegerCategoricalEncoder:
        return IntegerCategoricalEncoder(self.min_val)

    def n_free_parameters(self) -> int:
        return max(len(self.p_vec) - 1, 0)  # min_val is the support, the probabilities sum to one


class IntegerCategoricalEncoder(Encoder):
    """Integers -> int64 codes ``x - min_val``.

    Parameters
    ----------
    min_val, max_val : int, optional
        The range. With both, values outside it are a DataValueError (the estimator's statistics have
        that fixed shape); with ``max_val`` omitted any integer is accepted (a model scores values
        outside its support ``-inf``). Without ``min_val`` codes are the values themselves.
    """

    def __init__(self, min_val: int | None = None, max_val: int | None = None) -> None:
        self.min_val = None if min_val is None else int(min_val)
        self.max_val = None if max_val is None else int(max_val)

    def _finish(self, x: np.ndarray) -> IntegerCategoricalBatch:
        if self.min_val is not None and self.max_val is not None and len(x):
            bad = (x < self.min_val) | (x > self.max_val)
            if bad.any():
                i = first_true(bad)
                raise DataValueError(
                    f"expected an integer in [{self.min_val}, {self.max_val}] for "
                    "IntegerCategoricalEstimator",
                    value=int(x[i]),
                    row=i,
                    n_rows=len(x),
                    count=int(bad.sum()),
                )
        offset = self.min_val or 0
        return IntegerCategoricalBatch(x - offset if offset else x, offset)

    def encode(self, records: Sequence[Any]) -> IntegerCategoricalBatch:
        arr = records if isinstance(records, np.ndarray) else np.asarray(records)
        if arr.ndim == 1 and arr.dtype.kind in "iu":
            return self._finish(arr.astype(np.int64, copy=False))
        x = float_values(records, _EXPECTED)
        check_integer(x, _EXPECTED)
        return self._finish(x.astype(np.int64))

    def from_arrow(self, data: Any) -> IntegerCategoricalBatch:
        array = as_arrow_array(data)
        if pa.types.is_integer(array.type) and not array.null_count:
            x = np.asarray(array.to_numpy(zero_copy_only=False)).astype(np.int64, copy=False)
            return self._finish(x)
        x = arrow_float_values(array, _EXPECTED)  # reports nulls and non-numeric types
        check_integer(x, _EXPECTED)
        return self._finish(x.astype(np.int64))

    def check_arrow_type(self, arrow_type: Any) -> None:
        if not (pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type)):
            raise SchemaError(
                f"expected {self.expected_arrow()} for IntegerCategoricalEstimator, got Arrow "
                f"type {arrow_type}"
            )

    def expected_arrow(self) -> str:
        return "an integer column (or floating with integral values)"

    @property
    def needs_scan(self) -> bool:
        return self.min_val is None or self.max_val is None

    def _scan_of(self, enc: IntegerCategoricalBatch) -> Any:
        if not len(enc):
            return None
        return (int(enc.codes.min()) + enc.min_val, int(enc.codes.max()) + enc.min_val)

    def scan(self, records: Sequence[Any]) -> Any:
        """``(min, max)`` of the batch (None when empty)."""
        return self._scan_of(IntegerCategoricalEncoder().encode(records))

    def scan_arrow(self, data: Any) -> Any:
        return self._scan_of(IntegerCategoricalEncoder().from_arrow(data))

    def merge_scans(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        return (min(a[0], b[0]), max(a[1], b[1]))

    @property
    def rebases(self) -> bool:
        return True

    def rebase(self, enc: IntegerCategoricalBatch) -> IntegerCategoricalBatch:
        """The batch's codes moved from its own offset to this encoder's."""
        return self._finish(enc.codes + enc.min_val if enc.min_val else enc.codes)

    def union(self, other: Encoder) -> Encoder:
        if self == other:
            return self
        if not isinstance(other, IntegerCategoricalEncoder):
            raise TypeError(f"cannot combine encoders {self!r} and {other!r}")
        lo = None if self.min_val is None or other.min_val is None else min(self.min_val, other.min_val)
        hi = None if self.max_val is None or other.max_val is None else max(self.max_val, other.max_val)
        return IntegerCategoricalEncoder(lo, hi)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, IntegerCategoricalEncoder)
            and self.min_val == other.min_val
            and self.max_val == other.max_val
        )

    def __hash__(self) -> int:
        return hash(("IntegerCategoricalEncoder", self.min_val, self.max_val))

    def __repr__(self) -> str:
        return f"IntegerCategoricalEncoder(min_val={self.min_val!r}, max_val={self.max_val!r})"

    def _embedding_width(self) -> int:
        if self.min_val is None or self.max_val is None:
            return 1
        return label_width(range(self.max_val - self.min_val + 1))

    def embedding_scales(self) -> np.ndarray:
        return scales(False, self._embedding_width())

    def embed(self, enc: Any) -> np.ndarray:
        return one_hot(enc.codes, self._embedding_width())


def _align(min_val: int, counts: np.ndarray, lo: int, hi: int) -> np.ndarray:
    out = np.zeros(hi - lo + 1)
    if len(counts):
        out[min_val - lo : min_val - lo + len(counts)] = counts
    return out


class IntegerCategoricalAccumulator(Accumulator):
    """Weighted counts over ``min_val .. min_val + len(counts) - 1``; value ``(min_val, counts)``.

    ``widened`` is the default (``value()``): a range is not a vocabulary, ``combine`` re-bases it.
    """

    def __init__(self, min_val: int | None = None, max_val: int | None = None, keys: Any = None) -> None:
        self.keys = keys
        self.range = (min_val, max_val)  # as given (min_val moves with the data)
        if min_val is not None and max_val is not None:
            self.min_val, self.counts = int(min_val), np.zeros(int(max_val) - int(min_val) + 1)
        else:
            self.min_val, self.counts = 0, np.zeros(0)

    def _add(self, min_val: int, counts: np.ndarray) -> None:
        if min_val == self.min_val and len(counts) == len(self.counts):
            self.counts += counts
            return
        if not len(counts):
            return
        if not len(self.counts):
            self.min_val, self.counts = min_val, np.array(counts, dtype=np.float64)
            return
        lo = min(self.min_val, min_val)
        hi = max(self.min_val + len(self.counts), min_val + len(counts)) - 1
        self.counts = _align(self.min_val, self.counts, lo, hi) + _align(min_val, counts, lo, hi)
        self.min_val = lo

    def seq_update(self, enc: IntegerCategoricalBatch, weights: np.ndarray, estimate: Any) -> None:
        if not len(enc):
            return None
        lo = int(enc.codes.min())
        counts = np.bincount(enc.codes - lo, weights=weights)
        self._add(enc.min_val + lo, counts)
        return None

    def combine(self, value: Any) -> IntegerCategoricalAccumulator:
        min_val, counts = value
        self._add(int(min_val), np.array(counts, dtype=np.float64))
        return self

    def value(self) -> tuple[int, np.ndarray]:
        return (self.min_val, self.counts.copy())

    def _scale(self, factor: float) -> None:
        self.counts = factor * self.counts  # min_val stays

    def from_value(self, value: Any) -> IntegerCategoricalAccumulator:
        self.min_val = int(value[0])
        self.counts = np.array(value[1], dtype=np.float64)
        return self

    def make_encoder(self) -> IntegerCategoricalEncoder:
        return IntegerCategoricalEncoder()

    def fresh_args(self) -> tuple[Any, ...]:
        return (*self.range, self.keys)


@register_estimator("integer_categorical")
@dataclass(eq=False, repr=False)
class IntegerCategoricalEstimator(Estimator):
    """Frequencies of integers over a range.

    Parameters
    ----------
    min_val, max_val : int, optional
        The range (learnt by the scan where omitted); the estimate covers it, zeros included.
    pseudo_count : float, optional
        Prior weight, spread evenly over the range, or by ``suff_stat`` when given.
    suff_stat : (int, array of probabilities), optional
        Prior ``(min_val, p_vec)``; its support joins the range.
    min_prob : float
        Probability floor (default 0), applied before renormalizing.
    keys : str, optional
        Tie these parameters to every other site with the same key.

    Zero total weight gives the uniform distribution over the range.
    """

    min_val: int | None = option(None, _is_int, "an integer", read=int)
    max_val: int | None = option(None, _is_int, "an integer", read=int)
    pseudo_count: float | None = None
    suff_stat: tuple[int, Sequence[float] | np.ndarray] | None = None
    min_prob: float = min_prob_option()
    name: str | None = None
    keys: str | None = None

    def check(self) -> None:
        lo, hi = self.min_val, self.max_val
        ok = lo is None or hi is None or hi >= lo
        check_parameter(ok, "IntegerCategoricalEstimator", "max_val", hi, f"at least min_val = {lo}")
        if self.suff_stat is not None:
            prior = IntegerCategoricalDistribution(self.suff_stat[0], self.suff_stat[1])
            self.suff_stat = (prior.min_val, prior.p_vec)

    def accumulator_factory(self) -> IntegerCategoricalAccumulator:
        return IntegerCategoricalAccumulator(self.min_val, self.max_val, self.keys)

    def encoder(self) -> IntegerCategoricalEncoder:
        return IntegerCategoricalEncoder(self.min_val, self.max_val)

    def with_scan(self, scan: Any) -> IntegerCategoricalEstimator:
        if scan is None:
            return self
        lo = scan[0] if self.min_val is None else self.min_val
        hi = scan[1] if self.max_val is None else self.max_val
        return dataclasses.replace(self, min_val=lo, max_val=max(hi, lo))

    def estimate(self, nobs: float | None, value: Any) -> IntegerCategoricalDistribution:
        min_val, counts = int(value[0]), np.asarray(value[1], dtype=np.float64)
        ends = []
        if len(counts):
            ends += [min_val, min_val + len(counts) - 1]
        ends += [v for v in (self.min_val, self.max_val) if v is not None]
        if self.suff_stat is not None:
            ends += [self.suff_stat[0], self.suff_stat[0] + len(self.suff_stat[1]) - 1]
        if not ends:
            raise EmptyDataError("IntegerCategoricalEstimator: no data and no min_val / max_val given")
        lo, hi = min(ends), max(ends)
        counts = _align(min_val, counts, lo, hi)
        pc = self.pseudo_count or 0.0
        if pc > 0:
            if self.suff_stat is not None:
                counts += pc * _align(self.suff_stat[0], np.asarray(self.suff_stat[1]), lo, hi)
            else:
                counts += pc / len(counts)
        total = float(counts.sum())
        p = counts / total if total > 0 and math.isfinite(total) else np.full(len(counts), 1.0 / len(counts))
        if self.min_prob > 0:
            p = np.maximum(p, self.min_prob)
            p /= p.sum()
        return IntegerCategoricalDistribution(lo, p)
