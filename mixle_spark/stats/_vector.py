"""Shared reading and encoding for the vector Gaussian families (their moment algebra, and the
missing coordinates' densities and statistics, are :mod:`mixle_spark.stats._vector_moments`).

Records are 1-D float sequences of one length ``d`` (a list or a numpy array); Arrow columns are
``list``, ``large_list`` or ``fixed_size_list`` of any numeric type, read through the offsets and
values buffers (zero-copy for float64 values). The encoded batch is a :class:`VectorBatch`: the data
``x`` of shape (n, d) and a centre ``c`` of shape (d,), with lazily cached centred data ``y = x - c``
and mixture fast-path features, so a mixture builds them once per batch, not once per EM iteration.

Missing coordinates: a NaN (or, in Arrow, a null element) inside a vector is a coordinate that was
not observed. The densities marginalize it out exactly (the Gaussian of the observed coordinates) and
the statistics take its conditional expectation given the observed ones under the current model
(``E[x_m | x_o]`` and ``Cov[x_m | x_o]``, Ghahramani & Jordan 1994), so EM stays exact; a batch with
missing coordinates is scored component by component, grouped by pattern of missing coordinates
(:meth:`VectorBatch.patterns`), not by the mixture's fused features. Infinities are refused, and so
is a whole missing vector (null: that is OptionalEstimator's).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mixle_spark.errors import (
    DataTypeError,
    DataValueError,
    EmbeddingUnavailableError,
    FieldError,
    SchemaError,
)
from mixle_spark.stats._validate import arrow_float_values, as_arrow_array, first_true
from mixle_spark.stats.base import Encoder, check_parameter

__all__ = [
    "PatternGroup",
    "VectorBatch",
    "VectorEncoder",
    "arrow_vector_values",
    "check_not_infinite",
    "parameter_vector",
    "vector_values",
]

_NUMERIC_KINDS = "biuf"


def parameter_vector(value: Any, family: str, name: str) -> np.ndarray:
    """A model parameter as a non-empty finite float64 vector, else SpecError."""
    try:
        v = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        v = None
    check_parameter(
        v is not None and v.ndim == 1 and len(v) > 0 and bool(np.all(np.isfinite(v))),
        family,
        name,
        value,
        "a non-empty 1-D sequence of finite numbers",
    )
    return v  # type: ignore[return-value]


@cache
def triangle_indices(dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.triu_indices(dim)`` computed once per dimension (read-only: the E-step asks per component)."""
    iu, ju = np.triu_indices(dim)
    iu.flags.writeable = False
    ju.flags.writeable = False
    return iu, ju


_SCRATCH = threading.local()


def _references(pool: dict[str, np.ndarray], name: str) -> int:
    return sys.getrefcount(pool[name])


_UNHELD = _references({"probe": np.empty(0)}, "probe")
"""What :func:`_references` counts for an array only its pool holds, measured through the same code
(how many references the call itself adds differs between Python versions)."""


def _feature_array(name: str, shape: tuple[int, int], dtype: Any = np.float64) -> np.ndarray:
    """An uninitialised ``dtype`` array of ``shape`` for a batch's cached features: this thread's last
    one of ``name`` when nothing holds it any more (its batch is gone), else a new one.

    A batch that is folded once and dropped (a Spark job's E-step reads its chunks afresh on every
    pass) then writes its features into memory already mapped, instead of a fresh allocation the
    size of the chunk's features (35 MB at 65,536 rows of d = 10), which the allocator maps and the
    kernel zeroes page by page for every chunk: a third of the features' cost. A batch that keeps its
    features (the local backend, resident tasks) holds its array, so it is never handed out again."""
    pool = getattr(_SCRATCH, "arrays", None)
    if pool is None:
        pool = _SCRATCH.arrays = {}
    if (
        name in pool
        and pool[name].shape == shape
        and pool[name].dtype == dtype
        and _references(pool, name) == _UNHELD
    ):
        return pool[name]
    buf = pool[name] = np.empty(shape, dtype=dtype)
    return buf


