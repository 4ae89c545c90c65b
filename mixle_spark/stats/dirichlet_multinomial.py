"""Dirichlet-multinomial (Polya): ``DirichletMultinomialDistribution(alpha, len_dist=None)`` over count
vectors (``scipy.stats.dirichlet_multinomial(alpha, n)`` with ``n`` each row's own total).

A record is a vector of ``d >= 2`` non-negative integer counts (a Python sequence, or an Arrow ``list``
/ ``large_list`` / ``fixed_size_list`` column of numbers); its total ``n = Σ_j x_j`` varies from row to
row. A negative, fractional, NaN or null count is refused (the error names the column, the row and the
value). With ``A = Σ_j alpha_j``::

    log p(x) = log n! - Σ_j log x_j! + log Gamma(A) - log Gamma(n + A) + Σ_j [log Gamma(x_j + alpha_j)
               - log Gamma(alpha_j)]  (+ log len_dist(n))

The density is conditional on ``n`` unless ``len_dist`` (any count family) models it, as the length model
of :mod:`~mixle_spark.stats.multinomial`; sampling needs it. The encoder keeps each batch's distinct
counts and distinct totals with every entry's index into them, so the model's log-Gamma differences
(:func:`~mixle_spark.stats._special.log_rising_factorial`, accurate for a large ``alpha``) are computed
once per distinct value and gathered.

Estimation (a generalized EM step per pass; the maximum likelihood has no closed form): the accumulator
reads the current ``alpha`` (``seq_update``'s ``estimate``) and sums ``Σw``, ``Σw alpha_j`` (where the
statistics were taken), ``Σw [digamma(x_j + alpha_j) - digamma(alpha_j)]`` and ``Σw [digamma(n + A) -
digamma(A)]`` (:func:`~mixle_spark.stats._special.digamma_difference`), merged by addition. The M-step
is Minka's fixed point for the Polya distribution (T. Minka, "Estimating a Dirichlet distribution",
2000; the same minorize-maximize update as in H. Zhou and K. Lange, "MM algorithms for some discrete
multivariate distributions", J. Comput. Graph. Stat. 19, 2010)::

    alpha_j <- alpha_j Σw [digamma(x_j + alpha_j) - digamma(alpha_j)] / Σw [digamma(n + A) - digamma(A)]

It maximizes a minorizer of the log-likelihood built from two bounds that hold exactly (the tangent of
the convex ``log Gamma(A) - log Gamma(n + A)`` in ``A``, and ``log Gamma(x + a) - log Gamma(a) >= c +
â (digamma(x + â) - digamma(â)) log a`` for integer ``x >= 0``, the tangent in ``log a`` of
``Σ_{i<x} log(a + i)``, convex in ``log a``), so it never lowers the likelihood; the minorizer separates
over ``alpha_j``, so clipping to ``[min_alpha, max_alpha]`` keeps that. Iterated, it converges to the
maximum likelihood (linearly: expect tens to hundreds of passes; a fit stops when the gain reaches the
rounding of the log-likelihood, where the parameters agree with the maximum to about 1e-5).

First pass (no current model: ``seq_initialize``, or ``seq_update(..., None)``): the accumulator sums
the moments of the shares ``p = x / n`` of the rows with ``n > 0`` (``Σw``, ``Σw p_j``, ``Σw p_j^2``,
``Σw / n``), and the estimate matches them: mean shares ``m_j``, and the precision ``A`` from
``Var(p_j) = m_j (1 - m_j) (1 + A E[1/n]) / (1 + A)`` pooled over ``j`` (the Dirichlet-multinomial's
variance of ``x_j / n`` at a fixed ``n``, averaged over the rows' ``n``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import DataValueError, EmptyDataError
from mixle_spark.stats._lengths import (
    LengthAccumulation,
    LengthEncoding,
    LengthEstimation,
    LengthModel,
    check_length_model,
    draw_lengths,
)
from mixle_spark.stats._scalar_common import bound, check_bounds
from mixle_spark.stats._simplex import SimplexEncoder, check_entries
from mixle_spark.stats._special import digamma_difference, log_factorial, log_rising_factorial
from mixle_spark.stats._vector import parameter_vector
from mixle_spark.stats.base import (
    Accumulator,
    Distribution,
    Encoder,
    Estimator,
    Parameter,
    RowRandom,
    Sampler,
    check_parameter,
    estimator_option,
    free_parameters,
    option,
    part,
    register_distribution,
    register_estimator,
)

__all__ = [
    "DirichletMultinomialAccumulator",
    "DirichletMultinomialBatch",
    "DirichletMultinomialDistribution",
    "DirichletMultinomialEncoder",
    "DirichletMultinomialEstimator",
]

DEFAULT_MIN_ALPHA = 1e-6
DEFAULT_MAX_ALPHA = 1e8
_FAMILY = "DirichletMultinomialDistribution"


def _check_alpha(alpha: Any, family: str, name: str) -> np.ndarray:
    a = parameter_vector(alpha, family, name)
    check_parameter(
        len(a) >= 2 and bool(np.all(a > 0)), family, name, alpha, "at least 2 positive finite numbers"
    )
    return a


def _distinct(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(values, codes)`` with ``values[codes] == x`` for non-negative integral ``x``: every integer up to
    the largest count when that is no longer than ``x`` (no sort), else the distinct values."""
    top = int(x.max()) if x.size else 0
    if top < max(1024, x.size):
        return np.arange(top + 1, dtype=np.float64), x.astype(np.int64)
    values, codes = np.unique(x, return_inverse=True)
    return values, codes.reshape(x.shape)


