"""Advisory model decomposition: which axis of a model tree could be split across workers, and how.

Nothing here executes anything. The planner walks a distribution tree over its *owned* children
(:func:`cost_children`), sizes every subtree in a FLOP proxy (:func:`subtree_work`) and in bytes
(:func:`subtree_bytes`), lists every shardable axis anywhere in the tree (:func:`tree_axes`) and picks
the one whose split removes the most serial work (:func:`best_parallel_axis`)::

    benefit = total_work - max(max_unit_work, total_work / P),   P = min(num_workers, num_units)

:func:`threaded_nodes` gives every node tied at the best benefit (what an in-process component-parallel
fold threads), and :func:`decompose_model` turns the best axis into contiguous, throughput-weighted cuts
over a device budget, or explains why the model should simply be replicated (data-parallel).

Families are described by a small registry (:func:`register_decomposition`); the built-in combinators
are registered below and unknown families fall back to a reflective scan of their attributes.

>>> from mixle_spark.stats.gaussian import GaussianDistribution
>>> from mixle_spark.stats.mixture import MixtureDistribution
>>> mix = MixtureDistribution([GaussianDistribution(float(k), 1.0) for k in range(4)], [0.25] * 4)
>>> axis, units = parallel_units(mix)
>>> str(axis), len(units)
('component', 4)
>>> best_parallel_axis(mix, 2).benefit(2)
8.0
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from mixle_spark.parallel.planning._cuts import (
    check_positive_int,
    cost_balanced_cuts,
    min_known_memory,
    resource_devices,
)
from mixle_spark.parallel.planning._sizing import estimate_nbytes
from mixle_spark.stats.base import Distribution
from mixle_spark.stats.composite import CompositeDistribution
from mixle_spark.stats.mixture import MixtureDistribution
from mixle_spark.stats.optional import OptionalDistribution
from mixle_spark.stats.record import RecordDistribution
from mixle_spark.stats.sequence import SequenceDistribution

__all__ = [
    "AxisCandidate",
    "DecompositionAxis",
    "ModelDecomposition",
    "NodeSize",
    "ParallelAxisKind",
    "Reduction",
    "axis_reduction",
    "best_parallel_axis",
    "check_positive_int",
    "cost_balanced_cuts",
    "cost_children",
    "decompose_model",
    "min_known_memory",
    "parallel_units",
    "register_decomposition",
    "resource_devices",
    "size_model_tree",
    "subtree_bytes",
    "subtree_work",
    "threaded_axes",
    "threaded_nodes",
    "tree_axes",
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


def _attributes(dist: Any) -> Iterator[tuple[str, Any]]:
    for name, value in getattr(dist, "__dict__", {}).items():
        if name not in _NOT_PARAMETERS:
            yield name, value


def _reflected_children(dist: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, value in _attributes(dist):
        if isinstance(value, Distribution):
            out.append((name, value))
        elif isinstance(value, (list, tuple)):
            out.extend((f"{name}/{i}", v) for i, v in enumerate(value) if isinstance(v, Distribution))
        elif isinstance(value, dict):
            out.extend((f"{name}/{k}", v) for k, v in value.items() if isinstance(v, Distribution))
    return out


def _named_children(dist: Any) -> list[tuple[str, Any]]:
    rule = _rule_for(dist)
    pairs = rule[0](dist) if rule is not None else _reflected_children(dist)
    return [(role, child) for role, child in pairs if child is not None]


def cost_children(dist: Any) -> tuple[Any, ...]:
    """All child distributions a node owns (mixture components, record fields in order, composite
    components, the optional's child, a sequence's element and length distributions); for an
    unregistered family, every attribute that is a Distribution or a list/tuple/dict of them."""
    return tuple(child for _, child in _named_children(dist))


def parallel_units(dist: Any) -> tuple[DecompositionAxis, tuple[Any, ...]]:
    """``(axis, units)`` when ``dist`` can be split into independent units, else ``(NONE, ())``.

    A mixture splits along COMPONENT (reduction LOGSUMEXP_RESPONSIBILITY), a record or composite along
    FACTOR (reduction SUM); wrappers and leaves do not split."""
    rule = _rule_for(dist)
    if rule is None or rule[1] is DecompositionAxis.NONE:
        return DecompositionAxis.NONE, ()
    return rule[1], cost_children(dist)


# --- sizing ---------------------------------------------------------------------------------------
def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_))


def _own_work(dist: Any) -> float:
    work = 1.0
    for _, value in _attributes(dist):
        if isinstance(value, np.ndarray):
            work += float(value.size)
        elif _is_number(value):
            work += 1.0
    return work


def _own_bytes(dist: Any) -> int:
    """Bytes of the node's own attributes (strict: an opaque attribute raises), children excluded."""
    total = 0
    for _, value in _attributes(dist):
        if isinstance(value, (list, tuple)):
            total += sum(estimate_nbytes(v) for v in value if not isinstance(v, Distribution))
        elif isinstance(value, dict):
            items = [(k, v) for k, v in value.items() if not isinstance(v, Distribution)]
            total += sum(estimate_nbytes(k) + estimate_nbytes(v) for k, v in items)
        elif not isinstance(value, Distribution):
            total += estimate_nbytes(value)
    return total


