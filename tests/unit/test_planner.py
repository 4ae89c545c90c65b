"""Resources, row placement and model sharding (mixle_spark.parallel.planning.planner)."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from mixle_spark.errors import SchemaError
from mixle_spark.parallel.planning import _devices
from mixle_spark.parallel.planning.planner import (
    DeviceSpec,
    ModelShard,
    Placement,
    PlacementShard,
    Resources,
    UnknownMemoryFootprintError,
    estimate_nbytes,
    model_sharding_plan,
    plan,
    precision_name,
)
from mixle_spark.stats import (
    CategoricalEstimator,
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
    RecordEstimator,
)

MB = 1_000_000
TORCHRUN_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
MPI_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS")


def two_speed(memory: int | None = MB) -> Resources:
    return Resources.from_specs(
        [DeviceSpec("slow", memory_bytes=memory), DeviceSpec("fast", memory_bytes=memory, throughput=3.0)]
    )


def mixture(k: int) -> MixtureDistribution:
    return MixtureDistribution([GaussianDistribution(float(i), 1.0) for i in range(k)], [1.0 / k] * k)


# -- precision_name ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, "float64"),
        ("fp32", "float32"),
        ("float32", "float32"),
        (np.float32, "float32"),
        ("bf16", "bfloat16"),
        ("bfloat16", "bfloat16"),
        ("fp16", "float16"),
        ("float16", "float16"),
        ("FP64", "float64"),
        ("float64", "float64"),
        (np.float64, "float64"),
        (np.dtype("float32"), "float32"),
        ("torch.bfloat16", "bfloat16"),
    ],
)
def test_precision_name_normalises(given: Any, expected: str) -> None:
    assert precision_name(given) == expected


@pytest.mark.parametrize("bad", ["int8", "quarter", np.int32])
def test_precision_name_rejects_unknown_and_lists_names(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"unknown precision .*expected one of: .*bfloat16"):
        precision_name(bad)


# -- DeviceSpec ----------------------------------------------------------------------------------


def test_device_spec_defaults_dict_and_gpu() -> None:
    device = DeviceSpec("cpu:0")
    assert list(device.to_dict()) == [
        "name",
        "kind",
        "memory_bytes",
        "engine",
        "throughput",
        "precision",
        "node_id",
        "local_rank",
        "global_rank",
    ]
    assert device.to_dict()["throughput"] == 1.0 and device.engine == "numpy" and not device.is_gpu
    assert all(DeviceSpec("g", kind=kind).is_gpu for kind in ("cuda", "mps", "gpu"))
    assert DeviceSpec.from_dict({"name": "x"}) == DeviceSpec("x", "cpu", None, "numpy", 1.0)
    assert DeviceSpec("x", precision="fp16").precision == "float16"
    assert DeviceSpec("x", memory_bytes=np.int64(7)).memory_bytes == 7


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "  "}, "non-blank string, got '  '"),
        ({"name": 3}, "non-blank string, got 3"),
        ({"name": "d", "throughput": 0.0}, "finite and > 0, got 0.0"),
        ({"name": "d", "throughput": float("inf")}, "finite and > 0, got inf"),
        ({"name": "d", "throughput": float("nan")}, "finite and > 0, got nan"),
        ({"name": "d", "throughput": "fast"}, "number > 0, got 'fast'"),
        ({"name": "d", "memory_bytes": 0}, "positive integer, got 0"),
        ({"name": "d", "memory_bytes": -5}, "positive integer, got -5"),
        ({"name": "d", "memory_bytes": True}, "positive integer, got True"),
        ({"name": "d", "memory_bytes": 1.5}, "positive integer, got 1.5"),
        ({"name": "d", "local_rank": -1}, "local_rank must be None or a non-negative integer, got -1"),
        ({"name": "d", "global_rank": True}, "global_rank must be None or a non-negative integer, got True"),
        ({"name": "d", "precision": "int4"}, "unknown precision 'int4'"),
    ],
)
def test_device_spec_validation(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DeviceSpec(**kwargs)


def test_device_spec_from_dict_requires_name() -> None:
    with pytest.raises(ValueError, match=r"needs a 'name' key, got \{'kind': 'cpu'\}"):
        DeviceSpec.from_dict({"kind": "cpu"})


# -- Resources: invariants and constructors ---------------------------------------------------------


def test_resources_invariants() -> None:
    with pytest.raises(ValueError, match="at least one device"):
        Resources(())
    with pytest.raises(ValueError, match="duplicate device name 'a'"):
        Resources((DeviceSpec("a"), DeviceSpec("a")))
    with pytest.raises(ValueError, match=r"'a' and 'b' share the physical identity \(node_id='n'"):
        Resources((DeviceSpec("a", node_id="n", local_rank=0), DeviceSpec("b", node_id="n", local_rank=0)))
    with pytest.raises(TypeError, match="must be DeviceSpec, got str"):
        Resources(("cpu:0",))  # type: ignore[arg-type]
    # Different kinds on one local rank are different physical devices.
    Resources(
        (DeviceSpec("a", node_id="n", local_rank=0), DeviceSpec("b", "cuda", node_id="n", local_rank=0))
    )


def test_single_cpu_local_and_conveniences() -> None:
    for given in (np.float32, "fp32", "float32"):
        assert Resources.single_cpu(precision=given).devices[0].precision == "float32"
    assert Resources.single_cpu(precision="bf16").devices[0].precision == "bfloat16"
    local = Resources.local(3, memory_bytes=1000)
    assert [d.name for d in local.devices] == ["cpu:0", "cpu:1", "cpu:2"]
    assert [d.memory_bytes for d in local.devices] == [333, 333, 333]
    assert len(local) == 3 and local.total_memory_bytes == 999
    assert Resources.local(2).total_memory_bytes is None
    assert len(Resources.local()) == max(1, os.cpu_count() or 1)
    assert len(Resources.local(0)) == 1
    with pytest.raises(ValueError, match="memory_bytes must be None or a positive integer, got -1"):
        Resources.local(2, memory_bytes=-1)


def test_discover_defaults_to_one_cpu_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_devices, "_import_torch", lambda: None)
    assert [d.name for d in Resources.discover().devices] == ["cpu:0"]
    assert [d.name for d in Resources.discover(cpu_workers=2).devices] == ["cpu:0", "cpu:1"]


def test_discover_adds_accelerators_from_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_devices, "_import_torch", lambda: FakeTorch(gpus=2))
    devices = Resources.discover().devices
    assert [(d.name, d.kind, d.engine, d.throughput, d.memory_bytes) for d in devices] == [
        ("cpu:0", "cpu", "numpy", 1.0, None),
        ("cuda:0", "cuda", "torch", 10.0, 8000),
        ("cuda:1", "cuda", "torch", 10.0, 8000),
    ]


class FakeComm:
    def Get_size(self) -> int:
        return 3


def test_from_mpi_fake_comm_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in MPI_VARS:
        monkeypatch.delenv(name, raising=False)
    resources = Resources.from_mpi(FakeComm(), memory_bytes=900)
    assert [(d.name, d.memory_bytes) for d in resources.devices] == [
        ("mpi:0", 300),
        ("mpi:1", 300),
        ("mpi:2", 300),
    ]
    assert [d.name for d in Resources.from_mpi().devices] == ["mpi:0"]
    monkeypatch.setenv("SLURM_NTASKS", "2")
    assert len(Resources.from_mpi()) == 2
    monkeypatch.setenv("PMI_SIZE", "4")
    assert len(Resources.from_mpi()) == 4
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "five")
    with pytest.raises(ValueError, match="OMPI_COMM_WORLD_SIZE must be an integer, got 'five'"):
        Resources.from_mpi()


class FakeDaskClient:
    def __init__(self, workers: dict[str, Any]) -> None:
        self.workers = workers

    def scheduler_info(self) -> dict[str, Any]:
        return {"workers": self.workers}


def test_from_dask_fake_client() -> None:
    client = FakeDaskClient(
        {"tcp://b:2": {"nthreads": 4, "memory_limit": 2000}, "tcp://a:1": {"nthreads": 2, "memory_limit": 0}}
    )
    devices = Resources.from_dask(client).devices
    assert tuple(d.throughput for d in devices) == (2.0, 4.0)
    assert devices[1].memory_bytes == 2000 and devices[0].memory_bytes is None  # dask's 0 = no limit
    assert [d.name for d in devices] == ["dask:tcp://a:1", "dask:tcp://b:2"]
    with pytest.raises(TypeError, match="scheduler_info\\(\\), got object"):
        Resources.from_dask(object())
    with pytest.raises(ValueError, match="reports no workers"):
        Resources.from_dask(FakeDaskClient({}))


class FakeRay:
    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self._nodes = nodes

    def nodes(self) -> list[dict[str, Any]]:
        return self._nodes


def test_from_ray_fake_runtime() -> None:
    ray = FakeRay(
        [
            {"Alive": True, "NodeID": "n2", "NodeManagerAddress": "10.0.0.2", "Resources": {"CPU": 1.0}},
            {"Alive": False, "NodeID": "n3", "NodeManagerAddress": "10.0.0.3", "Resources": {"CPU": 8.0}},
            {
                "Alive": True,
                "NodeID": "n1",
                "NodeManagerAddress": "10.0.0.1",
                "Resources": {"CPU": 2.0, "memory": 3000.0},
            },
        ]
    )
    devices = Resources.from_ray(ray).devices
    assert [d.name for d in devices] == ["ray:10.0.0.1:0", "ray:10.0.0.1:1", "ray:10.0.0.2:0"]
    assert [(d.node_id, d.local_rank) for d in devices] == [("n1", 0), ("n1", 1), ("n2", 0)]
    assert [d.memory_bytes for d in devices] == [1500, 1500, None]  # the dead node is left out
    with pytest.raises(TypeError, match=r"nodes\(\), got object"):
        Resources.from_ray(object())
    with pytest.raises(ValueError, match=r"reports no live nodes"):
        Resources.from_ray(FakeRay([]))


def test_frame_engine_tells_engines_by_type_alone() -> None:
    from mixle_spark._frames import frame_engine

    def fake(module: str, name: str) -> Any:
        return type(name, (), {"__module__": module})()

    assert frame_engine(fake("pyspark.sql.dataframe", "DataFrame")) == "spark"
    assert frame_engine(fake("pyspark.sql.connect.dataframe", "DataFrame")) == "spark"
    assert frame_engine(fake("dask.dataframe.dask_expr._collection", "DataFrame")) == "dask"
    assert frame_engine(fake("ray.data.dataset", "MaterializedDataset")) == "ray"
    assert frame_engine(fake("raydata", "Dataset")) is None  # a prefix of a module name is not enough
    assert frame_engine(fake("pandas.core.frame", "DataFrame")) is None
    assert frame_engine(pa.table({"x": [1]})) is None


class FakeSparkContext:
    defaultParallelism = 5


class FakeConf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class ConfiguredSparkContext:
    def __init__(self, parallelism: int | None, conf: dict[str, str]) -> None:
        self.defaultParallelism = parallelism
        self.conf = FakeConf(conf)

    def getConf(self) -> FakeConf:
        return self.conf


def test_from_spark_default_parallelism_only() -> None:
    resources = Resources.from_spark(FakeSparkContext(), memory_bytes=5000)
    assert [(d.name, d.memory_bytes, d.node_id) for d in resources.devices] == [
        (f"spark:{i}", 1000, None) for i in range(5)
    ]
    assert [d.memory_bytes for d in Resources.from_spark(FakeSparkContext()).devices] == [None] * 5


def test_from_spark_reads_executor_conf() -> None:
    conf = {"spark.executor.instances": "2", "spark.executor.cores": "2", "spark.executor.memory": "4g"}
    devices = Resources.from_spark(ConfiguredSparkContext(4, conf)).devices
    assert [(d.node_id, d.local_rank, d.memory_bytes) for d in devices] == [
        ("spark-executor:0", 0, 2 * 1024**3),
        ("spark-executor:0", 1, 2 * 1024**3),
        ("spark-executor:1", 0, 2 * 1024**3),
        ("spark-executor:1", 1, 2 * 1024**3),
    ]
    # Without defaultParallelism the slot count is instances x cores; pyspark memory is preferred.
    conf["spark.executor.pyspark.memory"] = "512m"
    devices = Resources.from_spark(ConfiguredSparkContext(None, conf)).devices
    assert len(devices) == 4 and devices[0].memory_bytes == 256 * 1024**2
    # An explicit total wins over the conf.
    assert (
        Resources.from_spark(ConfiguredSparkContext(4, conf), memory_bytes=4000).devices[0].memory_bytes
        == 1000
    )


def test_from_spark_survives_a_broken_conf() -> None:
    class Broken:
        defaultParallelism = 2

        def getConf(self) -> Any:
            raise RuntimeError("context stopped")

    assert [d.name for d in Resources.from_spark(Broken()).devices] == ["spark:0", "spark:1"]


# -- from_torchrun -------------------------------------------------------------------------------------


class FakeCuda:
    def __init__(self, gpus: int) -> None:
        self.gpus = gpus

    def is_available(self) -> bool:
        return self.gpus > 0

    def device_count(self) -> int:
        return self.gpus

    def get_device_properties(self, i: int) -> Any:
        return type("Props", (), {"total_memory": 8000})()


class FakeTorch:
    def __init__(self, gpus: int) -> None:
        self.cuda = FakeCuda(gpus)


@pytest.fixture
def torchrun_env(monkeypatch: pytest.MonkeyPatch) -> Any:
    for name in TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_devices, "_import_torch", lambda: None)

    def setenv(**values: Any) -> None:
        for key, value in values.items():
            monkeypatch.setenv(key, str(value))

    return setenv


def test_from_torchrun_without_environment(torchrun_env: Any) -> None:
    devices = Resources.from_torchrun().devices
    assert [d.name for d in devices] == ["torchrun-node:0:cpu:0"]
    assert all(d.engine == "torch" for d in devices)


def test_from_torchrun_emits_every_rank(torchrun_env: Any) -> None:
    torchrun_env(WORLD_SIZE=4, LOCAL_WORLD_SIZE=2, RANK=3, LOCAL_RANK=1, GROUP_RANK=1)
    devices = Resources.from_torchrun(memory_bytes=4000).devices
    assert [d.name for d in devices] == [
        "torchrun-node:0:cpu:0",
        "torchrun-node:0:cpu:1",
        "torchrun-node:1:cpu:0",
        "torchrun-node:1:cpu:1",
    ]
    assert [(d.node_id, d.local_rank, d.global_rank, d.memory_bytes) for d in devices][3] == (
        "torchrun-node:1",
        1,
        3,
        1000,
    )
    assert all(d.engine == "torch" and d.throughput == 1.0 for d in devices)


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"WORLD_SIZE": 0}, "WORLD_SIZE must be >= 1, got 0"),
        ({"WORLD_SIZE": 4, "RANK": 0}, "WORLD_SIZE=4 requires LOCAL_WORLD_SIZE, LOCAL_RANK, GROUP_RANK"),
        ({"WORLD_SIZE": "x"}, "WORLD_SIZE must be an integer, got 'x'"),
        (
            {"WORLD_SIZE": 4, "LOCAL_WORLD_SIZE": 3, "RANK": 0, "LOCAL_RANK": 0, "GROUP_RANK": 0},
            "LOCAL_WORLD_SIZE=3 must be >= 1 and divide WORLD_SIZE=4",
        ),
        (
            {"WORLD_SIZE": 4, "LOCAL_WORLD_SIZE": 2, "RANK": 4, "LOCAL_RANK": 0, "GROUP_RANK": 2},
            r"RANK=4 must lie in \[0, 4\)",
        ),
        (
            {"WORLD_SIZE": 4, "LOCAL_WORLD_SIZE": 2, "RANK": 3, "LOCAL_RANK": 0, "GROUP_RANK": 1},
            "topology is inconsistent: RANK=3 .* got LOCAL_RANK=0 and GROUP_RANK=1",
        ),
        (
            {"WORLD_SIZE": 4, "LOCAL_WORLD_SIZE": 2, "RANK": 3, "LOCAL_RANK": 1, "GROUP_RANK": 0},
            "topology is inconsistent: .*implies LOCAL_RANK=1 and GROUP_RANK=1, "
            "got LOCAL_RANK=1 and GROUP_RANK=0",
        ),
    ],
)
def test_from_torchrun_rejects_inconsistent_topology(
    torchrun_env: Any, env: dict[str, Any], match: str
) -> None:
    torchrun_env(**env)
    with pytest.raises(ValueError, match=match):
        Resources.from_torchrun()


def test_from_torchrun_with_cuda(torchrun_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    torchrun_env(WORLD_SIZE=2, LOCAL_WORLD_SIZE=1, RANK=0, LOCAL_RANK=0, GROUP_RANK=0)
    monkeypatch.setattr(_devices, "_import_torch", lambda: FakeTorch(gpus=1))
    devices = Resources.from_torchrun().devices
    assert [(d.name, d.kind, d.memory_bytes, d.throughput) for d in devices] == [
        ("torchrun-node:0:cuda:0", "cuda", 8000, 10.0),
        ("torchrun-node:1:cuda:0", "cuda", 8000, 10.0),
    ]
    torchrun_env(LOCAL_WORLD_SIZE=2, GROUP_RANK=0)
    with pytest.raises(ValueError, match="LOCAL_WORLD_SIZE=2 exceeds the 1 visible CUDA devices"):
        Resources.from_torchrun()


# -- Resources: queries and persistence ----------------------------------------------------------------


def test_fastest_prefers_first_on_tie() -> None:
    resources = Resources.from_specs([DeviceSpec("a", throughput=2.0), DeviceSpec("b", throughput=2.0)])
    assert resources.fastest().name == "a"
    assert two_speed().fastest().name == "fast"


def test_to_json_exact_text() -> None:
    device = (
        '{{"name": "cpu:{i}", "kind": "cpu", "memory_bytes": 500, "engine": "numpy", "throughput": 1.0, '
        '"precision": null, "node_id": null, "local_rank": null, "global_rank": null}}'
    )
    expected = '{"devices": [' + device.format(i=0) + ", " + device.format(i=1) + "]}"
    assert Resources.local(2, memory_bytes=1000).to_json() == expected
    assert list(json.loads(Resources.local(1).to_json(sort_keys=True))["devices"][0]) == sorted(
        DeviceSpec("x").to_dict()
    )


def calibrated() -> Resources:
    return Resources.from_specs(
        [
            DeviceSpec("cpu:0", memory_bytes=123, throughput=2.718281828459045, precision="float32"),
            DeviceSpec("gpu", "cuda", 10**10, "torch", 0.1 + 0.2, None, "node-a", 0, 1),
        ]
    )


def test_json_round_trip_via_string_and_file(tmp_path: Any) -> None:
    resources = calibrated()
    assert Resources.from_json(resources.to_json()).devices == resources.devices
    path = tmp_path / "resources.json"
    resources.save(path, indent=2)
    assert Resources.load(path) == resources
    assert Resources.load(str(path)).devices[1].throughput == 0.1 + 0.2
    assert os.listdir(tmp_path) == ["resources.json"]  # no temporary file left behind


def test_save_is_atomic(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "resources.json"
    Resources.single_cpu().save(path)
    before = path.read_text()

    def boom(self: Resources, **kwargs: Any) -> str:
        raise RuntimeError("disk full")

    monkeypatch.setattr(Resources, "to_json", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        calibrated().save(path)
    assert path.read_text() == before and os.listdir(tmp_path) == ["resources.json"]


def test_from_dict_requires_devices() -> None:
    with pytest.raises(ValueError, match=r"needs a 'devices' key, got \{'device': \[\]\}"):
        Resources.from_dict({"device": []})


# -- estimate_nbytes ---------------------------------------------------------------------------------


class Pair(NamedTuple):
    a: float
    b: np.ndarray


@dataclasses.dataclass
class Holder:
    x: np.ndarray
    label: str


class Slotted:
    __slots__ = ("unset", "value")

    def __init__(self) -> None:
        self.value = np.zeros(3)


class SelfSized:
    def mixle_memory_nbytes(self) -> int:
        return 1234


def test_estimate_nbytes_counts_payloads() -> None:
    shared = np.zeros(10)
    assert estimate_nbytes(None) == 0
    assert estimate_nbytes(1.5) == 8 and estimate_nbytes(3) == 8 and estimate_nbytes("abc") == 3
    assert estimate_nbytes(b"abcd") == 4 and estimate_nbytes(np.float32(1)) == 4
    assert estimate_nbytes([shared, shared, (shared,)]) == 80  # counted once
    assert estimate_nbytes(Pair(1.0, np.zeros(2))) == 24
    assert estimate_nbytes(Holder(np.zeros(4), "ab")) == 34
    assert estimate_nbytes(Slotted()) == 24
    assert estimate_nbytes({"k": SelfSized()}) == 1 + 1234
    assert estimate_nbytes(pa.array([1.0, 2.0])) == 16
    assert estimate_nbytes(pa.table({"a": [1.0, 2.0, 3.0]})) == 24
    assert estimate_nbytes(np.array([1.5, "ab"], dtype=object)) == 10
    assert estimate_nbytes(pd.Series([1.0, 2.0])) > 0
    # A two-component Gaussian mixture: 2 x (mu, sigma2, log const) + w + log w.
    assert estimate_nbytes(mixture(2)) == 2 * 24 + 16 + 16


@pytest.mark.parametrize(
    ("bad", "type_name"),
    [
        (lambda: 1, "function"),
        (threading.Lock(), "lock"),
        (os, "module"),
        (print, "builtin_function_or_method"),
    ],
)
def test_estimate_nbytes_rejects_opaque_objects(bad: Any, type_name: str) -> None:
    with pytest.raises(UnknownMemoryFootprintError, match=rf"obj\.child\['f'\]\[1\] \(type .*{type_name}"):
        estimate_nbytes(_wrap(bad))
    assert issubclass(UnknownMemoryFootprintError, ValueError)


def _wrap(value: Any) -> Any:
    outer = type("Outer", (), {})()
    outer.child = {"f": [0.0, value]}
    return outer


def test_estimate_nbytes_checks_the_protocol_result() -> None:
    class Liar:
        def mixle_memory_nbytes(self) -> int:
            return -3

    with pytest.raises(UnknownMemoryFootprintError, match="non-negative int, got -3"):
        estimate_nbytes(Liar())


# -- PlacementShard and Placement ---------------------------------------------------------------------


CPU = DeviceSpec("cpu:0", memory_bytes=100)


def placement(shards: list[PlacementShard], total: int, **kw: Any) -> Placement:
    return Placement(tuple(shards), total, 1.0, 1.0, 0, 0, 8, **kw)


def test_placement_shard_validation() -> None:
    shard = PlacementShard(CPU, 2, 7, 1, 10, 5)
    assert shard.size == 5 and shard.total_bytes == 15
    with pytest.raises(TypeError, match=r"start must be an int, got 1\.0"):
        PlacementShard(CPU, 1.0, 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="stop must be an int, got True"):
        PlacementShard(CPU, 0, True)
    with pytest.raises(ValueError, match=r"0 <= start <= stop, got \[5:3\]"):
        PlacementShard(CPU, 5, 3)
    with pytest.raises(ValueError, match="sub_chunks must be >= 1, got 0"):
        PlacementShard(CPU, 0, 3, 0)
    with pytest.raises(ValueError, match="encoded_bytes=-1"):
        PlacementShard(CPU, 0, 3, 1, -1)


def test_placement_row_coverage_errors() -> None:
    with pytest.raises(ValueError, match="gap at row 3"):
        placement([PlacementShard(CPU, 0, 3), PlacementShard(CPU, 4, 6)], 6)
    with pytest.raises(ValueError, match="overlap at row 2"):
        placement([PlacementShard(CPU, 0, 3), PlacementShard(CPU, 2, 6)], 6)
    with pytest.raises(ValueError, match="stops at 5, expected 6"):
        placement([PlacementShard(CPU, 0, 5)], 6)
    with pytest.raises(ValueError, match=r"shard cpu:0\[3:3\] is empty"):
        placement([PlacementShard(CPU, 0, 3), PlacementShard(CPU, 3, 3)], 3)
    with pytest.raises(ValueError, match=r"only \[0:0\] shards, got \[0:2\]"):
        placement([PlacementShard(CPU, 0, 2)], 0)
    assert placement([PlacementShard(CPU, 0, 0)], 0).num_chunks == 1


def test_placement_field_and_resource_checks() -> None:
    good = [PlacementShard(CPU, 0, 3)]
    with pytest.raises(TypeError, match=r"total_rows must be an int, got 3\.0"):
        placement(good, 3.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dtype_bytes >= 1, got 3, 0, 0, 0"):
        Placement(tuple(good), 3, 1.0, 1.0, 0, 0, 0)
    with pytest.raises(ValueError, match="encoded_row_bytes must be finite and >= 0, got nan"):
        Placement(tuple(good), 3, float("nan"), 1.0, 0, 0, 8)
    other = Resources.single_cpu()
    with pytest.raises(
        ValueError, match=r"shard device 'cpu:0' is not among the declared resources \['cpu:0'\]"
    ):
        placement(good, 3, resources=other)  # same name, different memory
    p = placement(good, 3, resources=Resources((CPU,)))
    with pytest.raises(ValueError, match="covers 3 rows but the data has 4"):
        p.validate(total_rows=4)
    with pytest.raises(ValueError, match="different resources"):
        p.validate(resources=other)
    with pytest.raises(ValueError, match="backend must be a non-empty string, got ''"):
        placement(good, 3, backend="")


def test_placement_memory_overflow_is_recorded_and_strict_raises() -> None:
    p = placement([PlacementShard(CPU, 0, 3, 1, 90, 20)], 3)
    assert not p.fits
    with pytest.raises(MemoryError, match=r"cpu:0\[0:3\] needs 110 bytes but device cpu:0 has 100"):
        p.validate(strict=True)


# -- plan --------------------------------------------------------------------------------------------


def test_plan_splits_rows_by_throughput() -> None:
    data = list(np.linspace(-1.0, 1.0, 100))
    p = plan(data, model=GaussianDistribution(0.0, 1.0), resources=two_speed())
    assert [(s.device.name, s.start, s.stop) for s in p.shards] == [("slow", 0, 25), ("fast", 25, 100)]
    assert p.total_rows == 100 and p.encoded_row_bytes == 8.0 and p.transient_row_bytes == 24.0
    assert p.model_bytes == 24 and p.statistic_bytes == 24 and p.dtype_bytes == 8
    assert p.backend == "local" and p.precision == "float64" and p.fits and p.num_chunks == 2
    # encoded = ceil(25 * 8 * 1.25); transient = ceil(25 * 24 * 1.25 + ceil(48 * 1.25))
    assert (p.shards[0].encoded_bytes, p.shards[0].transient_bytes) == (250, 810)
    assert p.total_bytes == sum(s.total_bytes for s in p.shards)
    text = str(p)
    assert text.startswith("Placement(") and "slow[0:25] rows=25 sub_chunks=1 estimated_bytes=1060" in text
    assert any("in proportion to throughput: slow 25, fast 75" in r for r in p.reasons)
    assert p.for_device("fast") == (p.shards[1],)


def test_plan_num_chunks_uses_the_weighted_device_cycle() -> None:
    p = plan(np.arange(40.0), model=GaussianDistribution(0.0, 1.0), resources=two_speed(), num_chunks=4)
    assert [(s.device.name, s.start, s.stop) for s in p.shards] == [
        ("slow", 0, 10),
        ("fast", 10, 20),
        ("fast", 20, 30),
        ("fast", 30, 40),
    ]
    few = plan([1.0, 2.0], model=GaussianDistribution(0.0, 1.0), num_chunks=5)
    assert [(s.start, s.stop) for s in few.shards] == [(0, 1), (1, 2)]
    assert any("capped from 5" in r for r in few.reasons)


def test_plan_without_data() -> None:
    p = plan(num_chunks=3)
    assert [(s.device.name, s.start, s.stop) for s in p.shards] == [("cpu:0", 0, 0)]
    assert p.total_rows == 0 and p.encoded_row_bytes == 0.0


def test_plan_memory_cap_splits_into_sub_shards() -> None:
    data = list(np.arange(100.0))
    p = plan(data, model=GaussianDistribution(0.0, 1.0), resources=Resources.single_cpu(memory_bytes=1000))
    # (1000 - 60) // (32 * 1.25) = 23 rows per shard -> ceil(100 / 23) = 5 shards of 20 rows
    assert [(s.start, s.stop) for s in p.shards] == [(0, 20), (20, 40), (40, 60), (60, 80), (80, 100)]
    assert p.fits and all(s.total_bytes <= 1000 for s in p.shards)
    assert any("split into 5 shards of <= 23 rows" in r for r in p.reasons)
    p.validate(total_rows=100, strict=True)


def test_plan_records_a_placement_that_does_not_fit() -> None:
    p = plan(
        [1.0, 2.0], model=GaussianDistribution(0.0, 1.0), resources=Resources.single_cpu(memory_bytes=50)
    )
    assert not p.fits and p.total_rows == 2
    assert any(
        "does not fit: device cpu:0 needs 60 bytes for the model and statistics alone" in r for r in p.reasons
    )
    assert "fits=False" in str(p)
    with pytest.raises(MemoryError, match="device cpu:0 has 50"):
        p.validate(strict=True)
    one_row = plan(
        [1.0], model=GaussianDistribution(0.0, 1.0), resources=Resources.single_cpu(memory_bytes=80)
    )
    assert not one_row.fits and any("needs 100 bytes for one row but has 80" in r for r in one_row.reasons)


def test_plan_precision_engine_and_components() -> None:
    model = mixture(3)
    assert plan([1.0], model=model, precision="fp32").dtype_bytes == 4
    assert plan([1.0], model=model, precision="fp32").transient_row_bytes == 3 * 4 * 3
    auto = plan([1.0], model=model, precision="auto")
    assert auto.precision == "float64" and any("'auto' resolves to float64" in r for r in auto.reasons)
    assert plan([1.0], model=model, engine="numpy").transient_row_bytes == 72.0
    estimator = MixtureEstimator([GaussianEstimator()] * 4)
    assert plan([1.0, 2.0], estimator=estimator).transient_row_bytes == 4 * 8 * 3
    # issue 55: any registered engine (torch: tests/unit/test_plan_compute.py); an unknown one is named
    with pytest.raises(ValueError, match=r"engine='cupy' is not a compute engine; registered: numpy, torch"):
        plan([1.0], model=model, engine="cupy")
    with pytest.raises(ValueError, match="unknown precision 'int8'"):
        plan([1.0], model=model, precision="int8")


def test_plan_errors_in_reference_order() -> None:
    with pytest.raises(ValueError, match="sub_chunks must be a positive integer, got 0"):
        plan(safety_factor=0, sub_chunks=0)
    with pytest.raises(ValueError, match="safety_factor must be finite and > 0, got 0"):
        plan(safety_factor=0)
    with pytest.raises(ValueError, match=r"plan requires data or an explicit num_chunks\."):
        plan()
    with pytest.raises(ValueError, match="needs an encoder, a model or an estimator"):
        plan([1.0])
    with pytest.raises(ValueError, match="num_chunks must be a positive integer, got 0"):
        plan(num_chunks=0)
    with pytest.raises(ValueError, match="sample_size must be a positive integer, got 0"):
        plan([1.0], model=GaussianDistribution(0.0, 1.0), sample_size=0)
    with pytest.raises(TypeError, match="resources must be a Resources, got list"):
        plan(num_chunks=1, resources=[DeviceSpec("a")])  # type: ignore[arg-type]


def test_plan_accepts_tables_and_arrays() -> None:
    model = GaussianDistribution(0.0, 1.0)
    values = np.arange(10.0)
    frame = pd.DataFrame({"x": values})
    for data in (
        values,
        frame,
        pa.table({"x": values}),
        pa.record_batch([pa.array(values)], ["x"]),
        pa.array(values),
    ):
        p = plan(data, model=model)
        assert p.total_rows == 10 and p.encoded_row_bytes == 8.0
    wide = pd.DataFrame({"x": values, "y": values, "label": ["a"] * 10})
    record = RecordEstimator({"x": GaussianEstimator(), "y": GaussianEstimator()})
    assert plan(wide, estimator=record).encoded_row_bytes == 16.0
    with pytest.raises(SchemaError, match=r"reads one column but the data has 3: \['x', 'y', 'label'\]"):
        plan(wide, estimator=GaussianEstimator())
    with pytest.raises(SchemaError, match=r"columns \['z'\] not found"):
        plan(frame, estimator=RecordEstimator({"z": GaussianEstimator()}))


def test_plan_scans_the_sample_for_vocabularies() -> None:
    records = ["a", "b", "a", "c"]
    p = plan(records, estimator=CategoricalEstimator())
    # one float64 count per label seen in the sample (an unscanned accumulator would size as 0)
    assert p.statistic_bytes == 3 * 8 and p.encoded_row_bytes > 0
    fitted = CategoricalEstimator().with_scan(CategoricalEstimator().encoder().scan(records))
    model = fitted.estimate(4.0, fitted.accumulator_factory().make().value())
    assert plan(records, model=model, estimator=CategoricalEstimator()).statistic_bytes == 3 * 8


class DataFrame:
    """A stand-in for a pyspark DataFrame (detected by its module name, not by import)."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.calls: list[Any] = []

    def count(self) -> int:
        self.calls.append("count")
        return self.table.num_rows

    def limit(self, n: int) -> DataFrame:
        self.calls.append(("limit", n))
        return DataFrame(self.table.slice(0, n))

    def toArrow(self) -> pa.Table:
        return self.table


