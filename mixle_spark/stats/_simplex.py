"""What the Dirichlet and Dirichlet-multinomial families share: reading fixed-length vectors whose every
entry must pass a check (the error names the column, the row and the value), the scan that learns the
vector length, and the inverse of the digamma function.

Vectors are read as :mod:`~mixle_spark.stats._vector` reads them (Python sequences, or Arrow ``list``,
``large_list`` or ``fixed_size_list`` columns of numbers through their buffers); a null element or NaN
is not a missing coordinate here, but a value outside the support.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle_spark.errors import DataValueError, EmbeddingUnavailableError
from mixle_spark.stats._special import digamma, trigamma
from mixle_spark.stats._validate import first_true
from mixle_spark.stats._vector import VectorEncoder, arrow_vector_values, vector_values
from mixle_spark.stats.base import Encoder

__all__ = ["SimplexEncoder", "check_entries", "inverse_digamma"]

_EULER = 0.5772156649015329


def inverse_digamma(y: np.ndarray, iterations: int = 6) -> np.ndarray:
    """The ``x > 0`` with ``digamma(x) = y``, elementwise (T. Minka, "Estimating a Dirichlet
    distribution", 2000, its appendix on inverting digamma: start ``exp(y) + 1/2`` for ``y >= -2.22``,
    else ``-1 / (y + gamma)``, then Newton's method, which converges to double precision in five steps
    from that start)."""
    y = np.asarray(y, dtype=np.float64)
    with np.errstate(over="ignore"):
        x = np.where(y >= -2.22, np.exp(np.minimum(y, 700.0)) + 0.5, -1.0 / (y - (-_EULER)))
    for _ in range(iterations):
        x = x - (digamma(x) - y) / trigamma(x)
        x = np.maximum(x, 1e-300)
    return x  # type: ignore[no-any-return]


def check_entries(x: np.ndarray, bad: np.ndarray, expected: str) -> None:
    """Raise one DataValueError naming the first row of ``x`` (n, d) where ``bad`` (n, d) holds, its
    first bad entry and how many rows are bad."""
    rows = np.asarray(bad.any(axis=1))
    if rows.any():
        i = first_true(rows)
        value = float(x[i][bad[i]][0])
        raise DataValueError(expected, value=value, row=i, n_rows=len(x), count=int(rows.sum()))


class SimplexEncoder(Encoder):
    """Reads vectors of length ``dim`` (learnt by a scan when None) into float64 (n, d), checks them
    (:meth:`validate`) and packs the encoded batch (:meth:`pack`). Subclasses set :attr:`family` and
    :attr:`expectation`."""

    family = "SimplexEstimator"
    expectation = "a vector"

    def __init__(self, dim: int | None = None) -> None:
        self.dim = None if dim is None else int(dim)

    @property
    def expected(self) -> str:
        return f"expected {self.expectation} for {self.family}"

    def validate(self, x: np.ndarray) -> None:
        """Raise a DataValueError naming the first bad value (default: none)."""

    def pack(self, x: np.ndarray) -> Any:
        """The encoded batch of the checked vectors ``x`` (n, d)."""
        return x

    def _read(self, x: np.ndarray) -> Any:
        if self.dim is not None and x.shape[1] != self.dim and not len(x):
            x = x.reshape(0, self.dim)
        self.validate(x)
        return self.pack(x)

    def _vectors(self, records: Sequence[Any]) -> np.ndarray:
        return vector_values(records, self.dim, self.expected)

    def _arrow_vectors(self, data: Any) -> np.ndarray:
        return arrow_vector_values(data, self.dim, self.expected)

    def encode(self, records: Sequence[Any]) -> Any:
        return self._read(self._vectors(records))

    def from_arrow(self, data: Any) -> Any:
        return self._read(self._arrow_vectors(data))

    def check_arrow_type(self, arrow_type: Any) -> None:
        probe = VectorEncoder(self.dim)
        probe.family = self.family
        probe.check_arrow_type(arrow_type)

    def expected_arrow(self) -> str:
        length = "" if self.dim is None else f" (length {self.dim})"
        return f"a list, large_list or fixed_size_list column of numbers{length}"

    # -- the scan learns the vector length --------------------------------------------------------
    @property
    def needs_scan(self) -> bool:
        return self.dim is None

    def scan(self, records: Sequence[Any]) -> Any:
        x = self._vectors(records)
        return int(x.shape[1]) if len(x) else None

    def scan_arrow(self, data: Any) -> Any:
        x = self._arrow_vectors(data)
        return int(x.shape[1]) if len(x) else None

    def merge_scans(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        if int(a) != int(b):
            raise DataValueError(f"{self.expected}: vectors of lengths {a} and {b} in one column")
        return int(a)

    @property
    def rebases(self) -> bool:
        return True  # the encoding does not depend on the scan, only its length (checked when merged)

    def union(self, other: Encoder) -> Encoder:
        if self == other:
            return self
        if type(other) is type(self) and (self.dim is None or other.dim is None):  # type: ignore[attr-defined]
            return type(self)(self.dim if self.dim is not None else other.dim)  # type: ignore[attr-defined]
        raise TypeError(f"cannot combine encoders {self!r} and {other!r}")

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.dim))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim!r})"

    def embedding_scales(self) -> np.ndarray:
        if self.dim is None:
            raise EmbeddingUnavailableError(f"{type(self).__name__}: the vector length is not known yet")
        return np.zeros(self.dim, dtype=bool)  # shares: already on a comparable scale

    def embedding_groups(self) -> np.ndarray:
        return np.zeros(len(self.embedding_scales()), dtype=np.int64)
