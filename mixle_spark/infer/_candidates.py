"""Which families a column may be, from its profile: the candidate table of ``infer_spec``.

A candidate is an estimator spec dict; one naming a family that is not registered is left out
(:func:`candidates`), so a family joins the table's choices as soon as its module registers it.
The table and its rules are described in docs/infer-spec.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mixle_spark.infer._profile import DISTINCT_CAP, ColumnProfile

__all__ = [
    "COUNT_FAMILIES",
    "POSITIVE_FAMILIES",
    "REAL_FAMILIES",
    "UNIT_FAMILIES",
    "ZERO_FORMS",
    "ColumnPlan",
    "candidates",
    "label_of",
    "plan_column",
]

REAL_FAMILIES = (
    "gaussian",
    "student_t",
    "laplace",
    "logistic",
    "gumbel",
    "skew_normal",
    "ex_gaussian",
    "uniform",
)
"""Any real number."""
POSITIVE_FAMILIES = (
    "log_gaussian",
    "gamma",
    "exponential",
    "weibull",
    "inverse_gaussian",
    "rayleigh",
    "half_normal",
    "nakagami",
    "inverse_gamma",
    "pareto",
)
"""Positive numbers (and, for those whose support holds it, zero)."""
UNIT_FAMILIES = ("beta",)
"""Numbers strictly between 0 and 1."""
COUNT_FAMILIES = ("poisson", "negative_binomial", "geometric", "binomial", "log_series")
"""Non-negative integers (geometric and log_series from 1: refused by a column holding zeros)."""
ZERO_BASES = ("poisson", "negative_binomial")
"""The count families put under :data:`ZERO_FORMS` when a count column has zeros in excess."""
ZERO_FORMS = ("zero_inflated", "hurdle")
"""Combinators adding mass at zero: ``{"type": FORM, "estimator": E}``."""
SIGNED_COUNT_FAMILIES = ("skellam",)
"""Integers of either sign."""

INTEGER_CATEGORICAL_MAX_LEVELS = 64
"""An integer column spanning at most this many values is also tried as ``integer_categorical``."""
ZERO_MASS_SHARE = 0.01
"""A non-negative float column with at least this share of exact zeros has a point mass at zero."""
ID_MIN_ROWS = 100
"""A string or integer column whose sampled values all differ (over at least this many rows) is an
id: left out of the spec."""


@dataclass(frozen=True)
class ColumnPlan:
    """What to try for a column: ``specs`` (candidate estimator specs, registered families only),
    ``what`` (the data, in words), ``notes`` (rules applied, for the reason line) and, when the column
    is left out of the spec, ``ignored`` (why)."""

    specs: tuple[dict[str, Any], ...] = ()
    what: str = ""
    notes: tuple[str, ...] = ()
    ignored: str | None = None


def label_of(spec: dict[str, Any]) -> str:
    """A spec in one short phrase: ``hurdle(weibull)``, ``sequence(gaussian, length poisson)``."""
    kind = str(spec["type"])
    if kind == "sequence":
        inner = label_of(spec["estimator"])
        return f"sequence({inner}, length {label_of(spec['len_estimator'])})"
    if "estimator" in spec:
        return f"{kind}({label_of(spec['estimator'])})"
    return kind


def _families(spec: dict[str, Any]) -> Iterable[str]:
    yield str(spec["type"])
    for key in ("estimator", "len_estimator"):
        if key in spec:
            yield from _families(spec[key])


def candidates(specs: Iterable[dict[str, Any]], registered: Iterable[str]) -> tuple[dict[str, Any], ...]:
    """The specs all of whose families are registered (in their order, without repeats)."""
    known = set(registered)
    out: list[dict[str, Any]] = []
    for spec in specs:
        if all(name in known for name in _families(spec)) and spec not in out:
            out.append(spec)
    return tuple(out)


def _typed(names: Iterable[str]) -> list[dict[str, Any]]:
    return [{"type": name} for name in names]


def _percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%"


def _zeros_in_excess(profile: ColumnProfile) -> bool:
    """More zeros than a Poisson of the column's mean gives, by three standard deviations of that
    count (so sampling noise alone does not add the zero forms)."""
    p0 = math.exp(-profile.mean)
    expected = profile.values * p0
    return profile.zeros > expected + 3.0 * math.sqrt(expected * (1.0 - p0)) + 1.0


def _count_plan(profile: ColumnProfile, registered: set[str]) -> ColumnPlan:
    """A non-negative integer column: the count families, integer_categorical over a short range,
    and the zero-inflated / hurdle forms when zeros exceed a Poisson's share at the column's mean."""
    specs = _typed(COUNT_FAMILIES)
    notes: list[str] = []
    levels = profile.high - profile.low + 1
    if levels <= INTEGER_CATEGORICAL_MAX_LEVELS:
        specs.append({"type": "integer_categorical"})
    if _zeros_in_excess(profile):
        forms = [{"type": form, "estimator": {"type": base}} for form in ZERO_FORMS for base in ZERO_BASES]
        if candidates(forms, registered):
            specs.extend(forms)
            notes.append(
                f"{_percent(profile.zeros, profile.values)} zeros, above a Poisson's share -> "
                "zero-inflated / hurdle tried"
            )
    return ColumnPlan(candidates(specs, registered), "non-negative integers", tuple(notes))


def _float_plan(profile: ColumnProfile, registered: set[str]) -> ColumnPlan:
    """A float column: real-line families, positive ones when no value is negative (under hurdle
    when zeros form a point mass), beta inside (0, 1)."""
    if profile.negatives:
        return ColumnPlan(candidates(_typed(REAL_FAMILIES), registered), "real numbers")
    zero_share = profile.zeros / profile.values
    if profile.zeros and zero_share >= ZERO_MASS_SHARE:
        forms = [{"type": "hurdle", "estimator": {"type": name}} for name in POSITIVE_FAMILIES]
        found = candidates(forms, registered)
        share = _percent(profile.zeros, profile.values)
        if found:
            return ColumnPlan(found, "non-negative numbers", (f"{share} zeros -> hurdle",))
        fallback = candidates(_typed((*POSITIVE_FAMILIES, *REAL_FAMILIES)), registered)
        return ColumnPlan(fallback, "non-negative numbers", (f"{share} zeros, no hurdle family registered",))
    specs = _typed((*POSITIVE_FAMILIES, *REAL_FAMILIES))
    if 0.0 < profile.low and profile.high < 1.0:
        specs = _typed(UNIT_FAMILIES) + specs
    return ColumnPlan(candidates(specs, registered), "positive numbers" if profile.low > 0 else "numbers")


def _looks_like_id(profile: ColumnProfile, sampled: int, sampled_distinct: int) -> bool:
    everywhere = profile.n_distinct is None or profile.n_distinct == profile.values
    return everywhere and sampled >= ID_MIN_ROWS and sampled_distinct == sampled


def plan_column(
    profile: ColumnProfile, registered: Iterable[str], sampled: int = 0, sampled_distinct: int = 0
) -> ColumnPlan:
    """The candidates for a column of this profile (``sampled`` values in the sample, of which
    ``sampled_distinct`` differ), or why it is left out."""
    known = set(registered)
    if profile.values == 0:
        return ColumnPlan(ignored="every value is null")
    if profile.kind == "list":
        return ColumnPlan(what="lists")  # the caller plans its elements and lengths
    if profile.kind in ("float", "integer") and profile.nonfinite:
        return ColumnPlan(ignored=f"{profile.nonfinite} infinite values")
    if profile.n_distinct == 1:
        if profile.kind in ("float", "integer") and "point_mass" in known:
            return ColumnPlan(({"type": "point_mass"},), "one value")
        return ColumnPlan(candidates(_typed(("categorical",)), known), "one value")
    if profile.kind == "boolean":
        return ColumnPlan(candidates(_typed(("bernoulli", "categorical")), known)[:1], "booleans")
    if profile.kind == "string":
        if profile.n_distinct is None:
            return ColumnPlan(ignored=f"more than {DISTINCT_CAP} distinct labels: high-cardinality")
        if _looks_like_id(profile, sampled, sampled_distinct):
            return ColumnPlan(ignored="a different label on every sampled row: an id")
        return ColumnPlan(candidates(_typed(("categorical",)), known), "labels")
    if profile.kind == "integer" or (profile.kind == "float" and profile.whole):
        if _looks_like_id(profile, sampled, sampled_distinct):
            return ColumnPlan(ignored="a different integer on every sampled row: an id")
        if profile.negatives == 0:
            return _count_plan(profile, known)
        specs = _typed(SIGNED_COUNT_FAMILIES)
        if profile.high - profile.low + 1 <= INTEGER_CATEGORICAL_MAX_LEVELS:
            specs.append({"type": "integer_categorical"})
        specs += _typed(REAL_FAMILIES)
        return ColumnPlan(candidates(specs, known), "integers")
    if profile.kind == "float":
        return _float_plan(profile, known)
    return ColumnPlan(ignored="a type no family reads (dates, structs, maps, binary)")
