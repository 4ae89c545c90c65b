"""A model tree's independent units and their cost: what an in-process fold threads.

A mixture's components, a record's or composite's fields are independent units (an *axis*); each
family says how it decomposes (:func:`register_decomposition`; unknown families fall back to a scan
of their attributes). Work is a FLOP proxy of scoring one row (:func:`subtree_work`). Splitting an
axis of units with works ``w`` over ``P`` workers removes ``sum(w) - max(max(w), sum(w) / P)``
of serial work (:func:`axis_benefit`); :func:`threaded_nodes` picks every node tied at the best.

The threaded E-step (:mod:`mixle_spark.parallel.backends.model_parallel`) reads this at fit time;
the advisory planner (:mod:`mixle_spark.parallel.planning.model_decomposition`) builds its byte
sizes, cuts and device plans on it. Nothing here imports the planner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from enum import Enum
from typing import Any

import numpy as np

from mixle_spark.stats.base import Distribution
from mixle_spark.stats.composite import CompositeDistribution
from mixle_spark.stats.mixture import MixtureDistribution
from mixle_spark.stats.optional import OptionalDistribution
from mixle_spark.stats.record import RecordDistribution
from mixle_spark.stats.sequence import SequenceDistribution

__all__ = [
    "DecompositionAxis",
    "ParallelAxisKind",
    "Reduction",
    "axis_benefit",
    "axis_nodes",
    "axis_reduction",
    "check_positive_int",
    "cost_children",
    "join_path",
    "model_attributes",
    "named_children",
    "own_work",
    "parallel_units",
    "register_decomposition",
    "subtree_work",
    "threaded_nodes",
    "tied_best",
    "walk_unique",
]

_TIE_RTOL = 1e-9


class DecompositionAxis(str, Enum):
    """The axis along which a node's children are independent units (a ``str``, like a StrEnum)."""

    NONE = "none"
    COMPONENT = "component"
    FACTOR = "factor"
    SEQUENCE = "sequence"
    STATE = "state"
    TOPIC = "topic"

    def __str__(self) -> str:
        return self.value


ParallelAxisKind = DecompositionAxis
"""Alias of :class:`DecompositionAxis`."""


class Reduction(str, Enum):
    """How the per-unit results of a split axis are combined."""

    SUM = "sum"
    LOGSUMEXP_RESPONSIBILITY = "logsumexp_responsibility"
    REPLICATE = "replicate"

    def __str__(self) -> str:
        return self.value


def axis_reduction(axis: DecompositionAxis) -> Reduction:
    """The reduction that recombines units of ``axis``: responsibilities for latent-choice axes
    (COMPONENT, STATE, TOPIC), a sum of log-densities for FACTOR and SEQUENCE, REPLICATE for NONE."""
    if axis is DecompositionAxis.NONE:
        return Reduction.REPLICATE
    latent = axis in (DecompositionAxis.COMPONENT, DecompositionAxis.STATE, DecompositionAxis.TOPIC)
    return Reduction.LOGSUMEXP_RESPONSIBILITY if latent else Reduction.SUM


# --- the family registry ---------------------------------------------------------------------------
NamedChildren = Callable[[Any], Sequence[tuple[str, Any]]]
_RULES: dict[type, tuple[NamedChildren, DecompositionAxis]] = {}


