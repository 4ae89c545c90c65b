"""Segment profiles: each mixture component described field by field in the data's own units.

A fitted model stores parameters (a log-normal's ``mu`` and ``sigma2``, an optional field's ``p``); a
person reading segments wants a median spend, a missing rate, every label's share. This module turns a
model into that description, side by side across components, as JSON-able data that the report
(:mod:`mixle_spark.report`), em_fit's ``summary.json`` and ``MixleModel.summary`` all carry:

* a number (Gaussian, log-normal, exponential, Rayleigh, half-normal, inverse Gaussian, gamma,
  inverse gamma, Pareto, Student-t, beta, Poisson, geometric, binomial, negative binomial, a point mass):
  its mean, and its median and quartiles where the family has them in closed form (a log-normal's median
  is ``exp(mu)``, its quartiles ``exp(mu ± 0.6745 sigma)``; an inverse Gaussian's by bisection on its
  closed-form cdf), else the mean and the standard deviation; any other scalar family that gives its
  own ``moments`` (and ``quantile``) is described by them;
* labels (categorical, integer categorical): every label's probability, labels ordered by their share
  over all components;
* a yes / no field (Bernoulli): the share of ones;
* an optional field: its missing rate, labelled as such, then what its present values look like;
* a zero-inflated or hurdle field: its share of zeros, then its inner family; a truncated or censored
  field: its inner family;
* a sequence: its length and its elements;
* a vector Gaussian: each coordinate's mean and standard deviation;
* any other family (Markov chains, hidden Markov models, nested mixtures): its parameters as text
  (:func:`mixle_spark.report.describe_parameters`; a chain's as its most probable transitions).

Every field row also says how much the field separates the components (``separation``, in [0, 1]:
:mod:`mixle_spark.report.separation`), which the report ranks the fields by.

The components' sizes by hard assignment and how sure the assignments are come from the data, not the
model: :func:`assignment_summary` builds them from posterior probabilities (``predict_proba``), and
:func:`mixle_spark.scoring.assignment_counts` over a whole Spark table.

>>> from mixle_spark.stats import LogGaussianDistribution, MixtureDistribution, PoissonDistribution
>>> from mixle_spark.stats import RecordDistribution
>>> one = RecordDistribution({"spend": LogGaussianDistribution(5.5, 0.09), "items": PoissonDistribution(2.0)})
>>> two = RecordDistribution({"spend": LogGaussianDistribution(3.0, 0.25), "items": PoissonDistribution(6.0)})
>>> profile = segment_profile(MixtureDistribution([one, two], [0.7, 0.3]))
>>> [row["field"] for row in profile["fields"]]
['spend', 'items']
>>> round(profile["fields"][0]["cells"][0]["median"], 1)  # exp(5.5)
244.7
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mixle_spark.report.parameters import describe_parameters
from mixle_spark.report.separation import is_number as described_number
from mixle_spark.report.separation import separation
from mixle_spark.stats._scalar_common import describes
from mixle_spark.stats.base import Distribution, distribution_from_dict

__all__ = [
    "CERTAINTY_BINS",
    "assignment_summary",
    "field_cell",
    "is_number",
    "merge_assignments",
    "segment_profile",
]

CERTAINTY_BINS = 20
"""Bins of the maximum posterior probability over [0, 1] (a row's certainty of its segment)."""

_Z_QUARTILE = 0.6744897501960817
"""The standard normal's upper quartile: ``Phi^-1(0.75)``."""

_NUMBER = "number"
_LABELS = "labels"
_SHARE = "share"
_TEXT = "text"


def _fmt(value: float) -> str:
    """A number as a person reads it: 4 significant digits, thousands separated when large."""
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1e4 and abs(value) < 1e15:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _number(mean: float, sd: float, quartiles: tuple[float, float, float] | None = None) -> dict[str, Any]:
    """A number's cell. A value that is not finite (a Student-t's sd at 2 degrees of freedom or fewer,
    a log-normal's mean beyond float range) is left out of the numbers (the profile is strict JSON)
    and written as such in the text."""
    cell: dict[str, Any] = {"mean": float(mean), "sd": float(sd)}
    if quartiles is not None:
        q1, median, q3 = (float(q) for q in quartiles)
        cell.update(q1=q1, median=median, q3=q3)
        cell["text"] = f"median {_fmt(median)} (IQR {_fmt(q1)}–{_fmt(q3)}), mean {_fmt(mean)}"
    else:
        cell["text"] = f"mean {_fmt(mean)} (sd {_fmt(sd)})"
    return {k: v for k, v in cell.items() if not isinstance(v, float) or math.isfinite(v)}


def _exp(x: float) -> float:
    """``e**x``, infinite rather than an OverflowError beyond float range."""
    return math.exp(x) if x < 709.78 else math.inf


def _normal(mu: float, sd: float) -> dict[str, Any]:
    return _number(mu, sd, (mu - _Z_QUARTILE * sd, mu, mu + _Z_QUARTILE * sd))


def _log_normal(mu: float, sigma2: float) -> dict[str, Any]:
    s = math.sqrt(sigma2)
    mean = _exp(mu + sigma2 / 2)
    sd = mean * math.sqrt(math.expm1(sigma2)) if sigma2 < 709.78 else math.inf
    return _number(mean, sd, (_exp(mu - _Z_QUARTILE * s), _exp(mu), _exp(mu + _Z_QUARTILE * s)))


def _exponential(beta: float) -> dict[str, Any]:
    return _number(beta, beta, (beta * math.log(4 / 3), beta * math.log(2), beta * math.log(4)))


def _rayleigh(sigma: float) -> dict[str, Any]:
    """Quantile ``sigma sqrt(-2 ln(1 - q))``; mean ``sigma sqrt(pi / 2)``, sd ``sigma sqrt(2 - pi / 2)``."""
    q1, median, q3 = (sigma * math.sqrt(-2.0 * math.log1p(-p)) for p in (0.25, 0.5, 0.75))
    return _number(sigma * math.sqrt(math.pi / 2), sigma * math.sqrt(2 - math.pi / 2), (q1, median, q3))


_HALF_NORMAL_QUARTILES = (0.31863936396437514, _Z_QUARTILE, 1.1503493803760079)
"""``Phi^-1((1 + q) / 2)`` for q = 1/4, 1/2, 3/4: a half-normal's quartiles in units of its scale."""


def _half_normal(sigma: float) -> dict[str, Any]:
    """Quantile ``sigma Phi^-1((1 + q) / 2)``; mean ``sigma sqrt(2 / pi)``, sd ``sigma sqrt(1 - 2 / pi)``."""
    q1, median, q3 = (sigma * z for z in _HALF_NORMAL_QUARTILES)
    return _number(sigma * math.sqrt(2 / math.pi), sigma * math.sqrt(1 - 2 / math.pi), (q1, median, q3))


def _log_normal_tail(z: float) -> float:
    """``ln Phi(-z)`` for ``z >= 0``: by ``erfc`` while it is a normal number, beyond by the asymptotic
    series of ``erfcx`` (Abramowitz & Stegun 7.1.23; at ``z / sqrt 2 > 26`` its next term is below 1e-12)."""
    t = z / math.sqrt(2.0)
    if t < 26.0:
        return math.log(0.5 * math.erfc(t))
    u = 1.0 / (2.0 * t * t)
    series = 1.0 - u * (1.0 - 3.0 * u * (1.0 - 5.0 * u * (1.0 - 7.0 * u)))
    return -t * t + math.log(0.5 * series / (t * math.sqrt(math.pi)))


def _inverse_gaussian_cdf(x: float, mu: float, lam: float) -> float:
    """``Phi(a) + exp(2 lam / mu) Phi(-b)`` with ``a, b = sqrt(lam / x) (x / mu -+ 1)`` (Chhikara & Folks
    1989, eq. 2.3), the second term in logs: ``exp(2 lam / mu)`` alone overflows."""
    r = math.sqrt(lam / x)
    a, b = r * (x / mu - 1.0), r * (x / mu + 1.0)
    first = 0.5 * math.erfc(-a / math.sqrt(2.0))
    return first + math.exp(2.0 * lam / mu + _log_normal_tail(b))


def _inverse_gaussian(mu: float, lam: float) -> dict[str, Any]:
    """Mean ``mu``, sd ``sqrt(mu^3 / lam)``; the quartiles have no closed form: each is found by bisection
    over ``ln x`` on the closed-form cdf, to 1e-13 relative."""
    quartiles = []
    for q in (0.25, 0.5, 0.75):
        lo, hi = math.log(mu) - 60.0, math.log(mu) + 60.0
        while hi - lo > 1e-13 * max(1.0, abs(lo)):
            mid = 0.5 * (lo + hi)
            if _inverse_gaussian_cdf(math.exp(mid), mu, lam) < q:
                lo = mid
            else:
                hi = mid
        quartiles.append(math.exp(0.5 * (lo + hi)))
    q1, median, q3 = quartiles
    return _number(mu, math.sqrt(mu**3 / lam), (q1, median, q3))


def _pareto(x_m: float, alpha: float) -> dict[str, Any]:
    """Quantiles ``x_m (1 - q)^(-1 / alpha)``; the mean is infinite for ``alpha <= 1``, the sd for
    ``alpha <= 2`` (left out of the numbers, see :func:`_number`)."""
    mean = alpha * x_m / (alpha - 1) if alpha > 1 else math.inf
    sd = x_m / (alpha - 1) * math.sqrt(alpha / (alpha - 2)) if alpha > 2 else math.inf
    quartiles = (x_m * (4 / 3) ** (1 / alpha), x_m * 2 ** (1 / alpha), x_m * 4 ** (1 / alpha))
    return _number(mean, sd, quartiles)


def _inverse_gamma(a: float, b: float) -> dict[str, Any]:
    """Mean ``b / (a - 1)`` (a > 1) and sd ``mean / sqrt(a - 2)`` (a > 2); its quantiles are the
    gamma's, without a closed form."""
    mean = b / (a - 1) if a > 1 else math.inf
    return _number(mean, mean / math.sqrt(a - 2) if a > 2 else math.inf)


def _beta(a: float, b: float) -> dict[str, Any]:
    mean = a / (a + b)
    return _number(mean, math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1))))


