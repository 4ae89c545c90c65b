"""How EM starts: ``init="kmeans||"`` (the default for mixtures and hidden Markov models) or ``"random"``.

``kmeans||`` is Bahmani et al.'s scalable k-means++ (VLDB 2012), the seeding of Spark's ``KMeans``:

1. one pass for the embedding's moments (:mod:`mixle_spark.stats._embed`: numbers standardized, a
   vector's coordinates together when their spreads are alike, labels one-hot, counts on a log
   scale, ...) and a first centre drawn by weight;
2. ``steps`` rounds (pyspark.ml's ``initSteps``), one pass each, in which every unit becomes a
   candidate with probability ``min(1, l d²/φ)`` (``l = oversampling * k``);
3. one pass weighting each candidate by the units nearest to it; on the driver a weighted k-means++
   (greedy, ``2 + ln k`` tries per centre) and Lloyd iterations reduce the candidates to ``k`` centres,
   the best (lowest weighted cost) of :data:`LOCAL_STARTS` such runs;
4. Lloyd passes over the data until the centres settle (they move less than ``tol`` times the mean
   variance, as scikit-learn's ``KMeans`` stops), at most ``lloyd_iterations``;
5. one pass in which every unit is assigned to its nearest centre and each component's own estimator
   builds the component from its units (so any component family works).

Units are rows for a mixture and sequence elements for a hidden Markov model. All randomness is keyed
by seed and row id, so one seed gives the same initial model on every backend and partitioning. A model
whose encoder cannot embed (named in a warning), a backend without row passes, or data with fewer
distinct points than components falls back to ``"random"``: random responsibilities over a random
subset of rows, exactly as before ``kmeans||`` existed.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.em._nested_seeding import AssignNested, nested_plan
from mixle_spark.em._seeding_passes import LOCAL_LLOYD_ITERATIONS as LOCAL_LLOYD_ITERATIONS  # as before
from mixle_spark.em._seeding_passes import (
    Assign,
    Candidates,
    Lloyd,
    Moments,
    SeedStatsFactory,
    Space,
    Target,
    lloyd_sums,
    local_kmeans,
    moved_centres,
)
from mixle_spark.errors import EmbeddingUnavailableError, SpecError
from mixle_spark.parallel.backends.contract import EncodedData, RowPasses
from mixle_spark.stats._random import RowRandom
from mixle_spark.stats.base import Distribution, Estimator

__all__ = ["INIT_MODES", "Seeding", "SeedingFallbackWarning", "kmeans_parallel", "seed_target"]

logger = logging.getLogger("mixle_spark.estimation")

INIT_MODES = ("kmeans||", "random")
"""The initialization strategies of ``optimize(..., init=...)``."""

LOCAL_STARTS = 5
"""Greedy k-means++ runs over the weighted candidates on the driver; the one of lowest weighted cost
is kept (cheap: the candidates are a few times ``k`` points, not the data)."""

SHARED_SCALE_RATIO = 5.0
"""The coordinates of one vector share one seeding scale when their standard deviations are within
this factor of each other (same units, as likely as not); beyond it each is standardized alone
(features in different units: one scale would let the largest decide the clusters)."""


class SeedingFallbackWarning(UserWarning):
    """``init="kmeans||"`` could not seed this model or data; the fit started from ``init="random"``."""


@dataclass(frozen=True)
class Seeding:
    """How a fit starts.

    Parameters
    ----------
    mode : {"kmeans||", "random"}
        ``kmeans||`` seeds mixtures and hidden Markov models by distributed k-means|| (other models
        start as with ``random``); ``random`` draws random responsibilities over a row sample.
    steps : int
        k-means|| rounds (pyspark.ml ``KMeans.initSteps``), one pass over the data each.
    oversampling : float
        Expected candidates per round, as a multiple of the number of components.
    lloyd_iterations : int
        Most Lloyd passes over the data after the candidates are reduced to ``k`` centres.
    tol : float
        The Lloyd passes stop when the centres' total squared shift is below ``tol`` times the mean
        variance of the seeding coordinates.
    """

    mode: str = "kmeans||"
    steps: int = 2
    oversampling: float = 2.0
    lloyd_iterations: int = 50
    tol: float = 1e-4

    @classmethod
    def build(cls, init: Any = "kmeans||", init_steps: Any = None) -> Seeding:
        """Validate ``optimize``'s ``init`` (a mode name or a Seeding) and ``init_steps``."""
        if isinstance(init, Seeding):
            seeding = init
        elif isinstance(init, str) and init in INIT_MODES:
            seeding = cls(mode=init)
        else:
            raise SpecError(
                f"unknown init {init!r}; valid values: {', '.join(map(repr, INIT_MODES))} or a Seeding"
            )
        if init_steps is not None:
            seeding = cls(
                seeding.mode, init_steps, seeding.oversampling, seeding.lloyd_iterations, seeding.tol
            )
        seeding.check()
        return seeding

    def check(self) -> None:
        if self.mode not in INIT_MODES:
            raise SpecError(f"unknown init {self.mode!r}; valid values: {', '.join(map(repr, INIT_MODES))}")
        if type(self.steps) is not int or self.steps < 1:
            raise SpecError(f"init_steps (initSteps) must be an integer >= 1, got {self.steps!r}")
        if not (isinstance(self.oversampling, (int, float)) and self.oversampling > 0):
            raise SpecError(f"oversampling must be a number > 0, got {self.oversampling!r}")
        if type(self.lloyd_iterations) is not int or self.lloyd_iterations < 0:
            raise SpecError(f"lloyd_iterations must be an integer >= 0, got {self.lloyd_iterations!r}")
        if not (isinstance(self.tol, (int, float)) and self.tol >= 0):
            raise SpecError(f"tol must be a number >= 0, got {self.tol!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "init": self.mode,
            "init_steps": self.steps,
            "oversampling": self.oversampling,
            "lloyd_iterations": self.lloyd_iterations,
            "tol": self.tol,
        }


