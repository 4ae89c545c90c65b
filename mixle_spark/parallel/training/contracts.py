"""Contracts for distributed *training* backends: the process mesh, capabilities, receipts, registry.

This layer is pure data and validation (stdlib plus :mod:`mixle_spark.errors`); no backend lives here
and nothing optional is imported. Gradient training stays out of the encoded-data (EM) registry on
purpose: a training backend registers with :func:`register_training_backend`.

A :class:`ParallelPlan` is an N-D mesh over five *physical* axes, ``dp_replicate, dp_shard, tp, pp,
cp`` (row-major, ``cp`` fastest); expert parallelism (``ep``, ``etp``) is carved out of those ranks
and never multiplies the world size:

>>> plan = ParallelPlan(dp_replicate=2, tp=3, cp=2)
>>> plan.world_size, plan.mesh
(12, (('dp_replicate', 'tp', 'cp'), (2, 3, 2)))
>>> dict(plan.coordinate(7))
{'dp_replicate': 1, 'dp_shard': 0, 'tp': 0, 'pp': 0, 'cp': 1}
>>> plan.rank({"dp_replicate": 1, "cp": 1})
7
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

from mixle_spark.errors import MixleError, UnknownNameError, describe_value
from mixle_spark.parallel.training._records import (
    PHYSICAL_AXES,
    CollectiveKind,
    DistributedUpdate,
    ParallelAxis,
    ParameterLayout,
    PayloadKind,
    StateLayout,
    StepReceipt,
    as_axis,
    check_flag,
    exact_int,
    non_blank,
)

__all__ = [
    "PHYSICAL_AXES",
    "BackendCapabilities",
    "CollectiveKind",
    "DistributedTrainingBackend",
    "DistributedTrainingSession",
    "DistributedUpdate",
    "ParallelAxis",
    "ParallelPlan",
    "ParameterLayout",
    "PayloadKind",
    "StateLayout",
    "StepReceipt",
    "UnsupportedParallelismError",
    "available_training_backends",
    "get_training_backend",
    "register_training_backend",
]


class UnsupportedParallelismError(MixleError, NotImplementedError):
    """A plan asked for parallel axes (or an axis combination) that the executor does not run.

    The request is refused, never silently dropped; ``axes`` holds the offending axes.
    """

    def __init__(self, message: str, axes: Iterable[ParallelAxis] = ()) -> None:
        self.axes = tuple(axes)
        super().__init__(message)


@dataclass(frozen=True)
class ParallelPlan:
    """An explicit N-D process mesh and batch schedule.

    Every process owns exactly one coordinate over :data:`PHYSICAL_AXES`; keeping replicate and shard
    data parallelism separate expresses HSDP without conflating it with tensor or context parallelism.

    Parameters
    ----------
    dp_replicate, dp_shard : int
        Replicated (DDP) and sharded (FSDP) data-parallel sizes.
    tp, pp, cp : int
        Tensor, pipeline and context (sequence) parallel sizes.
    ep : int
        Expert-parallel size: a group carved from the data-parallel ranks, so it must divide
        ``dp_replicate * dp_shard``.
    etp : int
        Expert-tensor-parallel size: the expert groups (``ep * etp`` ranks) are carved from one
        pipeline stage, so ``ep * etp`` must divide ``dp_replicate * dp_shard * tp * cp``.
    microbatches, gradient_accumulation_steps : int
        Batch schedule of one optimizer step.

    Every field must be an exact integer >= 1 (``True`` and ``2.0`` are refused).
    """

    dp_replicate: int = 1
    dp_shard: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    microbatches: int = 1
    gradient_accumulation_steps: int = 1

    def __post_init__(self) -> None:
        for f in fields(self):
            value = exact_int(f.name, getattr(self, f.name), 1, "an exact positive integer")
            object.__setattr__(self, f.name, value)
        data_parallel = self.dp_replicate * self.dp_shard
        if data_parallel % self.ep:
            raise ValueError(
                f"expert parallelism ep={self.ep} must divide the data-parallel domain "
                f"dp_replicate*dp_shard={data_parallel}"
            )
        stage = data_parallel * self.tp * self.cp
        if stage % (self.ep * self.etp):
            raise ValueError(
                f"expert groups ep*etp={self.ep * self.etp} (ep={self.ep}, etp={self.etp}) must divide "
                f"the ranks of one pipeline stage, dp_replicate*dp_shard*tp*cp={stage}"
            )

    @property
    def world_size(self) -> int:
        """Number of physical ranks, ``dp_replicate * dp_shard * tp * pp * cp`` (EP/ETP overlap them)."""
        return math.prod(self.size(a) for a in PHYSICAL_AXES)

    @property
    def data_parallel_size(self) -> int:
        """``dp_replicate * dp_shard``."""
        return self.dp_replicate * self.dp_shard

    @property
    def axis_sizes(self) -> dict[str, int]:
        """The size of every :class:`ParallelAxis`, keyed by its value."""
        return {a.value: getattr(self, a.value) for a in ParallelAxis}

    @property
    def active_axes(self) -> tuple[ParallelAxis, ...]:
        """Axes of size > 1 in enum order, EP and ETP included."""
        return tuple(a for a in ParallelAxis if getattr(self, a.value) > 1)

    @property
    def mesh(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """``(axis names, shape)`` over the active physical axes; ``(("dp_replicate",), (1,))`` if none."""
        active = [a for a in PHYSICAL_AXES if self.size(a) > 1] or [ParallelAxis.DP_REPLICATE]
        return tuple(a.value for a in active), tuple(self.size(a) for a in active)

    @property
    def mesh_axis_names(self) -> tuple[str, ...]:
        """The names half of :attr:`mesh`."""
        return self.mesh[0]

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        """The shape half of :attr:`mesh`."""
        return self.mesh[1]

    def size(self, axis: ParallelAxis | str) -> int:
        """Size of ``axis`` (a member or its value, e.g. ``"tp"``)."""
        return int(getattr(self, as_axis(axis).value))

    def validate_world_size(self, actual: Any) -> int:
        """Return ``actual`` if it is exactly :attr:`world_size`, else raise ValueError with both numbers."""
        actual = exact_int("world_size", actual, 1, "an exact positive integer")
        if actual != self.world_size:
            raise ValueError(
                f"parallel plan requires world_size={self.world_size}, but the process group has "
                f"world_size={actual}"
            )
        return actual

    def coordinate(self, rank: Any) -> tuple[tuple[str, int], ...]:
        """Mesh coordinate of ``rank``: ``(axis value, index)`` over all of :data:`PHYSICAL_AXES`.

        Row-major: ``cp`` varies fastest and ``dp_replicate`` slowest, so consecutive ranks share
        every coordinate but the last active one. Size-1 axes are listed with index 0.
        """
        rank = exact_int("rank", rank, 0)
        if rank >= self.world_size:
            raise ValueError(f"rank must be in [0, {self.world_size}) for this plan, got {rank}")
        indices = []
        for axis in reversed(PHYSICAL_AXES):
            rank, index = divmod(rank, self.size(axis))
            indices.append((axis.value, index))
        return tuple(reversed(indices))

    def rank(self, coordinate: Mapping[Any, Any] | Iterable[tuple[Any, Any]]) -> int:
        """The rank at ``coordinate`` (inverse of :meth:`coordinate`).

        ``coordinate`` maps physical axes (members or values) to indices, as a mapping or as pairs;
        an omitted axis means index 0. EP/ETP are not mesh dimensions and are refused.
        """
        pairs = list(coordinate.items() if isinstance(coordinate, Mapping) else coordinate)
        indices: dict[ParallelAxis, int] = {}
        for key, value in pairs:
            axis = as_axis(key)
            if axis not in PHYSICAL_AXES:
                raise ValueError(
                    f"{axis.value} is not a mesh dimension; mesh axes: dp_replicate, dp_shard, tp, pp, cp"
                )
            if axis in indices:
                raise ValueError(f"coordinate repeats axis {axis.value!r}")
            index = exact_int(f"coordinate[{axis.value!r}]", value, 0)
            if index >= self.size(axis):
                raise ValueError(
                    f"coordinate[{axis.value!r}]={index} is out of range for {axis.value}={self.size(axis)}"
                )
            indices[axis] = index
        rank = 0
        for axis in PHYSICAL_AXES:
            rank = rank * self.size(axis) + indices.get(axis, 0)
        return rank

    def as_dict(self) -> dict[str, int]:
        """The seven axis sizes, the batch schedule, ``world_size`` and ``data_parallel_size``."""
        return {
            **self.axis_sizes,
            "microbatches": self.microbatches,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "world_size": self.world_size,
            "data_parallel_size": self.data_parallel_size,
        }

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> ParallelPlan:
        """Rebuild a plan from :meth:`as_dict`; derived sizes, when present, must agree."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(payload) - names - {"world_size", "data_parallel_size"})
        if unknown:
            raise ValueError(f"unknown ParallelPlan keys {unknown}; expected: {', '.join(sorted(names))}")
        plan = cls(**{k: v for k, v in payload.items() if k in names})
        for derived in ("world_size", "data_parallel_size"):
            if derived in payload and payload[derived] != getattr(plan, derived):
                raise ValueError(
                    f"{derived}={payload[derived]!r} disagrees with the axis sizes "
                    f"({derived}={getattr(plan, derived)})"
                )
        return plan