def _student_t(mu: float, sigma: float, dof: float) -> dict[str, Any]:
    sd = sigma * math.sqrt(dof / (dof - 2)) if dof > 2 else math.inf
    cell = _number(mu, sd)
    cell["text"] = f"centre {_fmt(mu)} (scale {_fmt(sigma)}, {_fmt(dof)} degrees of freedom)"
    return cell


def _von_mises(mu: float, kappa: float) -> dict[str, Any]:
    return {
        "mean": float(mu),
        "kappa": float(kappa),
        "text": f"mean direction {_fmt(mu)} rad (concentration {_fmt(kappa)})",
    }


def _count(mean: float, variance: float) -> dict[str, Any]:
    return _number(mean, math.sqrt(max(variance, 0.0)))


# type -> (kind, cell from the spec's parameters)
_SCALARS: dict[str, Any] = {
    "gaussian": lambda p: _normal(p["mu"], math.sqrt(p["sigma2"])),
    "log_gaussian": lambda p: _log_normal(p["mu"], p["sigma2"]),
    "exponential": lambda p: _exponential(p["beta"]),
    "rayleigh": lambda p: _rayleigh(p["sigma"]),
    "half_normal": lambda p: _half_normal(p["sigma"]),
    "inverse_gaussian": lambda p: _inverse_gaussian(p["mu"], p["lam"]),
    "gamma": lambda p: _number(p["k"] * p["theta"], math.sqrt(p["k"]) * p["theta"]),
    "beta": lambda p: _beta(p["alpha"], p["beta"]),
    "pareto": lambda p: _pareto(p["x_m"], p["alpha"]),
    "inverse_gamma": lambda p: _inverse_gamma(p["a"], p["b"]),
    "point_mass": lambda p: _number(p["value"], 0.0, (p["value"],) * 3),
    "student_t": lambda p: _student_t(p["mu"], p["sigma"], p["dof"]),
    "von_mises": lambda p: _von_mises(p["mu"], p["kappa"]),
    "poisson": lambda p: _count(p["lam"], p["lam"]),
    "geometric": lambda p: _count(1 / p["p"], (1 - p["p"]) / p["p"] ** 2),
    "binomial": lambda p: _count(p["n"] * p["p"], p["n"] * p["p"] * (1 - p["p"])),
    "negative_binomial": lambda p: _count(
        p["r"] * (1 - p["p"]) / p["p"], p["r"] * (1 - p["p"]) / p["p"] ** 2
    ),
}