def register_decomposition(
    cls: type, children: NamedChildren, axis: DecompositionAxis = DecompositionAxis.NONE
) -> None:
    """Declare how a distribution family decomposes.

    Parameters
    ----------
    cls : type
        The distribution class (subclasses inherit the rule).
    children : callable
        ``children(dist)`` returns the owned child distributions as ``(role, child)`` pairs, in order;
        the role names the child in paths (``"components/2"``, ``"fields/age"``).
    axis : DecompositionAxis
        The axis along which *all* children are independent units, or NONE when the node is a wrapper
        that cannot be split (its children are still costed and searched).
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_decomposition: expected a class, got {cls!r}")
    _RULES[cls] = (children, DecompositionAxis(axis))


def _rule_for(dist: Any) -> tuple[NamedChildren, DecompositionAxis] | None:
    return next((_RULES[k] for k in type(dist).__mro__ if k in _RULES), None)


def _indexed(role: str, items: Sequence[Any]) -> list[tuple[str, Any]]:
    return [(f"{role}/{i}", c) for i, c in enumerate(items)]


register_decomposition(
    MixtureDistribution, lambda d: _indexed("components", d.components), DecompositionAxis.COMPONENT
)
register_decomposition(
    RecordDistribution, lambda d: [(f"fields/{k}", v) for k, v in d.fields.items()], DecompositionAxis.FACTOR
)
register_decomposition(
    CompositeDistribution, lambda d: _indexed("components", d.components), DecompositionAxis.FACTOR
)
register_decomposition(OptionalDistribution, lambda d: [("dist", d.dist)])
register_decomposition(
    SequenceDistribution,
    lambda d: [("dist", d.dist)] + ([] if d.len_dist is None else [("len_dist", d.len_dist)]),
)

_NOT_PARAMETERS = frozenset({"fit_result"})  # bookkeeping set by optimize, not model state


def model_attributes(dist: Any) -> Iterator[tuple[str, Any]]:
    """``(name, value)`` of each attribute of ``dist`` that may hold parameters or children."""
    for name, value in getattr(dist, "__dict__", {}).items():
        if name not in _NOT_PARAMETERS:
            yield name, value


def _reflected_children(dist: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, value in model_attributes(dist):
        if isinstance(value, Distribution):
            out.append((name, value))
        elif isinstance(value, (list, tuple)):
            out.extend((f"{name}/{i}", v) for i, v in enumerate(value) if isinstance(v, Distribution))
        elif isinstance(value, dict):
            out.extend((f"{name}/{k}", v) for k, v in value.items() if isinstance(v, Distribution))
    return out


def named_children(dist: Any) -> list[tuple[str, Any]]:
    """``(role, child)`` for each child distribution of ``dist`` (its registered rule, else every
    attribute that is a Distribution or a list/tuple/dict of them), ``None`` children left out."""
    rule = _rule_for(dist)
    pairs = rule[0](dist) if rule is not None else _reflected_children(dist)
    return [(role, child) for role, child in pairs if child is not None]


def cost_children(dist: Any) -> tuple[Any, ...]:
    """All child distributions a node owns (mixture components, record fields in order, composite
    components, the optional's child, a sequence's element and length distributions); for an
    unregistered family, every attribute that is a Distribution or a list/tuple/dict of them."""
    return tuple(child for _, child in named_children(dist))


def parallel_units(dist: Any) -> tuple[DecompositionAxis, tuple[Any, ...]]:
    """``(axis, units)`` when ``dist`` can be split into independent units, else ``(NONE, ())``.

    A mixture splits along COMPONENT (reduction LOGSUMEXP_RESPONSIBILITY), a record or composite along
    FACTOR (reduction SUM); wrappers and leaves do not split."""
    rule = _rule_for(dist)
    if rule is None or rule[1] is DecompositionAxis.NONE:
        return DecompositionAxis.NONE, ()
    return rule[1], cost_children(dist)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_))


def own_work(dist: Any) -> float:
    """The node's own share of :func:`subtree_work`: 1 + its array elements + its numeric scalars."""
    work = 1.0
    for _, value in model_attributes(dist):
        if isinstance(value, np.ndarray):
            work += float(value.size)
        elif _is_number(value):
            work += 1.0
    return work


def walk_unique(dist: Any, seen: set[int]) -> Iterator[Any]:
    """Every node of the subtree once (by identity; ``seen`` collects the ids), parents first."""
    if id(dist) in seen:
        return
    seen.add(id(dist))
    yield dist
    for child in cost_children(dist):
        yield from walk_unique(child, seen)


def subtree_work(dist: Any) -> float:
    """FLOP proxy of scoring one row: over the subtree, ``1 + #array elements + #numeric scalar
    attributes`` per node, with a subtree shared by several parents counted once."""
    return float(sum(own_work(node) for node in walk_unique(dist, set())))


def join_path(path: str, role: str) -> str:
    """The path of a child in ``role`` under the node at ``path`` (``/`` separated)."""
    return f"{path.rstrip('/')}/{role}"


def check_positive_int(value: Any, name: str, where: str, *, allow_none: bool) -> None:
    """Raise ``ValueError`` naming ``where``, ``name`` and ``value`` unless it is a positive int."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        expected = "None or a positive integer" if allow_none else "a positive integer"
        raise ValueError(f"{where}: {name} must be {expected}, got {value!r}")


# --- which nodes to thread ------------------------------------------------------------------------
def axis_nodes(dist: Any) -> list[tuple[str, Any, DecompositionAxis, tuple[Any, ...]]]:
    """``(path, node, axis, units)`` for every node with at least 2 units, in pre-order (root first);
    a subtree shared by several parents is visited once."""
    out: list[tuple[str, Any, DecompositionAxis, tuple[Any, ...]]] = []
    seen: set[int] = set()

    def walk(node: Any, path: str) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        axis, units = parallel_units(node)
        if axis is not DecompositionAxis.NONE and len(units) >= 2:
            out.append((path, node, axis, units))
        for role, child in named_children(node):
            walk(child, join_path(path, role))

    walk(dist, "/")
    return out


def axis_benefit(unit_works: Sequence[float], num_workers: int | None = None) -> float:
    """Serial work removed by running units of ``unit_works`` on ``min(num_workers, units)`` workers
    (all units when ``num_workers`` is None); a unit cannot be split, so the heaviest one bounds it."""
    total = float(sum(unit_works))
    p = len(unit_works) if num_workers is None else max(1, min(int(num_workers), len(unit_works)))
    return total - max(max(unit_works), total / p)


def tied_best(benefits: Sequence[float]) -> list[int]:
    """Indices of the benefits tied at the maximum within 1e-9 relative; none when it is <= 0."""
    if not benefits:
        return []
    best = max(benefits)
    if best <= 0.0:
        return []
    return [i for i, b in enumerate(benefits) if best - b <= _TIE_RTOL * abs(best)]


def threaded_nodes(dist: Any, num_workers: int | None = None) -> tuple[Any, ...]:
    """The nodes an in-process fold with ``num_workers`` threads (None: one per unit) threads: every
    axis tied at the best :func:`axis_benefit`; below them it recurses serially."""
    check_positive_int(num_workers, "num_workers", "threaded_nodes", allow_none=True)
    nodes = axis_nodes(dist)
    benefits = [axis_benefit([subtree_work(u) for u in units], num_workers) for *_, units in nodes]
    return tuple(nodes[i][1] for i in tied_best(benefits))
