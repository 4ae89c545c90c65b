"""What a fitted model says about its own fit, in words a user acts on: parts that hold no data, and
variances that sit on their floor.

A fit can succeed numerically and still describe the data badly: a 0/1 column modelled as a Gaussian
puts its variance on the floor in every component and adds about 9 to the log-likelihood per row
(so BIC then prefers the most components offered); a component that lost all its rows keeps only its
floored weight. :func:`fit_warnings` finds these in any model tree (mixtures, records, optional and
nested parts), naming the component and field. ``optimize``, ``best_of`` and ``select_k`` raise each
as a :class:`~mixle_spark.errors.FitQualityWarning`; the fit job prints them and keeps them in
``summary.json``'s ``warnings`` (and the report); ``MixleModel.summary.warnings`` has them too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from mixle_spark.stats.base import Distribution

__all__ = ["FLOORED_VARIANCE", "fit_warnings", "model_parts"]

FLOORED_VARIANCE = 1.0001e-8
"""A log-Gaussian variance at or below this (its default floor, 1e-8) sits on its floor."""
COLLAPSED = 1e-6
"""A Gaussian variance below this fraction of the largest variance of the same coordinate in the
mixture's other components, or of the spread of their means, has collapsed onto its (relative) floor."""

_GAUSSIAN_VARIANCES = {
    "GaussianDistribution": "sigma2",
    "LogGaussianDistribution": "sigma2",
    "DiagonalGaussianDistribution": "covar",
    "MultivariateGaussianDistribution": "covar",
}


def model_parts(
    model: Distribution, where: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Distribution]]:
    """``(path, part)`` for ``model`` and every distribution inside it, depth first; a path is the
    words that lead there (``("component 1", "field 'amount'")``)."""
    yield where, model
    for parameter in type(model).parameters:
        value = getattr(model, parameter.attr, None)
        if isinstance(value, Distribution):
            yield from model_parts(value, (*where, parameter.name))
        elif isinstance(value, Mapping):
            for name, child in value.items():
                if isinstance(child, Distribution):
                    yield from model_parts(child, (*where, f"field {name!r}"))
        elif isinstance(value, list | tuple):
            word = "component" if parameter.name == "components" else parameter.name
            for j, child in enumerate(value):
                if isinstance(child, Distribution):
                    yield from model_parts(child, (*where, f"{word} {j}"))


def _variances(part: Distribution) -> tuple[np.ndarray, np.ndarray] | None:
    """(variances, means) of a Gaussian part, per coordinate; None for other families."""
    name = _GAUSSIAN_VARIANCES.get(type(part).__name__)
    if name is None:
        return None
    value = np.asarray(getattr(part, name), dtype=np.float64)
    variances = np.diag(value) if value.ndim == 2 else np.atleast_1d(value)
    return variances, np.atleast_1d(np.asarray(part.mu, dtype=np.float64))  # type: ignore[attr-defined]


def _shown(where: tuple[str, ...]) -> str:
    return ", ".join(where) if where else "the model"


def _floored_variances(model: Distribution) -> list[str]:
    """One warning per field whose Gaussian variance sits on its floor, naming the components."""
    found: dict[tuple[str, ...], list[str]] = {}
    sites: dict[tuple[str, ...], list[tuple[str, np.ndarray, np.ndarray, str]]] = {}
    for where, part in model_parts(model):
        found_parts = _variances(part)
        if found_parts is None:
            continue
        components = [w for w in where if w.startswith("component ")]
        field = tuple(w for w in where if not w.startswith("component "))
        kind = type(part).__name__
        sites.setdefault(field, []).append((", ".join(components), *found_parts, kind))
    for field, entries in sites.items():
        # what a collapsed variance is small against: the largest of the field's components, or the
        # spread of their means (every component may sit on a value of a 0/1 or integer column)
        spread = np.var([m for _, _, m, _ in entries], axis=0) if len(entries) > 1 else 0.0
        reference = np.maximum(np.max([v for _, v, _, _ in entries], axis=0), spread)
        for owner, variances, _means, kind in entries:
            on_floor = variances <= COLLAPSED * reference
            if kind == "LogGaussianDistribution":  # its floor is an absolute 1e-8
                on_floor |= variances <= FLOORED_VARIANCE
            elif kind == "GaussianDistribution":  # relative to the column's variance; 1e-8 without one
                on_floor |= np.isclose(variances, 1e-8, rtol=1e-4, atol=0.0)
            if np.any(on_floor):
                coordinates = np.flatnonzero(on_floor)
                label = owner or "the model"
                if len(variances) > 1:
                    plural = "s" if len(coordinates) > 1 else ""
                    label += f" (coordinate{plural} {', '.join(map(str, coordinates[:5]))})"
                found.setdefault(field, []).append(label)
    lines = []
    for field, labels in found.items():
        shown = _shown(field)
        lines.append(
            f"{shown}: the Gaussian variance sits on its floor in {', '.join(labels[:4])}"
            f"{' and more' if len(labels) > 4 else ''}: the values there are all alike (a 0/1, integer "
            "or constant column?); model it as bernoulli, categorical or integer_categorical, or drop it: "
            "a floored variance adds about 9 to the log-likelihood per row and BIC then prefers more "
            "components"
        )
    return lines


def _empty_components(model: Distribution, rows: float | None) -> list[str]:
    """One warning per mixture with components of (almost) no weight."""
    lines = []
    for where, part in model_parts(model):
        w = getattr(part, "w", None)
        components = getattr(part, "components", None)
        if w is None or not isinstance(components, list | tuple):
            continue
        weights = np.asarray(w, dtype=np.float64)
        limit = 0.5 / rows if rows and not where else 1e-5  # half a row at the top; else relative
        empty = [j for j, v in enumerate(weights) if v < limit]
        if empty:
            held = f" (fewer than half a row of {rows:,.0f})" if rows and not where else ""
            many = len(empty) > 1
            shown = ", ".join(f"{weights[j]:.3g}" for j in empty)
            lines.append(
                f"{_shown(where)}: component{'s' if many else ''} {', '.join(map(str, empty))} "
                f"{'have' if many else 'has'} weight {shown}{held}: no data is left there; a mixture "
                "with fewer components fits as well"
            )
    return lines


def fit_warnings(model: Distribution, rows: float | None = None) -> list[str]:
    """What ``model`` (fitted to ``rows`` rows) says about its fit: Gaussian variances on their floor
    (per field, naming the components) and mixture components with no weight left.

    >>> from mixle_spark.stats import GaussianDistribution, MixtureDistribution, RecordDistribution
    >>> flag = lambda v: RecordDistribution({"flag": GaussianDistribution(v, 1e-8)})
    >>> print(fit_warnings(MixtureDistribution([flag(0.0), flag(1.0)], [0.4, 0.6]))[0][:72])
    field 'flag': the Gaussian variance sits on its floor in component 0, co
    """
    return _floored_variances(model) + _empty_components(model, rows)
