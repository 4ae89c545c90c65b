"""The encoder the value combinators share (zero_inflated, hurdle, truncated, censored): a numeric
column whose rows fall into groups by their value (a zero, a positive value, a value at a censoring
bound, ...), some groups encoded by the inner family's encoder, the others kept as row positions.

The encoding is :class:`SplitEncoded` ``(n, rows, child)``: ``rows[g]`` the rows of group ``g``
(int64, increasing), ``child[g]`` the inner encoder's batch of those rows (None for a group the inner
family does not read). An error of the inner encoder is re-mapped to the row of the enclosing batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np

from mixle_spark.errors import DataError, FieldError
from mixle_spark.stats._validate import arrow_float_values, check_finite, float_values
from mixle_spark.stats.base import Encoder

__all__ = ["SplitEncoded", "SplitEncoder"]


class SplitEncoded(NamedTuple):
    """``n`` rows split into groups: ``rows[g]`` the rows of group ``g``, ``child[g]`` their inner
    encoding (None where the group is not read by the inner family)."""

    n: int
    rows: tuple[np.ndarray, ...]
    child: tuple[Any, ...]


class SplitEncoder(Encoder):
    """Reads numbers, sorts the rows into groups (:meth:`classify`) and encodes the groups listed in
    :attr:`encodes` with the inner encoder; a group in :attr:`tries` is encoded only when the inner
    encoder accepts its values (the zeros of a zero-inflated family whose inner family has no zero),
    else its ``child`` is None."""

    combinator: ClassVar[str] = ""
    encodes: ClassVar[tuple[int, ...]] = (0,)
    tries: ClassVar[tuple[int, ...]] = ()
    groups: ClassVar[int] = 1

    def __init__(self, child: Encoder) -> None:
        self.child = child

    @property
    def expected(self) -> str:
        return f"expected {self.expectation()} for {self.combinator}"

    def expectation(self) -> str:
        """What a value must be (message fragment)."""
        return "a finite number"

    def classify(self, x: np.ndarray) -> np.ndarray:
        """The group of each value (int array of shape (n,)); raises DataValueError for a value none
        takes. Values are finite here."""
        return np.zeros(len(x), dtype=np.int64)

    def _encode_group(self, x: np.ndarray, index: np.ndarray, n: int, g: int) -> Any:
        if g not in self.encodes and g not in self.tries:
            return None
        try:
            return self.child.encode(x[index])
        except FieldError as err:
            if g in self.tries and isinstance(err, DataError):  # the inner family has no such value
                return None
            raise err.in_rows(index, n) from err

    def _split(self, x: np.ndarray) -> SplitEncoded:
        check_finite(x, self.expected)
        codes = self.classify(x)
        n = len(x)
        index = tuple(np.flatnonzero(codes == g) for g in range(self.groups))
        child = tuple(self._encode_group(x, index[g], n, g) for g in range(self.groups))
        return SplitEncoded(n, index, child)

    def encode(self, records: Sequence[Any]) -> SplitEncoded:
        return self._split(float_values(records, self.expected))

    def from_arrow(self, data: Any) -> SplitEncoded:
        return self._split(arrow_float_values(data, self.expected))

    def check_arrow_type(self, arrow_type: Any) -> None:
        self.child.check_arrow_type(arrow_type)

    def expected_arrow(self) -> str:
        return self.child.expected_arrow()

    @property
    def needs_scan(self) -> bool:
        return self.child.needs_scan

    def _read(self, x: np.ndarray) -> np.ndarray:
        codes = self.classify(x)
        return x[np.isin(codes, self.encodes)]

    def scan(self, records: Sequence[Any]) -> Any:
        if not self.needs_scan:
            return None
        values: Any = self._read(float_values(records, self.expected))
        return self.child.scan(values)

    def scan_arrow(self, data: Any) -> Any:
        if not self.needs_scan:
            return None
        values: Any = self._read(arrow_float_values(data, self.expected))
        return self.child.scan(values)

    def merge_scans(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return self.child.merge_scans(a, b)

    @property
    def rebases(self) -> bool:
        return self.child.rebases

    def rebase(self, enc: SplitEncoded) -> SplitEncoded:
        child = tuple(None if c is None else self.child.rebase(c) for c in enc.child)
        return SplitEncoded(enc.n, enc.rows, child)

    def union(self, other: Encoder) -> Encoder:
        if type(other) is not type(self) or vars(other).keys() != vars(self).keys():
            raise TypeError(f"cannot combine encoders {self!r} and {other!r}")
        mine = {k: v for k, v in vars(self).items() if k != "child"}
        theirs = {k: v for k, v in vars(other).items() if k != "child"}
        if mine != theirs:
            raise TypeError(f"cannot combine encoders {self!r} and {other!r}")
        out = type(self).__new__(type(self))
        out.__dict__.update(vars(self))
        out.child = self.child.union(other.child)  # type: ignore[attr-defined]
        return out

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash((type(self).__name__, hash(self.child)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.child!r})"

    def embedding_scales(self) -> np.ndarray:
        return self.child.embedding_scales()

    def embedding_groups(self) -> np.ndarray:
        return self.child.embedding_groups()

    def embed(self, enc: SplitEncoded) -> np.ndarray:
        """The inner family's embedding of the rows it reads; NaN (missing, for the seeding) in the
        rows it does not (the structural zeros, censored values)."""
        out = np.full((enc.n, len(self.child.embedding_scales())), np.nan)
        for index, child in zip(enc.rows, enc.child, strict=True):
            if child is not None and len(index):
                out[index] = self.child.embed(child)
        return out