class DirichletMultinomialBatch:
    """An encoded batch of count vectors: ``x`` (n, d), the totals ``totals`` (n,), the parameter-free
    ``log_coef = log n! - Σ log x_j!`` (n,); the distinct counts ``values`` with ``flat_codes`` (n, d)
    (the index of entry ``(i, j)`` into a (values, d) table, row-major), the distinct totals
    ``total_values`` with ``total_codes`` (n,), and the length encoding ``len_enc`` (or None)."""

    __slots__ = ("flat_codes", "len_enc", "log_coef", "total_codes", "total_values", "totals", "values", "x")

    def __init__(self, x: np.ndarray, len_enc: Any = None) -> None:
        d = x.shape[1]
        self.x = x
        self.totals = x.sum(axis=1)
        self.values, codes = _distinct(x)
        self.flat_codes = codes * d + np.arange(d)
        self.total_values, self.total_codes = _distinct(self.totals)
        log_fact = np.asarray(log_factorial(self.values), dtype=np.float64)
        self.log_coef = np.asarray(log_factorial(self.totals), dtype=np.float64) - log_fact[codes].sum(axis=1)
        self.len_enc = len_enc

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def table_sums(self, table: np.ndarray) -> np.ndarray:
        """``Σ_j table[value of x_ij, j]`` per row, for a (values, d) table."""
        return table.ravel()[self.flat_codes].sum(axis=1)  # type: ignore[no-any-return]

    def weighted_counts(self, weights: np.ndarray) -> np.ndarray:
        """``H[k, j] = Σ_i w_i [x_ij = values[k]]``, shape (values, d)."""
        d = self.x.shape[1]
        h = np.bincount(
            self.flat_codes.ravel(), weights=np.repeat(weights, d), minlength=len(self.values) * d
        )
        return h.reshape(len(self.values), d)  # type: ignore[no-any-return]