def _walk_unique(dist: Any, seen: set[int]) -> Iterator[Any]:
    if id(dist) in seen:
        return
    seen.add(id(dist))
    yield dist
    for child in cost_children(dist):
        yield from _walk_unique(child, seen)


def subtree_work(dist: Any) -> float:
    """FLOP proxy of scoring one row: over the subtree, ``1 + #array elements + #numeric scalar
    attributes`` per node, with a subtree shared by several parents counted once."""
    return float(sum(_own_work(node) for node in _walk_unique(dist, set())))


def subtree_bytes(dist: Any) -> int:
    """Parameter bytes of the subtree (:func:`~mixle_spark.parallel.planning.planner.estimate_nbytes` of every
    node's own attributes: arrays, numbers as 8 bytes, strings, containers), a shared subtree counted
    once.

    Raises
    ------
    UnknownMemoryFootprintError
        When a node holds an object that cannot be sized (a callable, a lock, ...)."""
    return int(sum(_own_bytes(node) for node in _walk_unique(dist, set())))


@dataclass(frozen=True)
class NodeSize:
    """Size of one node of a model tree; ``children`` omits subtrees already sized elsewhere."""

    path: str
    family: str
    axis: DecompositionAxis
    num_units: int
    own_bytes: int
    subtree_bytes: int
    own_work: float
    subtree_work: float
    children: tuple[NodeSize, ...] = ()


def _join(path: str, role: str) -> str:
    return f"{path.rstrip('/')}/{role}"


def size_model_tree(dist: Any, path: str = "/") -> NodeSize:
    """Size the whole tree below ``dist`` (root path ``"/"``); a shared subtree is sized once, under
    its first parent."""
    return _size(dist, path, set())


def _size(dist: Any, path: str, seen: set[int]) -> NodeSize:
    seen.add(id(dist))
    axis, units = parallel_units(dist)
    kids = tuple(
        _size(child, _join(path, role), seen)
        for role, child in _named_children(dist)
        if id(child) not in seen
    )
    own_b, own_w = _own_bytes(dist), _own_work(dist)
    return NodeSize(
        path=path,
        family=type(dist).__name__,
        axis=axis,
        num_units=len(units),
        own_bytes=own_b,
        subtree_bytes=own_b + sum(k.subtree_bytes for k in kids),
        own_work=own_w,
        subtree_work=own_w + sum(k.subtree_work for k in kids),
        children=kids,
    )


# --- axes -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AxisCandidate:
    """One shardable node of the tree, with the work and bytes of each of its units."""

    path: str
    node_id: int
    family: str
    axis: DecompositionAxis
    reduction: Reduction
    unit_works: tuple[float, ...]
    unit_bytes: tuple[int, ...]
    node: Any = field(default=None, compare=False, repr=False)

    @property
    def num_units(self) -> int:
        return len(self.unit_works)

    @property
    def total_work(self) -> float:
        return float(sum(self.unit_works))

    @property
    def total_bytes(self) -> int:
        return int(sum(self.unit_bytes))

    def benefit(self, num_workers: int | None = None) -> float:
        """Serial work removed by running the units on ``min(num_workers, num_units)`` workers (all
        units when ``num_workers`` is None); a unit cannot be split, so the heaviest one bounds it."""
        p = self.num_units if num_workers is None else max(1, min(int(num_workers), self.num_units))
        return self.total_work - max(max(self.unit_works), self.total_work / p)


