"""The moment algebra of the vector Gaussian families: their statistics and the missing coordinates.

:class:`MomentAccumulator` sums ``Σw``, ``Σw y`` and ``Σw y y^T`` (or its diagonal) around a centre,
re-expressed exactly at another centre when splits merge (:func:`shift_vector_moments`);
:func:`moments_about_mean` turns them into a mean and a scatter for the M-step. A coordinate that was
not observed is marginalized out of a density (:func:`marginal_log_density`) and replaced in the
statistics by its conditional expectation under the current model (:func:`conditional_fill`), so EM
stays exact with missing coordinates. Batches are :class:`~mixle_spark.stats._vector.VectorBatch`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from mixle_spark.stats._vector import VectorBatch, triangle_indices
from mixle_spark.stats.base import Accumulator, Encoder

__all__ = [
    "MomentAccumulator",
    "conditional_fill",
    "marginal_log_density",
    "moments_about_mean",
    "shift_vector_moments",
]


def shift_vector_moments(
    sw: float, s1: np.ndarray, s2: np.ndarray, old: np.ndarray, new: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Re-express Σw(x - old) and Σw(x - old)(x - old)^T (or its diagonal, when ``s2`` is 1-D)
    as sums around ``new``."""
    delta = old - new
    s1_new = s1 + sw * delta
    if s2.ndim == 1:
        s2_new = s2 + 2.0 * delta * s1 + sw * delta * delta
    else:
        s2_new = s2 + np.outer(delta, s1) + np.outer(s1, delta) + sw * np.outer(delta, delta)
    return s1_new, s2_new


class MomentAccumulator(Accumulator):
    """Σw, Σw y and Σw y y^T (or Σw y^2 when ``diagonal``) around a centre; base of the vector
    Gaussian accumulators.

    ``value()`` is ``(sw, s1, s2, center)``. The centre is the first batch's (the data mean from the
    scan, or the model's mean); ``combine`` re-expresses incoming sums at this centre exactly, so
    splits accumulated at different centres merge to the statistics of the whole.
    """

    diagonal: ClassVar[bool] = False

    def __init__(self, dim: int | None = None, keys: Any = None) -> None:
        self.keys = keys
        self.sw = 0.0
        self.dim: int | None = None
        self.s1 = self.s2 = self.center = np.zeros(0)
        if dim is not None:
            self._reset(int(dim), np.zeros(int(dim)))

    def _reset(self, d: int, center: np.ndarray) -> None:
        self.dim = d
        self.sw = 0.0
        self.s1 = np.zeros(d)
        self.s2 = np.zeros(d) if self.diagonal else np.zeros((d, d))
        self.center = np.array(center, dtype=np.float64)

    def _add(self, sw: float, s1: np.ndarray, s2: np.ndarray, center: np.ndarray) -> None:
        """Add sums taken around ``center`` (the arrays are not kept)."""
        d = len(s1)
        if self.dim is not None and d != self.dim:
            raise ValueError(
                f"{type(self).__name__}: cannot add statistics of dimension {d} to "
                f"statistics of dimension {self.dim}"
            )
        if self.dim is None or self.sw == 0.0:
            self._reset(d, center)
        if not np.array_equal(center, self.center):
            s1, s2 = shift_vector_moments(sw, s1, s2, center, self.center)
        self.sw += sw
        self.s1 += s1
        self.s2 += s2

    def seq_update(self, enc: VectorBatch, weights: np.ndarray, estimate: Any) -> None:
        if enc.has_missing:
            self._add_missing(enc, weights, estimate)
            return None
        y = enc.y
        s1 = weights @ y
        if self.diagonal:
            s2 = weights @ (y * y)
        else:
            s2 = y.T @ (y * weights[:, None])
            s2 = 0.5 * (s2 + s2.T)  # exact symmetry, whatever the BLAS summation order
        self._add(float(weights.sum()), s1, s2, enc.c)
        return None

    def _add_missing(self, enc: VectorBatch, weights: np.ndarray, estimate: Any) -> None:
        """The expected statistics of a batch with missing coordinates: each missing coordinate
        replaced by its conditional mean given the row's observed ones under ``estimate`` (the
        current model), and the conditional covariance added to the scatter (Ghahramani & Jordan
        1994). Without a model (a random or seeded start), a missing coordinate is at the centre."""
        mu = getattr(estimate, "mu", None)
        covar = getattr(estimate, "covar", None)
        if mu is None or covar is None or len(mu) != enc.dim:
            y = enc.filled(enc.c) - enc.c
            extra = np.zeros(enc.dim) if self.diagonal else np.zeros((enc.dim, enc.dim))
        else:
            filled, extra = conditional_fill(enc, np.asarray(mu), np.asarray(covar), weights)
            y = filled - enc.c
            if self.diagonal and extra.ndim == 2:
                extra = np.diag(extra).copy()
            elif not self.diagonal and extra.ndim == 1:
                extra = np.diag(extra)
        s1 = weights @ y
        if self.diagonal:
            s2 = weights @ (y * y) + extra
        else:
            s2 = y.T @ (y * weights[:, None]) + extra
            s2 = 0.5 * (s2 + s2.T)
        self._add(float(weights.sum()), s1, s2, enc.c)

    def add_feature_sums(self, sums: np.ndarray, enc: VectorBatch, estimate: Any) -> None:
        """Add ``sums = Σ w φ(x)`` from the mixture fast path (features of :class:`VectorBatch`)."""
        d = enc.dim
        s1 = np.array(sums[1 : d + 1], dtype=np.float64)
        if self.diagonal:
            s2 = np.array(sums[d + 1 :], dtype=np.float64)
        else:
            iu, ju = triangle_indices(d)
            s2 = np.empty((d, d))
            s2[iu, ju] = sums[d + 1 :]
            s2[ju, iu] = sums[d + 1 :]
        self._add(float(sums[0]), s1, s2, enc.c)

    def combine(self, value: Any) -> MomentAccumulator:
        sw, s1, s2, center = value
        if len(s1) == 0:
            return self
        self._add(
            float(sw),
            np.array(s1, dtype=np.float64),
            np.array(s2, dtype=np.float64),
            np.array(center, dtype=np.float64),
        )
        return self

    def value(self) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        return (self.sw, self.s1.copy(), self.s2.copy(), self.center.copy())

    def _scale(self, factor: float) -> None:
        # The centre is where the sums are taken, not a sum: it stays.
        self.sw *= factor
        self.s1 = factor * self.s1
        self.s2 = factor * self.s2

    def from_value(self, value: Any) -> MomentAccumulator:
        sw, s1, s2, center = value
        self.sw = float(sw)
        self.s1 = np.array(s1, dtype=np.float64)
        self.s2 = np.array(s2, dtype=np.float64)
        self.center = np.array(center, dtype=np.float64)
        self.dim = len(self.s1) if len(self.s1) else None
        return self

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.dim, self.keys)

    def make_encoder(self) -> Encoder:
        return self.encoder_class(self.dim)  # type: ignore[call-arg, misc]