class PatternGroup:
    """Rows that observe the same number ``m`` of coordinates: ``obs`` (P, m) and ``miss`` (P, d - m)
    the coordinate indices each of the group's P patterns observes and misses (in order), ``rows``
    the group's rows (pattern by pattern) and ``which`` each row's pattern (0..P-1). The E-step works
    on a whole group at once (stacked factorizations, per-row gathers in blocks), so its numpy calls
    do not grow with the number of patterns (up to 2^d)."""

    __slots__ = ("miss", "obs", "rows", "which")

    def __init__(self, obs: np.ndarray, miss: np.ndarray, rows: np.ndarray, which: np.ndarray) -> None:
        self.obs, self.miss, self.rows, self.which = obs, miss, rows, which

    def blocks(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(rows, which)`` in blocks whose gathered (rows, m, m) matrices stay near 16 MiB."""
        width = max(self.obs.shape[1], self.miss.shape[1], 1)
        size = max(1, (1 << 21) // (width * width))
        return [(self.rows[a : a + size], self.which[a : a + size]) for a in range(0, len(self.rows), size)]


class VectorBatch:
    """An encoded batch of vectors: ``x`` (n, d) float64 (NaN where a coordinate is missing) and the
    centre ``c`` (d,) float64.

    ``y`` (= x - c), the fast-path features and the missing-coordinate patterns are computed on first
    use and cached. A batch stored at a narrower precision (:meth:`centred`, what
    ``precision="float32"`` stores) holds only ``y`` in that dtype, rounded relative to the data's
    spread rather than to its magnitude (a column at 1e6 +- 1 keeps its digits); its features are
    computed in that dtype and ``x`` is ``y + c`` in float64, made on each use.
    """

    __slots__ = ("_cache", "_patterns", "_stored_t", "_x", "c")

    def __init__(self, x: np.ndarray, c: np.ndarray) -> None:
        self._x: np.ndarray | None = x
        self._stored_t: np.ndarray | None = None
        self.c = c
        self._cache: dict[str, np.ndarray] = {}
        self._patterns: list[PatternGroup] | None = None

    @classmethod
    def centred(cls, batch: VectorBatch, dtype: Any) -> VectorBatch:
        """``batch`` stored as its centred values ``x - c`` in ``dtype`` (feature-major, (d, n)
        C-ordered: the layout the features are built from)."""
        out = cls(batch.x, batch.c)
        out._x = None
        out._stored_t = np.ascontiguousarray(np.subtract(batch.x.T, batch.c[:, None]), dtype=dtype)
        return out

    @property
    def x(self) -> np.ndarray:
        """The vectors, (n, d) float64 (of a centred batch: ``y + c``, made on each use)."""
        if self._x is not None:
            return self._x
        assert self._stored_t is not None
        return self._stored_t.T + self.c

    @property
    def dtype(self) -> np.dtype:
        """The dtype the batch is stored (and its features computed) in."""
        return self._x.dtype if self._x is not None else self._stored_t.dtype  # type: ignore[union-attr]

    @property
    def nbytes(self) -> int:
        """The bytes the batch's values take (not counting cached features)."""
        return int(self._x.nbytes if self._x is not None else self._stored_t.nbytes)  # type: ignore[union-attr]

    @property
    def shape(self) -> tuple[int, int]:
        """``(n, d)``."""
        stored = self._x if self._x is not None else self._stored_t.T  # type: ignore[union-attr]
        return (int(stored.shape[0]), int(stored.shape[1]))

    @property
    def missing(self) -> np.ndarray | None:
        """Where coordinates are missing, (n, d) bool; None when every coordinate is observed."""
        mask = self._cache.get("missing")
        if mask is None:
            mask = np.isnan(self.x if self._x is not None else self.y)
            self._cache["missing"] = mask if mask.any() else np.zeros((0, 0), dtype=bool)
            return self.missing
        return mask if mask.size else None

    @property
    def has_missing(self) -> bool:
        """Whether any coordinate of the batch is missing (then the mixture's fused features, which
        need every coordinate, are not used)."""
        return self.missing is not None

    def patterns(self) -> list[PatternGroup]:
        """The rows grouped by how many coordinates they observe, each group holding its patterns of
        missing coordinates (:class:`PatternGroup`); cached. Every coordinate observed is a group too."""
        if self._patterns is None:
            mask = self.missing
            if mask is None:
                mask = np.zeros((len(self), self.dim), dtype=bool)
            unique, inverse = np.unique(mask, axis=0, return_inverse=True)
            inverse = inverse.ravel()
            observed = (~unique).sum(axis=1)
            groups = []
            for m in np.unique(observed):
                members = np.flatnonzero(observed == m)  # patterns observing m coordinates
                local = np.full(len(unique), -1)
                local[members] = np.arange(len(members))
                rows = np.flatnonzero(np.isin(inverse, members))
                which = local[inverse[rows]]
                order = np.argsort(which, kind="stable")  # the group's rows pattern by pattern
                rows, which = rows[order], which[order]
                coords = np.argsort(unique[members], axis=1, kind="stable")  # observed first, in order
                groups.append(PatternGroup(coords[:, :m], coords[:, m:], rows, which))
            self._patterns = groups
        return self._patterns

    def filled(self, values: np.ndarray) -> np.ndarray:
        """``x`` with each missing coordinate set from ``values`` ((d,) or (n, d))."""
        mask = self.missing
        if mask is None:
            return self.x
        full = np.broadcast_to(values, self.x.shape)
        return np.where(mask, full, self.x)

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def dim(self) -> int:
        return self.shape[1]

    @property
    def y(self) -> np.ndarray:
        """Centred data ``x - c``, shape (n, d) (a cached view of a (d, n) C-ordered array)."""
        return self._centred_t().T

    def _centred_t(self) -> np.ndarray:
        if self._stored_t is not None:
            return self._stored_t
        yt = self._cache.get("yt")
        if yt is None:
            # Feature-major layout: each feature column below is one contiguous vectorized product.
            yt = np.subtract(
                self.x.T, self.c[:, None], out=_feature_array("yt", self.x.shape[::-1], self.x.dtype)
            )
            self._cache["yt"] = yt
        return yt

    def diagonal_features(self) -> np.ndarray:
        """``[1, y, y*y]``, shape (n, 2d + 1) (cached; Fortran-ordered, which BLAS reads directly)."""
        f = self._cache.get("diag")
        if f is None:
            n, d = self.shape
            yt = self._centred_t()
            ft = _feature_array("diag", (2 * d + 1, n), self.dtype)
            ft[0] = 1.0
            ft[1 : d + 1] = yt
            np.multiply(yt, yt, out=ft[d + 1 :])
            f = self._cache["diag"] = ft.T
        return f

    def full_features(self) -> np.ndarray:
        """``[1, y, upper triangle of y y^T]`` (row-major ``triu_indices`` order), shape
        (n, 1 + d + d(d+1)/2) (cached; Fortran-ordered, which BLAS reads directly)."""
        f = self._cache.get("full")
        if f is None:
            n, d = self.shape
            yt = self._centred_t()
            ft = _feature_array("full", (1 + d + d * (d + 1) // 2, n), self.dtype)
            ft[0] = 1.0
            ft[1 : d + 1] = yt
            k = d + 1
            # One vectorized product per row of the triangle (d of them), written in place.
            for i in range(d):
                np.multiply(yt[i], yt[i:], out=ft[k : k + d - i])
                k += d - i
            f = self._cache["full"] = ft.T
        return f


def _bad_record_error(records: Sequence[Any], dim: int | None, expected: str) -> FieldError:
    """Slow path, only reached on bad input: the error for the first bad record."""
    n = len(records)
    for i, row in enumerate(records):
        if row is None:
            return DataValueError(
                expected + " (a missing value needs OptionalEstimator)", value=None, row=i, n_rows=n
            )
        if isinstance(row, (str, bytes)) or np.ndim(row) != 1:
            return DataTypeError(expected + " (a 1-D sequence of numbers)", value=row, row=i, n_rows=n)
        for v in row:
            if isinstance(v, (str, bytes)) or not isinstance(v, (int, float, np.number, np.bool_)):
                return DataTypeError(expected, value=v, row=i, n_rows=n)
        if dim is None:
            dim = len(row)
        elif len(row) != dim:
            return DataValueError(
                f"{expected}: expected length {dim}, got length {len(row)}", row=i, n_rows=n
            )
    return DataTypeError(expected, value=records, row=0, n_rows=n)


def vector_values(records: Sequence[Any] | np.ndarray, dim: int | None, expected: str) -> np.ndarray:
    """Records (1-D numeric sequences, or a 2-D array) -> float64 array of shape (n, d), validated."""
    n = len(records)
    if n == 0:
        return np.zeros((0, dim or 0))
    arr = records if isinstance(records, np.ndarray) else None
    if arr is None:
        try:
            arr = np.asarray(records)
        except ValueError:  # ragged rows
            arr = None
        if arr is not None and arr.dtype == object and arr.ndim == 2:  # None inside vectors: missing
            arr = _with_missing(arr)
    if arr is None or arr.ndim != 2 or arr.dtype.kind not in _NUMERIC_KINDS:
        raise _bad_record_error(list(records), dim, expected)
    x = arr.astype(np.float64, copy=False)
    if dim is not None and x.shape[1] != dim:
        raise DataValueError(f"{expected}: expected length {dim}, got length {x.shape[1]}", row=0, n_rows=n)
    check_not_infinite(x, expected)
    return x


def _with_missing(arr: np.ndarray) -> np.ndarray | None:
    """An object array of numbers and None as float64 with NaN for None; None when a cell is neither."""
    cells = arr.ravel()
    ok = all(v is None or (isinstance(v, (int, float, np.number)) and not isinstance(v, bool)) for v in cells)
    if not ok:
        return None
    return np.array([np.nan if v is None else float(v) for v in cells], dtype=np.float64).reshape(arr.shape)


def check_not_infinite(x: np.ndarray, expected: str) -> None:
    """Raise DataValueError naming the first infinite coordinate of ``x`` (n, d) (NaN is a missing
    coordinate, accepted)."""
    bad = np.isinf(x)
    if bad.any():
        rows = bad.any(axis=1)
        i = first_true(rows)
        value = x[i][bad[i]][0]
        raise DataValueError(expected, value=float(value), row=i, n_rows=len(x), count=int(rows.sum()))


def _is_vector_type(typ: pa.DataType) -> bool:
    if not (pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ)):
        return False
    v = typ.value_type
    return pa.types.is_integer(v) or pa.types.is_floating(v) or pa.types.is_decimal(v)


def arrow_vector_values(data: Any, dim: int | None, expected: str) -> np.ndarray:
    """An Arrow list / large_list / fixed_size_list column of numbers -> float64 (n, d).

    Reads the offsets and values buffers directly (no per-row Python), zero-copy for float64 values
    without nulls. Every row must have length ``dim`` (when ``dim`` is None, the batch's most common
    length: the rows that differ from the majority are the ones reported).
    """
    array = as_arrow_array(data)
    typ = array.type
    n = len(array)
    if not _is_vector_type(typ):
        valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False))
        i = first_true(valid) if valid.any() else 0
        value = array[i].as_py() if n else None
        raise DataTypeError(f"{expected} (Arrow type {typ})", value=value, row=i, n_rows=n)
    if array.null_count:
        mask = np.asarray(array.is_null().to_numpy(zero_copy_only=False))
        raise DataValueError(
            expected + " (a missing value needs OptionalEstimator)",
            value=None,
            row=first_true(mask),
            n_rows=n,
            count=int(mask.sum()),
        )
    if pa.types.is_fixed_size_list(typ):
        size = typ.list_size
        if dim is not None and size != dim and n:
            raise DataValueError(f"{expected}: expected length {dim}, got length {size}", row=0, n_rows=n)
        d = size
        values = array.values.slice(array.offset * size, n * size)
    else:
        offsets = np.asarray(array.offsets)
        lengths = np.diff(offsets)
        if dim is not None:
            d, which = dim, ""
        elif n and np.any(lengths != lengths[0]):
            sizes, counts = np.unique(lengths, return_counts=True)
            d, which = int(sizes[np.argmax(counts)]), " (the most common length)"
        else:
            d, which = (int(lengths[0]) if n else 0), ""
        bad = lengths != d
        if bad.any():
            i = first_true(bad)
            raise DataValueError(
                f"{expected}: expected length {d}{which}, got length {int(lengths[i])}",
                row=i,
                n_rows=n,
                count=int(bad.sum()),
            )
        values = (
            array.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
            if n
            else array.values.slice(0, 0)
        )
    if values.null_count:  # a null element is a missing coordinate: NaN
        values = pc.fill_null(pc.cast(values, pa.float64()), float("nan"))
    flat = arrow_float_values(values, expected)
    x = flat.reshape(n, d)
    check_not_infinite(x, expected)
    return x


