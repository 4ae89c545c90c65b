"""Von Mises-Fisher: ``VonMisesFisherDistribution(mu, kappa)`` on the unit sphere ``S^{d-1}`` of ``R^d``
(``d >= 2``), scipy.stats' ``vonmises_fisher(mu, kappa)``: mean direction ``mu`` (a unit vector) and
concentration ``kappa >= 0``.

``log p(x) = log C_d(kappa) + kappa mu^T x`` with ``log C_d(kappa) = v log kappa - (d/2) log(2 pi)
- log I_v(kappa)``, ``v = d/2 - 1`` (Mardia & Jupp 2000, "Directional Statistics", 9.3.4), computed as
``[log C_d(kappa) + kappa] - kappa |x - mu|^2 / 2`` (equal on the sphere; no cancellation for a large
``kappa``); ``I_v`` is the modified Bessel function (:mod:`~mixle_spark.stats._bessel`: series and
Debye's uniform expansion, stable for a large ``kappa`` and ``d``). ``kappa = 0`` is the uniform
distribution, ``log C_d(0) = log Gamma(d/2) - log 2 - (d/2) log pi``.

Records are 1-D float sequences of one length ``d`` (read as the vector Gaussians read them,
:mod:`~mixle_spark.stats._vector`) of unit Euclidean norm: a row whose norm differs from 1 by more than
:data:`NORM_TOLERANCE` (``1e-6``, so unit vectors rounded to float32 pass) is an error naming its row and
norm; an accepted row is divided by its norm. A missing (NaN) coordinate is refused.

Estimation: exact maximum likelihood from ``(Σw, Σw x)`` (sums that merge by addition):
``mu = Σw x / |Σw x|`` and ``kappa`` solving ``A_d(kappa) = R`` with ``A_d = I_{d/2} / I_{d/2-1}`` and
``R = |Σw x| / Σw`` (Mardia & Jupp 10.3.1), started from Sra's approximation ``R (d - R^2) / (1 - R^2)``
(Sra 2012, "A short note on parameter approximation for von Mises-Fisher distributions", Computational
Statistics 27) and finished by Newton steps on ``A_d(kappa) - R`` (``A_d' = 1 - A_d^2 - (d - 1) A_d /
kappa``) kept inside a bisection bracket, to a relative step of 1e-15; ``1 - A_d`` is computed without
cancellation, so a tight cluster's ``kappa`` keeps its digits. ``kappa`` is at most ``max_kappa``
(default 1e10; identical rows reach it). Mixture fast path: ``log p`` is linear in ``[1, x]`` (the vector
Gaussians' cached ``[1, y, y*y]``, ``y = x``, with zero coefficients on ``y*y``).

Sampling: Wood's rejection sampler for ``mu^T x`` (Wood 1994, "Simulation of the von Mises Fisher
distribution", Communications in Statistics - Simulation and Computation 23(1)), a uniform direction
orthogonal to ``mu`` for the rest, and a Householder reflection of the first axis onto ``mu``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import DataValueError, SpecError
from mixle_spark.stats._bessel import bessel_ratio, log_bessel_i
from mixle_spark.stats._special import gammaln
from mixle_spark.stats._validate import first_true
from mixle_spark.stats._vector import VectorBatch, VectorEncoder, parameter_vector
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
    "VonMisesFisherAccumulator",
    "VonMisesFisherDistribution",
    "VonMisesFisherEncoder",
    "VonMisesFisherEstimator",
    "solve_kappa",
]

_FAMILY = "VonMisesFisherDistribution"
NORM_TOLERANCE = 1e-6
"""How far from 1 a record's (and ``mu``'s) Euclidean norm may be."""
DEFAULT_MAX_KAPPA = 1e10
_NEWTON_ITERATIONS = 200


def log_peak(d: int, kappa: float) -> float:
    """``log C_d(kappa) + kappa``: the log-density at ``mu`` (module docstring), from the scaled Bessel
    function, so it keeps its digits for a large ``kappa``."""
    if kappa == 0.0:
        return float(gammaln(0.5 * d)) - math.log(2.0) - 0.5 * d * math.log(math.pi)
    v = 0.5 * d - 1.0
    scaled = float(log_bessel_i(v, kappa, scaled=True))
    return v * math.log(kappa) - 0.5 * d * math.log(2.0 * math.pi) - scaled


def solve_kappa(d: int, resultant: float, complement: float, max_kappa: float = DEFAULT_MAX_KAPPA) -> float:
    """The ``kappa`` in ``[0, max_kappa]`` with ``A_d(kappa) = resultant``, ``complement`` being
    ``1 - resultant`` (given apart, so a tight cluster's equation keeps its digits); see the module
    docstring."""
    if not resultant > 0.0:
        return 0.0
    if not complement > 0.0:
        return max_kappa
    v = 0.5 * d - 1.0
    a_top, _ = bessel_ratio(v, max_kappa)
    if a_top <= resultant:
        return max_kappa
    lo, hi = 0.0, max_kappa
    kappa = min(resultant * (d - resultant * resultant) / (complement * (1.0 + resultant)), max_kappa)
    for _ in range(_NEWTON_ITERATIONS):
        a, c = bessel_ratio(v, kappa)
        gap = complement - c  # A(kappa) - resultant, from the complements
        if gap < 0:
            lo = kappa
        else:
            hi = kappa
        slope = 1.0 - a * a - (d - 1.0) * a / kappa if kappa > 0 else 1.0 / d
        new = kappa - gap / slope if slope > 0 else 0.5 * (lo + hi)
        if not lo < new < hi:
            new = math.sqrt(lo * hi) if lo > 0 else 0.5 * hi  # geometric bisection over decades
        if abs(new - kappa) <= 1e-15 * kappa or hi - lo <= 1e-15 * hi:
            return new
        kappa = new
    return kappa


def _unit(value: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(value as given, value / |value|)`` after checking ``|value|`` is 1 within the tolerance."""
    v = parameter_vector(value, _FAMILY, name)
    norm = float(np.linalg.norm(v))
    check_parameter(
        len(v) >= 2 and abs(norm - 1.0) <= NORM_TOLERANCE,
        _FAMILY,
        name,
        value,
        f"a unit vector (norm within {NORM_TOLERANCE} of 1) of length >= 2",
    )
    return v, v / norm


@register_distribution("von_mises_fisher")
class VonMisesFisherDistribution(Distribution):
    """Von Mises-Fisher distribution on the unit sphere of ``R^d``: mean direction ``mu`` (a unit
    vector of length ``d >= 2``) and concentration ``kappa >= 0`` (0: uniform).

    Examples
    --------
    >>> uniform = VonMisesFisherDistribution([0.0, 0.0, 1.0], 0.0)
    >>> round(uniform.log_density([1.0, 0.0, 0.0]), 12) == round(-math.log(4 * math.pi), 12)
    True
    """

    parameters = (Parameter("mu"), Parameter("kappa"))

    def __init__(self, mu: Sequence[float] | np.ndarray, kappa: float) -> None:
        self.mu, self._direction = _unit(mu, "mu")
        ok = isinstance(kappa, numbers.Real) and not isinstance(kappa, bool) and 0 <= float(kappa) < math.inf
        check_parameter(ok, _FAMILY, "kappa", kappa, "a finite number >= 0")
        self.kappa = float(kappa)
        self.dim = len(self.mu)
        self._log_peak = log_peak(self.dim, self.kappa)

    def draw(self, rng: np.random.Generator, size: int | None = None) -> Any:
        """Wood's (1994) sampler: one record is a 1-D array, a batch a list of them."""
        n = 1 if size is None else size
        d, kappa = self.dim, self.kappa
        b = (d - 1.0) / (2.0 * kappa + math.sqrt(4.0 * kappa * kappa + (d - 1.0) ** 2))
        x0 = (1.0 - b) / (1.0 + b)
        c = kappa * x0 + (d - 1.0) * math.log(1.0 - x0 * x0)
        w = np.empty(n)
        one_minus = np.empty(n)
        todo = np.arange(n)
        while len(todo):  # rejection rounds (about 1.1 draws per row), not a loop over rows
            z = rng.beta(0.5 * (d - 1.0), 0.5 * (d - 1.0), size=len(todo))
            u = rng.random(len(todo))
            den = 1.0 - (1.0 - b) * z
            t = (1.0 - (1.0 + b) * z) / den
            keep = kappa * t + (d - 1.0) * np.log(1.0 - x0 * t) - c >= np.log(u)
            w[todo[keep]] = t[keep]
            one_minus[todo[keep]] = (2.0 * b * z / den)[keep]  # 1 - t without cancellation
            todo = todo[~keep]
        tangent = rng.standard_normal((n, d - 1))
        tangent /= np.linalg.norm(tangent, axis=1, keepdims=True)
        radius = np.sqrt(np.maximum(one_minus * (2.0 - one_minus), 0.0))
        draws = np.column_stack([w, radius[:, None] * tangent])
        draws = self._rotate(draws)
        return draws[0] if size is None else list(draws)

    def _rotate(self, x: np.ndarray) -> np.ndarray:
        """``x`` with the first axis reflected onto ``mu`` (Householder: ``H e_1 = mu``)."""
        axis = -self._direction.copy()
        axis[0] += 1.0  # e_1 - mu
        norm2 = float(axis @ axis)
        if norm2 < 1e-30:
            return x
        return x - np.outer(x @ axis, axis) * (2.0 / norm2)  # type: ignore[no-any-return]

    def log_density(self, x: Any) -> float:
        try:
            v = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            return -math.inf
        if v.shape != (self.dim,) or not bool(np.all(np.isfinite(v))):
            return -math.inf
        norm = float(np.linalg.norm(v))
        if abs(norm - 1.0) > NORM_TOLERANCE:
            return -math.inf
        return float(self.seq_log_density(VectorBatch((v / norm)[None, :], np.zeros(self.dim)))[0])

    def seq_log_density(self, enc: VectorBatch) -> np.ndarray:
        # kappa (mu^T x - 1) = -kappa |x - mu|^2 / 2 on the sphere: no cancellation for a large kappa
        r = enc.x - self._direction
        return self._log_peak - (0.5 * self.kappa) * np.einsum("ij,ij->i", r, r)  # type: ignore[no-any-return]

    # -- mixture fast path: [1, y, y*y] of the vector batch (y = x - c), zero weight on y*y ------
    def feature_key(self) -> Any:
        return ("von_mises_fisher", self.dim)

    def seq_features(self, enc: VectorBatch) -> np.ndarray:
        return enc.diagonal_features()

    def feature_coefficients(self, enc: VectorBatch) -> np.ndarray:
        slope = self.kappa * self._direction
        const = self._log_peak - self.kappa + float(slope @ enc.c)
        return np.concatenate(([const], slope, np.zeros(self.dim)))

    def estimator(self, pseudo_count: float | None = None) -> VonMisesFisherEstimator:
        if pseudo_count is None:
            return VonMisesFisherEstimator(dim=self.dim)
        return VonMisesFisherEstimator(
            pseudo_count=pseudo_count, suff_stat=(self.mu, self.kappa), dim=self.dim
        )

    def encoder(self) -> VonMisesFisherEncoder:
        return VonMisesFisherEncoder(self.dim)

    def n_free_parameters(self) -> int:
        return self.dim  # a direction on the sphere (d - 1) and the concentration


class VonMisesFisherEncoder(VectorEncoder):
    """Reads unit vectors of length ``dim`` (each divided by its norm) into a
    :class:`~mixle_spark.stats._vector.VectorBatch` centred at 0; the scan learns only ``dim``."""

    family = "VonMisesFisherEstimator"

    def __init__(self, dim: int | None = None, center: Sequence[float] | np.ndarray | None = None) -> None:
        super().__init__(dim, None)  # statistics are sums of x: no centre

    @property
    def needs_scan(self) -> bool:
        return self.dim is None

    def _batch(self, x: np.ndarray) -> VectorBatch:
        n, d = x.shape
        missing = np.isnan(x)
        if missing.any():
            rows = missing.any(axis=1)
            raise DataValueError(
                self._expected + " (no missing coordinate)",
                value=math.nan,
                row=first_true(rows),
                n_rows=n,
                count=int(rows.sum()),
            )
        if d < 2 and n:
            raise DataValueError(
                f"{self._expected}: expected vectors of length >= 2, got length {d}", row=0, n_rows=n
            )
        norm = np.sqrt(np.einsum("ij,ij->i", x, x))
        bad = ~(np.abs(norm - 1.0) <= NORM_TOLERANCE)
        if bad.any():
            i = first_true(bad)
            raise DataValueError(
                f"expected a unit vector (Euclidean norm within {NORM_TOLERANCE} of 1) for {self.family}; "
                f"the row's norm is {float(norm[i])!r}",
                row=i,
                n_rows=n,
                count=int(bad.sum()),
            )
        return VectorBatch(x / norm[:, None], np.zeros(d))


class VonMisesFisherAccumulator(Accumulator):
    """``Σw`` and ``Σw x``; value ``(sw, s)`` (s of shape (d,))."""

    encoder_class = VonMisesFisherEncoder

    def __init__(self, dim: int | None = None, keys: Any = None) -> None:
        self.keys = keys
        self.dim = dim
        self.sw = 0.0
        self.s = np.zeros(0 if dim is None else int(dim))

    def _add(self, sw: float, s: np.ndarray) -> None:
        if len(s) == 0:
            return
        if len(self.s) != len(s):
            if len(self.s) and self.sw != 0.0:
                raise ValueError(
                    f"{type(self).__name__}: cannot add statistics of dimension {len(s)} to statistics "
                    f"of dimension {len(self.s)}"
                )
            self.s, self.dim = np.zeros(len(s)), len(s)
        self.sw += sw
        self.s = self.s + s

    def seq_update(self, enc: VectorBatch, weights: np.ndarray, estimate: Distribution | None) -> None:
        weights = np.asarray(weights, dtype=np.float64)
        self._add(float(weights.sum()), weights @ enc.x)
        return None

    def add_feature_sums(self, sums: np.ndarray, enc: VectorBatch, estimate: Any) -> None:
        """Add ``sums = Σw [1, y, y*y]`` of the mixture fast path (``Σw x = Σw y + c Σw``)."""
        d = enc.dim
        self._add(float(sums[0]), np.asarray(sums[1 : d + 1], dtype=np.float64) + enc.c * float(sums[0]))

    def combine(self, value: Any) -> VonMisesFisherAccumulator:
        self._add(float(value[0]), np.array(value[1], dtype=np.float64))
        return self

    def value(self) -> tuple[float, np.ndarray]:
        return (self.sw, self.s.copy())

    def from_value(self, value: Any) -> VonMisesFisherAccumulator:
        self.sw = float(value[0])
        self.s = np.array(value[1], dtype=np.float64)
        self.dim = len(self.s) if len(self.s) else self.dim
        return self

    def _scale(self, factor: float) -> None:
        self.sw *= factor
        self.s = factor * self.s

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.dim, self.keys)

    def make_encoder(self) -> VonMisesFisherEncoder:
        return VonMisesFisherEncoder(self.dim)