def seed_target(estimator: Estimator) -> Target | None:
    """What k-means|| seeds for ``estimator`` (bound to the data), or None when it has no latent
    clusters to seed (then ``random`` and ``kmeans||`` start alike). Raises
    :class:`~mixle_spark.errors.EmbeddingUnavailableError` when the units cannot be embedded."""
    from mixle_spark.stats.hidden_markov import HiddenMarkovEstimator
    from mixle_spark.stats.mixture import MixtureEstimator

    inner = getattr(estimator, "inner", estimator)  # ModelParallelEstimator threads a mixture
    if isinstance(inner, MixtureEstimator):
        target = Target("rows", inner.encoder(), len(inner.estimators))
    elif isinstance(inner, HiddenMarkovEstimator):
        target = Target("elements", inner.encoder().child, len(inner.estimators))
    else:
        return None
    target.encoder.embedding_scales()  # raises for a family without an embedding
    return target


def _fallback(reason: str) -> None:
    warnings.warn(
        f'init="kmeans||": {reason}; starting from init="random" instead',
        SeedingFallbackWarning,
        stacklevel=5,
    )


def kmeans_parallel(
    handle: EncodedData,
    estimator: Estimator,
    seed: int,
    seeding: Seeding,
    report: Callable[[str], None] = logger.info,
) -> Distribution | None:
    """The initial model of ``estimator`` seeded by k-means|| over ``handle``'s data, or None (with a
    :class:`SeedingFallbackWarning` where the user asked for something that could not be done) when
    the fit must start from ``init="random"``. Each pass is logged at INFO; ``report`` gets the
    summary line."""
    bound = handle.bind(estimator) if isinstance(handle, RowPasses) else estimator
    try:
        target = seed_target(bound)
    except EmbeddingUnavailableError as err:
        _fallback(str(err))
        return None
    if target is None:
        return None
    if not isinstance(handle, RowPasses):
        _fallback(f"the {type(handle).__name__} backend cannot run seeding passes")
        return None
    run = handle.pysp_row_pass
    started = time.perf_counter()

    def passes_of(task: Any) -> Any:
        return run(SeedStatsFactory(), task)[1]

    nested = nested_plan(bound, target)
    found = None
    if nested is not None:  # K * k flat clusters; too few distinct points for them: K as usual
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SeedingFallbackWarning)
            flat = Target(target.kind, target.encoder, nested.flat_k(target.k))
            found = _centres(passes_of, flat, seed, seeding)
        if found is None:
            nested = None
    if found is None:
        found = _centres(passes_of, target, seed, seeding)
    if found is None:
        return None
    space, centres, passes = found
    task: Any = Assign(target, space, centres, seed)
    what = f"{target.k} centres"
    if nested is not None:
        rng = np.random.default_rng(int(RowRandom(seed, [0]).child("kmeans||-nested").bits()[0]))
        owner, inner = nested.groups(centres, target.k, rng)
        task = AssignNested(target, space, centres, seed, nested, owner, inner)
        what = f"{target.k} x {nested.k} centres (the mixture in field {nested.name!r} seeded with its own)"
    factory = bound.accumulator_factory()
    nobs, value = run(factory, task)
    from mixle_spark.parallel.fold import fold_key_passes

    model = bound.estimate(nobs, fold_key_passes(factory.make().from_value(value)).value())
    report(
        f"kmeans|| seeding: {what} in {passes + 1} passes over the data "
        f"({time.perf_counter() - started:.2f} s)"
    )
    return model