DataFrame.__module__ = "pyspark.sql.dataframe"


def test_plan_reads_a_spark_dataframe_through_count_and_limit() -> None:
    frame = DataFrame(pa.table({"x": np.arange(1000.0)}))
    p = plan(frame, model=GaussianDistribution(0.0, 1.0), resources=Resources.from_spark(FakeSparkContext()))
    assert p.backend == "spark" and p.total_rows == 1000 and p.num_chunks == 5
    assert frame.calls == ["count", ("limit", 256)]
    assert any("pyspark DataFrame" in r for r in p.reasons)


def test_placement_dict_round_trip() -> None:
    p = plan(np.arange(50.0), model=mixture(2), resources=two_speed(), num_chunks=4, sub_chunks=2)
    payload = json.loads(json.dumps(p.to_dict()))
    assert payload["backend"] == "local" and payload["fits"] is True and payload["num_chunks"] == 4
    assert payload["shards"][0] == {
        "device": "slow",
        "kind": "cpu",
        "engine": "numpy",
        "memory_bytes": MB,
        "throughput": 1.0,
        "start": 0,
        "stop": 12,
        "sub_chunks": 2,
        "encoded_bytes": 120,
        "transient_bytes": 920,  # ceil(12 * 48 * 1.25 + ceil((80 + 80) * 1.25))
    }
    again = Placement.from_dict(payload)
    assert again == p
    payload["resources"] = None
    assert Placement.from_dict(payload).shards == p.shards


