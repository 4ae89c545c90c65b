"""Summaries of fitted models (for jobs and notebooks), built from ``to_dict()``: a plain-text
description, the number of free parameters (asked of the model), and information criteria (BIC / AIC).

The counting and the criteria are the statistics layer's (:mod:`mixle_spark.stats.criteria`, which
the families use themselves); they are importable from here as well."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mixle_spark.stats.base import Distribution
from mixle_spark.stats.criteria import count_free_parameters, information_criteria

__all__ = [
    "TIMINGS",
    "count_free_parameters",
    "describe_model",
    "information_criteria",
    "labelled_timings",
    "parameters_warning",
    "timings_line",
]

TIMINGS = {
    "startup": "start-up",
    "read": "read",
    "encode": "encode",
    "seeding": "seeding",
    "em": "EM iterations",
    "scoring": "scoring",
    "report": "report",
    "total": "total",
}
"""The one timing vocabulary of a fit (em_fit's ``summary.json`` ``timings`` and its stderr line, the
report's overview, ``MixleModel.summary.timings``): key -> label, in the order a fit spends them. Each
is measured once: ``startup`` starting Spark, ``read`` opening the input (a Delta table's snapshot and
the file listing), ``encode`` the validating / encoding pass, ``seeding`` building the starting model
(k-means|| or random rows; several trials or candidates seed together), ``em`` the EM iterations and
the final scoring pass, ``scoring`` the hard assignment of every row for the segment profile,
``report`` writing the report, ``total`` all of it. A fit that has no such step leaves its key out."""


def labelled_timings(timings: Mapping[str, float]) -> list[tuple[str, float]]:
    """``(label, seconds)`` of ``timings`` in the vocabulary's order and labels; keys outside it
    (an older summary's) follow under their own names.

    >>> labelled_timings({"total": 3.0, "encode": 1.25, "em": 1.5})
    [('encode', 1.25), ('EM iterations', 1.5), ('total', 3.0)]
    """
    known = [(label, timings[key]) for key, label in TIMINGS.items() if key in timings]
    return known + [(key, value) for key, value in timings.items() if key not in TIMINGS]


def timings_line(timings: Mapping[str, float]) -> str:
    """``timings`` in the vocabulary's order and labels, one line: ``"read 0.4s, encode 1.2s, ..."``.

    >>> timings_line({"total": 3.0, "encode": 1.25, "em": 1.5})
    'encode 1.2s, EM iterations 1.5s, total 3.0s'
    """
    return ", ".join(f"{label} {seconds:.1f}s" for label, seconds in labelled_timings(timings))


def _number(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _params(spec: dict[str, Any]) -> str:
    parts = []
    for key, value in spec.items():
        if key == "type":
            continue
        if key == "pmap" and isinstance(value, list):
            top = sorted(value, key=lambda kv: -kv[1])[:4]
            more = f", ... {len(value) - 4} more" if len(value) > 4 else ""
            parts.append("{" + ", ".join(f"{k!r}: {p:.3f}" for k, p in top) + more + "}")
        elif isinstance(value, list) and value and all(isinstance(x, (int, float)) for x in value):
            shown = ", ".join(_number(x) for x in value[:6]) + (", ..." if len(value) > 6 else "")
            parts.append(f"{key}=[{shown}]")
        elif isinstance(value, list):
            parts.append(f"{key}=<{len(value)} rows>")
        elif isinstance(value, dict):
            parts.append(f"{key}={_line(value)}")
        else:
            parts.append(f"{key}={_number(value)}")
    return ", ".join(parts)


def _line(spec: dict[str, Any]) -> str:
    return f"{spec.get('type', '?')}({_params(spec)})"


def _describe(spec: dict[str, Any], indent: str) -> list[str]:
    kind = spec.get("type")
    if kind == "mixture":
        lines = []
        for k, (w, comp) in enumerate(zip(spec["w"], spec["components"], strict=True)):
            lines.append(f"{indent}component {k}  weight {w:.4f}")
            lines += _describe(comp, indent + "    ")
        return lines
    if kind == "record":
        lines = []
        for name, child in spec["fields"].items():
            if child.get("type") in ("record", "mixture"):
                lines.append(f"{indent}{name}:")
                lines += _describe(child, indent + "    ")
            else:
                lines.append(f"{indent}{name}: {_line(child)}")
        return lines
    return [indent + _line(spec)]


def describe_model(model: Distribution) -> str:
    """A multi-line, human-readable summary: mixture weights, then each field's parameters."""
    return "\n".join(_describe(model.to_dict(), ""))


def _field_parameters(model: Distribution) -> dict[str, int]:
    """Free parameters per record field, summed over a mixture's components (empty for other models)."""
    parts = getattr(model, "components", None)
    records = parts if isinstance(parts, list | tuple) else [model]
    counts: dict[str, int] = {}
    for record in records:
        fields = getattr(record, "fields", None)
        if not isinstance(fields, Mapping):
            return {}
        for name, dist in fields.items():
            counts[name] = counts.get(name, 0) + dist.n_free_parameters()
    return counts


def parameters_warning(model: Distribution, n_parameters: int, n_rows: float) -> str | None:
    """A warning when ``model`` has more free parameters than ``n_rows``: such a fit describes its
    rows rather than a population (a label column with nearly as many values as rows, say); it names
    the field holding most of them when the model is a record or a mixture of records.

    >>> from mixle_spark.stats import CategoricalDistribution, RecordDistribution
    >>> ids = RecordDistribution({"customer": CategoricalDistribution({f"id{i}": 0.25 for i in range(4)})})
    >>> print(parameters_warning(ids, 3, 2))  # doctest: +NORMALIZE_WHITESPACE
    the model has 3 free parameters for 2 rows (field 'customer' has 3 of them): it describes these
    rows, not a population
    """
    if n_parameters <= n_rows:
        return None
    fields = _field_parameters(model)
    name = max(fields, key=lambda f: fields[f]) if fields else None
    where = f" (field {name!r} has {fields[name]:,} of them)" if name is not None else ""
    return (
        f"the model has {n_parameters:,} free parameters for {n_rows:,.0f} rows{where}: it describes "
        "these rows, not a population"
    )