def _centres(
    run: Callable[[Any], Any], target: Target, seed: int, seeding: Seeding
) -> tuple[Space, np.ndarray, int] | None:
    """(coordinates, k centres, passes made) by k-means|| and Lloyd passes, or None to fall back."""
    k = target.k
    sums, moments, _rows, first = run(Moments(target, seed))
    if first is None or moments is None:
        _fallback("no row has a positive weight")
        return None
    space = _space(target, moments)
    centres = space(first[2][None, :])
    passes = 1
    expected = seeding.oversampling * k  # candidates drawn per round, in expectation
    for round_ in range(seeding.steps):
        sums, _moments, rows, _first = run(Candidates(target, space, centres, seed, round_, expected))
        passes += 1
        phi = float(sums.get("cost", 0.0))
        if rows is not None and phi > 0:
            keys, coords, race = rows
            order = np.argsort(keys, kind="stable")
            chosen = order[race[order] > phi / expected]
            centres = np.vstack([centres, coords[chosen]])
        logger.info(f"kmeans|| round {round_ + 1}: {len(centres)} candidates, cost {phi:.6g}")
        if phi <= 0:
            break
    _unique, first_seen = np.unique(centres, axis=0, return_index=True)
    centres = centres[np.sort(first_seen)]  # a repeated point (discrete data) is one candidate
    if len(centres) < k:
        _fallback(f"the data has only {len(centres)} distinct points in seeding space for {k} components")
        return None
    if len(centres) > k:
        weights = run(Lloyd(target, space, centres))[0]["count"]
        passes += 1
        rng = np.random.default_rng(int(RowRandom(seed, [0]).child("kmeans||-local").bits()[0]))
        centres = best_local_kmeans(centres, weights, k, rng, LOCAL_STARTS)
    tol = seeding.tol * float(np.mean(_coordinate_variance(moments, space)))
    for step in range(seeding.lloyd_iterations):
        sums = run(Lloyd(target, space, centres))[0]
        passes += 1
        moved = moved_centres(sums["count"], sums["sum"], centres)
        shift = float(((moved - centres) ** 2).sum())
        centres = moved
        logger.info(
            f"kmeans|| Lloyd pass {step + 1}: cost {float(sums['cost']):.6g}, centre shift {shift:.3g}"
        )
        if shift <= tol:
            break
    return space, centres, passes


def _variance(moments: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """The weighted variance of every embedding column (0 for a column without values)."""
    n, _mean, m2 = moments
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, m2 / n, 0.0)  # type: ignore[no-any-return]


def _space(target: Target, moments: tuple[np.ndarray, np.ndarray, np.ndarray]) -> Space:
    """Standardize the number columns (by the weighted standard deviation; a constant one by 1),
    centre every column. The coordinates of one vector (:meth:`Encoder.embedding_groups`) whose
    standard deviations are within :data:`SHARED_SCALE_RATIO` of each other share one scale, the
    root mean square of theirs: scaling them one by one would distort rotated clusters."""
    standardize = np.asarray(target.encoder.embedding_scales(), dtype=bool)
    sd = np.sqrt(_variance(moments))
    scale = np.where(standardize & (sd > 0), sd, 1.0)
    groups = np.asarray(target.encoder.embedding_groups())
    for group in np.unique(groups):
        columns = np.flatnonzero(groups == group)
        part = sd[columns]
        if len(columns) > 1 and standardize[columns].all() and part.min() > 0:
            if part.max() <= SHARED_SCALE_RATIO * part.min():
                scale[columns] = np.sqrt(np.mean(part**2))
    return Space(np.asarray(moments[1], dtype=np.float64), scale)


def _coordinate_variance(moments: tuple[np.ndarray, np.ndarray, np.ndarray], space: Space) -> np.ndarray:
    """The variance of every seeding coordinate (one 0 for an empty embedding)."""
    var = _variance(moments) / space.scale**2
    return var if len(var) else np.zeros(1)


def best_local_kmeans(
    points: np.ndarray, weights: np.ndarray, k: int, rng: np.random.Generator, starts: int
) -> np.ndarray:
    """The ``k`` centres of :func:`local_kmeans` from ``starts`` starts (drawn in turn from ``rng``)
    with the lowest weighted cost over ``points``; the first of equal costs."""
    best, best_cost = None, np.inf
    for _ in range(starts):
        centres = local_kmeans(points, weights, k, rng)
        cost = lloyd_sums(points, np.maximum(np.asarray(weights, dtype=np.float64), 0.0), centres)[2]
        if cost < best_cost:
            best, best_cost = centres, cost
    assert best is not None
    return best
