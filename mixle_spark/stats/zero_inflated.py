"""Extra mass at zero: ``ZeroInflatedDistribution(dist, pi)``.

``P(0) = pi + (1 - pi) f(0)`` and ``p(x) = (1 - pi) f(x)`` for ``x != 0``, with ``f`` the inner family
(Lambert 1992, "Zero-inflated Poisson regression", Technometrics 34(1)). Over a count family both are
probabilities. Over a continuous family the model is a *mixed measure*: an atom of mass ``pi`` at 0
plus ``(1 - pi)`` times a density (a duration that is exactly 0 for 5% of sessions); a row's
log-likelihood then adds the log of a probability (the atom, at a zero) to the logs of densities (the
other rows), which is the likelihood with respect to the counting measure at 0 plus Lebesgue measure.
A continuous inner family gives a zero no mass of its own, so every zero is structural; where its
density is finite at 0 (an exponential) the zero rows still count ``(1 - pi) f(0)`` beside the atom,
exactly as the formula says. An inner family whose support lacks 0 (a gamma, a geometric) has
``f(0) = 0``.

The M-step is exact EM: a zero row is structural with posterior
``r = pi / (pi + (1 - pi) f(0))`` at the current parameters; ``Σ w r`` is ``pi``'s statistic and the
rest of the zero rows' weight, ``w (1 - r)``, goes to the inner family's statistics with the non-zero
rows. The statistics are sums, so they merge across partitions by addition; each step never lowers
the likelihood (Dempster, Laird & Rubin 1977).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats._product import as_record_list
from mixle_spark.stats._split import SplitEncoded, SplitEncoder
from mixle_spark.stats._zero_share import ZeroShareAccumulator, ZeroShareEstimator
from mixle_spark.stats.base import (
    Distribution,
    Encoder,
    Parameter,
    RowRandom,
    Sampler,
    check_parameter,
    part,
    register_distribution,
    register_estimator,
    seq_update_with_ll,
)

__all__ = [
    "ZeroInflatedAccumulator",
    "ZeroInflatedDistribution",
    "ZeroInflatedEncoder",
    "ZeroInflatedEstimator",
]

NONZERO, ZERO = 0, 1


def _log(p: float) -> float:
    return math.log(p) if p > 0.0 else -math.inf


class ZeroInflatedEncoder(SplitEncoder):
    """Group 0: the non-zero values (read by the inner family); group 1: the zeros (read by the inner
    family too where its support has 0, else None)."""

    combinator = "ZeroInflatedEstimator"
    encodes = (NONZERO,)
    tries = (ZERO,)
    groups = 2

    def classify(self, x: np.ndarray) -> np.ndarray:
        return (x == 0.0).astype(np.int64)


def _inner_log_density_at_zero(dist: Distribution, encoder: Encoder) -> float:
    """``log f(0)`` of the inner family, ``-inf`` where its encoder refuses a 0 (0 is off its support)."""
    enc = ZeroInflatedEncoder(encoder).encode([0.0])
    if enc.child[ZERO] is None:
        return -math.inf
    return float(dist.seq_log_density(enc.child[ZERO])[0])


@register_distribution("zero_inflated")
class ZeroInflatedDistribution(Distribution):
    """An atom of mass ``pi`` at 0 mixed with ``dist`` (weight ``1 - pi``).

    Parameters
    ----------
    dist : Distribution
        The inner family (a count or a number).
    pi : float in [0, 1]
        The structural-zero probability.

    Examples
    --------
    >>> from mixle_spark.stats import PoissonDistribution
    >>> d = ZeroInflatedDistribution(PoissonDistribution(2.0), 0.25)
    >>> round(math.exp(d.log_density(0)), 12) == round(0.25 + 0.75 * math.exp(-2.0), 12)
    True
    """

    parameters = (part("dist"), Parameter("pi"))

    def __init__(self, dist: Distribution, pi: float) -> None:
        check_parameter(
            isinstance(dist, Distribution), "ZeroInflatedDistribution", "dist", dist, "a Distribution"
        )
        check_parameter(
            isinstance(pi, (int, float)) and 0.0 <= pi <= 1.0,
            "ZeroInflatedDistribution",
            "pi",
            pi,
            "a probability in [0, 1]",
        )
        self.dist = dist
        self.pi = float(pi)
        self._log_pi = _log(self.pi)
        self._log_rest = _log(1.0 - self.pi)

    def sampling_parts(self) -> list[Distribution]:
        return [self.dist]

    def draw_with(self, sampler: Sampler, size: int | None = None) -> Any:
        """0 with probability ``pi``, else a draw of ``dist``."""
        rng, (child,) = sampler.rng, sampler.parts
        zero = getattr(self.dist, "record_type", float)(0)
        if size is None:
            return zero if rng.random() < self.pi else child.sample()
        structural = rng.random(size) < self.pi
        values = as_record_list(child.sample(size))
        return [zero if s else v for s, v in zip(structural.tolist(), values, strict=True)]

    def _log_zero(self, log_f0: np.ndarray | float) -> Any:
        with np.errstate(divide="ignore"):
            return np.logaddexp(self._log_pi, self._log_rest + log_f0)

    def log_density(self, x: Any) -> float:
        return float(self.seq_log_density(self.encoder().encode([x]))[0])

    def seq_log_density(self, enc: SplitEncoded) -> np.ndarray:
        out = np.empty(enc.n)
        nonzero, zero = enc.rows
        if len(nonzero):
            out[nonzero] = self._log_rest + self.dist.seq_log_density(enc.child[NONZERO])
        if len(zero):
            child = enc.child[ZERO]
            out[zero] = self._log_pi if child is None else self._log_zero(self.dist.seq_log_density(child))
        return out

    def moments(self) -> tuple[float, float]:
        """Mean ``(1 - pi) m`` and variance ``(1 - pi) (v + m^2) - mean^2`` from the inner family's
        mean ``m`` and variance ``v`` (where it gives them)."""
        m, v = self.dist.moments()  # type: ignore[attr-defined]
        mean = (1.0 - self.pi) * m
        return mean, (1.0 - self.pi) * (v + m * m) - mean * mean

    def zero_share(self) -> float:
        """``P(X = 0)``: the structural zeros and the inner family's own."""
        return math.exp(float(self._log_zero(_inner_log_density_at_zero(self.dist, self.dist.encoder()))))

    def estimator(self, pseudo_count: float | None = None) -> ZeroInflatedEstimator:
        return ZeroInflatedEstimator(self.dist.estimator(pseudo_count), pseudo_count=pseudo_count)

    def encoder(self) -> ZeroInflatedEncoder:
        return ZeroInflatedEncoder(self.dist.encoder())

    def n_free_parameters(self) -> int:
        return self.estimator().n_free_parameters(self)