def _prior(value: Any) -> bool:
    try:
        VonMisesFisherDistribution(value[0], value[1])
    except (SpecError, TypeError, IndexError, ValueError):
        return False
    return len(value) == 2


@register_estimator("von_mises_fisher")
@dataclass(eq=False, repr=False)
class VonMisesFisherEstimator(Estimator):
    """Von Mises-Fisher maximum-likelihood fit (module docstring).

    Parameters
    ----------
    pseudo_count : float, optional
        Pseudo-observations: with ``suff_stat = (mu0, kappa0)`` they add ``pc`` to Σw and
        ``pc A_d(kappa0) mu0`` (their expected resultant) to Σw x, so a large ``pc`` gives the prior;
        without it ``pc`` is added to Σw alone, shrinking the concentration.
    suff_stat : (array, float), optional
        Prior mean direction and concentration; also the model for zero total weight (else the first
        axis with ``kappa = 0``, the uniform distribution).
    max_kappa : float
        Largest concentration (default 1e10).
    dim : int, optional
        Vector length (learnt by the scan when omitted).
    keys : str, optional
        Tie these parameters to every other site with the same key.
    """

    pseudo_count: float | None = None
    suff_stat: tuple[Any, float] | None = option(
        None, _prior, "(mu0, kappa0): a unit vector of length >= 2 and a finite number >= 0"
    )
    max_kappa: float = option(
        DEFAULT_MAX_KAPPA, lambda v: 0 < v < math.inf, "a positive finite number", read=float
    )
    dim: int | None = option(None, lambda v: isinstance(v, int) and v >= 2, "an integer >= 2")
    name: str | None = None
    keys: str | None = None

    def check(self) -> None:
        if self.suff_stat is not None:
            prior = VonMisesFisherDistribution(self.suff_stat[0], self.suff_stat[1])
            dim = prior.dim if self.dim is None else self.dim
            check_parameter(
                prior.dim == dim, type(self).__name__, "suff_stat", self.suff_stat, f"of dimension {dim}"
            )
            self.suff_stat = (prior.mu, prior.kappa)
            self.dim = dim

    def accumulator_factory(self) -> VonMisesFisherAccumulator:
        return VonMisesFisherAccumulator(self.dim, self.keys)

    def encoder(self) -> VonMisesFisherEncoder:
        return VonMisesFisherEncoder(self.dim)

    def with_scan(self, scan: Any) -> VonMisesFisherEstimator:
        """Fix the dimension learnt by the scan."""
        if scan is None or self.dim is not None:
            return self
        return dataclasses.replace(self, dim=len(scan[1]))

    def _fallback(self, d: int) -> VonMisesFisherDistribution:
        if self.suff_stat is not None:
            return VonMisesFisherDistribution(*self.suff_stat)
        if d < 2:
            raise SpecError(f"{type(self).__name__}: no data, and neither dim nor suff_stat to fall back on")
        return VonMisesFisherDistribution(np.eye(d)[0], 0.0)

    def estimate(self, nobs: float | None, value: Any) -> VonMisesFisherDistribution:
        sw, s = float(value[0]), np.array(value[1], dtype=np.float64)
        d = len(s) or (self.dim or 0)
        if not sw > 0 or not np.all(np.isfinite(s)):
            return self._fallback(d)
        pc = self.pseudo_count or 0.0
        if pc > 0 and self.suff_stat is not None:
            mu0, kappa0 = self.suff_stat
            s = s + pc * float(bessel_ratio(0.5 * d - 1.0, kappa0)[0]) * np.asarray(mu0)
        sw += pc
        length = float(np.linalg.norm(s))
        if not length > 0:
            return VonMisesFisherDistribution(np.eye(d)[0], 0.0)
        resultant = min(length / sw, 1.0)
        kappa = solve_kappa(d, resultant, (sw - length) / sw, self.max_kappa)
        return VonMisesFisherDistribution(s / length, kappa)
