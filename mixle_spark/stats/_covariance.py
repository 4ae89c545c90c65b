"""Covariance forms of a Gaussian mixture: the constraints that tie the components' covariances
together (volume, shape, orientation equal or varying across components), and their M-steps.

A form is named as mclust names it, after the eigen-decomposition ``Σ_k = λ_k D_k A_k D_k^T``
(volume ``λ_k``, shape ``A_k`` with ``|A_k| = 1``, orientation ``D_k``), one letter for each, in that
order: ``E`` equal across components, ``V`` varying, ``I`` the identity (Banfield & Raftery 1993;
Celeux & Govaert 1995, "Gaussian parsimonious clustering models", Pattern Recognition 28(5)):

======  =================  ========================================  ===================================
form    scikit-learn name  covariance of component k                 M-step (``n_k``, scatter ``W_k``)
======  =================  ========================================  ===================================
EII     (tied spherical)   ``λ I``                                   ``λ = tr W / (d n)``
VII     ``spherical``      ``λ_k I``                                 ``λ_k = tr W_k / (d n_k)``
EEI     ``tied_diag``      ``B`` diagonal                            ``B = diag W / n``
VEI                        ``λ_k B``, ``B`` diagonal, ``|B| = 1``    iterated (C&G 1995, model [λ_k B])
EVI                        ``λ B_k``, ``B_k`` diagonal, ``|B_k| = 1``  ``B_k = diag W_k / |diag W_k|^(1/d)``,
                                                                     ``λ = Σ_k |diag W_k|^(1/d) / n``
VVI     ``diag``           ``B_k`` diagonal                          ``B_k = diag W_k / n_k``
EEE     ``tied``           ``Σ``                                     ``Σ = W / n``
VVV     ``full``           ``Σ_k``                                   ``Σ_k = W_k / n_k``
======  =================  ========================================  ===================================

``W_k = Σ_i r_ik (x_i - μ_k)(x_i - μ_k)^T`` is component k's weighted scatter about its mean,
``n_k = Σ_i r_ik`` its weight, ``W = Σ_k W_k`` and ``n = Σ_k n_k``. Every form's M-step is a function of
``(n_k, W_k)`` alone, so the E-step and the accumulators are the unconstrained mixture's: the
constraint is applied on the driver, and every backend gives the same model. The diagonal forms
read only ``diag W_k``, so their components may be ``diagonal_gaussian`` (``2d + 1`` statistics per
row instead of ``1 + d + d(d+1)/2``); the others need ``multivariate_gaussian`` components.

The number of free covariance parameters of each form (for BIC) is :func:`covariance_parameters`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats._vector_estimator import VectorGaussianEstimator
from mixle_spark.stats.base import Distribution, Estimator

__all__ = [
    "DIAGONAL_FORMS",
    "FORMS",
    "FORM_ALIASES",
    "FORM_CHOICES",
    "check_form_components",
    "constrained_covariances",
    "covariance_form",
    "covariance_parameters",
    "form_m_step",
    "form_parameters",
    "is_form",
]

FORMS = ("EII", "VII", "EEI", "VEI", "EVI", "VVI", "EEE", "VVV")
"""The forms, fewest free parameters first (for d > 1 and k > 1)."""

DIAGONAL_FORMS = frozenset({"EII", "VII", "EEI", "VEI", "EVI", "VVI"})
"""Forms whose covariances are diagonal: they read only the scatters' diagonals."""

FORM_ALIASES = {
    "full": "VVV",
    "tied": "EEE",
    "diag": "VVI",
    "spherical": "VII",
    "tied_diag": "EEI",
    "tied_spherical": "EII",
}
"""scikit-learn's ``covariance_type`` names (and the two tied forms it lacks) for mclust's."""

FORM_CHOICES = "one of " + ", ".join(FORMS) + " or " + ", ".join(FORM_ALIASES)

_VEI_ITERATIONS = 500
_VEI_TOLERANCE = 1e-13


def covariance_form(value: Any, owner: str = "covariance") -> str:
    """The mclust name of the form ``value`` names (an mclust name in any case, or a scikit-learn
    name); SpecError naming the value and the choices otherwise."""
    if isinstance(value, str):
        name = value.strip()
        if name.upper() in FORMS:
            return name.upper()
        if name.lower() in FORM_ALIASES:
            return FORM_ALIASES[name.lower()]
    raise SpecError(f"{owner} must be {FORM_CHOICES}, got {value!r}")