class DirichletMultinomialEncoder(LengthEncoding, SimplexEncoder):
    """Reads count vectors into a :class:`DirichletMultinomialBatch` (with the totals' length encoding
    when there is a length encoder)."""

    family = "DirichletMultinomialEstimator"
    expectation = "a vector of non-negative integer counts"
    length_name = "count total"

    def __init__(self, dim: int | None = None, len_encoder: Encoder | None = None) -> None:
        super().__init__(dim)
        self.len_encoder = len_encoder

    def validate(self, x: np.ndarray) -> None:
        check_entries(x, ~(x >= 0) | (x != np.floor(x)), self.expected)

    def pack(self, x: np.ndarray) -> DirichletMultinomialBatch:
        batch = DirichletMultinomialBatch(x)
        batch.len_enc = self.encoded_lengths(batch.totals)
        return batch

    @property
    def needs_scan(self) -> bool:
        return self.dim is None or self.lengths_need_scan

    def _scan_of(self, x: np.ndarray) -> Any:
        if not len(x):
            return None
        self.validate(x)
        return (int(x.shape[1]), self.scan_lengths(x.sum(axis=1).astype(np.int64)))

    def scan(self, records: Sequence[Any]) -> Any:
        return self._scan_of(self._vectors(records))

    def scan_arrow(self, data: Any) -> Any:
        return self._scan_of(self._arrow_vectors(data))

    def merge_scans(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        return (super().merge_scans(a[0], b[0]), self.merge_length_scans(a[1], b[1]))

    @property
    def rebases(self) -> bool:
        return self.len_encoder is None or self.len_encoder.rebases

    def rebase(self, enc: DirichletMultinomialBatch) -> DirichletMultinomialBatch:
        if self.len_encoder is not None and enc.len_enc is not None:
            enc.len_enc = self.len_encoder.rebase(enc.len_enc)
        return enc

    def with_unseen(self, unseen: str) -> DirichletMultinomialEncoder:
        len_encoder = self.lengths_with_unseen(unseen)
        return self if len_encoder is self.len_encoder else DirichletMultinomialEncoder(self.dim, len_encoder)

    def unseen_rows(self, enc: DirichletMultinomialBatch) -> np.ndarray | None:
        return self.unseen_lengths(enc.len_enc)

    def union(self, other: Encoder) -> Encoder:
        if self == other:
            return self
        if isinstance(other, DirichletMultinomialEncoder) and (
            self.dim is None or other.dim is None or self.dim == other.dim
        ):
            dim = self.dim if self.dim is not None else other.dim
            return DirichletMultinomialEncoder(dim, self.union_lengths(other))
        raise TypeError(f"cannot combine encoders {self!r} and {other!r}")

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.dim))

    def embed(self, enc: DirichletMultinomialBatch) -> np.ndarray:
        """Each row's shares ``x / n`` (NaN, missing, for a row of zeros)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return enc.x / enc.totals[:, None]  # type: ignore[no-any-return]


@register_distribution("dirichlet_multinomial")
class DirichletMultinomialDistribution(LengthModel, Distribution):
    """Dirichlet-multinomial distribution with concentrations ``alpha`` (d,), ``d >= 2``, and an optional
    model ``len_dist`` of the row totals (see the module docstring).

    Examples
    --------
    >>> d = DirichletMultinomialDistribution([1.0, 1.0])  # uniform over the n + 1 splits of n
    >>> round(d.log_density([2, 1]), 12) == round(-math.log(4.0), 12)
    True
    """

    parameters = (Parameter("alpha"), part("len_dist", optional=True))
    length_name = "count total"

    def __init__(self, alpha: Sequence[float] | np.ndarray, len_dist: Distribution | None = None) -> None:
        self.alpha = _check_alpha(alpha, _FAMILY, "alpha")
        check_length_model(_FAMILY, len_dist)
        self.len_dist = len_dist
        self.dim = len(self.alpha)
        self._total = float(self.alpha.sum())

    def sampling_parts(self) -> list[Distribution]:
        return [self.sampled_lengths()]

    def draw_with(self, sampler: Sampler, size: int | None = None) -> Any:
        """A total from ``len_dist``, shares from ``Dirichlet(alpha)``, then the counts: one record is a
        1-D int64 array, a batch a list of them."""
        n = draw_lengths(sampler.parts[0], 1 if size is None else size)
        shares = sampler.rng.dirichlet(self.alpha, size=len(n))
        counts = sampler.rng.multinomial(n, shares)
        return counts[0] if size is None else list(counts)

    def log_density(self, x: Any) -> float:
        try:
            enc = DirichletMultinomialEncoder(self.dim).encode([x])
        except (TypeError, ValueError):
            return -math.inf
        return float(self.seq_log_density(enc)[0])

    def seq_log_density(self, enc: DirichletMultinomialBatch) -> np.ndarray:
        rising = log_rising_factorial(self.alpha[None, :], enc.values[:, None])
        totals = log_rising_factorial(self._total, enc.total_values)
        out = enc.log_coef + enc.table_sums(rising) - np.asarray(totals)[enc.total_codes]
        if self.len_dist is not None:
            out = out + self.length_log_density(enc.len_enc, enc.totals)
        return out  # type: ignore[no-any-return]

    def mean(self) -> np.ndarray:
        """Each coordinate's mean share ``alpha_j / Σ alpha``, shape (d,)."""
        return self.alpha / self._total  # type: ignore[no-any-return]

    def estimator(self, pseudo_count: float | None = None) -> DirichletMultinomialEstimator:
        return DirichletMultinomialEstimator(
            pseudo_count=pseudo_count,
            suff_stat=None if pseudo_count is None else self.alpha,
            dim=self.dim,
            len_estimator=self.length_estimator(pseudo_count),
        )

    def encoder(self) -> DirichletMultinomialEncoder:
        return DirichletMultinomialEncoder(self.dim, self.length_encoder())

    def n_free_parameters(self) -> int:
        return self.estimator().n_free_parameters(self)