class VectorEncoder(Encoder):
    """Reads vectors of length ``dim`` centred at ``center``; base of the vector Gaussian encoders.

    Without ``dim`` / ``center`` (an estimator before its scan) a batch uses its own length and mean.
    The scan is ``(count, sum vector, squared deviations)`` (:func:`merge_vector_scans`); the
    estimator's ``with_scan`` fixes ``dim``, ``center = sum / count`` and each coordinate's variance in
    the data (``scale``: what its floors are relative to).
    """

    family = "VectorEstimator"

    def __init__(self, dim: int | None = None, center: Sequence[float] | np.ndarray | None = None) -> None:
        self.dim = None if dim is None else int(dim)
        self.center = None if center is None else tuple(float(v) for v in np.asarray(center).ravel())
        if self.center is not None and self.dim is None:
            self.dim = len(self.center)

    @property
    def _expected(self) -> str:
        return f"expected a vector of finite numbers for {self.family}"

    def _batch(self, x: np.ndarray) -> VectorBatch:
        if self.center is not None:
            c = np.array(self.center)
        else:
            c = _observed_mean(x)
        return VectorBatch(x, c)

    def encode(self, records: Sequence[Any]) -> VectorBatch:
        return self._batch(vector_values(records, self.dim, self._expected))

    def from_arrow(self, data: Any) -> VectorBatch:
        return self._batch(arrow_vector_values(data, self.dim, self._expected))

    def narrow(self, enc: VectorBatch, dtype: Any) -> VectorBatch:
        """The batch stored as its centred values in ``dtype`` (:meth:`VectorBatch.centred`: the centre
        stays float64, so the rounding is relative to the spread, not to the values' magnitude); its
        features are then computed in ``dtype`` too."""
        if enc.dtype == dtype:
            return enc
        return VectorBatch.centred(enc, dtype)

    def check_arrow_type(self, arrow_type: Any) -> None:
        if not _is_vector_type(arrow_type):
            raise SchemaError(
                f"expected {self.expected_arrow()} for {self.family}, got Arrow type "
                f"{arrow_type} (convert an ML Vector column with vector_to_array first)"
            )
        if (
            pa.types.is_fixed_size_list(arrow_type)
            and self.dim is not None
            and arrow_type.list_size != self.dim
        ):
            raise SchemaError(
                f"expected vectors of length {self.dim} for {self.family}, got Arrow type {arrow_type}"
            )

    def expected_arrow(self) -> str:
        length = "" if self.dim is None else f" (length {self.dim})"
        return f"a list, large_list or fixed_size_list column of numbers{length}"

    @property
    def needs_scan(self) -> bool:
        return self.dim is None or self.center is None

    def scan(self, records: Sequence[Any]) -> Any:
        return _scan_of(vector_values(records, self.dim, self._expected))

    def scan_arrow(self, data: Any) -> Any:
        return _scan_of(arrow_vector_values(data, self.dim, self._expected))

    def merge_scans(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        if len(a[1]) != len(b[1]):
            raise DataValueError(
                f"{self._expected}: vectors of lengths {len(a[1])} and {len(b[1])} in one column"
            )
        return merge_vector_scans(a, b)

    @property
    def rebases(self) -> bool:
        return True

    def rebase(self, enc: VectorBatch) -> VectorBatch:
        """The batch's vectors with this encoder's centre."""
        x = enc.x
        if self.dim is not None and x.shape[1] != self.dim and not len(x):  # no rows, no length seen
            x = x.reshape(0, self.dim)
        return self._batch(x)

    def union(self, other: Encoder) -> Encoder:
        if self == other:
            return self
        if isinstance(other, VectorEncoder) and type(other) is type(self):
            if self.dim is None or other.dim is None or self.dim == other.dim:
                # The centre only conditions the arithmetic: any common centre is correct.
                center = self.center if self.center is not None else other.center
                return type(self)(self.dim if self.dim is not None else other.dim, center)
        raise TypeError(f"cannot combine encoders {self!r} and {other!r}")

    def __eq__(self, other: object) -> bool:
        return (
            type(self) is type(other)
            and self.dim == other.dim  # type: ignore[attr-defined]
            and self.center == other.center
        )  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.dim))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim!r})"

    def embedding_scales(self) -> np.ndarray:
        if self.dim is None:
            raise EmbeddingUnavailableError(f"{type(self).__name__}: the vector length is not known yet")
        return np.ones(self.dim, dtype=bool)

    def embedding_groups(self) -> np.ndarray:
        return np.zeros(len(self.embedding_scales()), dtype=np.int64)  # one vector

    def embed(self, enc: Any) -> np.ndarray:
        """The vectors, a missing coordinate at the centre (the data mean: k-means|| seeding)."""
        return np.asarray(enc.filled(enc.c), dtype=np.float64)


