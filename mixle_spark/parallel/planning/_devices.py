"""Placement targets: :class:`DeviceSpec`, :class:`Resources` and :func:`precision_name`.

Re-exported by :mod:`mixle_spark.parallel.planning.planner` (the public home of these names). Resources come
from explicit specs, the local machine, MPI, Dask, Ray, Spark or torchrun; none of those libraries is
imported at module load (torch lazily, for accelerator discovery; ray by ``from_ray()`` without
an argument).
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark._outputs import write_file
from mixle_spark.parallel._slots import task_slots

__all__ = ["PRECISION_BYTES", "DeviceSpec", "Resources", "precision_name", "task_slots"]

_PRECISION_ALIASES = {
    "float32": "float32",
    "fp32": "float32",
    "f32": "float32",
    "single": "float32",
    "float64": "float64",
    "fp64": "float64",
    "f64": "float64",
    "double": "float64",
    "float16": "float16",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}
PRECISION_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
_GPU_KINDS = frozenset({"cuda", "mps", "gpu"})


def precision_name(precision: Any) -> str:
    """The canonical name of a floating-point precision.

    ``None`` means the default ``"float64"``. Accepts the names and aliases ``float64`` / ``fp64``,
    ``float32`` / ``fp32``, ``float16`` / ``fp16``, ``bfloat16`` / ``bf16`` (any case, with or without
    a ``torch.`` prefix), numpy scalar types and dtypes.

    >>> precision_name("bf16"), precision_name(np.float32), precision_name(None)
    ('bfloat16', 'float32', 'float64')
    """
    if precision is None:
        return "float64"
    key: str | None = None
    if isinstance(precision, str):
        key = precision.strip().lower().removeprefix("torch.")
    else:
        try:
            key = np.dtype(precision).name
        except TypeError:
            key = str(precision).lower().removeprefix("torch.")
    if key in _PRECISION_ALIASES:
        return _PRECISION_ALIASES[key]
    raise ValueError(
        f"unknown precision {precision!r}; expected one of: {', '.join(sorted(_PRECISION_ALIASES))}"
    )


def _optional_precision(precision: Any) -> str | None:
    return None if precision is None else precision_name(precision)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _check_total_memory(memory_bytes: Any) -> None:
    if memory_bytes is not None and (not _is_int(memory_bytes) or memory_bytes <= 0):
        raise ValueError(f"memory_bytes must be None or a positive integer, got {memory_bytes!r}")


def _split_memory(memory_bytes: int | None, n: int) -> int | None:
    _check_total_memory(memory_bytes)
    return None if memory_bytes is None else max(1, int(memory_bytes) // n)


# -- devices ------------------------------------------------------------------------------------


_RESOURCES_HEAD = re.compile(rb'\s*\{\s*"devices"\s*:')


@dataclass(frozen=True)
class DeviceSpec:
    """One placement target.

    Parameters
    ----------
    name : str
        Unique, non-blank name, e.g. ``"cpu:0"``, ``"spark:3"``, ``"torchrun-node:1:cuda:0"``.
    kind : str
        ``"cpu"``, ``"cuda"``, ``"mps"`` or ``"gpu"`` (the last three count as GPUs).
    memory_bytes : int, optional
        Capacity available to one shard; None when unknown (no memory cap is applied).
    engine : str
        Compute engine of the device (``"numpy"``; ``"torch"`` for torch-launched ranks).
    throughput : float
        Relative speed (> 0, finite); rows are split in proportion to it.
    precision : str, optional
        Canonical precision name (see :func:`precision_name`) or None.
    node_id, local_rank, global_rank
        Physical identity: no two devices may share ``(node_id, kind, local_rank)``.
    """

    name: str
    kind: str = "cpu"
    memory_bytes: int | None = None
    engine: str = "numpy"
    throughput: float = 1.0
    precision: str | None = None
    node_id: str | None = None
    local_rank: int | None = None
    global_rank: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"device name must be a non-blank string, got {self.name!r}")
        if isinstance(self.throughput, bool) or not isinstance(self.throughput, numbers.Real):
            raise ValueError(
                f"device {self.name!r}: throughput must be a number > 0, got {self.throughput!r}"
            )
        if not math.isfinite(self.throughput) or self.throughput <= 0:
            raise ValueError(
                f"device {self.name!r}: throughput must be finite and > 0, got {self.throughput!r}"
            )
        object.__setattr__(self, "throughput", float(self.throughput))
        if self.memory_bytes is not None:
            if not _is_int(self.memory_bytes) or self.memory_bytes <= 0:
                raise ValueError(
                    f"device {self.name!r}: memory_bytes must be None or a positive integer, "
                    f"got {self.memory_bytes!r}"
                )
            object.__setattr__(self, "memory_bytes", int(self.memory_bytes))
        for label in ("local_rank", "global_rank"):
            value = getattr(self, label)
            if value is not None:
                if not _is_int(value) or value < 0:
                    raise ValueError(
                        f"device {self.name!r}: {label} must be None or a non-negative integer, got {value!r}"
                    )
                object.__setattr__(self, label, int(value))
        object.__setattr__(self, "precision", _optional_precision(self.precision))

    @property
    def is_gpu(self) -> bool:
        """True for ``cuda``, ``mps`` and ``gpu`` devices."""
        return self.kind in _GPU_KINDS

    def to_dict(self) -> dict[str, Any]:
        """All nine fields, in field order (JSON-able)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> DeviceSpec:
        """Rebuild from :meth:`to_dict` output; only ``name`` is required."""
        if not isinstance(payload, Mapping) or "name" not in payload:
            raise ValueError(f"a device dict needs a 'name' key, got {payload!r}")
        return cls(
            name=payload["name"],
            kind=payload.get("kind", "cpu"),
            memory_bytes=payload.get("memory_bytes"),
            engine=payload.get("engine", "numpy"),
            throughput=payload.get("throughput", 1.0),
            precision=payload.get("precision"),
            node_id=payload.get("node_id"),
            local_rank=payload.get("local_rank"),
            global_rank=payload.get("global_rank"),
        )


