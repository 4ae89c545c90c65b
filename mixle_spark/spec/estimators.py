"""Estimator specs (JSON) -> estimators: :func:`estimator_from_spec`, with the ``k`` shorthands.

>>> estimator = estimator_from_spec(
...     {"type": "mixture", "k": 5,
...      "component": {"type": "record", "fields": {
...          "amount": "log_gaussian",
...          "channel": "categorical",
...          "n_items": "poisson",
...          "tags": {"type": "sequence", "estimator": "categorical", "len_estimator": "poisson"}}}})
>>> len(estimator.estimators), sorted(estimator.estimators[0].fields)
(5, ['amount', 'channel', 'n_items', 'tags'])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mixle_spark.stats  # noqa: F401  (registers every family)
from mixle_spark.errors import SpecError, TooLargeError
from mixle_spark.spec.json_text import check_nesting
from mixle_spark.stats.base import Estimator, estimator_from_dict

__all__ = ["MAX_COMPONENTS", "MAX_SPEC_NODES", "estimator_from_spec"]

MAX_COMPONENTS = 100_000
"""Most components (or hidden states) a spec's ``k`` may ask for; more is refused before anything is
built (the memory a fit needs for its components is checked against the data when it starts)."""
MAX_SPEC_NODES = 1_000_000
"""Most components a spec may expand to, nested ones counted in every copy (k=1000 of k=1000 is
10^6); more is refused before any is built."""


# Families with a "K copies of one spec" shorthand: type -> (list key, copy key).
_SHORTHANDS = {"mixture": ("components", "component"), "hidden_markov": ("estimators", "emission")}


def _expand_shorthand(spec: Any) -> Any:
    """Expand ``{"type": "mixture", "k": K, "component": C}`` into K copies of C (and
    ``{"type": "hidden_markov", "k": K, "emission": E}`` into K emission estimators), recursively."""
    if isinstance(spec, list):
        return [_expand_shorthand(s) for s in spec]
    if not isinstance(spec, Mapping):
        return spec
    out = {k: _expand_shorthand(v) for k, v in spec.items()}
    family = str(out.get("type", "")).lower()
    if family in _SHORTHANDS and ("k" in out or _SHORTHANDS[family][1] in out):
        many, one = _SHORTHANDS[family]
        if "k" not in out or one not in out:
            raise SpecError(f"{family} shorthand needs both 'k' and '{one}'")
        if many in out:
            raise SpecError(f"{family} spec: give either '{many}' or 'k' with '{one}', not both")
        k = out.pop("k")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise SpecError(f"{family} spec: k must be a positive integer, got {k!r}")
        if k > MAX_COMPONENTS:
            raise TooLargeError(
                f"{family} spec: k = {k:,} is more than the {MAX_COMPONENTS:,} components allowed"
            )
        out[many] = [out.pop(one)] * k
    return out


def estimator_from_spec(spec: Mapping[str, Any] | str) -> Estimator:
    """Build an estimator from a spec dict or family name (see module docstring)."""
    check_nesting(spec, "the spec", TooLargeError)
    expanded = _expand_shorthand(spec)
    nodes = _spec_nodes(expanded, {})
    if nodes > MAX_SPEC_NODES:  # shorthands inside shorthands multiply: k=1000 of k=1000 is 10^6
        raise TooLargeError(
            f"the spec expands to {nodes:,} components (its k shorthands multiply); the limit is "
            f"{MAX_SPEC_NODES:,}"
        )
    return estimator_from_dict(expanded)


def _spec_nodes(spec: Any, seen: dict[int, int]) -> int:
    """Entries of lists (components, states: what a shorthand copies) in an expanded spec, every copy
    counted with what it holds; the copies share one object, measured once (``seen``), so this is
    fast whatever k is."""
    known = seen.get(id(spec))
    if known is not None:
        return known
    if isinstance(spec, Mapping):
        count = sum(_spec_nodes(v, seen) for v in spec.values())
    elif isinstance(spec, list | tuple):
        count = sum(1 + _spec_nodes(v, seen) for v in spec)
    else:
        count = 0
    seen[id(spec)] = count
    return count