def is_form(value: Any) -> bool:
    """Whether ``value`` names a covariance form (:func:`covariance_form` would read it)."""
    try:
        covariance_form(value)
    except SpecError:
        return False
    return True


def check_form_components(form: str, estimators: Sequence[Estimator]) -> None:
    """SpecError unless every one of a mixture's component ``estimators`` can be fitted under
    ``form``: vector Gaussians, full-covariance ones unless the form is diagonal."""
    from mixle_spark.stats.multivariate_gaussian import MultivariateGaussianEstimator

    for j, e in enumerate(estimators):
        if not isinstance(e, VectorGaussianEstimator):
            raise SpecError(
                f"MixtureEstimator: covariance={form!r} ties Gaussian covariances, but component {j} is "
                f"{type(e).__name__}; use multivariate_gaussian (or, for a diagonal form, "
                "diagonal_gaussian) components"
            )
        if form not in DIAGONAL_FORMS and not isinstance(e, MultivariateGaussianEstimator):
            diagonal = ", ".join(sorted(DIAGONAL_FORMS))
            raise SpecError(
                f"MixtureEstimator: covariance={form!r} needs full covariances, but component {j} is "
                f"{type(e).__name__} (variances only); use multivariate_gaussian components, or a "
                f"diagonal form ({diagonal})"
            )


def form_m_step(
    form: str, estimators: Sequence[Estimator], counts: np.ndarray, values: Sequence[Any]
) -> list[Callable[[Any], Distribution]]:
    """Each component's M-step under ``form``: the covariances decided together from the
    components' statistics ``values`` (their weights and scatters about their means, priors folded
    in: :meth:`VectorGaussianEstimator.moments`), each component's mean its own."""
    vector = [e for e in estimators if isinstance(e, VectorGaussianEstimator)]
    assert len(vector) == len(estimators)  # check_form_components ran
    weights: list[float] = []
    scatters: list[np.ndarray | None] = []
    for e, v in zip(vector, values, strict=True):
        moments = e.moments(v)
        if isinstance(moments, Distribution):  # no weight: the fallback
            weights.append(0.0)
            scatters.append(None)
        else:
            weights.append(moments[0])
            scatters.append(moments[2])
    full = not all(np.ndim(s) == 1 for s in scatters if s is not None)
    covars = constrained_covariances(form, weights, scatters, full)
    out: list[Callable[[Any], Distribution]] = []
    for e, s, covar in zip(vector, scatters, covars, strict=True):
        if covar is not None and s is not None and covar.ndim != s.ndim:  # mixed component kinds
            covar = np.diag(covar) if s.ndim == 2 else np.diag(covar).copy()
        out.append(partial(e.with_covariance, covar=covar))
    return out


def form_parameters(form: str, model: Any) -> int:
    """Free parameters of a fitted mixture's components under ``form``: each component's mean and
    the form's covariance parameters (:func:`covariance_parameters`)."""
    k = len(model.components)
    d = int(model.components[0].dim)
    return k * d + covariance_parameters(form, k, d)


def covariance_parameters(form: str, k: int, d: int) -> int:
    """Free parameters of the ``k`` covariances of a ``d``-dimensional mixture of ``form`` (mclust's
    counts: a volume, shape or orientation shared by the components counts once; a shape has ``d - 1``
    free values, an orientation ``d (d - 1) / 2``)."""
    full = d * (d + 1) // 2
    counts = {
        "EII": 1,
        "VII": k,
        "EEI": d,
        "VEI": k + (d - 1),
        "EVI": 1 + k * (d - 1),
        "VVI": k * d,
        "EEE": full,
        "VVV": k * full,
    }
    return counts[form]


def _diagonal(scatter: np.ndarray) -> np.ndarray:
    return np.diag(scatter).copy() if scatter.ndim == 2 else np.asarray(scatter, dtype=np.float64)


def _geometric_mean(values: np.ndarray) -> float:
    """``|diag|^(1/d)`` of positive ``values`` in log space (no under- or overflow for large d)."""
    return math.exp(float(np.mean(np.log(values))))