def tree_axes(dist: Any) -> tuple[AxisCandidate, ...]:
    """Every node anywhere in the tree with at least 2 units, in pre-order (root first)."""
    out: list[AxisCandidate] = []
    seen: set[int] = set()

    def walk(node: Any, path: str) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        axis, units = parallel_units(node)
        if axis is not DecompositionAxis.NONE and len(units) >= 2:
            out.append(
                AxisCandidate(
                    path=path,
                    node_id=id(node),
                    family=type(node).__name__,
                    axis=axis,
                    reduction=axis_reduction(axis),
                    unit_works=tuple(subtree_work(u) for u in units),
                    unit_bytes=tuple(subtree_bytes(u) for u in units),
                    node=node,
                )
            )
        for role, child in _named_children(node):
            walk(child, _join(path, role))

    walk(dist, "/")
    return tuple(out)


def best_parallel_axis(dist: Any, num_workers: int | None = None) -> AxisCandidate | None:
    """The axis of maximum :meth:`AxisCandidate.benefit` (the first in pre-order on ties), or None
    when no node has 2 or more units."""
    check_positive_int(num_workers, "num_workers", "best_parallel_axis", allow_none=True)
    candidates = tree_axes(dist)
    if not candidates:
        return None
    return max(candidates, key=lambda c: c.benefit(num_workers))  # max keeps the first maximum


def threaded_axes(dist: Any, num_workers: int | None = None) -> tuple[AxisCandidate, ...]:
    """Every axis tied at the maximum benefit within 1e-9 relative; empty when that benefit is <= 0."""
    check_positive_int(num_workers, "num_workers", "threaded_axes", allow_none=True)
    candidates = tree_axes(dist)
    if not candidates:
        return ()
    benefits = [c.benefit(num_workers) for c in candidates]
    best = max(benefits)
    if best <= 0.0:
        return ()
    return tuple(c for c, b in zip(candidates, benefits, strict=True) if best - b <= _TIE_RTOL * abs(best))


def threaded_nodes(dist: Any, num_workers: int | None = None) -> tuple[Any, ...]:
    """The distribution objects of :func:`threaded_axes`: the nodes an in-process fold with
    ``num_workers`` threads (None: one per unit) threads; below them it recurses serially."""
    return tuple(c.node for c in threaded_axes(dist, num_workers))


