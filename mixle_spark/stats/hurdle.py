"""A zero hurdle: ``HurdleDistribution(dist, pi)``.

``P(0) = pi`` and ``p(x) = (1 - pi) f(x) / P(X > 0)`` for ``x > 0``: the zeros are their own process
and the positive values come from ``dist`` truncated to ``X > 0`` (Mullahy 1986, "Specification and
testing of some modified count data models", J. Econometrics 33). For a count family ``P(X > 0)`` is its
survival function at 0 (``1 - f(0)``); for a family whose support is already positive (gamma, or a
continuous family on ``x >= 0``) the truncation is a no-op. Negative values are an error naming column,
row and value.

The likelihood factorizes, so the M-step is exact: ``pi`` is the zero share (closed form), and the
positive part is the maximum of the truncated likelihood, by the EM of
:mod:`~mixle_spark.stats.truncated` (each positive row stands for ``P(X <= 0) / P(X > 0)`` unobserved
draws at or below 0, whose expected statistics join the inner family's); it never lowers the likelihood.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import DataError, SpecError
from mixle_spark.stats._product import as_record_list
from mixle_spark.stats._scalar_common import ScalarFamily, describes
from mixle_spark.stats._split import SplitEncoded, SplitEncoder
from mixle_spark.stats._tails import add_tail_statistics, is_count, log_tail
from mixle_spark.stats._validate import check_range
from mixle_spark.stats._zero_share import ZeroShareAccumulator, ZeroShareEstimator
from mixle_spark.stats.base import (
    Distribution,
    Parameter,
    RowRandom,
    Sampler,
    check_parameter,
    part,
    register_distribution,
    register_estimator,
    registered_distributions,
    seq_update_with_ll,
)

__all__ = ["HurdleAccumulator", "HurdleDistribution", "HurdleEncoder", "HurdleEstimator"]

POSITIVE, ZERO = 0, 1


class HurdleEncoder(SplitEncoder):
    """Group 0: the positive values (read by the inner family); group 1: the zeros; a negative value is
    an error."""

    combinator = "HurdleEstimator"
    groups = 2

    def expectation(self) -> str:
        return "a non-negative finite number"

    def classify(self, x: np.ndarray) -> np.ndarray:
        check_range(x, self.expected, low=0.0)
        return (x == 0.0).astype(np.int64)


def _log_positive(dist: Any) -> float:
    """``ln P(X > 0)`` of the inner family: its survival function at 0, or 0 for a continuous family
    without one whose encoder refuses negative values (its support is already non-negative)."""
    if describes(dist, "log_survival"):
        return log_tail(dist, 0.0, True)
    if not is_count(dist):
        try:
            dist.encoder().encode([-1.0])
        except DataError:
            return 0.0
    raise SpecError(f"hurdle needs the survival function of {dist.family}, which it does not give")


@register_distribution("hurdle")
class HurdleDistribution(Distribution):
    """Zeros with probability ``pi``, else ``dist`` truncated to ``X > 0`` (module doc).

    Parameters
    ----------
    dist : Distribution
        The family of the positive values.
    pi : float in [0, 1]
        The probability of a zero.

    Examples
    --------
    >>> from mixle_spark.stats import PoissonDistribution
    >>> d = HurdleDistribution(PoissonDistribution(2.0), 0.4)
    >>> round(math.exp(d.log_density(1)), 12) == round(0.6 * 2.0 * math.exp(-2.0) / -math.expm1(-2.0), 12)
    True
    """

    parameters = (part("dist"), Parameter("pi"))

    def __init__(self, dist: Distribution, pi: float) -> None:
        check_parameter(isinstance(dist, Distribution), "HurdleDistribution", "dist", dist, "a Distribution")
        check_parameter(
            isinstance(pi, (int, float)) and 0.0 <= pi <= 1.0,
            "HurdleDistribution",
            "pi",
            pi,
            "a probability in [0, 1]",
        )
        self.dist = dist
        self.pi = float(pi)
        self._log_pi = math.log(self.pi) if self.pi > 0 else -math.inf
        self._log_rest = math.log1p(-self.pi) if self.pi < 1 else -math.inf
        self._log_positive = _log_positive(dist)
        if not self._log_positive > -math.inf:
            raise SpecError(f"hurdle: {dist.family} {dist.to_dict()} cannot take positive values")

    def sampling_parts(self) -> list[Distribution]:
        return [self.dist]

    def draw_with(self, sampler: Sampler, size: int | None = None) -> Any:
        """0 with probability ``pi``, else the inner quantile of a uniform over ``(F(0), 1)``."""
        rng, (child,) = sampler.rng, sampler.parts
        n = 1 if size is None else int(size)
        zero = rng.random(n) < self.pi
        if self._log_positive == 0.0:
            positive = as_record_list(child.sample(n))
        else:
            below = -math.expm1(self._log_positive)
            x = np.asarray(self.dist.quantile(below + (1.0 - below) * rng.random(n)))  # type: ignore[attr-defined]
            positive = [int(v) for v in x.tolist()] if is_count(self.dist) else x.tolist()
        nil = getattr(self.dist, "record_type", float)(0)
        values = [nil if z else v for z, v in zip(zero.tolist(), positive, strict=True)]
        return values[0] if size is None else values

    def log_density(self, x: Any) -> float:
        return float(self.seq_log_density(self.encoder().encode([x]))[0])

    def seq_log_density(self, enc: SplitEncoded) -> np.ndarray:
        out = np.empty(enc.n)
        positive, zero = enc.rows
        if len(positive):
            inner = self.dist.seq_log_density(enc.child[POSITIVE])
            out[positive] = self._log_rest + inner - self._log_positive
        out[zero] = self._log_pi
        return out

    def zero_share(self) -> float:
        """``P(X = 0) = pi``."""
        return self.pi

    def estimator(self, pseudo_count: float | None = None) -> HurdleEstimator:
        return HurdleEstimator(self.dist.estimator(pseudo_count), pseudo_count=pseudo_count)

    def encoder(self) -> HurdleEncoder:
        return HurdleEncoder(self.dist.encoder())

    def n_free_parameters(self) -> int:
        return self.estimator().n_free_parameters(self)


class HurdleAccumulator(ZeroShareAccumulator):
    """The zeros' weight, the total weight and the positive part's inner statistics (with the expected
    statistics of its unobserved draws at or below 0). Value: ``(zero_weight, total_weight, child_value)``."""

    def _count(self, enc: SplitEncoded, weights: np.ndarray) -> np.ndarray:
        self.total += float(weights.sum())
        self.zeros += float(weights[enc.rows[ZERO]].sum())
        return weights[enc.rows[POSITIVE]]

    def seq_update(self, enc: SplitEncoded, weights: np.ndarray, estimate: Any) -> np.ndarray | None:
        w_positive = self._count(enc, weights)
        if estimate is None:
            self.child.seq_update(enc.child[POSITIVE], w_positive, None)
            return None
        positive, zero = enc.rows
        ll = np.empty(enc.n)
        inner = seq_update_with_ll(self.child, enc.child[POSITIVE], w_positive, estimate.dist)
        ll[positive] = estimate._log_rest + inner - estimate._log_positive
        ll[zero] = estimate._log_pi
        if estimate._log_positive < 0.0:
            per_row = math.exp(log_tail(estimate.dist, 0.0, False) - estimate._log_positive)
            add_tail_statistics(
                self.child, estimate.dist, 0.0, False, float(w_positive.sum()) * per_row, self._nodes
            )
        return ll

    def seq_initialize(self, enc: SplitEncoded, weights: np.ndarray, rng: RowRandom) -> None:
        w_positive = self._count(enc, weights)
        self.child.seq_initialize(enc.child[POSITIVE], w_positive, rng.take(enc.rows[POSITIVE]))


@register_estimator("hurdle")
@dataclass(eq=False, repr=False)
class HurdleEstimator(ZeroShareEstimator):
    """Fits the zero probability (the zero share) and the positive part's truncated MLE (module doc).

    Parameters
    ----------
    estimator : Estimator
        Estimator of the positive values' family.
    pseudo_count : float, optional
        ``pi = (Σw zeros + pseudo_count / 2) / (Σw + pseudo_count)``; with zero total weight and no
        pseudo-count, ``pi = 1/2``.
    name, keys : str, optional
    """

    distribution_class = HurdleDistribution
    accumulator_class = HurdleAccumulator
    encoder_class = HurdleEncoder

    def check(self) -> None:
        super().check()
        cls = registered_distributions().get(self.estimator.family)
        positive_support_possible = cls is not None and issubclass(cls, ScalarFamily) and not is_count(cls)
        if cls is None or not (describes(cls, "log_survival") or positive_support_possible):
            raise SpecError(
                f"hurdle needs the survival function of {self.estimator.family}, which it does not give"
            )
