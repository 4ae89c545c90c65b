"""Launch a :class:`~mixle_spark.parallel.training.contracts.ParallelPlan` on Ray Train or Lightning Fabric.

Both launchers are capability-gated: every argument is validated against the plan *before* the
optional library is imported, and a plan axis a launcher cannot execute is refused, never dropped.
Each launched process then binds its runtime rank to exactly one planned mesh coordinate with
:func:`attest_worker_coordinate`, so a launcher that started the wrong number of processes fails
loudly instead of training on a different mesh than planned.

>>> from mixle_spark.parallel.training.contracts import ParallelPlan
>>> attest_worker_coordinate(ParallelPlan(dp_replicate=2, tp=2), actual_world_size=4, rank=1).as_dict()
{'rank': 1, 'world_size': 4, 'coordinate': {'dp_replicate': 0, 'dp_shard': 0, 'tp': 1, 'pp': 0, 'cp': 0}}
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from numbers import Integral, Real
from types import ModuleType
from typing import Any

from mixle_spark.errors import describe_value
from mixle_spark.parallel.training._records import as_axis, exact_int
from mixle_spark.parallel.training.contracts import (
    PHYSICAL_AXES,
    ParallelAxis,
    ParallelPlan,
    UnsupportedParallelismError,
)

__all__ = [
    "PLAN_CONFIG_KEY",
    "TOPOLOGY_CONFIG_KEY",
    "LightningFabricLauncher",
    "RayTrainLauncher",
    "TopologyBoundFabric",
    "WorkerTopologyAttestation",
    "attest_worker_coordinate",
]

#: Keys the Ray launcher adds to ``train_loop_config`` (a caller's config may not use them).
PLAN_CONFIG_KEY = "mixle_parallel_plan"
TOPOLOGY_CONFIG_KEY = "mixle_worker_topology_attestation"

_RAY_HINT = "Ray training launch requires ray[train] and torch: pip install 'mixle-spark[ray-train]'"
_LIGHTNING_HINT = "Lightning Fabric launch requires lightning: pip install 'mixle-spark[lightning]'"
_DATA_PARALLEL = (ParallelAxis.DP_REPLICATE, ParallelAxis.DP_SHARD)
_REPLICATING_STRATEGIES = frozenset({"ddp", "ddp_spawn", "ddp_fork", "ddp_notebook", "dp"})


def _check_plan(plan: Any) -> ParallelPlan:
    if not isinstance(plan, ParallelPlan):
        raise TypeError(f"plan must be a ParallelPlan, got {describe_value(plan)}")
    return plan


@dataclass(frozen=True)
class WorkerTopologyAttestation:
    """Runtime proof binding one launched rank to one planned mesh coordinate.

    ``coordinate`` holds ``(axis value, index)`` pairs over all five physical axes, slowest first
    (see :meth:`ParallelPlan.coordinate <mixle_spark.parallel.training.contracts.ParallelPlan.coordinate>`).
    """

    rank: int
    world_size: int
    coordinate: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        world_size = exact_int("world_size", self.world_size, 1)
        rank = exact_int("rank", self.rank, 0)
        if rank >= world_size:
            raise ValueError(f"rank {rank} is outside the process group [0, {world_size})")
        pairs = self.coordinate if isinstance(self.coordinate, tuple) else ()
        axes = tuple(p[0] if isinstance(p, tuple) and len(p) == 2 else None for p in pairs)
        if axes != tuple(a.value for a in PHYSICAL_AXES):
            raise ValueError(
                "coordinate must be a tuple of (axis, index) pairs over dp_replicate, dp_shard, tp, pp, cp "
                f"in that order, got {self.coordinate!r}"
            )
        for axis, index in pairs:
            exact_int(f"coordinate[{axis!r}]", index, 0)
        object.__setattr__(self, "rank", rank)
        object.__setattr__(self, "world_size", world_size)
        object.__setattr__(self, "coordinate", tuple((axis, int(index)) for axis, index in pairs))

    def index(self, axis: ParallelAxis | str) -> int:
        """This rank's index along the physical ``axis`` (a member or its value)."""
        name = as_axis(axis).value
        indices = dict(self.coordinate)
        if name not in indices:
            raise ValueError(f"{name} is not a mesh dimension; mesh axes: {', '.join(indices)}")
        return indices[name]

    def as_dict(self) -> dict[str, Any]:
        """``{"rank", "world_size", "coordinate": {axis: index}}``."""
        return {"rank": self.rank, "world_size": self.world_size, "coordinate": dict(self.coordinate)}


