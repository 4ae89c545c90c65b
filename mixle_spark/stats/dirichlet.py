"""Dirichlet: ``DirichletDistribution(alpha)`` over the probability simplex (``scipy.stats.dirichlet``).

Records are vectors of ``d >= 2`` positive numbers summing to 1 (shares, proportions, compositions): a
Python sequence, or an Arrow ``list`` / ``large_list`` / ``fixed_size_list`` column of numbers. A row
whose sum is more than :data:`SUM_TOLERANCE` (1e-6) away from 1 is refused (the error names the column,
the row and its sum), and so is a zero, negative, NaN or null entry (naming the value). Rows within the
tolerance are used as given (not renormalized)::

    log p(x) = log Gamma(A) - Σ_j log Gamma(alpha_j) + Σ_j (alpha_j - 1) log x_j,   A = Σ_j alpha_j

The encoded batch is the feature matrix ``[1, log x_1, ..., log x_d]`` (n, d + 1): the density is one
matrix-vector product, the mixture fast path uses it as its features, and the statistics
``(Σw, Σw log x_j)`` are one more. The length ``d`` is learnt by a scan when the estimator has no ``dim``.

The maximum-likelihood ``alpha`` is a function of ``s_j = Σw log x_j / Σw`` only, and the
log-likelihood per unit weight ``f(alpha) = log Gamma(A) - Σ log Gamma(alpha_j) + Σ (alpha_j - 1) s_j``
is concave (an exponential family in ``alpha``). :func:`fit_alpha` maximizes it on the driver to
machine precision: Newton's method with the Hessian ``-diag(trigamma(alpha)) + trigamma(A) 1 1^T``
inverted in O(d) by the Sherman-Morrison formula, each step halved until it stays positive and does not
lower ``f``, with the fixed point ``alpha_j = digamma^-1(digamma(A) + s_j)`` (an increasing step,
through :func:`~mixle_spark.stats._simplex.inverse_digamma`) where a halved Newton step fails; the fixed
point, this Newton step and the inversion of digamma are T. Minka's ("Estimating a Dirichlet
distribution", 2000). The start is the maximum for a large precision, from ``digamma(a) ≈ log a -
1 / (2a)``: ``m_j ∝ exp(s_j)`` and ``A = (d - 1) / (2 (-log Σ_j exp(s_j)))``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import DataValueError, EmptyDataError
from mixle_spark.stats._scalar_common import bound, check_bounds
from mixle_spark.stats._simplex import SimplexEncoder, check_entries, inverse_digamma
from mixle_spark.stats._special import digamma, gammaln, trigamma
from mixle_spark.stats._validate import first_true
from mixle_spark.stats._vector import parameter_vector
from mixle_spark.stats.base import (
    Accumulator,
    Distribution,
    Estimator,
    Parameter,
    check_parameter,
    option,
    register_distribution,
    register_estimator,
)

__all__ = [
    "DirichletAccumulator",
    "DirichletDistribution",
    "DirichletEncoder",
    "DirichletEstimator",
    "fit_alpha",
]

SUM_TOLERANCE = 1e-6
"""How far from 1 the sum of a row's shares may be (rounding of shares written with 7 digits)."""
DEFAULT_MIN_ALPHA = 1e-6
DEFAULT_MAX_ALPHA = 1e8
ALPHA_RTOL = 1e-14
"""Relative change of every ``alpha_j`` at which :func:`fit_alpha` stops."""
_MAX_ITERATIONS = 500
_QUADRATIC = 1e-5  # a Newton step this small (relative) is inside the quadratic region
_FAMILY = "DirichletDistribution"


def _check_alpha(alpha: Any, family: str, name: str) -> np.ndarray:
    a = parameter_vector(alpha, family, name)
    check_parameter(
        len(a) >= 2 and bool(np.all(a > 0)), family, name, alpha, "at least 2 positive finite numbers"
    )
    return a


def log_normalizer(alpha: np.ndarray) -> float:
    """``log Gamma(A) - Σ log Gamma(alpha_j)``: the log of 1 / B(alpha)."""
    return float(gammaln(float(alpha.sum()))) - float(np.sum(gammaln(alpha)))


def _objective(alpha: np.ndarray, s: np.ndarray) -> float:
    return log_normalizer(alpha) + float(np.dot(alpha - 1.0, s))