def _env_int(name: str, default: int | None) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {raw!r}") from None


def _import_torch() -> Any:
    try:
        import torch  # optional: only for accelerator discovery
    except ImportError:
        return None
    return torch


def _cuda_count(torch: Any) -> int:
    try:
        return int(torch.cuda.device_count()) if torch is not None and torch.cuda.is_available() else 0
    except Exception:  # a broken CUDA driver means no usable GPU, not a failed plan
        return 0


_JVM_SIZE_UNITS = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}


def _jvm_bytes(text: str | None, default_unit: str = "m") -> int | None:
    """Bytes of a JVM size string like ``"4g"``, ``"512m"`` or ``"2048"`` (MiB); None if unreadable."""
    if text is None:
        return None
    value = str(text).strip().lower().removesuffix("ib").removesuffix("b") or "0"
    unit = value[-1] if value[-1] in _JVM_SIZE_UNITS else default_unit
    number = value[:-1] if value[-1] in _JVM_SIZE_UNITS else value
    try:
        out = int(float(number) * _JVM_SIZE_UNITS[unit])
    except ValueError:
        return None
    return out if out > 0 else None


def _concurrent_tasks(spark_context: Any) -> int:
    """Task slots of a live SparkContext (0 for anything else, or before executors register)."""
    if getattr(spark_context, "_jsc", None) is None:
        return 0
    return task_slots(spark_context)


def _spark_conf(spark_context: Any) -> dict[str, str]:
    get_conf = getattr(spark_context, "getConf", None)
    if not callable(get_conf):
        return {}
    try:
        conf = get_conf()
    except Exception:  # a stopped context or a fake without a conf: fall back to defaultParallelism
        return {}
    out: dict[str, str] = {}
    for key in (
        "spark.executor.instances",
        "spark.executor.cores",
        "spark.executor.memory",
        "spark.executor.pyspark.memory",
    ):
        try:
            value = conf.get(key)
        except Exception:
            value = None
        if value is not None:
            out[key] = str(value)
    return out


def _positive_int(text: str | None) -> int | None:
    try:
        value = int(str(text).strip()) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value > 0 else None


