"""A model's parameters as short text: the report's parameter table (:mod:`mixle_spark.report`) and the
segment profile's cells for families it has no closed form for (:mod:`mixle_spark.profile`) read them
from here.

>>> describe_parameters({"type": "gaussian", "mu": 0.5, "sigma2": 2.0})
'mu 0.5; sigma2 2'
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from mixle_spark.report._html import _num, _numeric_array

__all__ = ["describe_parameters", "flatten_parameters"]


def describe_parameters(spec: Mapping[str, Any]) -> str:
    """A model's (or field's) parameters as one short text: ``"mu 0.5; sigma2 2"``."""
    parts = flatten_parameters(spec)
    return "; ".join(f"{path + ' ' if path else ''}{key} {text}" for path, _, key, text in parts)


def flatten_parameters(spec: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, str, str, str]]:
    """``(field path, family, parameter, value text)`` for every leaf parameter of ``spec``."""
    family = str(spec.get("type", "?"))
    for key, value in spec.items():
        if key == "type":
            continue
        if key == "fields" and isinstance(value, Mapping):
            for name, child in value.items():
                yield from flatten_parameters(child, f"{path}.{name}" if path else str(name))
        elif isinstance(value, Mapping) and "type" in value:
            yield from flatten_parameters(value, f"{path}.{key}" if path else key)
        elif isinstance(value, list) and value and all(isinstance(c, Mapping) and "type" in c for c in value):
            for i, child in enumerate(value):
                yield from flatten_parameters(child, f"{path}.{key}[{i}]" if path else f"{key}[{i}]")
        else:
            yield path, family, key, _summarise(key, value)


def _vector(values: np.ndarray, limit: int = 8) -> str:
    shown = ", ".join(_num(v, 4) for v in values[: limit if len(values) <= limit else 6])
    return f"[{shown}]" if len(values) <= limit else f"[{shown}, … ({len(values)} values)]"


def _summarise(key: str, value: Any) -> str:
    """A short text for one parameter value (pmaps: top labels; matrices: shape and diagonal)."""
    if (
        key == "pmap"
        and isinstance(value, list)
        and all(isinstance(kv, list) and len(kv) == 2 for kv in value)
    ):
        top = sorted(value, key=lambda kv: -float(kv[1]))[:5]
        more = f", … ({len(value) - 5} more)" if len(value) > 5 else ""
        return ", ".join(f"{label!r}: {float(p):.3f}" for label, p in top) + more
    array = _numeric_array(value)
    if array is not None and array.ndim == 1:
        return _vector(array)
    if array is not None:
        rows, cols = array.shape
        if rows != cols:
            return f"{rows}×{cols} matrix"
        text = f"{rows}×{cols}, diagonal {_vector(np.diag(array))}"
        diag = np.sqrt(np.abs(np.diag(array)))
        if rows > 1 and "cov" in key and np.all(diag > 0):
            corr = array / np.outer(diag, diag)
            text += f", max |correlation| {np.max(np.abs(corr[~np.eye(rows, dtype=bool)])):.3f}"
        return text
    if isinstance(value, (bool, int, float, np.number)) or value is None:
        return _num(value, 4)
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 120 else text[:117] + "…"