def constrained_covariances(
    form: str, counts: Sequence[float], scatters: Sequence[np.ndarray | None], full: bool
) -> list[np.ndarray | None]:
    """Component covariances of ``form`` from the components' weights ``counts`` (``n_k``) and
    scatters about their means (``W_k``: (d, d) matrices, or (d,) diagonals for diagonal forms; None
    for a component without data), as (d, d) matrices when ``full`` else (d,) variances, before any
    floor. A component without weight gets None from a form whose covariance varies (its estimator
    falls back) and the shared covariance from one that does not."""
    n = np.asarray(counts, dtype=np.float64)
    live = [j for j, w in enumerate(scatters) if w is not None and n[j] > 0]
    k = len(scatters)
    out: list[np.ndarray | None] = [None] * k
    if not live:
        return out
    d = len(_diagonal(scatters[live[0]]))  # type: ignore[arg-type]
    total = float(sum(n[j] for j in live))
    diag = {j: _diagonal(scatters[j]) for j in live}  # type: ignore[arg-type]

    def shaped(variances: np.ndarray) -> np.ndarray:
        return np.diag(variances) if full else variances

    if form == "VVV":
        for j in live:
            out[j] = scatters[j] / n[j]  # type: ignore[operator]
    elif form == "EEE":
        pooled = _total([scatters[j] for j in live]) / total  # type: ignore[misc]
        out = [np.array(pooled) for _ in range(k)]
    elif form == "VVI":
        for j in live:
            out[j] = shaped(diag[j] / n[j])
    elif form == "EEI":
        shared = _total([diag[j] for j in live]) / total
        out = [shaped(shared) for _ in range(k)]
    elif form == "VII":
        for j in live:
            out[j] = shaped(np.full(d, float(diag[j].sum()) / (d * n[j])))
    elif form == "EII":
        shared = np.full(d, float(sum(diag[j].sum() for j in live)) / (d * total))
        out = [shaped(shared) for _ in range(k)]
    elif form == "EVI":
        # B_k = diag W_k / |diag W_k|^(1/d), λ = Σ_k |diag W_k|^(1/d) / n (C&G 1995, model [λ B_k])
        scales = {j: _geometric_mean(np.maximum(diag[j], _tiny(diag[j]))) for j in live}
        volume = sum(scales.values()) / total
        for j in live:
            out[j] = shaped(volume * diag[j] / scales[j])
    elif form == "VEI":
        shape, volumes = _vei(n, diag, live, d)
        out = [shaped(volumes.get(j, 1.0) * shape) for j in range(k)]
        for j in range(k):
            if j not in volumes:
                out[j] = None
    else:  # covariance_form() names only the forms above
        raise SpecError(f"covariance form {form!r} has no M-step")
    return out


def _total(arrays: list[np.ndarray]) -> np.ndarray:
    """The sum of ``arrays`` (of one shape), added in order."""
    out = np.array(arrays[0], dtype=np.float64)
    for a in arrays[1:]:
        out += a
    return out


def _tiny(values: np.ndarray) -> float:
    """A positive stand-in for zero variances (a coordinate constant within a component)."""
    top = float(np.max(values)) if len(values) else 0.0
    return max(top * 1e-300, np.finfo(np.float64).tiny)


def _vei(
    n: np.ndarray, diag: dict[int, np.ndarray], live: list[int], d: int
) -> tuple[np.ndarray, dict[int, float]]:
    """The VEI M-step (C&G 1995, model [λ_k B], alternating): ``λ_k = tr(W_k B^-1) / (d n_k)``, then
    ``B = diag(Σ_k W_k / λ_k) / |diag(Σ_k W_k / λ_k)|^(1/d)``, from ``B = I``, until the volumes
    change by less than 1e-13 relative (or 500 rounds). Each round cannot lower the likelihood."""
    shape = np.ones(d)
    volumes = {j: float(diag[j].sum()) / (d * n[j]) for j in live}
    for _ in range(_VEI_ITERATIONS):
        summed = _total([diag[j] / max(volumes[j], np.finfo(np.float64).tiny) for j in live])
        summed = np.maximum(summed, _tiny(summed))
        shape = summed / _geometric_mean(summed)
        new = {j: float((diag[j] / shape).sum()) / (d * n[j]) for j in live}
        change = max(abs(new[j] - volumes[j]) / max(abs(volumes[j]), 1e-300) for j in live)
        volumes = new
        if change < _VEI_TOLERANCE:
            break
    return shape, volumes