@dataclass(frozen=True)
class BackendCapabilities:
    """What a backend actually executes, rather than merely accepting as flags.

    Parameters
    ----------
    name : str
        Backend name used in error messages.
    axes : set of ParallelAxis
        Axes the backend executes; a plan with any other active axis is refused. Axis values
        (``"tp"``) are accepted too; every collection is stored as a frozenset of members.
    precisions : set of str
        Supported precision names (``"fp32"``, ``"bf16"``, ...).
    distributed_optimizer, reshardable_checkpoint, elastic_restart : bool
        Features the backend implements.
    requirements : tuple of str
        Human-readable runtime requirements (``"torch>=2.4"``).
    incompatible_axis_sets : tuple of sets of ParallelAxis
        Axis combinations the backend cannot run together in one session.
    """

    name: str
    axes: AbstractSet[ParallelAxis]
    precisions: AbstractSet[str] = frozenset({"bf16", "fp32"})
    distributed_optimizer: bool = False
    reshardable_checkpoint: bool = False
    elastic_restart: bool = False
    requirements: tuple[str, ...] = ()
    incompatible_axis_sets: tuple[AbstractSet[ParallelAxis], ...] = ()

    def __post_init__(self) -> None:
        non_blank("BackendCapabilities.name", self.name)
        for name in ("axes", "precisions", "requirements", "incompatible_axis_sets"):
            if isinstance(getattr(self, name), str):
                value = describe_value(getattr(self, name))
                raise TypeError(f"BackendCapabilities.{name} must be a collection, got {value}")
        object.__setattr__(self, "axes", frozenset(as_axis(a) for a in self.axes))
        precisions = frozenset(non_blank("precision", p) for p in self.precisions)
        object.__setattr__(self, "precisions", precisions)
        for flag in ("distributed_optimizer", "reshardable_checkpoint", "elastic_restart"):
            check_flag(f"BackendCapabilities.{flag}", getattr(self, flag))
        requirements = tuple(non_blank("requirement", r) for r in self.requirements)
        object.__setattr__(self, "requirements", requirements)
        combos = tuple(frozenset(as_axis(a) for a in combo) for combo in self.incompatible_axis_sets)
        object.__setattr__(self, "incompatible_axis_sets", combos)

    def unsupported_axes(self, plan: ParallelPlan) -> tuple[ParallelAxis, ...]:
        """Active axes of ``plan`` this backend does not execute (in enum order)."""
        return tuple(a for a in plan.active_axes if a not in self.axes)

    def validate(self, plan: ParallelPlan, *, precision: str = "fp32") -> None:
        """Refuse a plan or precision the backend cannot execute.

        Raises
        ------
        UnsupportedParallelismError (a NotImplementedError)
            An active axis of ``plan`` is not executed, or an incompatible combination is active.
        ValueError
            ``precision`` is not supported.
        """
        if not isinstance(plan, ParallelPlan):
            raise TypeError(f"plan must be a ParallelPlan, got {describe_value(plan)}")
        missing = self.unsupported_axes(plan)
        if missing:
            asked = ", ".join(f"{a.value}={plan.size(a)}" for a in missing)
            raise UnsupportedParallelismError(
                f"{self.name} does not execute requested parallel axes: {asked}; it executes: "
                f"{', '.join(sorted(a.value for a in self.axes)) or 'none'}",
                missing,
            )
        if precision not in self.precisions:
            raise ValueError(
                f"{self.name} does not support precision={precision!r}; supported: "
                f"{', '.join(sorted(self.precisions))}"
            )
        active = set(plan.active_axes)
        for combo in self.incompatible_axis_sets:
            if combo <= active:
                names = "+".join(sorted(a.value for a in combo))
                raise UnsupportedParallelismError(
                    f"{self.name} does not compose axes {names} in one session", sorted(combo)
                )

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready description (collections as sorted lists)."""
        return {
            "name": self.name,
            "axes": sorted(a.value for a in self.axes),
            "precisions": sorted(self.precisions),
            "distributed_optimizer": self.distributed_optimizer,
            "reshardable_checkpoint": self.reshardable_checkpoint,
            "elastic_restart": self.elastic_restart,
            "requirements": list(self.requirements),
            "incompatible_axis_sets": [sorted(a.value for a in c) for c in self.incompatible_axis_sets],
        }


@runtime_checkable
class DistributedTrainingSession(Protocol):
    """A prepared training job: one committed update per :meth:`step` or completed accumulation."""

    plan: ParallelPlan
    capabilities: BackendCapabilities

    def step(self, *args: Any, **kwargs: Any) -> StepReceipt: ...

    def train_batch(self, *args: Any, **kwargs: Any) -> StepReceipt: ...

    def finish_accumulation(self) -> StepReceipt | None: ...

    def discard_accumulation(self) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class DistributedTrainingBackend(Protocol):
    """A training backend: declared :class:`BackendCapabilities` and ``prepare(module, *, plan)``."""

    capabilities: BackendCapabilities

    def prepare(self, module: Any, *, plan: ParallelPlan, **kwargs: Any) -> DistributedTrainingSession: ...


# What was registered (instance or zero-argument factory) and, once resolved, the backend instance.
_REGISTERED: dict[str, Any] = {}
_RESOLVED: dict[str, DistributedTrainingBackend] = {}
_LOCK = threading.RLock()


def _key(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"a training backend name must be a string, got {describe_value(name)}")
    key = name.strip().lower().replace("-", "_")
    if not key:
        raise ValueError(f"a training backend needs a non-blank name, got {name!r}")
    return key


def _is_backend(obj: Any) -> bool:
    # A class with a class-level ``capabilities`` satisfies the Protocol structurally; it is a factory.
    return not isinstance(obj, type) and isinstance(obj, DistributedTrainingBackend)


def register_training_backend(name: str, backend: Any, *, override: bool = False) -> None:
    """Register a backend instance, or a zero-argument factory that builds one, under ``name``.

    Names are case-insensitive and ``-`` equals ``_`` (``"Torch-Native"`` is ``torch_native``). A
    factory is called by the first :func:`get_training_backend` only, so optional dependencies are
    imported lazily. Re-registering the same object is a no-op; a different object under a taken name
    raises ValueError naming it unless ``override=True``.
    """
    key = _key(name)
    if not (_is_backend(backend) or callable(backend)):
        raise TypeError(
            f"training backend {key!r} must implement DistributedTrainingBackend or be a zero-argument "
            f"factory, got {describe_value(backend)}"
        )
    check_flag("override", override)
    if _is_backend(backend) and not isinstance(backend.capabilities, BackendCapabilities):
        raise TypeError(
            f"training backend {key!r}: capabilities must be a BackendCapabilities, got "
            f"{describe_value(backend.capabilities)}"
        )
    with _LOCK:
        owner = _REGISTERED.get(key)
        if owner is backend:
            return
        if owner is not None and not override:
            what = getattr(owner, "__qualname__", type(owner).__qualname__)
            raise ValueError(
                f"distributed training backend {key!r} is already registered ({what}); "
                "pass override=True to replace it"
            )
        _REGISTERED[key] = backend
        _RESOLVED.pop(key, None)
        if _is_backend(backend):
            _RESOLVED[key] = backend


def get_training_backend(name: str) -> DistributedTrainingBackend:
    """Resolve a registered backend, calling its lazy factory once and caching the result.

    Raises
    ------
    UnknownNameError (a ValueError)
        ``name`` is not registered; the message lists the registered names.
    TypeError
        The factory built something that is not a backend with :class:`BackendCapabilities`; it is
        not cached, so a later call retries the factory.
    """
    key = _key(name)
    with _LOCK:
        if key in _RESOLVED:
            return _RESOLVED[key]
        if key not in _REGISTERED:
            raise UnknownNameError("training backend", name, available_training_backends() or ["<none>"])
        backend = _REGISTERED[key]()
        if not _is_backend(backend) or not isinstance(backend.capabilities, BackendCapabilities):
            raise TypeError(
                f"registered backend {key!r} does not implement DistributedTrainingBackend (a "
                f"BackendCapabilities `capabilities` and `prepare(module, *, plan)`); its factory "
                f"returned {describe_value(backend)}"
            )
        _RESOLVED[key] = backend
        return backend


def available_training_backends() -> tuple[str, ...]:
    """Sorted names of the registered training backends (none are built in)."""
    with _LOCK:
        return tuple(sorted(_REGISTERED))