# --- the decision ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelDecomposition:
    """How a model should be placed: replicated (axis NONE) or cut along one axis.

    ``cuts`` are contiguous ``(start, stop)`` unit ranges, one per device used; ``extra`` holds the
    axis path, device names and per-cut work and bytes."""

    axis: DecompositionAxis
    reduction: Reduction
    num_units: int
    cuts: tuple[tuple[int, int], ...]
    rationale: tuple[str, ...]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_model_parallel(self) -> bool:
        return self.axis is not DecompositionAxis.NONE and len(self.cuts) > 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (enums as their string values)."""
        return {
            "axis": self.axis.value,
            "reduction": self.reduction.value,
            "num_units": self.num_units,
            "cuts": [list(c) for c in self.cuts],
            "rationale": list(self.rationale),
            "is_model_parallel": self.is_model_parallel,
            "extra": dict(self.extra),
        }


def _replicate(num_units: int, why: str, extra: dict[str, Any]) -> ModelDecomposition:
    return ModelDecomposition(DecompositionAxis.NONE, Reduction.REPLICATE, num_units, (), (why,), extra)


def decompose_model(
    model: Any, resources: Any, *, n_data: int | None = None, min_components_per_shard: int = 1
) -> ModelDecomposition:
    """Decide whether ``model`` should be cut across ``resources``, and where.

    The model is replicated (axis NONE, data-parallel) when no node has 2 or more units, when there
    are fewer than 2 devices, or when the model fits replicated on every device (or memory is unknown)
    and either ``n_data >= 8 * #devices`` (whatever the unit count: with that many rows, sharding the
    data keeps every device busy without any cross-device reduction over the model axis) or ``n_data``
    is unknown and the best axis has fewer than ``2 * #devices`` units. Otherwise the best axis is cut
    into contiguous ranges balanced by unit work against device throughput.

    Parameters
    ----------
    model : Distribution
        The model tree.
    resources : Resources
        The device budget (``resources.devices``).
    n_data : int, optional
        Number of rows, when known.
    min_components_per_shard : int
        At least this many units per cut; limits the cuts to ``num_units // min_components_per_shard``.
    """
    where = "decompose_model"
    check_positive_int(n_data, "n_data", where, allow_none=True)
    check_positive_int(min_components_per_shard, "min_components_per_shard", where, allow_none=False)
    devices = resource_devices(resources, where)
    p = len(devices)
    best = best_parallel_axis(model, p)
    model_bytes = subtree_bytes(model)
    mem = min_known_memory(devices)
    fits = mem is None or model_bytes <= mem
    extra: dict[str, Any] = dict(model_bytes=model_bytes, min_device_memory=mem, fits_replicated=fits)
    extra.update(n_data=n_data, num_devices=p, path=None if best is None else best.path)
    if best is None:
        return _replicate(
            1,
            f"No node of the {type(model).__name__} tree has 2 or more shardable units, so the model "
            f"is replicated on all {p} device(s) and the data is sharded (data-parallel).",
            extra,
        )
    units = best.num_units
    extra["benefit"] = best.benefit(p)
    if p < 2:
        return _replicate(
            units,
            f"Single device ({devices[0].name}): model parallelism needs at least 2 devices, so the "
            f"{units}-unit {best.axis.value} axis at {best.path} is not split.",
            extra,
        )
    mem_text = "memory is unknown" if mem is None else f"the smallest device has {mem} bytes"
    if fits and n_data is not None and n_data >= 8 * p:
        return _replicate(
            units,
            f"Data-parallel preferred: the model ({model_bytes} bytes; {mem_text}) fits replicated and "
            f"N={n_data} >= 8 x {p} devices = {8 * p} rows keeps every device busy with its own rows, "
            f"so the {units}-unit {best.axis.value} axis at {best.path} is not split (a split would "
            "only add a cross-device reduction).",
            extra,
        )
    if fits and n_data is None and units < 2 * p:
        return _replicate(
            units,
            f"Data-parallel preferred: the model ({model_bytes} bytes; {mem_text}) fits replicated and "
            f"the best axis ({best.axis.value} at {best.path}) has only {units} units, fewer than "
            f"2 x {p} devices = {2 * p}; N is unknown.",
            extra,
        )
    return _cut(best, devices, min_components_per_shard, model_bytes, mem, n_data, extra)


def _cut(
    best: AxisCandidate,
    devices: tuple[Any, ...],
    min_per: int,
    model_bytes: int,
    mem: int | None,
    n_data: int | None,
    extra: dict[str, Any],
) -> ModelDecomposition:
    p, units = len(devices), best.num_units
    shards = max(1, min(p, units // min_per))
    if shards < 2:
        return _replicate(
            units,
            f"min_components_per_shard={min_per} leaves the {units} {best.axis.value} units at "
            f"{best.path} room for only one shard, so the model is replicated (data-parallel).",
            extra,
        )
    # With fewer shards than devices, the fastest devices take them (stable in the given order).
    order = sorted(range(p), key=lambda i: -float(devices[i].throughput))
    used = [devices[i] for i in sorted(order[:shards])]
    cuts = cost_balanced_cuts(best.unit_works, [float(d.throughput) for d in used], min(min_per, units))
    cut_work = [float(sum(best.unit_works[a:b])) for a, b in cuts]
    cut_bytes = [int(sum(best.unit_bytes[a:b])) for a, b in cuts]
    replicated = max(0, model_bytes - best.total_bytes)
    extra.update(devices=[d.name for d in used], cut_work=cut_work, cut_bytes=cut_bytes)
    extra["replicated_bytes"] = replicated
    if not extra["fits_replicated"]:
        why = f"the model ({model_bytes} bytes) does not fit replicated in the smallest device ({mem} bytes)"
    elif n_data is None:
        why = f"N is unknown and the axis has {units} >= 2 x {p} devices units"
    else:
        why = f"N={n_data} < 8 x {p} devices = {8 * p} rows is too few to keep every device busy with rows"
    ranges = ", ".join(
        f"{d.name}: units [{a}, {b}) work {w:g}" for d, (a, b), w in zip(used, cuts, cut_work, strict=True)
    )
    rationale = [
        f"Model-parallel: {why}, so the {units} {best.axis.value} units of {best.family} at {best.path} "
        f"(total work {best.total_work:g}) are cut into {len(cuts)} contiguous ranges balanced by work "
        f"against device throughput: {ranges}."
    ]
    if shards < p:
        rationale.append(
            f"Only {shards} of {p} devices are used: {units} units with at least {min_per} per shard."
        )
    if mem is not None and replicated + max(cut_bytes) > mem:
        rationale.append(
            f"WARNING: the largest cut needs {replicated + max(cut_bytes)} bytes (cut plus the "
            f"{replicated} replicated bytes) but the smallest device has {mem} bytes."
        )
    return ModelDecomposition(best.axis, best.reduction, units, cuts, tuple(rationale), extra)
