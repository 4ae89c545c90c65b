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

__all__ = ["TOP_TRANSITIONS", "describe_parameters", "flatten_parameters", "transitions_text"]


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
        elif family in _CHAINS and key in ("initial", "transitions"):
            yield path, family, key, _initial_text(value) if key == "initial" else transitions_text(value)
        else:
            yield path, family, key, _summarise(key, value)


_CHAINS = ("markov_chain", "hidden_markov")

TOP_TRANSITIONS = 3
"""Transitions shown from each state, the most probable first."""

_STATES_SHOWN = 12
"""States whose transitions are shown before the rest are counted."""


def _pairs(value: Any) -> list[tuple[Any, float]]:
    """``[label, p]`` pairs (a Markov chain's), or a vector indexed by state (a hidden Markov model's)."""
    if all(isinstance(kv, list) and len(kv) == 2 and not isinstance(kv[1], list) for kv in value):
        return [(label, float(p)) for label, p in value]
    return [(i, float(p)) for i, p in enumerate(value)]


def _initial_text(value: Any) -> str:
    """The first state's most probable values: ``"home 0.60, cart 0.40"``."""
    pairs = sorted((kv for kv in _pairs(value) if kv[1] > 0), key=lambda kv: -kv[1])
    more = f", … ({len(pairs) - 5} more)" if len(pairs) > 5 else ""
    return ", ".join(f"{label} {p:.2f}" for label, p in pairs[:5]) + more


def transitions_text(value: Any) -> str:
    """A chain's transitions as its most probable moves from each state, rounded, states in the
    spec's order: ``"cart -> checkout 0.42, cart -> home 0.31, home -> home 0.70"``.

    ``value`` is a Markov chain's ``transitions`` (``[[state, [[next, p], ...]], ...]``) or a hidden
    Markov model's matrix (rows: from state ``i``). At most :data:`TOP_TRANSITIONS` moves per state
    are shown (``…`` marks more).

    >>> transitions_text([[0.9, 0.1], [0.25, 0.75]])
    '0 -> 0 0.90, 0 -> 1 0.10, 1 -> 1 0.75, 1 -> 0 0.25'
    """
    rows = [(i, row) for i, row in enumerate(value)]
    if value and all(isinstance(r, list) and len(r) == 2 and isinstance(r[1], list) for r in value):
        if all(isinstance(kv, list) and len(kv) == 2 for r in value for kv in r[1]):
            rows = [(state, row) for state, row in value]
    parts = []
    for state, row in rows[:_STATES_SHOWN]:
        moves = sorted((kv for kv in _pairs(row) if kv[1] > 0), key=lambda kv: -kv[1])
        shown = [f"{state} -> {target} {p:.2f}" for target, p in moves[:TOP_TRANSITIONS]]
        parts.append(", ".join(shown) + (", …" if len(moves) > TOP_TRANSITIONS else ""))
    more = f" … ({len(rows) - _STATES_SHOWN} more states)" if len(rows) > _STATES_SHOWN else ""
    return ", ".join(p for p in parts if p) + more


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