_LOG_2PI = float(np.log(2.0 * np.pi))


def marginal_log_density(enc: VectorBatch, mu: np.ndarray, covar: np.ndarray) -> np.ndarray:
    """``log N(x_o; mu_o, covar_oo)`` of every row over its observed coordinates ``o`` (a row with
    none observed: 0), for a full ``covar`` (d, d) or variances (d,); one Cholesky factor per pattern
    of missing coordinates."""
    x = enc.x
    if covar.ndim == 1:
        r = x - mu
        terms = -0.5 * (_LOG_2PI + np.log(covar) + r * r / covar)
        mask = enc.missing
        if mask is not None:
            terms[mask] = 0.0
        return terms.sum(axis=1)  # type: ignore[no-any-return]
    out = np.zeros(len(enc))
    for g in enc.patterns():  # batched over the patterns observing as many coordinates
        m = g.obs.shape[1]
        if m == 0:
            continue
        chol = np.linalg.cholesky(covar[g.obs[:, :, None], g.obs[:, None, :]])  # (P, m, m)
        half_logdet = np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1)
        whiten = np.linalg.inv(chol)
        for rows, which in g.blocks():
            obs = g.obs[which]
            z = np.einsum("bij,bj->bi", whiten[which], x[rows[:, None], obs] - mu[obs])
            out[rows] = -0.5 * m * _LOG_2PI - half_logdet[which] - 0.5 * (z * z).sum(axis=1)
    return out


def conditional_fill(
    enc: VectorBatch, mu: np.ndarray, covar: np.ndarray, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(x̂, extra)``: the rows with each missing coordinate replaced by its conditional mean given
    the observed ones under ``N(mu, covar)`` (``mu_m + covar_mo covar_oo^-1 (x_o - mu_o)``), and
    ``Σ_i w_i Cov[x_m | x_o]`` laid into a (d, d) matrix (or its diagonal (d,) for variances
    ``covar``), what the expected scatter adds to ``Σ w x̂ x̂^T``."""
    x = enc.x
    w = np.ones(len(enc)) if weights is None else weights
    mask = enc.missing
    if mask is None:
        return x, np.zeros(covar.shape)
    if covar.ndim == 1:  # independent coordinates: the mean, and the variance
        return np.where(mask, mu, x), w @ (mask * covar)
    filled = x.copy()
    extra = np.zeros(covar.shape)
    for g in enc.patterns():  # batched over the patterns observing as many coordinates
        q = g.miss.shape[1]
        if q == 0:
            continue
        obs, miss = g.obs, g.miss
        cond = covar[miss[:, :, None], miss[:, None, :]]  # (P, q, q)
        if obs.shape[1]:
            cross = covar[obs[:, :, None], miss[:, None, :]]  # covar_om, (P, m, q)
            gain = np.linalg.solve(covar[obs[:, :, None], obs[:, None, :]], cross)  # covar_oo^-1 covar_om
            cond = cond - np.einsum("pmi,pmj->pij", cross, gain)
        for rows, which in g.blocks():
            where = miss[which]
            if obs.shape[1]:
                seen = obs[which]
                r = x[rows[:, None], seen] - mu[seen]
                filled[rows[:, None], where] = mu[where] + np.einsum("bm,bmq->bq", r, gain[which])
            else:
                filled[rows[:, None], where] = mu[where]
        mass = np.bincount(g.which, weights=w[g.rows], minlength=len(miss))  # Σ w per pattern
        np.add.at(extra, (miss[:, :, None], miss[:, None, :]), mass[:, None, None] * cond)
    return filled, extra


def moments_about_mean(value: Any) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """``(sw, mean_y, scatter, center)`` from an accumulator value: ``scatter`` is Σw(x - mean)(x - mean)^T
    (or its diagonal), ``mean_y`` the weighted mean of x - center."""
    sw, s1, s2, center = value
    sw = float(sw)
    s1 = np.asarray(s1, dtype=np.float64)
    s2 = np.asarray(s2, dtype=np.float64)
    mean_y = s1 / sw if sw > 0 else np.zeros_like(s1)
    if s2.ndim == 1:
        scatter = np.maximum(s2 - sw * mean_y * mean_y, 0.0)
    else:
        scatter = s2 - sw * np.outer(mean_y, mean_y)
    return sw, mean_y, scatter, np.asarray(center, dtype=np.float64)
