"""Counter-based randomness keyed by stable row ids.

EM initialization must give the same model for one seed on every backend and every partitioning,
and after a task retry. A per-partition random stream cannot do that, so every random number used
during initialization is a hash of ``(seed, stream, row key, column)``: a row draws the same numbers
wherever it is processed. The hash is SplitMix64's finalizer, vectorized over uint64 arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["RowRandom", "mix64", "seed_to_int"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK53 = np.uint64((1 << 53) - 1)


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer applied elementwise to a uint64 array (wrapping arithmetic)."""
    z = np.asarray(x, dtype=np.uint64) + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def seed_to_int(seed: int | str | None) -> int:
    """Map a user seed (None means 0) to a 64-bit integer; strings hash deterministically."""
    if seed is None:
        return 0
    if isinstance(seed, str):
        acc = np.zeros(1, dtype=np.uint64)
        for byte in seed.encode("utf-8"):
            acc = mix64(acc ^ np.uint64(byte))
        return int(acc[0])
    return int(seed) & 0xFFFFFFFFFFFFFFFF


def _combine(a: int, b: int | str) -> int:
    return int(
        mix64(np.array([seed_to_int(a) ^ int(mix64(np.array([seed_to_int(b)]))[0])], dtype=np.uint64))[0]
    )


class RowRandom:
    """Random numbers for a batch of rows, each row's draws a pure function of (seed, key).

    Parameters
    ----------
    seed : int
        64-bit stream seed.
    keys : array of shape (n,), uint64
        One stable key per row (the row's global index, or a key derived from it).

    Examples
    --------
    >>> a = RowRandom(7, np.arange(5)).uniform()
    >>> b = RowRandom(7, np.arange(2, 5)).uniform()
    >>> bool(np.all(a[2:] == b))
    True
    """

    __slots__ = ("keys", "seed")

    def __init__(self, seed: int, keys: np.ndarray | Sequence[int]) -> None:
        self.seed = seed_to_int(seed)
        self.keys = np.asarray(keys, dtype=np.uint64)

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def for_rows(cls, seed: int | str | None, start: int, n: int) -> RowRandom:
        """Rows with global indices ``start .. start + n - 1``."""
        return cls(seed_to_int(seed), np.arange(start, start + n, dtype=np.uint64))

    def child(self, stream: int | str) -> RowRandom:
        """An independent stream for the same rows (one per child field / component)."""
        return RowRandom(_combine(self.seed, stream), self.keys)

    def take(self, index: np.ndarray) -> RowRandom:
        """The rows at ``index`` (a boolean mask or integer positions), keeping their keys."""
        return RowRandom(self.seed, self.keys[index])

    def expand(self, lengths: np.ndarray) -> RowRandom:
        """Keys for the elements of sequences: row ``i`` has ``lengths[i]`` elements.

        Element ``j`` of row ``i`` gets a key derived from (key of row i, j), so the draws of an
        element do not depend on how rows are split into chunks.
        """
        lengths = np.asarray(lengths, dtype=np.int64)
        owner = np.repeat(self.keys, lengths)
        starts = np.cumsum(lengths) - lengths
        position = np.arange(len(owner), dtype=np.int64) - np.repeat(starts, lengths)
        return RowRandom(self.seed, mix64(owner) ^ mix64(position.astype(np.uint64) + _GOLDEN))

    def bits(self, columns: int | None = None) -> np.ndarray:
        """uint64 hashes, shape (n,) or (n, columns)."""
        base = mix64(self.keys ^ np.uint64(self.seed))
        if columns is None:
            return mix64(base)
        col = mix64(np.arange(columns, dtype=np.uint64) * _GOLDEN)
        return mix64(base[:, None] ^ col[None, :])

    def uniform(self, columns: int | None = None) -> np.ndarray:
        """Uniform doubles in the open interval (0, 1), shape (n,) or (n, columns)."""
        mantissa = (self.bits(columns) >> np.uint64(11)) & _MASK53
        return (mantissa.astype(np.float64) + 0.5) * (1.0 / (1 << 53))

    def integers(self, high: int) -> np.ndarray:
        """Integers in ``[0, high)``, shape (n,)."""
        return np.minimum((self.uniform() * high).astype(np.int64), high - 1)

    def normal(self, columns: int | None = None) -> np.ndarray:
        """Standard normal draws (Box-Muller on two independent uniforms)."""
        u1 = self.child("normal-1").uniform(columns)
        u2 = self.child("normal-2").uniform(columns)
        return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)

    def dirichlet_like(self, k: int, alpha: float) -> np.ndarray:
        """Random probability vectors, shape (n, k), approximately Dirichlet(alpha, ..., alpha).

        Uses Gamma(alpha) ~ Exp(1) * U**(1/alpha) (exact in the Gamma(1 + alpha) factor's limit
        alpha -> 0, close for the small alphas used at initialization, e.g. 1/k**2).
        """
        e = -np.log(self.child("dirichlet-e").uniform(k))
        log_u = np.log(self.child("dirichlet-u").uniform(k)) / alpha
        log_g = np.log(e) + log_u
        log_g -= log_g.max(axis=1, keepdims=True)
        g = np.exp(log_g)
        return g / g.sum(axis=1, keepdims=True)