# -- model_sharding_plan ------------------------------------------------------------------------------


def ranges(shards: tuple[ModelShard, ...]) -> list[tuple[int, int]]:
    return [(s.start, s.stop) for s in shards]


def test_model_sharding_examples() -> None:
    model = mixture(5)
    shards = model_sharding_plan(model, two_speed(), estimator=model.estimator())
    assert ranges(shards) == [(0, 1), (1, 5)]
    assert sum(s.num_components for s in shards) == 5
    assert shards[1].parameter_bytes > shards[0].parameter_bytes
    assert shards[1].statistic_bytes > shards[0].statistic_bytes
    # 5 components: 3 x 24 bytes + w + log_w = 200 bytes; 1/5 of it rounded up.
    assert shards[0].parameter_bytes == 40
    assert ranges(model_sharding_plan(model, Resources.local(4))) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    one = model_sharding_plan(model, Resources.local(4), min_components_per_shard=3)
    assert ranges(one) == [(0, 5)] and one[0].device.name == "cpu:0"


def test_model_sharding_errors() -> None:
    model = mixture(5)
    with pytest.raises(ValueError, match="min_components_per_shard=6 exceeds the model's K=5"):
        model_sharding_plan(model, Resources.local(2), min_components_per_shard=6)
    with pytest.raises(ValueError, match="min_components_per_shard must be a positive integer, got 0"):
        model_sharding_plan(model, Resources.local(2), min_components_per_shard=0)
    with pytest.raises(ValueError, match="only axis='components' is currently supported, got axis='rows'"):
        model_sharding_plan(model, Resources.local(2), axis="rows")
    with pytest.raises(ValueError, match="GaussianDistribution has None"):
        model_sharding_plan(GaussianDistribution(0.0, 1.0), Resources.local(2))
    with pytest.raises(MemoryError, match=r"components \[0:5\] need 400 bytes but device cpu:0 has 100"):
        model_sharding_plan(model, Resources.single_cpu(memory_bytes=100))


def test_model_shard_validation() -> None:
    with pytest.raises(ValueError, match=r"non-empty range 0 <= start < stop, got \[2:2\]"):
        ModelShard(CPU, 2, 2, 0, 0)
    with pytest.raises(TypeError, match=r"parameter_bytes must be an int, got 1\.5"):
        ModelShard(CPU, 0, 1, 1.5, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="statistic_bytes=-1"):
        ModelShard(CPU, 0, 1, 0, -1)
    assert ModelShard(CPU, 0, 2, 10, 20).total_bytes == 30