def _observed_mean(x: np.ndarray) -> np.ndarray:
    """The mean of each coordinate over the rows that observe it (0 where none does)."""
    if not len(x):
        return np.zeros(x.shape[1])
    missing = np.isnan(x)
    if not missing.any():
        return x.mean(axis=0)
    seen = (~missing).sum(axis=0)
    total = np.where(missing, 0.0, x).sum(axis=0)
    return np.where(seen > 0, total / np.maximum(seen, 1), 0.0)


def _scan_of(x: np.ndarray) -> Any:
    """``(count, sum, m2)``: the rows, the sum of each coordinate and its sum of squared deviations
    from this chunk's mean; with missing coordinates the count is per coordinate (the rows observing
    it), the sums over those rows. Deviations are taken in the chunk (not ``Σx² - (Σx)²/n``), so a
    coordinate with a large offset and a small spread keeps its spread."""
    if len(x) == 0:
        return None
    missing = np.isnan(x)
    if not missing.any():
        total = x.sum(axis=0)
        return (float(len(x)), total, ((x - total / len(x)) ** 2).sum(axis=0))
    count = (~missing).sum(axis=0).astype(np.float64)
    total = np.where(missing, 0.0, x).sum(axis=0)
    mean = np.where(count > 0, total / np.maximum(count, 1.0), 0.0)
    return (count, total, np.where(missing, 0.0, (x - mean) ** 2).sum(axis=0))


def merge_vector_scans(a: Any, b: Any) -> Any:
    """Two chunks' :func:`_scan_of` as one (Chan et al.'s pairwise update of the squared deviations;
    a scan without ``m2``, of an earlier release, is merged without it)."""
    if len(a) < 3 or len(b) < 3:
        return (np.add(a[0], b[0]), np.asarray(a[1]) + np.asarray(b[1]))
    (na, ta, ma), (nb, tb, mb) = a, b
    na, nb = np.asarray(na, dtype=np.float64), np.asarray(nb, dtype=np.float64)
    n = na + nb
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.where((na > 0) & (nb > 0), tb / np.maximum(nb, 1e-300) - ta / np.maximum(na, 1e-300), 0.0)
        cross = np.where(n > 0, gap * gap * na * nb / np.maximum(n, 1e-300), 0.0)
    count: Any = float(n) if n.ndim == 0 else n
    return (count, np.asarray(ta) + np.asarray(tb), np.asarray(ma) + np.asarray(mb) + cross)