@dataclass
class Resources:
    """A collection of placement targets (at least one, unique names, unique physical identity)."""

    devices: tuple[DeviceSpec, ...]

    def __post_init__(self) -> None:
        self.devices = tuple(self.devices)
        if not self.devices:
            raise ValueError("Resources requires at least one device.")
        for device in self.devices:
            if not isinstance(device, DeviceSpec):
                raise TypeError(f"Resources devices must be DeviceSpec, got {type(device).__name__}")
        names: set[str] = set()
        identities: dict[tuple[Any, ...], str] = {}
        for device in self.devices:
            if device.name in names:
                raise ValueError(f"duplicate device name {device.name!r}")
            names.add(device.name)
            if device.node_id is not None and device.local_rank is not None:
                key = (device.node_id, device.kind, device.local_rank)
                if key in identities:
                    raise ValueError(
                        f"devices {identities[key]!r} and {device.name!r} share the physical identity "
                        f"(node_id={key[0]!r}, kind={key[1]!r}, local_rank={key[2]})"
                    )
                identities[key] = device.name

    def __len__(self) -> int:
        return len(self.devices)

    @property
    def total_memory_bytes(self) -> int | None:
        """Sum of device memory, or None when any device's memory is unknown."""
        sizes = [d.memory_bytes for d in self.devices]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def single_cpu(
        cls, memory_bytes: int | None = None, throughput: float = 1.0, precision: Any = None
    ) -> Resources:
        """One CPU device ``cpu:0`` (numpy engine)."""
        return cls(
            (
                DeviceSpec(
                    "cpu:0",
                    memory_bytes=memory_bytes,
                    throughput=throughput,
                    precision=_optional_precision(precision),
                ),
            )
        )

    @classmethod
    def local(
        cls, num_cpus: int | None = None, memory_bytes: int | None = None, precision: Any = None
    ) -> Resources:
        """``num_cpus`` CPU slots ``cpu:0..n-1`` (default ``os.cpu_count()``); ``memory_bytes`` is a
        total split evenly."""
        n = max(1, int(num_cpus)) if num_cpus is not None else max(1, os.cpu_count() or 1)
        memory = _split_memory(memory_bytes, n)
        prec = _optional_precision(precision)
        return cls(tuple(DeviceSpec(f"cpu:{i}", memory_bytes=memory, precision=prec) for i in range(n)))

    @classmethod
    def discover(
        cls, include_torch: bool = True, cpu_workers: int | None = None, precision: Any = None
    ) -> Resources:
        """Best-effort local discovery: ``cpu_workers`` CPU slots (default one) plus, when torch imports,
        one ``cuda:i`` per visible GPU (throughput 10) and ``mps:0`` (throughput 3)."""
        devices = list(cls.local(cpu_workers or 1, precision=precision).devices)
        torch: Any = _import_torch() if include_torch else None
        prec = _optional_precision(precision)
        for i in range(_cuda_count(torch)):
            memory = int(torch.cuda.get_device_properties(i).total_memory)
            devices.append(DeviceSpec(f"cuda:{i}", "cuda", memory, "torch", 10.0, prec))
        mps = getattr(getattr(torch, "backends", None), "mps", None)
        if mps is not None and callable(getattr(mps, "is_available", None)) and mps.is_available():
            devices.append(DeviceSpec("mps:0", "mps", None, "torch", 3.0, prec))
        return cls(tuple(devices))

    @classmethod
    def from_specs(cls, specs: Iterable[DeviceSpec]) -> Resources:
        """Resources from an iterable of :class:`DeviceSpec`."""
        return cls(tuple(specs))

    @classmethod
    def from_mpi(
        cls, comm: Any = None, memory_bytes: int | None = None, throughput: float = 1.0, precision: Any = None
    ) -> Resources:
        """One ``mpi:i`` slot per rank, never importing mpi4py.

        The size is ``comm.Get_size()`` when ``comm`` has one, else the first of ``OMPI_COMM_WORLD_SIZE``,
        ``PMI_SIZE``, ``PMIX_SIZE``, ``MPI_LOCALNRANKS``, ``SLURM_NTASKS`` that is set, else 1.
        ``memory_bytes`` is a total split per rank.
        """
        size: int | None = None
        if comm is not None and callable(getattr(comm, "Get_size", None)):
            size = int(comm.Get_size())
        else:
            for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS"):
                size = _env_int(name, None)
                if size is not None:
                    break
        n = max(1, size or 1)
        memory = _split_memory(memory_bytes, n)
        prec = _optional_precision(precision)
        return cls(
            tuple(
                DeviceSpec(
                    f"mpi:{i}", memory_bytes=memory, throughput=throughput, precision=prec, global_rank=i
                )
                for i in range(n)
            )
        )

    @classmethod
    def from_dask(cls, client: Any, precision: Any = None) -> Resources:
        """One ``dask:<address>`` slot per worker of a dask.distributed-like client.

        Reads only ``client.scheduler_info()["workers"]``: throughput ``max(1, nthreads)``, memory the
        worker's ``memory_limit`` (0 or missing means unknown). Workers are sorted by address.
        """
        info = getattr(client, "scheduler_info", None)
        if not callable(info):
            raise TypeError(f"from_dask needs a client with scheduler_info(), got {type(client).__name__}")
        workers = (info() or {}).get("workers") or {}
        if not workers:
            raise ValueError("the dask client reports no workers")
        prec = _optional_precision(precision)
        devices = []
        for address in sorted(workers, key=str):
            worker = workers[address] or {}
            memory = worker.get("memory_limit") or None
            threads = float(worker.get("nthreads") or 1)
            devices.append(
                DeviceSpec(
                    f"dask:{address}", memory_bytes=memory, throughput=max(1.0, threads), precision=prec
                )
            )
        return cls(tuple(devices))

    @classmethod
    def from_ray(cls, ray: Any = None, precision: Any = None) -> Resources:
        """One ``ray:<node address>:<i>`` CPU slot per CPU of every live node of a Ray cluster.

        ``ray`` is the ``ray`` module with a runtime started (default: imported here), or anything
        with ``nodes()`` returning Ray's node records (``Alive``, ``NodeID``, ``NodeManagerAddress``,
        ``Resources`` with ``CPU`` and ``memory``). Each slot gets its node's ``memory`` divided by the
        node's CPUs, ``node_id`` the node and ``local_rank`` its index there; nodes are sorted by
        address.
        """
        if ray is None:
            try:
                import ray
            except ImportError as err:
                raise ImportError(f"from_ray needs Ray: pip install 'mixle-spark[ray]' ({err})") from err
        nodes_of = getattr(ray, "nodes", None)
        if not callable(nodes_of):
            raise TypeError(
                f"from_ray needs the ray module or an object with nodes(), got {type(ray).__name__}"
            )
        nodes = [n for n in nodes_of() or () if n.get("Alive", True)]
        if not nodes:
            raise ValueError("the Ray cluster reports no live nodes (is a runtime started? ray.init())")
        prec = _optional_precision(precision)
        devices = []
        for node in sorted(nodes, key=lambda n: str(n.get("NodeManagerAddress", ""))):
            resources = node.get("Resources") or {}
            cpus = max(1, int(resources.get("CPU") or 1))
            memory = int(resources.get("memory") or 0) // cpus or None
            address = node.get("NodeManagerAddress", "?")
            for i in range(cpus):
                devices.append(
                    DeviceSpec(
                        f"ray:{address}:{i}",
                        memory_bytes=memory,
                        precision=prec,
                        node_id=str(node.get("NodeID", address)),
                        local_rank=i,
                    )
                )
        return cls(tuple(devices))

    @classmethod
    def from_spark(
        cls, spark_context: Any, memory_bytes: int | None = None, precision: Any = None
    ) -> Resources:
        """One ``spark:i`` CPU slot per Spark task slot of a SparkContext-like object.

        Reads, each only when present (a fake with just ``defaultParallelism`` works):

        * of a live SparkContext, the tasks its scheduler can run at once (executors' cores /
          ``spark.task.cpus``): the number of slots; else ``defaultParallelism`` (which is only a
          default partition count, ``spark.default.parallelism`` when that is set);
        * ``getConf().get(...)`` of ``spark.executor.instances`` and ``spark.executor.cores``: the slot
          count when ``defaultParallelism`` is missing, and each slot's executor (``node_id =
          "spark-executor:<i // cores>"``, ``local_rank = i % cores``);
        * ``spark.executor.pyspark.memory``, else ``spark.executor.memory``: when ``memory_bytes`` is not
          given, each slot gets its executor's memory divided by the executor's cores (the Python
          workers that run the E-step live within that budget; ``spark.executor.memory`` is the JVM
          heap, so this is an upper bound).

        An explicit ``memory_bytes`` is a total split evenly over the slots.
        """
        conf = _spark_conf(spark_context)
        instances = _positive_int(conf.get("spark.executor.instances"))
        cores = _positive_int(conf.get("spark.executor.cores"))
        parallelism = _concurrent_tasks(spark_context)
        if parallelism <= 0:
            try:
                parallelism = int(getattr(spark_context, "defaultParallelism", 0) or 0)
            except (TypeError, ValueError):
                parallelism = 0
        if parallelism <= 0 and instances and cores:
            parallelism = instances * cores
        n = max(1, parallelism or 1)
        if memory_bytes is not None:
            memory = _split_memory(memory_bytes, n)
        else:
            executor = _jvm_bytes(conf.get("spark.executor.pyspark.memory")) or _jvm_bytes(
                conf.get("spark.executor.memory")
            )
            memory = max(1, executor // (cores or 1)) if executor else None
        prec = _optional_precision(precision)
        devices = []
        for i in range(n):
            node = f"spark-executor:{i // cores}" if cores else None
            local = i % cores if cores else None
            devices.append(
                DeviceSpec(f"spark:{i}", memory_bytes=memory, precision=prec, node_id=node, local_rank=local)
            )
        return cls(tuple(devices))

    @classmethod
    def from_torchrun(cls, memory_bytes: int | None = None, precision: Any = None) -> Resources:
        """A device for every global rank of a torchrun job, from its environment.

        Reads ``WORLD_SIZE`` (default 1), ``RANK``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and ``GROUP_RANK``
        (all required when ``WORLD_SIZE > 1``) and checks they describe one consistent topology. Rank r
        lives on ``node_id = "torchrun-node:<r // LOCAL_WORLD_SIZE>"`` with ``local_rank = r %
        LOCAL_WORLD_SIZE``; it is ``<node>:cuda:<local>`` when torch sees CUDA, else ``<node>:cpu:<local>``
        (engine torch, memory split evenly).
        """
        world = _env_int("WORLD_SIZE", 1) or 0
        if world < 1:
            raise ValueError(f"WORLD_SIZE must be >= 1, got {world}")
        required = ("LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK", "GROUP_RANK")
        if world > 1:
            missing = [name for name in required if not os.environ.get(name, "").strip()]
            if missing:
                raise ValueError(f"torchrun WORLD_SIZE={world} requires {', '.join(missing)} to be set")
        local_world = _env_int("LOCAL_WORLD_SIZE", world if world == 1 else None) or 0
        rank = _env_int("RANK", 0) or 0
        local_rank = _env_int("LOCAL_RANK", 0) or 0
        group_rank = _env_int("GROUP_RANK", 0) or 0
        if local_world < 1 or world % local_world:
            raise ValueError(f"LOCAL_WORLD_SIZE={local_world} must be >= 1 and divide WORLD_SIZE={world}")
        if not 0 <= rank < world:
            raise ValueError(f"RANK={rank} must lie in [0, {world}) for WORLD_SIZE={world}")
        if local_rank != rank % local_world or group_rank != rank // local_world:
            raise ValueError(
                f"torchrun topology is inconsistent: RANK={rank} with LOCAL_WORLD_SIZE={local_world} implies "
                f"LOCAL_RANK={rank % local_world} and GROUP_RANK={rank // local_world}, "
                f"got LOCAL_RANK={local_rank} and GROUP_RANK={group_rank}"
            )
        torch = _import_torch()
        gpus = _cuda_count(torch)
        if gpus and local_world > gpus:
            raise ValueError(
                f"LOCAL_WORLD_SIZE={local_world} exceeds the {gpus} visible CUDA devices; "
                "ranks would share a physical GPU"
            )
        prec = _optional_precision(precision)
        memory = _split_memory(memory_bytes, world)
        devices = []
        for r in range(world):
            node, local = f"torchrun-node:{r // local_world}", r % local_world
            if gpus:
                gpu_memory = int(torch.cuda.get_device_properties(local).total_memory)
                spec = DeviceSpec(
                    f"{node}:cuda:{local}", "cuda", gpu_memory, "torch", 10.0, prec, node, local, r
                )
            else:
                spec = DeviceSpec(f"{node}:cpu:{local}", "cpu", memory, "torch", 1.0, prec, node, local, r)
            devices.append(spec)
        return cls(tuple(devices))

    # -- queries and persistence -------------------------------------------------------------
    def fastest(self) -> DeviceSpec:
        """The device with the largest throughput (the first on a tie)."""
        return max(self.devices, key=lambda d: d.throughput)

    def to_dict(self) -> dict[str, Any]:
        """``{"devices": [device.to_dict(), ...]}``."""
        return {"devices": [d.to_dict() for d in self.devices]}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> Resources:
        """Rebuild from :meth:`to_dict` output."""
        if not isinstance(payload, Mapping) or "devices" not in payload:
            raise ValueError(f"a resources dict needs a 'devices' key, got {payload!r}")
        return cls(tuple(DeviceSpec.from_dict(d) for d in payload["devices"]))

    def to_json(self, **kwargs: Any) -> str:
        """JSON of :meth:`to_dict` (calibrated throughput included); ``kwargs`` go to ``json.dumps``."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_json(cls, text: str) -> Resources:
        """Rebuild from :meth:`to_json` output."""
        return cls.from_dict(json.loads(text))

    def save(self, path: str | os.PathLike[str], **kwargs: Any) -> None:
        """Write :meth:`to_json` to ``path`` (a local path or a URI) whole or not at all: a temporary
        file created exclusively beside it, then renamed into place. An existing file is replaced
        only when it holds resources (a JSON object whose first key is ``devices``); another file, a
        directory or a symbolic link is refused and kept."""
        write_file(
            path,
            self.to_json(**kwargs),
            what="resources file",
            ours=lambda head: _RESOURCES_HEAD.match(head) is not None,
            claim="does not hold resources saved by mixle_spark",
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Resources:
        """Read resources written by :meth:`save`."""
        with open(path, encoding="utf-8") as handle:
            return cls.from_json(handle.read())
