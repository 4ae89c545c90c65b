"""The passes over the data behind ``init="kmeans||"`` (private; the driver is :mod:`mixle_spark.em.seeding`).

Each pass is a small, picklable *row task* that a backend runs over every chunk of its data inside
:func:`~mixle_spark.parallel.fold.accumulate_chunks` (``task.fold(acc, enc, weights, row_ids)``),
exactly like an E-step: Spark jobs or resident tasks, mp workers, MPI ranks and the local backend all
run the same code, and the per-chunk results merge through :class:`SeedStats` (sums add, moments
combine by Chan's formula, candidate rows concatenate, the first centre is the minimum of a race).
Randomness is keyed by row ids (:class:`~mixle_spark.stats._random.RowRandom`), so the candidates, and
hence the initial model, do not depend on the backend or the partitioning.

A *unit* is what is clustered: a row for mixtures, an element of the sequence for hidden Markov
models (whose states are seeded from clusters of the emissions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats._random import RowRandom
from mixle_spark.stats.base import Encoder

__all__ = [
    "ASSIGN_EPSILON",
    "LOCAL_LLOYD_ITERATIONS",
    "Assign",
    "Candidates",
    "Lloyd",
    "Moments",
    "SeedStats",
    "SeedStatsFactory",
    "Space",
    "Target",
    "lloyd_sums",
    "local_kmeans",
    "moved_centres",
    "nearest",
    "one_hot",
]

LOCAL_LLOYD_ITERATIONS = 30
"""Lloyd iterations over the weighted candidates on the driver (as Spark's LocalKMeans)."""

ASSIGN_EPSILON = 1e-6
"""Responsibility every component gets from every unit in the initial hard assignment, so a component
no unit is nearest to still has (tiny) statistics and a finite estimate."""


@dataclass(frozen=True)
class Target:
    """What the seeding clusters: ``kind`` "rows" (a mixture) or "elements" (a hidden Markov model's
    emissions), embedded by ``encoder`` (of a row, resp. of one element), into ``k`` clusters."""

    kind: str
    encoder: Encoder
    k: int

    def units(self, enc: Any, w: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(embedding (u, m), weights (u,), keys (u,) uint64) of the units of one encoded chunk."""
        if self.kind == "rows":
            return self.encoder.embed(enc), w, np.asarray(ids, dtype=np.uint64)
        width = len(self.encoder.embedding_scales())
        emb = self.encoder.embed(enc.values) if len(enc.owner) else np.zeros((0, width))
        keys = RowRandom(0, ids).expand(enc.lengths).keys
        return emb, np.asarray(w, dtype=np.float64)[enc.owner], keys


@dataclass(frozen=True)
class Space:
    """The seeding's coordinates: ``(embedding - mean) / scale``, a missing value (NaN) at 0 (the mean)."""

    mean: np.ndarray
    scale: np.ndarray

    def __call__(self, emb: np.ndarray) -> np.ndarray:
        z = (emb - self.mean) / self.scale
        return np.where(np.isnan(z), 0.0, z)


def nearest(z: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the nearest centre, squared distance to it) for every row of ``z`` (u, m).

    Computed with ``einsum``, not a BLAS product: a BLAS kernel rounds a row differently depending on
    how many rows share the call, which would let the chunking decide exact ties (common with one-hot
    and count embeddings) and so the backend and partitioning decide the initial model.
    """
    if len(z) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    zz = np.einsum("ij,ij->i", z, z)
    cc = np.einsum("ij,ij->i", centres, centres)
    d2 = zz[:, None] - 2.0 * np.einsum("ij,kj->ik", z, centres) + cc[None, :]
    index = np.argmin(d2, axis=1)
    return index, np.maximum(d2[np.arange(len(z)), index], 0.0)


def lloyd_sums(z: np.ndarray, w: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Lloyd's statistics of rows ``z`` (u, m) weighted ``w``: per centre the weight and the weighted
    coordinate sum of its nearest rows (shapes (k,), (k, m)), and the weighted squared distance."""
    index, d2 = nearest(z, centres)
    k = len(centres)
    sums = np.zeros((k, z.shape[1]))
    np.add.at(sums, index, z * w[:, None])
    return np.bincount(index, weights=w, minlength=k), sums, float(np.dot(w, d2))


def moved_centres(count: np.ndarray, sums: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Lloyd's update: every centre to the mean of its rows; a centre with none stays where it is."""
    return np.where(count[:, None] > 0, sums / np.maximum(count, 1e-300)[:, None], centres)


class SeedStats:
    """The mergeable result of a seeding pass.

    ``sums`` named arrays (added); ``moments`` per embedding column ``(weight, mean, M2)`` of the
    non-missing values (Chan's parallel update); ``rows`` candidate units ``(keys, coordinates,
    sampling keys)`` (concatenated; the driver orders them by key); ``first`` the winner of the
    first-centre race ``(race, key, embedding)`` (smallest race wins).
    """

    def __init__(self) -> None:
        self.sums: dict[str, np.ndarray] = {}
        self.moments: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.first: tuple[float, int, np.ndarray] | None = None

    def add(self, name: str, value: Any) -> None:
        value = np.asarray(value, dtype=np.float64)
        self.sums[name] = self.sums[name] + value if name in self.sums else value.copy()

    def add_moments(self, emb: np.ndarray, w: np.ndarray) -> None:
        present = ~np.isnan(emb)
        wp = np.where(present, w[:, None], 0.0)
        n = wp.sum(axis=0)
        x = np.where(present, emb, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, (wp * x).sum(axis=0) / n, 0.0)
        m2 = (wp * (x - mean) ** 2).sum(axis=0)
        self.merge_moments((n, mean, m2))

    def merge_moments(self, other: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> None:
        if other is None:
            return
        if self.moments is None:
            self.moments = tuple(np.array(a, dtype=np.float64) for a in other)  # type: ignore[assignment]
            return
        na, ma, sa = self.moments
        nb, mb, sb = (np.asarray(a, dtype=np.float64) for a in other)
        n = na + nb
        delta = mb - ma
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(n > 0, nb / n, 0.0)
            mean = ma + delta * share
            m2 = sa + sb + np.where(n > 0, delta * delta * na * share, 0.0)
        self.moments = (n, mean, m2)

    def add_rows(self, keys: np.ndarray, coords: np.ndarray, sort_keys: np.ndarray) -> None:
        if len(keys) == 0:
            return
        new = (np.asarray(keys, dtype=np.uint64), np.asarray(coords, dtype=np.float64), np.asarray(sort_keys))
        if self.rows is None:
            self.rows = new
        else:
            self.rows = tuple(np.concatenate([a, b]) for a, b in zip(self.rows, new, strict=True))  # type: ignore[assignment]

    def offer_first(self, candidate: tuple[float, int, np.ndarray] | None) -> None:
        if candidate is not None and (self.first is None or candidate[:2] < self.first[:2]):
            self.first = candidate

    def combine(self, value: Any) -> SeedStats:
        sums, moments, rows, first = value
        for name, v in sums.items():
            self.add(name, v)
        self.merge_moments(moments)
        if rows is not None:
            self.add_rows(*rows)
        self.offer_first(first)
        return self

    def value(self) -> tuple[Any, ...]:
        return (dict(self.sums), self.moments, self.rows, self.first)

    def from_value(self, value: Any) -> SeedStats:
        self.sums, self.moments, self.rows, self.first = {}, None, None, None
        return self.combine(value)


class SeedStatsFactory:
    """Makes empty :class:`SeedStats` (the factory a seeding pass merges its payloads with)."""

    def make(self) -> SeedStats:
        return SeedStats()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SeedStatsFactory)

    def __hash__(self) -> int:
        return hash("SeedStatsFactory")


@dataclass(frozen=True)
class Moments:
    """Pass 1: the embedding's per-column moments, and the first centre: a unit drawn with probability
    proportional to its weight (an exponential race keyed by seed and unit)."""

    target: Target
    seed: int

    def fold(self, acc: SeedStats, enc: Any, w: np.ndarray, ids: np.ndarray) -> None:
        emb, wu, keys = self.target.units(enc, w, ids)
        acc.add_moments(emb, wu)
        if not len(wu):
            return
        u = RowRandom(self.seed, keys).child("kmeans||-first").uniform()
        with np.errstate(divide="ignore"):
            race = np.where(wu > 0, -np.log(u) / np.where(wu > 0, wu, 1.0), np.inf)
        i = int(np.lexsort((keys, race))[0])
        if np.isfinite(race[i]):
            acc.offer_first((float(race[i]), int(keys[i]), emb[i].copy()))


@dataclass(frozen=True)
class Candidates:
    """A k-means|| round: every unit is a candidate with probability ``min(1, l w d² / φ)``, d its
    distance to the centres so far and φ the total ``Σ w d²``.

    The test ``w d² / u > φ / l`` (u the unit's uniform draw) needs the global φ, which no chunk
    knows; a chunk's own φ is smaller, so each chunk returns the units that pass against its own φ (a
    superset, about ``l`` of them) and the driver keeps those that pass against the merged one: one
    pass per round, and the same candidates as two passes would draw.
    """

    target: Target
    space: Space
    centres: np.ndarray
    seed: int
    round: int
    oversampling: float

    def fold(self, acc: SeedStats, enc: Any, w: np.ndarray, ids: np.ndarray) -> None:
        emb, wu, keys = self.target.units(enc, w, ids)
        z = self.space(emb)
        cost = wu * nearest(z, self.centres)[1]
        phi = float(cost.sum())
        acc.add("cost", phi)
        if phi <= 0.0:
            return
        u = RowRandom(self.seed, keys).child(f"kmeans||-{self.round}").uniform()
        race = cost / u
        pick = race > phi / self.oversampling
        acc.add_rows(keys[pick], z[pick], race[pick])


@dataclass(frozen=True)
class Lloyd:
    """A Lloyd step: per centre the weight and weighted coordinate sum of its nearest units, and the
    cost (the weights are also the k-means|| candidates' weights for the driver's k-means++)."""

    target: Target
    space: Space
    centres: np.ndarray

    def fold(self, acc: SeedStats, enc: Any, w: np.ndarray, ids: np.ndarray) -> None:
        emb, wu, _keys = self.target.units(enc, w, ids)
        count, sums, cost = lloyd_sums(self.space(emb), wu, self.centres)
        acc.add("count", count)
        acc.add("sum", sums)
        acc.add("cost", cost)


@dataclass(frozen=True)
class Assign:
    """The initial model's statistics: every unit's responsibility is one-hot on its nearest centre
    (:data:`ASSIGN_EPSILON` spread over the others), folded by the model's own accumulator
    (``seq_assign``), so every component family builds its component from its units."""

    target: Target
    space: Space
    centres: np.ndarray
    seed: int

    def fold(self, acc: Any, enc: Any, w: np.ndarray, ids: np.ndarray) -> None:
        emb, _wu, _keys = self.target.units(enc, w, ids)
        index, _d2 = nearest(self.space(emb), self.centres)
        self.assign(acc, enc, w, index, RowRandom(self.seed, ids).child("init"))

    def assign(self, acc: Any, enc: Any, w: np.ndarray, index: np.ndarray, rng: RowRandom) -> None:
        """Fold units whose nearest centre is ``index`` into ``acc``."""
        acc.seq_assign(enc, w, one_hot(index, self.target.k), rng)


def one_hot(index: np.ndarray, k: int) -> np.ndarray:
    """Responsibilities (n, k) one-hot at ``index``, :data:`ASSIGN_EPSILON` spread over the rest."""
    resp = np.full((len(index), k), ASSIGN_EPSILON / k)
    resp[np.arange(len(index)), index] += 1.0 - ASSIGN_EPSILON
    return resp


def local_kmeans(points: np.ndarray, weights: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` centres of weighted ``points`` (c, m): greedy k-means++ then Lloyd iterations.

    Greedy k-means++ (Arthur & Vassilvitskii 2007, as scikit-learn's ``kmeans_plusplus``) tries
    ``2 + ln k`` candidates per centre and keeps the one that lowers the weighted cost most.
    """
    weights = np.maximum(np.asarray(weights, dtype=np.float64), 0.0)
    if weights.sum() <= 0:
        weights = np.ones(len(points))
    tries = 2 + int(math.log(k))
    chosen = [int(rng.choice(len(points), p=weights / weights.sum()))]
    closest = ((points - points[chosen[0]]) ** 2).sum(axis=1)
    for _ in range(1, k):
        mass = weights * closest
        total = mass.sum()
        if total <= 0:
            remaining = np.setdiff1d(np.arange(len(points)), chosen)
            pick = int(remaining[0]) if len(remaining) else chosen[-1]
        else:
            cumulative = np.cumsum(mass)
            tried = np.searchsorted(cumulative, rng.random(tries) * total, side="right")
            tried = np.minimum(tried, len(points) - 1)
            d2 = ((points[None, :, :] - points[tried][:, None, :]) ** 2).sum(axis=2)
            costs = (weights[None, :] * np.minimum(closest[None, :], d2)).sum(axis=1)
            pick = int(tried[int(np.argmin(costs))])
        chosen.append(pick)
        closest = np.minimum(closest, ((points - points[pick]) ** 2).sum(axis=1))
    centres = points[chosen].copy()
    for _ in range(LOCAL_LLOYD_ITERATIONS):
        count, sums, _cost = lloyd_sums(points, weights, centres)
        moved = moved_centres(count, sums, centres)
        if np.allclose(moved, centres, rtol=0.0, atol=1e-12):
            centres = moved
            break
        centres = moved
    return centres
