"""Advisory model decomposition: which axis of a model tree could be split across workers, and how.

Nothing here executes anything. The planner walks a distribution tree over its *owned* children
(:func:`cost_children`), sizes every subtree in a FLOP proxy (:func:`subtree_work`) and in bytes
(:func:`subtree_bytes`), lists every shardable axis anywhere in the tree (:func:`tree_axes`) and picks
the one whose split removes the most serial work (:func:`best_parallel_axis`; :func:`compute_cost` is
a whole model's work and bytes, :func:`shard_children` the units one node splits into)::

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

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mixle_spark.parallel._model_tree import (
    DecompositionAxis,
    ParallelAxisKind,
    Reduction,
    axis_benefit,
    axis_nodes,
    axis_reduction,
    check_positive_int,
    cost_children,
    join_path,
    model_attributes,
    named_children,
    own_work,
    parallel_units,
    register_decomposition,
    subtree_work,
    threaded_nodes,
    tied_best,
    walk_unique,
)
from mixle_spark.parallel.planning._cuts import (
    cost_balanced_cuts,
    min_known_memory,
    resource_devices,
)
from mixle_spark.parallel.planning._sizing import estimate_nbytes
from mixle_spark.stats.base import Distribution

__all__ = [
    "AxisCandidate",
    "DecompositionAxis",
    "ModelCut",
    "ModelDecomposition",
    "NodeSize",
    "ParallelAxisKind",
    "Reduction",
    "axis_reduction",
    "best_parallel_axis",
    "check_positive_int",
    "compute_cost",
    "cost_balanced_cuts",
    "cost_children",
    "decompose_model",
    "min_known_memory",
    "parallel_units",
    "register_decomposition",
    "resource_devices",
    "shard_children",
    "size_model_tree",
    "subtree_bytes",
    "subtree_work",
    "threaded_axes",
    "threaded_nodes",
    "tree_axes",
]


# --- sizing ---------------------------------------------------------------------------------------
def _own_bytes(dist: Any) -> int:
    """Bytes of the node's own attributes (strict: an opaque attribute raises), children excluded."""
    total = 0
    for _, value in model_attributes(dist):
        if isinstance(value, (list, tuple)):
            total += sum(estimate_nbytes(v) for v in value if not isinstance(v, Distribution))
        elif isinstance(value, dict):
            items = [(k, v) for k, v in value.items() if not isinstance(v, Distribution)]
            total += sum(estimate_nbytes(k) + estimate_nbytes(v) for k, v in items)
        elif not isinstance(value, Distribution):
            total += estimate_nbytes(value)
    return total


def subtree_bytes(dist: Any) -> int:
    """Parameter bytes of the subtree (:func:`~mixle_spark.parallel.planning.planner.estimate_nbytes` of every
    node's own attributes: arrays, numbers as 8 bytes, strings, containers), a shared subtree counted
    once.

    Raises
    ------
    UnknownMemoryFootprintError
        When a node holds an object that cannot be sized (a callable, a lock, ...)."""
    return int(sum(_own_bytes(node) for node in walk_unique(dist, set())))


def compute_cost(model: Any) -> tuple[float, int]:
    """``(work, bytes)`` of the whole model: the FLOP proxy of scoring one row
    (:func:`subtree_work`) and the parameter bytes (:func:`subtree_bytes`), the load a split balances
    and the memory that constrains it; a shared subtree is counted once in both.

    >>> from mixle_spark.stats.gaussian import GaussianDistribution
    >>> compute_cost(GaussianDistribution(0.0, 1.0))  # 1 + mu, sigma2 and a cached constant; 3 floats
    (4.0, 24)
    """
    return subtree_work(model), subtree_bytes(model)


def shard_children(node: Any) -> tuple[Any, ...]:
    """The children ``node`` splits into along its axis (a mixture's components, a record's fields,
    a composite's components), in order; ``()`` for a node that does not split (a leaf, a wrapper
    such as an optional or a sequence). :func:`decompose_model` cuts these into :class:`ModelCut`
    ranges."""
    return parallel_units(node)[1]


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


def size_model_tree(dist: Any, path: str = "/") -> NodeSize:
    """Size the whole tree below ``dist`` (root path ``"/"``); a shared subtree is sized once, under
    its first parent."""
    return _size(dist, path, set())