class ZeroInflatedAccumulator(ZeroShareAccumulator):
    """The structural zeros' weight ``Σ w r``, the total weight and the inner family's statistics.

    Value: ``(structural_weight, total_weight, child_value)`` (see
    :class:`~mixle_spark.stats._zero_share.ZeroShareAccumulator`).
    """

    def _posterior(self, enc: SplitEncoded, estimate: Any) -> tuple[np.ndarray, np.ndarray]:
        """The zero rows' structural posterior ``r`` and the inner log-density there (``-inf`` where
        the inner family has no zero). With no estimate (the first pass) a zero is structural with
        probability 1/2 when the inner family has zeros."""
        zero = enc.rows[ZERO]
        child = enc.child[ZERO]
        if child is None:
            return np.ones(len(zero)), np.full(len(zero), -math.inf)
        if estimate is None:
            return np.full(len(zero), 0.5), np.full(len(zero), math.nan)
        log_f0 = estimate.dist.seq_log_density(child)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.exp(estimate._log_pi - estimate._log_zero(log_f0))
        return np.where(np.isfinite(r), r, 1.0), log_f0

    def _count(self, enc: SplitEncoded, weights: np.ndarray, r: np.ndarray) -> None:
        self.total += float(weights.sum())
        self.zeros += float(np.dot(weights[enc.rows[ZERO]], r))

    def seq_update(self, enc: SplitEncoded, weights: np.ndarray, estimate: Any) -> np.ndarray | None:
        nonzero, zero = enc.rows
        r, log_f0 = self._posterior(enc, estimate)
        self._count(enc, weights, r)
        inner = None if estimate is None else estimate.dist
        if enc.child[ZERO] is not None and len(zero):
            self.child.seq_update(enc.child[ZERO], weights[zero] * (1.0 - r), inner)
        if inner is None:
            self.child.seq_update(enc.child[NONZERO], weights[nonzero], None)
            return None
        ll = np.empty(enc.n)
        ll[zero] = estimate._log_zero(log_f0)
        child_ll = seq_update_with_ll(self.child, enc.child[NONZERO], weights[nonzero], inner)
        ll[nonzero] = estimate._log_rest + child_ll
        return ll

    def seq_initialize(self, enc: SplitEncoded, weights: np.ndarray, rng: RowRandom) -> None:
        nonzero, zero = enc.rows
        r, _ = self._posterior(enc, None)
        self._count(enc, weights, r)
        if enc.child[ZERO] is not None and len(zero):
            self.child.seq_initialize(enc.child[ZERO], weights[zero] * (1.0 - r), rng.take(zero))
        self.child.seq_initialize(enc.child[NONZERO], weights[nonzero], rng.take(nonzero))


@register_estimator("zero_inflated")
@dataclass(eq=False, repr=False)
class ZeroInflatedEstimator(ZeroShareEstimator):
    """Fits the structural-zero probability ``pi`` and the inner family by exact EM (see the module).

    Parameters
    ----------
    estimator : Estimator
        Estimator of the inner family.
    pseudo_count : float, optional
        ``pi = (Σ w r + pseudo_count / 2) / (Σ w + pseudo_count)``: shrinks ``pi`` towards 1/2. With
        zero total weight and no pseudo-count, ``pi = 1/2``.
    name, keys : str, optional
        ``keys`` ties ``pi`` and the inner statistics across sites.
    """

    distribution_class = ZeroInflatedDistribution
    accumulator_class = ZeroInflatedAccumulator
    encoder_class = ZeroInflatedEncoder
