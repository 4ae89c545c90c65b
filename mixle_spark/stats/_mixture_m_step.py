"""The mixture's M-step (``MixtureEstimator.estimate``, :mod:`mixle_spark.stats.mixture`): the weights
from the components' counts, then each component from its own statistics.

The weights add ``pseudo_count / K`` to every count and are floored at ``w_min`` (then renormalised);
zero total weight gives uniform weights. The components are estimated one by one, or together under
a shared covariance form (:func:`~mixle_spark.stats._covariance.form_m_step`); a component whose
M-step fails (statistics that overflowed, say) is named with the others that failed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from mixle_spark.errors import DegenerateComponentError, NonFiniteLikelihoodError
from mixle_spark.stats._covariance import form_m_step
from mixle_spark.stats.base import Distribution, Estimator

__all__ = ["estimate_components", "mixture_weights"]


def mixture_weights(counts: Any, k: int, pseudo_count: float | None, w_min: float) -> np.ndarray:
    """The weights of ``k`` components from their ``counts`` (raises on a non-finite count)."""
    counts = np.asarray(counts, dtype=np.float64)
    if not np.all(np.isfinite(counts)):
        raise NonFiniteLikelihoodError(f"MixtureEstimator: non-finite component counts {counts.tolist()}")
    w = counts + (pseudo_count or 0.0) / k
    total = float(w.sum())
    if not (total > 0 and math.isfinite(total)):
        w = np.full(k, 1.0 / k)
    else:
        w = w / total
    if w_min > 0:
        w = np.maximum(w, w_min)
        w /= w.sum()
    return w


def estimate_components(
    estimators: Sequence[Estimator],
    covariance: str | None,
    counts: Any,
    comp_values: Sequence[Any],
    w: np.ndarray,
) -> list[Distribution]:
    """Each component from its statistics (``covariance``: under that shared form); raises
    :class:`~mixle_spark.errors.DegenerateComponentError` naming every component that failed
    (``w``: the new weights, which the error carries)."""
    counts = np.asarray(counts, dtype=np.float64)
    comps: list[Distribution | None] = []
    failures: list[tuple[int, str]] = []
    if covariance is not None:
        estimate = form_m_step(covariance, estimators, counts, comp_values)
    else:
        estimate = [partial(e.estimate, float(c)) for e, c in zip(estimators, counts, strict=True)]
    for j, (m_step, v) in enumerate(zip(estimate, comp_values, strict=True)):
        try:
            comps.append(m_step(v))
        except (ValueError, ArithmeticError) as err:  # e.g. statistics that overflowed to inf
            comps.append(None)
            failures.append((j, f"{type(err).__name__}: {err}"))
    if failures:
        raise DegenerateComponentError(sorted(set(failures)), comps, w)
    return [c for c in comps if c is not None]