def attest_worker_coordinate(
    plan: ParallelPlan, *, actual_world_size: int, rank: int
) -> WorkerTopologyAttestation:
    """Validate a runtime rank and deterministically bind it to the plan's mesh.

    Parameters
    ----------
    plan : ParallelPlan
        The plan the job was launched for.
    actual_world_size : int
        Size of the process group the runtime reports; it must equal ``plan.world_size``.
    rank : int
        This process's global rank, in ``[0, actual_world_size)``.

    Returns
    -------
    WorkerTopologyAttestation
        The rank with its row-major coordinate (``cp`` fastest, ``dp_replicate`` slowest).
    """
    plan = _check_plan(plan)
    world_size = plan.validate_world_size(actual_world_size)
    if isinstance(rank, bool) or not isinstance(rank, Integral) or not 0 <= rank < world_size:
        raise ValueError(
            f"rank must be an exact integer in [0, {world_size}) for world_size={world_size}, "
            f"got {describe_value(rank)}"
        )
    return WorkerTopologyAttestation(int(rank), world_size, plan.coordinate(rank))


def _import_first(names: tuple[str, ...], hint: str) -> ModuleType:
    """The first of ``names`` that imports; ImportError with the install ``hint`` when none does."""
    errors = []
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError as err:
            errors.append(err)
    raise ImportError(f"{hint} ({errors[-1]})") from errors[-1]


class _AttestedRayLoop:
    """The per-worker entry point: attest this Ray worker's rank, then run the caller's loop.

    A small picklable object capturing only the loop and the plan (Ray ships it to every worker).
    """

    def __init__(self, loop: Callable[[dict[str, Any]], Any], plan: ParallelPlan) -> None:
        self.loop = loop
        self.plan = plan

    def __call__(self, config: dict[str, Any]) -> Any:
        context = importlib.import_module("ray.train").get_context()
        attestation = attest_worker_coordinate(
            self.plan, actual_world_size=context.get_world_size(), rank=context.get_world_rank()
        )
        return self.loop({**config, TOPOLOGY_CONFIG_KEY: attestation})