def _described(spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """The cell of a scalar family that describes itself (its ``moments``, and its ``quantile`` for the
    quartiles where it has one), None for a family that does not."""
    if not described_number(str(spec.get("type"))):
        return None
    dist: Any = distribution_from_dict(dict(spec))
    mean, variance = (float(v) for v in dist.moments())
    sd = math.sqrt(variance) if variance >= 0 else math.nan
    if describes(dist, "quantile"):
        q1, median, q3 = (float(q) for q in dist.quantile(np.array([0.25, 0.5, 0.75])))
        return _number(mean, sd, (q1, median, q3))
    return _number(mean, sd)


def is_number(family: str) -> bool:
    """Whether the profile describes ``family`` as a number (mean, sd, quartiles where it has them)."""
    return family in _SCALARS or described_number(family)


def field_cell(spec: Mapping[str, Any]) -> dict[str, Any]:
    """One numeric field's description (``mean``, ``sd``, and ``q1`` / ``median`` / ``q3`` where the
    family has them, ``text``) from its spec; KeyError for a family that is not a number.

    The families listed here have their cells written out; any other scalar family that gives its own
    ``moments`` (and ``quantile``) is described by those."""
    family = str(spec["type"])
    if family in _SCALARS:
        return dict(_SCALARS[family](spec))
    cell = _described(spec)
    if cell is None:
        raise KeyError(family)
    return cell


def _label_rows(path: str, family: str, pmaps: list[list[tuple[Any, float]]], weights: np.ndarray) -> dict:
    """One labels row: every label's probability per component, labels by their overall share."""
    overall: dict[Any, float] = {}
    for pmap, w in zip(pmaps, weights, strict=True):
        for label, p in pmap:
            overall[label] = overall.get(label, 0.0) + float(w) * float(p)
    order = sorted(overall, key=lambda label: (-overall[label], str(label)))
    cells = []
    for pmap in pmaps:
        probs = {label: float(p) for label, p in pmap}
        shown = [[label, probs.get(label, 0.0)] for label in order]
        top = max(shown, key=lambda lp: lp[1])
        cells.append({"labels": shown, "text": f"mostly {top[0]!s} ({100 * top[1]:.0f}%)"})
    return {"field": path, "family": family, "kind": _LABELS, "labels": order, "cells": cells}


def _share_row(
    path: str, family: str, shares: np.ndarray, what: str, label: str, weights: np.ndarray
) -> tuple[dict[str, Any], np.ndarray]:
    """The row of a per-component share (an optional field's missing rate, a zero-inflated or hurdle
    field's zeros) and the segments' weights among the rows outside that share, which the inner family's
    rows are scored with."""
    cells = [{"share": v, "text": f"{100 * v:.1f}% {what}"} for v in shares.tolist()]
    score = _scored([{"type": "bernoulli", "p": v} for v in shares.tolist()], weights)
    row = {"field": f"{path} ({label})", "family": family, "kind": _SHARE, "cells": cells, **score}
    rest = weights * (1.0 - shares)
    return row, (rest / rest.sum() if rest.sum() > 0 else weights)


def _zero_share(spec: Mapping[str, Any]) -> float:
    """``P(X = 0)`` of a zero-inflated or hurdle field."""
    dist: Any = distribution_from_dict(dict(spec))
    return float(dist.zero_share())


def _rows(specs: list[Mapping[str, Any]], path: str, weights: np.ndarray) -> list[dict[str, Any]]:
    """The profile rows of one field: ``specs`` holds that field's spec in every component."""
    family = str(specs[0].get("type"))
    if any(str(s.get("type")) != family for s in specs):  # components that differ in form
        return [_text_row(specs, path, "mixed families", weights)]
    if family == "ignored":
        return []
    if family == "record":
        names = list(specs[0]["fields"])
        return [
            row
            for name in names
            for row in _rows([s["fields"][name] for s in specs], _join(path, name), weights)
        ]
    if family == "composite":
        count = len(specs[0]["components"])
        return [
            row
            for i in range(count)
            for row in _rows([s["components"][i] for s in specs], f"{path}[{i}]", weights)
        ]
    if is_number(family):
        cells = [field_cell(s) for s in specs]
        return [{"field": path, "family": family, "kind": _NUMBER, "cells": cells, **_scored(specs, weights)}]
    if family == "bernoulli":
        cells = [{"share": float(s["p"]), "text": f"{100 * float(s['p']):.1f}% ones"} for s in specs]
        return [{"field": path, "family": family, "kind": _SHARE, "cells": cells, **_scored(specs, weights)}]
    if family == "categorical":
        pmaps = [[(label, float(p)) for label, p in s["pmap"]] for s in specs]
        return [{**_label_rows(path, family, pmaps, weights), **_scored(specs, weights)}]
    if family == "integer_categorical":
        pmaps = [[(int(s["min_val"]) + i, float(p)) for i, p in enumerate(s["p_vec"])] for s in specs]
        return [{**_label_rows(path, family, pmaps, weights), **_scored(specs, weights)}]
    if family == "optional":
        if not all(s.get("p") is not None for s in specs):
            return _rows([s["dist"] for s in specs], path, weights)
        missing = np.array([float(s["p"]) for s in specs])
        row, present = _share_row(path, family, missing, "missing", "missing rate", weights)
        return [row, *_rows([s["dist"] for s in specs], path, present)]
    if family in ("zero_inflated", "hurdle"):
        zeros = np.array([_zero_share(s) for s in specs])
        row, rest = _share_row(path, family, zeros, "zeros", "zero share", weights)
        return [row, *_rows([s["dist"] for s in specs], path, rest)]
    if family in ("truncated", "censored"):  # the inner family's cell
        return _rows([s["dist"] for s in specs], path, weights)
    if family in ("sequence", "multinomial", "markov_chain", "hidden_markov"):
        rows = []
        if all(s.get("len_dist") is not None for s in specs):
            rows += _rows([s["len_dist"] for s in specs], f"{path} (length)", weights)
        if family == "sequence":
            return rows + _rows([s["dist"] for s in specs], f"{path} (elements)", weights)
        if family == "multinomial":
            pmaps = [[(label, float(p)) for label, p in s["pmap"]] for s in specs]
            return [
                *rows,
                {**_label_rows(f"{path} (tokens)", family, pmaps, weights), **_scored(specs, weights)},
            ]
        # the length has its own row
        chains: list[Mapping[str, Any]] = [{k: v for k, v in s.items() if k != "len_dist"} for s in specs]
        return [*rows, _text_row(chains, path, "parameters", weights)]
    if family in ("diagonal_gaussian", "multivariate_gaussian"):
        means = [np.asarray(s["mu"], dtype=np.float64) for s in specs]
        sds = [
            np.sqrt(np.abs(np.diag(np.atleast_2d(np.asarray(s["covar"], dtype=np.float64))))) for s in specs
        ]
        if family == "diagonal_gaussian":
            sds = [np.sqrt(np.abs(np.asarray(s["covar"], dtype=np.float64))) for s in specs]
        return [
            {
                "field": f"{path}[{j}]",
                "family": family,
                "kind": _NUMBER,
                "cells": [_normal(float(m[j]), float(sd[j])) for m, sd in zip(means, sds, strict=True)],
                **_scored(
                    [
                        {"type": "gaussian", "mu": m[j], "sigma2": sd[j] ** 2}
                        for m, sd in zip(means, sds, strict=True)
                    ],
                    weights,
                ),
            }
            for j in range(len(means[0]))
        ]
    return [_text_row(specs, path, "parameters", weights)]


def _scored(specs: list[Mapping[str, Any]], weights: np.ndarray) -> dict[str, Any]:
    """``{"separation": score}``: how much the field separates the components
    (:func:`mixle_spark.report.separation.separation`; None where it has no measure)."""
    return {"separation": separation(specs, weights)}


def _text_row(specs: list[Mapping[str, Any]], path: str, what: str, weights: np.ndarray) -> dict[str, Any]:
    cells = [{"text": describe_parameters(s)} for s in specs]
    return {
        "field": path or "(model)",
        "family": str(specs[0].get("type")),
        "kind": _TEXT,
        "note": what,
        "cells": cells,
        **_scored(specs, weights),
    }


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else str(name)


def segment_profile(model: Distribution, assignments: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The segment profile of ``model`` as JSON-able data.

    Parameters
    ----------
    model : Distribution
        A fitted model: a mixture profiles each component; any other model is one segment.
    assignments : mapping, optional
        From :func:`assignment_summary` (or :func:`mixle_spark.scoring.assignment_counts`): rows per
        component by hard assignment and the distribution of the maximum posterior.

    Returns
    -------
    dict
        ``components``: per component its ``weight`` and, with ``assignments``, ``rows``, ``share``
        and ``mean_certainty`` (the mean maximum posterior of its rows); ``fields``: one row per
        field (and per part of an optional or sequence field) with ``field``, ``family``, ``kind``
        (``number``, ``labels``, ``share`` or ``text``), ``separation`` (how much the field separates
        the components, :func:`mixle_spark.report.separation.separation`; None where it has no
        measure) and one ``cells`` entry per component, each with a ``text`` and its numbers;
        ``assignments``: the ``assignments`` given (or None).
    """
    spec = model.to_dict()
    if spec.get("type") == "mixture":
        parts, weights = list(spec["components"]), np.asarray(spec["w"], dtype=np.float64)
    else:
        parts, weights = [spec], np.ones(1)
    components: list[dict[str, Any]] = [{"component": k, "weight": float(w)} for k, w in enumerate(weights)]
    if assignments is not None:
        counts = np.asarray(assignments["rows"], dtype=np.float64)
        total = counts.sum()
        sure = np.asarray(assignments["certainty_sum"], dtype=np.float64)
        for k, comp in enumerate(components):
            comp["rows"] = int(counts[k])
            comp["share"] = float(counts[k] / total) if total > 0 else 0.0
            comp["mean_certainty"] = float(sure[k] / counts[k]) if counts[k] > 0 else None
    return {
        "components": components,
        "fields": _rows(parts, "", weights),
        "assignments": dict(assignments) if assignments is not None else None,
    }


def assignment_summary(proba: Any, basis: str = "") -> dict[str, Any]:
    """Hard assignments and their certainty from posterior probabilities (rows x components).

    ``rows``: rows per component (each row to its most probable one); ``certainty_sum``: per
    component, the sum of its rows' maximum posterior; ``certainty_histogram``: rows per bin of the
    maximum posterior (:data:`CERTAINTY_BINS` equal bins over [0, 1]); ``basis`` says what rows
    these are (the whole table, a sample).

    >>> summary = assignment_summary(np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]))
    >>> summary["rows"], summary["certainty_histogram"][18]
    ([2, 1], 1)
    """
    p = np.asarray(proba, dtype=np.float64)
    k = p.shape[1]
    best = np.argmax(p, axis=1)
    top = p[np.arange(len(p)), best]
    bins = np.minimum((top * CERTAINTY_BINS).astype(np.int64), CERTAINTY_BINS - 1)
    return {
        "rows": np.bincount(best, minlength=k).astype(int).tolist(),
        "certainty_sum": np.bincount(best, weights=top, minlength=k).tolist(),
        "certainty_histogram": np.bincount(bins, minlength=CERTAINTY_BINS).astype(int).tolist(),
        "basis": basis,
    }


def merge_assignments(parts: Sequence[Mapping[str, Any]], basis: str = "") -> dict[str, Any]:
    """The sum of several :func:`assignment_summary` results (batches of one table)."""
    first = parts[0]
    return {
        "rows": np.sum([p["rows"] for p in parts], axis=0).astype(int).tolist(),
        "certainty_sum": np.sum([p["certainty_sum"] for p in parts], axis=0).tolist(),
        "certainty_histogram": np.sum([p["certainty_histogram"] for p in parts], axis=0).astype(int).tolist(),
        "basis": basis or first.get("basis", ""),
    }