_SCALARS = ("rw", "sw", "sn", "mw", "sc")
_VECTORS = ("sx", "sa", "sp", "sp2")


class DirichletMultinomialAccumulator(LengthAccumulation, Accumulator):
    """The generalized-EM and first-pass statistics (see the module docstring); value ``(rw, sw, sx, sn,
    sa, mw, sp, sp2, sc, length value)``: ``rw`` all rows' weight, ``sw``, ``sx`` (d,), ``sn``, ``sa``
    (d,) over rows updated with a current model, ``mw``, ``sp`` (d,), ``sp2`` (d,), ``sc`` over the
    first-pass rows with ``n > 0``. Every entry is a weighted sum: merged by addition, scaled alike."""

    length_name = "count total"

    def __init__(self, dim: int | None = None, len_acc: Accumulator | None = None, keys: Any = None) -> None:
        self.dim = dim
        self.len_acc = len_acc
        self.keys = keys
        self.rw = self.sw = self.sn = self.mw = self.sc = 0.0
        self.sx, self.sa, self.sp, self.sp2 = (np.zeros(0 if dim is None else dim) for _ in range(4))

    def _sized(self, d: int) -> None:
        if len(self.sx) != d:
            if len(self.sx) or self.rw:
                raise DataValueError(
                    f"DirichletMultinomialAccumulator: vectors of length {d} after {len(self.sx)}"
                )
            self.sx, self.sa, self.sp, self.sp2 = (np.zeros(d) for _ in range(4))

    def _add_counts(self, enc: DirichletMultinomialBatch, weights: np.ndarray, estimate: Any) -> None:
        self._sized(enc.x.shape[1])
        total = float(weights.sum())
        self.rw += total
        if estimate is None:  # first pass: the moments of the shares of the rows with a positive total
            seen = enc.totals > 0
            w, t = weights[seen], enc.totals[seen]
            p = enc.x[seen] / t[:, None]
            self.mw += float(w.sum())
            self.sp = self.sp + w @ p
            self.sp2 = self.sp2 + w @ (p * p)
            self.sc += float(np.dot(w, 1.0 / t))
            return
        alpha = estimate.alpha
        table = digamma_difference(alpha[None, :], enc.values[:, None])
        self.sx = self.sx + (enc.weighted_counts(weights) * table).sum(axis=0)
        per_total = np.bincount(enc.total_codes, weights=weights, minlength=len(enc.total_values))
        self.sn += float(per_total @ digamma_difference(float(alpha.sum()), enc.total_values))
        self.sw += total
        self.sa = self.sa + total * alpha

    def seq_update(self, enc: DirichletMultinomialBatch, weights: np.ndarray, estimate: Any) -> None:
        weights = np.asarray(weights, dtype=np.float64)
        self._add_counts(enc, weights, estimate)
        if self.len_acc is not None:
            self.update_lengths(
                enc.len_enc, enc.totals, weights, None if estimate is None else estimate.len_dist
            )
        return None

    def seq_initialize(self, enc: DirichletMultinomialBatch, weights: np.ndarray, rng: RowRandom) -> None:
        weights = np.asarray(weights, dtype=np.float64)
        self._add_counts(enc, weights, None)
        self.initialize_lengths(enc.len_enc, enc.totals, weights, rng)

    def combine(self, value: Any) -> DirichletMultinomialAccumulator:
        *numbers, len_value = value
        if len(numbers[2]) or float(numbers[0]):  # an accumulator that never saw a vector adds nothing
            self._sized(len(numbers[2]))
        for name, v in zip(("rw", "sw", "sx", "sn", "sa", "mw", "sp", "sp2", "sc"), numbers, strict=True):
            if name in _SCALARS:
                setattr(self, name, getattr(self, name) + float(v))
            elif len(v):
                setattr(self, name, getattr(self, name) + np.asarray(v, dtype=np.float64))
        self.combine_lengths(len_value)
        return self

    def value(self) -> tuple[Any, ...]:
        return (
            self.rw,
            self.sw,
            self.sx.copy(),
            self.sn,
            self.sa.copy(),
            self.mw,
            self.sp.copy(),
            self.sp2.copy(),
            self.sc,
            self.length_value(),
        )

    def _scale(self, factor: float) -> None:
        for name in _SCALARS:
            setattr(self, name, factor * getattr(self, name))
        for name in _VECTORS:
            setattr(self, name, factor * getattr(self, name))
        self.scale_lengths(factor)

    def from_value(self, value: Any) -> DirichletMultinomialAccumulator:
        *numbers, len_value = value
        for name, v in zip(("rw", "sw", "sx", "sn", "sa", "mw", "sp", "sp2", "sc"), numbers, strict=True):
            setattr(self, name, float(v) if name in _SCALARS else np.array(v, dtype=np.float64))
        self.lengths_from_value(len_value)
        return self

    def make_encoder(self) -> DirichletMultinomialEncoder:
        return DirichletMultinomialEncoder(self.dim, self.length_encoder())

    def parts(self) -> list[Accumulator]:
        return self.length_parts()

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.dim, self.fresh_lengths(), self.keys)