class RayTrainLauncher:
    """Launch one worker per physical plan rank with ``ray.train.torch.TorchTrainer``.

    :meth:`scaling_config` and :meth:`train_loop_config` are pure (no Ray needed); :meth:`launch`
    imports Ray only after they have validated everything.
    """

    def scaling_config(
        self,
        plan: ParallelPlan,
        *,
        use_gpu: bool = True,
        resources_per_worker: Mapping[str, float] | None = None,
    ) -> dict[str, Any]:
        """Keyword arguments of ``ray.train.ScalingConfig``: ``num_workers`` is ``plan.world_size``.

        ``resources_per_worker`` maps non-blank resource names to finite reals >= 0; a ``"GPU"``
        entry must agree with ``use_gpu`` (positive exactly when ``use_gpu``).
        """
        plan = _check_plan(plan)
        if not isinstance(use_gpu, bool):
            raise TypeError(f"use_gpu must be a bool, got {describe_value(use_gpu)}")
        resources = None
        if resources_per_worker is not None:
            if not isinstance(resources_per_worker, Mapping):
                raise TypeError(
                    f"resources_per_worker must be a dict or None, got {describe_value(resources_per_worker)}"
                )
            resources = {}
            for name, amount in resources_per_worker.items():
                if not isinstance(name, str) or not name.strip():
                    raise ValueError(f"resource names must be non-blank strings, got {name!r}")
                bad = isinstance(amount, bool) or not isinstance(amount, Real)
                if bad or not math.isfinite(amount) or amount < 0:
                    raise ValueError(
                        f"resource {name!r} must be a finite real >= 0, got {describe_value(amount)}"
                    )
                resources[name] = amount
            gpus = resources.get("GPU")
            if gpus is not None and (gpus > 0) != use_gpu:
                raise ValueError(f"use_gpu={use_gpu} conflicts with the resource request GPU={gpus}")
        return {"num_workers": plan.world_size, "use_gpu": use_gpu, "resources_per_worker": resources}

    def train_loop_config(
        self, plan: ParallelPlan, train_loop_config: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """A copy of ``train_loop_config`` with the plan injected under :data:`PLAN_CONFIG_KEY`.

        Each worker also receives its :class:`WorkerTopologyAttestation` under
        :data:`TOPOLOGY_CONFIG_KEY`; both keys are reserved.
        """
        plan = _check_plan(plan)
        if train_loop_config is not None and not isinstance(train_loop_config, Mapping):
            raise TypeError(
                f"train_loop_config must be a dict or None, got {describe_value(train_loop_config)}"
            )
        config = dict(train_loop_config or {})
        taken = [key for key in (PLAN_CONFIG_KEY, TOPOLOGY_CONFIG_KEY) if key in config]
        if taken:
            raise ValueError(f"train_loop_config may not set the reserved key(s) {', '.join(taken)}")
        config[PLAN_CONFIG_KEY] = plan.as_dict()
        return config

    def launch(
        self,
        train_loop_per_worker: Callable[[dict[str, Any]], Any],
        *,
        plan: ParallelPlan,
        train_loop_config: Mapping[str, Any] | None = None,
        use_gpu: bool = True,
        resources_per_worker: Mapping[str, float] | None = None,
        run_config: Any = None,
    ) -> Any:
        """Run ``train_loop_per_worker(config)`` on ``plan.world_size`` Ray workers; return ``fit()``.

        Raises
        ------
        TypeError, ValueError
            Invalid arguments (checked before Ray is imported).
        ImportError
            Ray Train is not installed; the message names the pip extra.
        """
        if not callable(train_loop_per_worker):
            raise TypeError(
                f"train_loop_per_worker must be callable, got {describe_value(train_loop_per_worker)}"
            )
        _check_takes_config(train_loop_per_worker)
        scaling = self.scaling_config(plan, use_gpu=use_gpu, resources_per_worker=resources_per_worker)
        config = self.train_loop_config(plan, train_loop_config)
        train = _import_first(("ray.train",), _RAY_HINT)
        torch_trainer = _import_first(("ray.train.torch",), _RAY_HINT).TorchTrainer
        trainer = torch_trainer(
            _AttestedRayLoop(train_loop_per_worker, plan),
            train_loop_config=config,
            scaling_config=train.ScalingConfig(**scaling),
            run_config=run_config,
        )
        return trainer.fit()


def _check_takes_config(loop: Callable[..., Any]) -> None:
    try:
        signature = inspect.signature(loop)
    except (TypeError, ValueError):  # some builtins have no signature; Ray will check them itself
        return
    try:
        signature.bind({})
    except TypeError as err:
        raise TypeError(
            f"train_loop_per_worker must accept the config dict as its one argument, got {loop!r} ({err})"
        ) from err


class TopologyBoundFabric:
    """A Lightning ``Fabric`` whose launched processes attest their plan coordinate.

    Every attribute not defined here is the wrapped Fabric's (``setup``, ``backward``, ...).
    """

    def __init__(self, fabric: Any, plan: ParallelPlan) -> None:
        self._fabric = fabric
        self._plan = _check_plan(plan)
        self._attestation: WorkerTopologyAttestation | None = None

    @property
    def fabric(self) -> Any:
        """The wrapped ``lightning.fabric.Fabric``."""
        return self._fabric

    @property
    def plan(self) -> ParallelPlan:
        """The plan this Fabric was created for."""
        return self._plan

    def launch(self, function: Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        """Launch Fabric's processes and attest each one's coordinate.

        With ``function``, each launched process attests and then calls ``function(bound_fabric,
        *args, **kwargs)`` with this topology-bound wrapper (not the bare Fabric).
        """
        if function is None:
            result = self._fabric.launch()
            self._attest()
            return result
        return self._fabric.launch(_AttestThenRun(self, function), *args, **kwargs)

    def _attest(self) -> WorkerTopologyAttestation:
        self._attestation = attest_worker_coordinate(
            self._plan, actual_world_size=self._fabric.world_size, rank=self._fabric.global_rank
        )
        return self._attestation

    def attest_topology(self) -> WorkerTopologyAttestation:
        """This process's attestation; RuntimeError before :meth:`launch`."""
        if self._attestation is None:
            raise RuntimeError("Fabric topology is not attested yet: call launch() first")
        return self._attestation

    def __getattr__(self, name: str) -> Any:
        # Private names are never proxied: unpickling looks them up before _fabric exists.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._fabric, name)


class _AttestThenRun:
    """Fabric's per-process entry: attest the rank, then run the caller's function (picklable)."""

    def __init__(self, bound: TopologyBoundFabric, function: Callable[..., Any]) -> None:
        self.bound = bound
        self.function = function

    def __call__(self, fabric: Any, *args: Any, **kwargs: Any) -> Any:
        bound = self.bound if self.bound.fabric is fabric else TopologyBoundFabric(fabric, self.bound.plan)
        bound._attest()
        return self.function(bound, *args, **kwargs)


class LightningFabricLauncher:
    """Create Lightning Fabric for pure DDP or FSDP jobs.

    Lightning is capability-gated to data parallelism: a plan with any active tp, pp, cp, ep or etp
    axis is refused (those belong to a native DeviceMesh or Megatron backend), never accepted and
    discarded. :meth:`fabric_config` is pure; :meth:`create` imports Lightning only after it passed.
    """

    def fabric_config(
        self,
        *,
        plan: ParallelPlan,
        accelerator: str = "auto",
        devices: int | str = "auto",
        num_nodes: int = 1,
        precision: str = "32-true",
        strategy: Any = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Keyword arguments of ``Fabric(...)`` for ``plan``, or raise before anything is imported.

        ``devices="auto"`` means ``plan.world_size`` on one node; with several nodes give the
        per-node count. ``devices * num_nodes`` must equal ``plan.world_size``. The strategy defaults
        to ``"fsdp"`` when ``dp_shard > 1`` and ``"ddp"`` otherwise; a strategy *name* that contradicts
        the plan (replicating a sharded plan or the reverse) is refused, and HSDP (both data-parallel
        axes > 1) needs an explicit strategy object such as an FSDP strategy with hybrid sharding.
        """
        plan = _check_plan(plan)
        refused = [a for a in plan.active_axes if a not in _DATA_PARALLEL]
        if refused:
            asked = ", ".join(f"{a.value}={plan.size(a)}" for a in refused)
            raise UnsupportedParallelismError(
                f"Lightning Fabric launcher only owns data parallelism; requested: {asked}", refused
            )
        hybrid = plan.dp_replicate > 1 and plan.dp_shard > 1
        if hybrid and strategy is None:
            raise UnsupportedParallelismError(
                f"hybrid sharded data parallelism (dp_replicate={plan.dp_replicate}, "
                f"dp_shard={plan.dp_shard}) requires an explicit Fabric strategy",
                _DATA_PARALLEL,
            )
        num_nodes = exact_int("num_nodes", num_nodes, 1)
        if isinstance(devices, str) and devices == "auto":
            if num_nodes != 1:
                raise ValueError(
                    f"multi-node launch (num_nodes={num_nodes}) requires an explicit per-node device count, "
                    'got devices="auto"'
                )
            devices = plan.world_size
        devices = exact_int("devices", devices, 1)
        if devices * num_nodes != plan.world_size:
            raise ValueError(
                f"devices={devices} x num_nodes={num_nodes} = {devices * num_nodes} processes, but the plan "
                f"has world_size={plan.world_size}"
            )
        if strategy is None:
            strategy = "fsdp" if plan.dp_shard > 1 else "ddp"
        elif isinstance(strategy, str):
            _check_strategy_name(strategy, plan)
        return {
            "accelerator": accelerator,
            "devices": devices,
            "num_nodes": num_nodes,
            "precision": precision,
            "strategy": strategy,
            **kwargs,
        }

    def create(
        self,
        *,
        plan: ParallelPlan,
        accelerator: str = "auto",
        devices: int | str = "auto",
        num_nodes: int = 1,
        precision: str = "32-true",
        strategy: Any = None,
        **kwargs: Any,
    ) -> TopologyBoundFabric:
        """Build ``Fabric`` for ``plan`` (see :meth:`fabric_config`) bound to its topology.

        Raises
        ------
        UnsupportedParallelismError (a NotImplementedError)
            The plan has a non-data-parallel axis, or is HSDP without an explicit strategy.
        TypeError, ValueError
            Invalid arguments.
        ImportError
            Lightning is not installed; the message names the pip extra.
        """
        config = self.fabric_config(
            plan=plan,
            accelerator=accelerator,
            devices=devices,
            num_nodes=num_nodes,
            precision=precision,
            strategy=strategy,
            **kwargs,
        )
        fabric_module = _import_first(("lightning.fabric", "lightning_fabric"), _LIGHTNING_HINT)
        return TopologyBoundFabric(fabric_module.Fabric(**config), plan)


def _check_strategy_name(strategy: str, plan: ParallelPlan) -> None:
    """Refuse a strategy name whose data layout contradicts the plan's data-parallel axes."""
    name = strategy.strip().lower()
    if plan.world_size == 1:
        return
    shape = f"dp_replicate={plan.dp_replicate}, dp_shard={plan.dp_shard}"
    if plan.dp_replicate > 1 and plan.dp_shard > 1:
        raise ValueError(
            f"strategy={strategy!r} cannot express hybrid sharding ({shape}); pass a strategy object, "
            "e.g. an FSDP strategy with sharding_strategy='HYBRID_SHARD'"
        )
    if plan.dp_shard > 1 and (name in _REPLICATING_STRATEGIES or name == "single_device"):
        raise ValueError(f"strategy={strategy!r} does not shard, but the plan shards the model ({shape})")
    if plan.dp_replicate > 1 and (name.startswith("fsdp") or name == "single_device"):
        raise ValueError(
            f"strategy={strategy!r} does not replicate, but the plan replicates the model ({shape})"
        )