def _start(s: np.ndarray, max_alpha: float) -> np.ndarray:
    """The large-precision start (see the module docstring)."""
    top = float(s.max())
    lse = top + math.log(float(np.exp(s - top).sum()))  # log Σ exp(s_j) <= 0 by Jensen
    m = np.exp(s - lse)
    gap = -lse
    total = (len(s) - 1) / (2.0 * gap) if gap > 0 else math.inf
    total = min(total, max_alpha / float(m.max()))
    return m * total  # type: ignore[no-any-return]


def _newton_step(alpha: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The Newton step ``H^-1 g`` of ``f`` at ``alpha`` (the new point is ``alpha - step``)."""
    total = float(alpha.sum())
    g = float(digamma(total)) - digamma(alpha) + s
    q = -trigamma(alpha)
    z = float(trigamma(total))
    b = float(np.sum(g / q)) / (1.0 / z + float(np.sum(1.0 / q)))
    return (g - b) / q  # type: ignore[no-any-return]


def _increasing_step(
    alpha: np.ndarray, s: np.ndarray, step: np.ndarray, f: float
) -> tuple[np.ndarray, float] | None:
    """The Newton step halved until it stays positive and does not lower ``f``, else the fixed
    point; ``(alpha, f)`` after it, None when neither increases ``f``."""
    t = 1.0
    while t > 1e-12:
        trial = alpha - t * step
        if bool(np.all(trial > 0)):
            value = _objective(trial, s)
            if value >= f:
                return trial, value
        t *= 0.5
    trial = inverse_digamma(float(digamma(float(alpha.sum()))) + s)
    value = _objective(trial, s)
    return (trial, value) if value > f else None


def fit_alpha(
    s: np.ndarray, min_alpha: float = DEFAULT_MIN_ALPHA, max_alpha: float = DEFAULT_MAX_ALPHA
) -> np.ndarray:
    """The ``alpha`` maximizing the Dirichlet log-likelihood given the mean logs ``s`` (d,), within
    ``[min_alpha, max_alpha]`` (see the module docstring). Data that are all equal (``log Σ exp(s) =
    0``) have no finite maximum: the largest ``alpha_j`` is then ``max_alpha``."""
    s = np.asarray(s, dtype=np.float64)
    alpha = np.clip(_start(s, max_alpha), min_alpha, max_alpha)
    if float(alpha.max()) >= max_alpha:
        total = float(alpha.sum())
        slope = float(np.dot(alpha, float(digamma(total)) - digamma(alpha) + s))  # d f(c alpha) / dc at c = 1
        if slope >= 0:  # still rising at the bound, along the shares of the start: stay there
            return alpha
    f = _objective(alpha, s)
    last = math.inf
    for _ in range(_MAX_ITERATIONS):
        step = _newton_step(alpha, s)
        change = float(np.max(np.abs(step) / alpha))
        if change < _QUADRATIC:
            # Within the region where Newton's method converges quadratically, f changes by less than
            # its rounding: the full step is taken (comparing values of f could no longer tell), until
            # the steps stop shrinking (the rounding of the score) or reach ALPHA_RTOL.
            alpha = alpha - step
            if change <= ALPHA_RTOL or change > 0.5 * last:
                break
            last = change
            continue
        new = _increasing_step(alpha, s, step, f)
        if new is None:
            break
        alpha, f = new
        if float(alpha.max()) > max_alpha:
            break
    top = float(alpha.max())
    if top > max_alpha:
        alpha = alpha * (max_alpha / top)  # the shares kept, the precision bounded
    return np.clip(alpha, min_alpha, max_alpha)  # type: ignore[no-any-return]


class DirichletEncoder(SimplexEncoder):
    """Reads vectors of shares into the features ``[1, log x]``, a float64 array of shape (n, d + 1)."""

    family = "DirichletEstimator"
    expectation = "a vector of positive numbers summing to 1"

    def validate(self, x: np.ndarray) -> None:
        check_entries(x, ~(x > 0), self.expected)
        sums = x.sum(axis=1)
        bad = ~(np.abs(sums - 1.0) <= SUM_TOLERANCE)
        if bad.any():
            i = first_true(bad)
            raise DataValueError(
                f"{self.expected} (within {SUM_TOLERANCE:g}), got a vector summing to {float(sums[i]):.15g}",
                row=i,
                n_rows=len(x),
                count=int(bad.sum()),
            )

    def pack(self, x: np.ndarray) -> np.ndarray:
        n, d = x.shape
        phi = np.empty((n, d + 1), order="F")
        phi[:, 0] = 1.0
        np.log(x, out=phi[:, 1:])
        return phi

    def narrow(self, enc: np.ndarray, dtype: Any) -> np.ndarray:
        """The features ``[1, log x]`` stored in ``dtype`` (the family's kernels are products with them)."""
        return enc.astype(dtype) if enc.dtype == np.float64 else enc

    def embed(self, enc: np.ndarray) -> np.ndarray:
        """The shares themselves (each row's features back from its logs)."""
        return np.exp(enc[:, 1:])  # type: ignore[no-any-return]


@register_distribution("dirichlet")
class DirichletDistribution(Distribution):
    """Dirichlet distribution with concentrations ``alpha`` (d,), ``d >= 2``; the mean share of
    coordinate ``j`` is ``alpha_j / Σ alpha``.

    Examples
    --------
    >>> d = DirichletDistribution([1.0, 1.0, 1.0])  # uniform on the triangle: density Gamma(3) = 2
    >>> round(d.log_density([0.2, 0.3, 0.5]), 12) == round(math.log(2.0), 12)
    True
    """

    parameters = (Parameter("alpha"),)

    def __init__(self, alpha: Sequence[float] | np.ndarray) -> None:
        self.alpha = _check_alpha(alpha, _FAMILY, "alpha")
        self.dim = len(self.alpha)
        self._coef = np.concatenate(([log_normalizer(self.alpha)], self.alpha - 1.0))

    def draw(self, rng: np.random.Generator, size: int | None = None) -> Any:
        """One record is a 1-D array of shares; a batch a list of them (numpy's gamma-ratio draws:
        a very small ``alpha_j`` can draw a share that underflows to 0, outside the support)."""
        draws = rng.dirichlet(self.alpha, size=1 if size is None else size)
        return draws[0] if size is None else list(draws)

    def log_density(self, x: Any) -> float:
        try:
            enc = DirichletEncoder(self.dim).encode([x])
        except (TypeError, ValueError):
            return -math.inf
        return float(self.seq_log_density(enc)[0])

    def seq_log_density(self, enc: np.ndarray) -> np.ndarray:
        return enc @ self._coef  # type: ignore[no-any-return]

    # Mixture fast path: log p(x) = [1, log x] @ [log 1 / B(alpha), alpha - 1].
    def feature_key(self) -> Any:
        return ("dirichlet", self.dim)

    def seq_features(self, enc: np.ndarray) -> np.ndarray:
        return enc

    def feature_coefficients(self, enc: np.ndarray) -> np.ndarray:
        return self._coef

    def mean(self) -> np.ndarray:
        """Each coordinate's mean share ``alpha_j / Σ alpha``, shape (d,)."""
        return self.alpha / self.alpha.sum()  # type: ignore[no-any-return]

    def estimator(self, pseudo_count: float | None = None) -> DirichletEstimator:
        if pseudo_count is None:
            return DirichletEstimator(dim=self.dim)
        return DirichletEstimator(pseudo_count=pseudo_count, suff_stat=self.alpha, dim=self.dim)

    def encoder(self) -> DirichletEncoder:
        return DirichletEncoder(self.dim)


class DirichletAccumulator(Accumulator):
    """Sums ``(Σw, Σw log x_j)``; value ``(sw, slog)`` with ``slog`` of shape (d,), merged by addition."""

    def __init__(self, dim: int | None = None, keys: Any = None) -> None:
        self.dim = dim
        self.keys = keys
        self.sw = 0.0
        self.slog = np.zeros(0 if dim is None else dim)

    def _add(self, sums: np.ndarray) -> None:
        if len(self.slog) != len(sums) - 1:
            if len(self.slog) or self.sw:
                raise DataValueError(
                    f"DirichletAccumulator: vectors of length {len(sums) - 1} after {len(self.slog)}"
                )
            self.slog = np.zeros(len(sums) - 1)  # no dim given: the first batch's length
        self.sw += float(sums[0])
        self.slog = self.slog + sums[1:]

    def seq_update(self, enc: np.ndarray, weights: np.ndarray, estimate: Any) -> None:
        self._add(np.asarray(weights, dtype=np.float64) @ enc)
        return None

    def add_feature_sums(self, sums: np.ndarray, enc: Any, estimate: Any) -> None:
        self._add(np.asarray(sums, dtype=np.float64))

    def combine(self, value: Any) -> DirichletAccumulator:
        sw, slog = value
        if len(slog) or float(sw):  # an accumulator that never saw a vector adds nothing
            self._add(np.concatenate(([float(sw)], np.asarray(slog, dtype=np.float64))))
        return self

    def value(self) -> tuple[float, np.ndarray]:
        return (self.sw, self.slog.copy())

    def _scale(self, factor: float) -> None:
        self.sw *= factor
        self.slog = factor * self.slog

    def from_value(self, value: Any) -> DirichletAccumulator:
        self.sw = float(value[0])
        self.slog = np.array(value[1], dtype=np.float64)
        return self

    def make_encoder(self) -> DirichletEncoder:
        return DirichletEncoder(self.dim)

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.dim, self.keys)


@register_estimator("dirichlet")
@dataclass(eq=False, repr=False)
class DirichletEstimator(Estimator):
    """Maximum-likelihood Dirichlet fit from ``(Σw, Σw log x)`` (see :func:`fit_alpha`).

    Parameters
    ----------
    pseudo_count : float, optional
        Number of pseudo-observations drawn "on average" from ``Dirichlet(suff_stat)``: they add
        ``pc (digamma(alpha0_j) - digamma(A0))`` (their expected ``log x_j``) to ``Σw log x_j`` and
        ``pc`` to ``Σw``; as ``pc`` grows the estimate tends to ``suff_stat``.
    suff_stat : array of shape (d,), optional
        Prior concentrations ``alpha0`` (default all ones when only ``pseudo_count`` is given).
    min_alpha, max_alpha : float
        Bounds of every ``alpha_j`` (defaults 1e-6 and 1e8). Rows that are all equal give
        ``max(alpha) = max_alpha``, a very peaked but finite density.
    dim : int, optional
        Vector length (learnt by the scan when omitted).
    keys : str, optional
        Tie this parameter to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or all ones).
    """

    pseudo_count: float | None = None
    suff_stat: Sequence[float] | np.ndarray | None = option(
        None,
        lambda v: len(_check_alpha(v, "DirichletEstimator", "suff_stat")) >= 2,
        "at least 2 positive finite numbers",
        read=lambda v: np.array(v, dtype=np.float64),
    )
    min_alpha: float = bound(DEFAULT_MIN_ALPHA)
    max_alpha: float = bound(DEFAULT_MAX_ALPHA)
    dim: int | None = option(None, lambda v: isinstance(v, int) and v >= 2, "an integer >= 2")
    name: str | None = None
    keys: str | None = None

    def check(self) -> None:
        check_bounds(self, "min_alpha", "max_alpha")
        if self.suff_stat is not None:
            d = len(self.suff_stat)
            check_parameter(
                self.dim in (None, d),
                "DirichletEstimator",
                "suff_stat",
                self.suff_stat,
                f"of length {self.dim}",
            )
            self.dim = d

    def accumulator_factory(self) -> DirichletAccumulator:
        return DirichletAccumulator(self.dim, self.keys)

    def encoder(self) -> DirichletEncoder:
        return DirichletEncoder(self.dim)

    def with_scan(self, scan: Any) -> DirichletEstimator:
        if scan is None or self.dim is not None:
            return self
        return dataclasses.replace(self, dim=int(scan))

    def estimate(self, nobs: float | None, value: Any) -> DirichletDistribution:
        sw, slog = float(value[0]), np.asarray(value[1], dtype=np.float64)
        d = len(slog) or self.dim
        if not d:
            raise EmptyDataError("DirichletEstimator: no data, and neither dim nor suff_stat to fall back on")
        alpha0 = np.ones(d) if self.suff_stat is None else np.asarray(self.suff_stat)
        pc = self.pseudo_count or 0.0
        if not sw > 0 or len(slog) != d:
            return DirichletDistribution(np.clip(alpha0, self.min_alpha, self.max_alpha))
        if pc > 0:
            slog = slog + pc * (digamma(alpha0) - float(digamma(float(alpha0.sum()))))
            sw += pc
        s = slog / sw
        if not bool(np.all(np.isfinite(s))):
            return DirichletDistribution(np.clip(alpha0, self.min_alpha, self.max_alpha))
        return DirichletDistribution(fit_alpha(s, self.min_alpha, self.max_alpha))