@register_estimator("dirichlet_multinomial")
@dataclass(eq=False, repr=False)
class DirichletMultinomialEstimator(LengthEstimation, Estimator):
    """Dirichlet-multinomial fit by generalized EM (Minka's fixed point, one step per pass; see the
    module docstring).

    Parameters
    ----------
    pseudo_count : float, optional
        Weight ``pc`` of a prior ``Π_j alpha_j^(pc alpha0_j) exp(-pc alpha_j)`` on ``alpha`` (a gamma
        prior whose mode is ``alpha0``): the step becomes ``alpha_j <- (alpha_j sx_j + pc alpha0_j) /
        (sn + pc)``, still a minorize-maximize step of the posterior; as ``pc`` grows the estimate
        tends to ``alpha0``. The first pass's moment start ignores it.
    suff_stat : array of shape (d,), optional
        Prior concentrations ``alpha0`` (default all ones when only ``pseudo_count`` is given).
    min_alpha, max_alpha : float
        Bounds of every ``alpha_j`` (defaults 1e-6 and 1e8; counts that are multinomial, with no
        extra spread, drive the precision to ``max_alpha``).
    dim : int, optional
        Vector length (learnt by the scan when omitted).
    len_estimator : Estimator, optional
        Estimator of the row totals (a count family); without it the fitted model has
        ``len_dist=None`` (a density conditional on each row's total, and no sampler).
    keys : str, optional
        Tie these parameters to every other site with the same key.

    With zero total weight the estimate is ``suff_stat`` (or all ones).
    """

    pseudo_count: float | None = None
    suff_stat: Sequence[float] | np.ndarray | None = option(
        None,
        lambda v: len(_check_alpha(v, "DirichletMultinomialEstimator", "suff_stat")) >= 2,
        "at least 2 positive finite numbers",
        read=lambda v: np.array(v, dtype=np.float64),
    )
    min_alpha: float = bound(DEFAULT_MIN_ALPHA)
    max_alpha: float = bound(DEFAULT_MAX_ALPHA)
    dim: int | None = option(None, lambda v: isinstance(v, int) and v >= 2, "an integer >= 2")
    len_estimator: Estimator | None = estimator_option()
    name: str | None = None
    keys: str | None = None

    def check(self) -> None:
        check_bounds(self, "min_alpha", "max_alpha")
        if self.suff_stat is not None:
            d = len(self.suff_stat)
            fam = "DirichletMultinomialEstimator"
            check_parameter(self.dim in (None, d), fam, "suff_stat", self.suff_stat, f"of length {self.dim}")
            self.dim = d

    def accumulator_factory(self) -> DirichletMultinomialAccumulator:
        return DirichletMultinomialAccumulator(self.dim, self.length_accumulator(), self.keys)

    def encoder(self) -> DirichletMultinomialEncoder:
        return DirichletMultinomialEncoder(self.dim, self.length_encoder())

    def with_scan(self, scan: Any) -> DirichletMultinomialEstimator:
        if scan is None:
            return self
        dim, len_scan = scan
        return dataclasses.replace(
            self, dim=self.dim if self.dim is not None else dim, len_estimator=self.length_with_scan(len_scan)
        )

    def min_rows(self) -> int:
        return self.length_min_rows()

    def _free_parameters(self, model: Any, tied: set[Any]) -> int:
        return len(model.alpha) + free_parameters(self.len_estimator, model.len_dist, tied)

    def _bounded(self, alpha: np.ndarray) -> np.ndarray:
        return np.clip(alpha, self.min_alpha, self.max_alpha)  # type: ignore[no-any-return]

    def _moment_start(self, mw: float, sp: np.ndarray, sp2: np.ndarray, sc: float) -> np.ndarray:
        """The first pass's start from the moments of the shares (see the module docstring)."""
        m = sp / mw
        spread = float(np.sum(np.maximum(sp2 / mw - m * m, 0.0)))
        binomial = float(np.sum(m * (1.0 - m)))
        r = spread / binomial if binomial > 0 else 1.0
        c = sc / mw
        precision = (1.0 - r) / (r - c) if c < r < 1.0 else (self.max_alpha if r <= c else 1.0)
        return self._bounded(m * min(precision, self.max_alpha))

    def estimate(self, nobs: float | None, value: Any) -> DirichletMultinomialDistribution:
        rw, sw, sx, sn, sa, mw, sp, sp2, sc, len_value = value
        sx, sa, sp, sp2 = (np.asarray(v, dtype=np.float64) for v in (sx, sa, sp, sp2))
        d = len(sx) or self.dim
        if not d:
            raise EmptyDataError(
                "DirichletMultinomialEstimator: no data, and neither dim nor suff_stat to fall back on"
            )
        alpha0 = np.ones(d) if self.suff_stat is None else np.asarray(self.suff_stat, dtype=np.float64)
        pc = self.pseudo_count or 0.0
        len_dist = self.length_estimate(rw, len_value)
        if sw > 0 and len(sx) == d:
            old = sa / sw
            alpha = (old * sx + pc * alpha0) / (sn + pc) if sn + pc > 0 else old
            ok = bool(np.all(np.isfinite(alpha))) and bool(np.all(alpha > 0))
            return DirichletMultinomialDistribution(self._bounded(alpha if ok else old), len_dist)
        if mw > 0 and len(sp) == d:
            return DirichletMultinomialDistribution(self._moment_start(mw, sp, sp2, sc), len_dist)
        return DirichletMultinomialDistribution(self._bounded(alpha0), len_dist)