def _size(dist: Any, path: str, seen: set[int]) -> NodeSize:
    seen.add(id(dist))
    axis, units = parallel_units(dist)
    kids = tuple(
        _size(child, join_path(path, role), seen)
        for role, child in named_children(dist)
        if id(child) not in seen
    )
    own_b, own_w = _own_bytes(dist), own_work(dist)
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
        return axis_benefit(self.unit_works, num_workers)


def tree_axes(dist: Any) -> tuple[AxisCandidate, ...]:
    """Every node anywhere in the tree with at least 2 units, in pre-order (root first)."""
    return tuple(
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
        for path, node, axis, units in axis_nodes(dist)
    )


def best_parallel_axis(dist: Any, num_workers: int | None = None) -> AxisCandidate | None:
    """The axis of maximum :meth:`AxisCandidate.benefit` (the first in pre-order on ties), or None
    when no node has 2 or more units."""
    check_positive_int(num_workers, "num_workers", "best_parallel_axis", allow_none=True)
    candidates = tree_axes(dist)
    if not candidates:
        return None
    return max(candidates, key=lambda c: c.benefit(num_workers))  # max keeps the first maximum


def threaded_axes(dist: Any, num_workers: int | None = None) -> tuple[AxisCandidate, ...]:
    """Every axis tied at the maximum benefit within 1e-9 relative; empty when that benefit is <= 0
    (the candidates of :func:`~mixle_spark.parallel._model_tree.threaded_nodes`, with their bytes)."""
    check_positive_int(num_workers, "num_workers", "threaded_axes", allow_none=True)
    candidates = tree_axes(dist)
    return tuple(candidates[i] for i in tied_best([c.benefit(num_workers) for c in candidates]))


# --- the decision ---------------------------------------------------------------------------------
class ModelCut(tuple[int, int]):
    """One cut of a model's axis: units ``[start, stop)`` placed on ``device``, their results
    combined by ``reduction``.

    A cut unpacks and compares as its ``(start, stop)`` range (``a, b = cut``, ``cut == (0, 3)``), the
    form :attr:`ModelDecomposition.cuts` had before cuts named their device; two cuts are equal when
    their ranges, devices and reductions are.
    """

    device: Any
    reduction: Reduction

    def __new__(cls, device: Any, start: int, stop: int, reduction: Reduction | str) -> ModelCut:
        for name, value in (("start", start), ("stop", stop)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"ModelCut {name} must be an int, got {value!r}")
        if not 0 <= start < stop:
            raise ValueError(f"ModelCut needs 0 <= start < stop, got [{start}, {stop})")
        cut = super().__new__(cls, (int(start), int(stop)))
        object.__setattr__(cut, "device", device)
        object.__setattr__(cut, "reduction", Reduction(reduction))
        return cut

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"ModelCut is immutable: cannot set {name!r}")

    def __getnewargs__(self) -> tuple[Any, int, int, Reduction]:  # type: ignore[override]
        return (self.device, self[0], self[1], self.reduction)

    @property
    def start(self) -> int:
        """First unit of the cut."""
        return self[0]

    @property
    def stop(self) -> int:
        """One past the last unit of the cut."""
        return self[1]

    @property
    def num_units(self) -> int:
        """Units in the cut."""
        return self[1] - self[0]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ModelCut):
            same = other.device == self.device and other.reduction is self.reduction
            return same and tuple(self) == tuple(other)
        return tuple(self) == other

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:  # the range's: a cut equal to a plain (start, stop) hashes alike
        return hash((self[0], self[1]))

    def __repr__(self) -> str:
        name = getattr(self.device, "name", self.device)
        return (
            f"ModelCut(device={name!r}, start={self[0]}, stop={self[1]}, reduction={self.reduction.value!r})"
        )


@dataclass(frozen=True)
class ModelDecomposition:
    """How a model should be placed: replicated (axis NONE) or cut along one axis.

    ``cuts`` are contiguous unit ranges, one :class:`ModelCut` per device used (each unpacks as its
    ``(start, stop)``); ``extra`` holds the axis path, device names and per-cut work and bytes."""

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
    bounds = cost_balanced_cuts(best.unit_works, [float(d.throughput) for d in used], min(min_per, units))
    cuts = tuple(ModelCut(d, a, b, best.reduction) for d, (a, b) in zip(used, bounds, strict=True))
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
