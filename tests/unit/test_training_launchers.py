"""Training launchers: rank -> coordinate attestation, Ray / Lightning gating without the libraries.

Neither ray nor lightning is needed: their absence is forced through ``sys.modules`` (so the tests
also hold where they are installed), and the launch paths run against small fake modules.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from mixle_spark.parallel.training.contracts import ParallelAxis, ParallelPlan, UnsupportedParallelismError
from mixle_spark.parallel.training.launchers import (
    PLAN_CONFIG_KEY,
    TOPOLOGY_CONFIG_KEY,
    LightningFabricLauncher,
    RayTrainLauncher,
    TopologyBoundFabric,
    WorkerTopologyAttestation,
    attest_worker_coordinate,
)

# ------------------------------------------------------------------------------------ attestation


def test_attestation_follows_the_reference_examples() -> None:
    plan = ParallelPlan(dp_replicate=2, tp=2)
    got = [attest_worker_coordinate(plan, actual_world_size=4, rank=r).as_dict() for r in range(4)]
    assert [(a["coordinate"]["dp_replicate"], a["coordinate"]["tp"]) for a in got] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    assert all(
        a["coordinate"]["dp_shard"] == a["coordinate"]["pp"] == a["coordinate"]["cp"] == 0 for a in got
    )
    five = ParallelPlan(dp_replicate=2, dp_shard=2, tp=2, pp=2, cp=2)
    attestation = attest_worker_coordinate(five, actual_world_size=32, rank=13)
    assert attestation == WorkerTopologyAttestation(
        13, 32, (("dp_replicate", 0), ("dp_shard", 1), ("tp", 1), ("pp", 0), ("cp", 1))
    )
    assert attestation.index("tp") == attestation.index(ParallelAxis.TP) == 1


def test_every_rank_of_a_2x3x2_mesh_attests_its_own_coordinate() -> None:
    plan = ParallelPlan(dp_shard=2, tp=3, pp=2, ep=2)
    seen = set()
    for rank in range(12):
        attestation = attest_worker_coordinate(plan, actual_world_size=12, rank=rank)
        assert attestation.coordinate == plan.coordinate(rank)
        assert plan.rank(attestation.coordinate) == rank
        assert rank == attestation.index("dp_shard") * 6 + attestation.index("tp") * 2 + attestation.index(
            "pp"
        )
        seen.add(attestation.coordinate)
    assert len(seen) == 12


@pytest.mark.parametrize(
    ("world_size", "rank", "match"),
    [
        (3, 0, r"parallel plan requires world_size=4, but the process group has world_size=3"),
        (8, 0, r"requires world_size=4, .* world_size=8"),
        (0, 0, r"world_size must be an exact positive integer, got 0"),
        (4, 4, r"rank must be an exact integer in \[0, 4\) for world_size=4, got 4"),
        (4, -1, r"rank must be .* got -1"),
        (4, True, r"rank must be .* got boolean True"),
        (4, 1.0, r"rank must be .* got 1\.0"),
    ],
)
def test_attestation_refuses_mismatched_worlds_and_ranks(world_size: Any, rank: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        attest_worker_coordinate(ParallelPlan(dp_shard=2, tp=2), actual_world_size=world_size, rank=rank)


def test_attestation_needs_a_plan_and_a_well_formed_coordinate() -> None:
    with pytest.raises(TypeError, match=r"plan must be a ParallelPlan, got dict"):
        attest_worker_coordinate({"tp": 2}, actual_world_size=2, rank=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"rank 2 is outside the process group \[0, 2\)"):
        WorkerTopologyAttestation(2, 2, ParallelPlan(tp=2).coordinate(1))
    with pytest.raises(
        ValueError, match=r"coordinate must be a tuple of \(axis, index\) pairs .*\('tp', 0\)"
    ):
        WorkerTopologyAttestation(0, 2, (("tp", 0),))
    with pytest.raises(ValueError, match=r"coordinate\['cp'\] must be an exact integer >= 0, got -1"):
        WorkerTopologyAttestation(
            0, 2, (("dp_replicate", 0), ("dp_shard", 0), ("tp", 0), ("pp", 0), ("cp", -1))
        )
    with pytest.raises(ValueError, match="ep is not a mesh dimension"):
        attest_worker_coordinate(ParallelPlan(), actual_world_size=1, rank=0).index("ep")


# ---------------------------------------------------------------------------- missing libraries


@pytest.fixture
def no_lightning(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("lightning", "lightning.fabric", "lightning_fabric"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ray", "ray.train", "ray.train.torch"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.usefixtures("no_lightning")
def test_lightning_absent_names_the_extra_to_install() -> None:
    with pytest.raises(
        ImportError,
        match=r"Lightning Fabric launch requires lightning: pip install 'mixle-spark\[lightning\]'",
    ):
        LightningFabricLauncher().create(plan=ParallelPlan(dp_shard=2))


@pytest.mark.usefixtures("no_ray")
def test_ray_absent_names_the_extra_to_install() -> None:
    with pytest.raises(
        ImportError, match=r"requires ray\[train\] and torch: pip install 'mixle-spark\[ray-train\]'"
    ):
        RayTrainLauncher().launch(lambda config: None, plan=ParallelPlan(dp_replicate=2))


@pytest.mark.usefixtures("no_ray")
def test_ray_arguments_are_validated_before_ray_is_imported() -> None:
    launcher = RayTrainLauncher()
    with pytest.raises(ValueError, match=r"use_gpu=False conflicts with the resource request GPU=1"):
        launcher.launch(
            lambda config: None, plan=ParallelPlan(), use_gpu=False, resources_per_worker={"GPU": 1}
        )
    with pytest.raises(TypeError, match=r"train_loop_per_worker must be callable, got string 'train'"):
        launcher.launch("train", plan=ParallelPlan())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"must accept the config dict as its one argument"):
        launcher.launch(lambda: None, plan=ParallelPlan())  # type: ignore[arg-type,misc]
    with pytest.raises(TypeError, match=r"plan must be a ParallelPlan, got 4"):
        launcher.launch(lambda config: None, plan=4)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- Lightning (pure logic)


@pytest.mark.usefixtures("no_lightning")
@pytest.mark.parametrize(
    ("kwargs", "requested", "axes"),
    [
        ({"tp": 2}, "tp=2", (ParallelAxis.TP,)),
        ({"dp_shard": 2, "pp": 4}, "pp=4", (ParallelAxis.PP,)),
        ({"cp": 2}, "cp=2", (ParallelAxis.CP,)),
        ({"dp_shard": 4, "ep": 2}, "ep=2", (ParallelAxis.EP,)),
        ({"tp": 2, "etp": 2}, "tp=2, etp=2", (ParallelAxis.TP, ParallelAxis.ETP)),
    ],
)
def test_lightning_refuses_every_non_data_parallel_axis_before_importing(
    kwargs: dict[str, int], requested: str, axes: tuple[ParallelAxis, ...]
) -> None:
    with pytest.raises(
        UnsupportedParallelismError,
        match=rf"Lightning Fabric launcher only owns data parallelism; requested: {requested}$",
    ) as info:
        LightningFabricLauncher().create(plan=ParallelPlan(**kwargs))
    assert isinstance(info.value, NotImplementedError)
    assert info.value.axes == axes


@pytest.mark.parametrize(
    ("plan", "strategy"),
    [(ParallelPlan(), "ddp"), (ParallelPlan(dp_replicate=4), "ddp"), (ParallelPlan(dp_shard=4), "fsdp")],
)
def test_lightning_config_defaults(plan: ParallelPlan, strategy: str) -> None:
    config = LightningFabricLauncher().fabric_config(plan=plan, callbacks=["cb"])
    assert config == {
        "accelerator": "auto",
        "devices": plan.world_size,
        "num_nodes": 1,
        "precision": "32-true",
        "strategy": strategy,
        "callbacks": ["cb"],
    }


def test_lightning_multi_node_and_explicit_hybrid_strategy() -> None:
    strategy = object()
    plan = ParallelPlan(dp_replicate=2, dp_shard=4)
    config = LightningFabricLauncher().fabric_config(plan=plan, devices=4, num_nodes=2, strategy=strategy)
    assert (config["devices"], config["num_nodes"], config["strategy"]) == (4, 2, strategy)


@pytest.mark.parametrize(
    ("plan", "kwargs", "error", "match"),
    [
        (
            ParallelPlan(dp_replicate=2, dp_shard=2),
            {},
            UnsupportedParallelismError,
            r"hybrid sharded data parallelism \(dp_replicate=2, dp_shard=2\) requires an explicit Fabric",
        ),
        (
            ParallelPlan(dp_shard=2),
            {"num_nodes": 0},
            ValueError,
            "num_nodes must be an exact integer >= 1, got 0",
        ),
        (ParallelPlan(dp_shard=2), {"num_nodes": True}, ValueError, "num_nodes .* got boolean True"),
        (
            ParallelPlan(dp_shard=4),
            {"num_nodes": 2},
            ValueError,
            r"multi-node launch \(num_nodes=2\) requires an explicit per-node device count",
        ),
        (
            ParallelPlan(dp_shard=4),
            {"devices": "0,1"},
            ValueError,
            "devices must be an exact integer >= 1, got string '0,1'",
        ),
        (
            ParallelPlan(dp_shard=4),
            {"devices": 2},
            ValueError,
            r"devices=2 x num_nodes=1 = 2 processes, but the plan has world_size=4",
        ),
        (
            ParallelPlan(dp_shard=4),
            {"devices": 4, "num_nodes": 2},
            ValueError,
            r"= 8 processes, .* world_size=4",
        ),
        (
            ParallelPlan(dp_shard=4),
            {"strategy": "ddp"},
            ValueError,
            r"strategy='ddp' does not shard, but the plan shards the model \(dp_replicate=1, dp_shard=4\)",
        ),
        (
            ParallelPlan(dp_replicate=2),
            {"strategy": "fsdp"},
            ValueError,
            r"strategy='fsdp' does not replicate, but the plan replicates .*\(dp_replicate=2, dp_shard=1\)",
        ),
        (
            ParallelPlan(dp_replicate=2, dp_shard=2),
            {"strategy": "fsdp"},
            ValueError,
            r"strategy='fsdp' cannot express hybrid sharding \(dp_replicate=2, dp_shard=2\)",
        ),
        ("dp", {}, TypeError, r"plan must be a ParallelPlan, got string 'dp'"),
    ],
)
def test_lightning_config_refusals(
    plan: Any, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        LightningFabricLauncher().fabric_config(plan=plan, **kwargs)


# ------------------------------------------------------------------------ Lightning (fake module)


class FakeFabric:
    """Records its arguments; ``launch`` plays one process of the given rank."""

    rank_to_play = 0

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.world_size = kwargs["devices"] * kwargs["num_nodes"]
        self.global_rank = -1
        self.precision_name = kwargs["precision"]

    def launch(self, function: Any = None, *args: Any, **kwargs: Any) -> Any:
        self.global_rank = FakeFabric.rank_to_play
        return None if function is None else function(self, *args, **kwargs)


@pytest.fixture
def fake_lightning(monkeypatch: pytest.MonkeyPatch) -> None:
    package, fabric = types.ModuleType("lightning"), types.ModuleType("lightning.fabric")
    fabric.Fabric = FakeFabric  # type: ignore[attr-defined]
    package.fabric = fabric  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "lightning", package)
    monkeypatch.setitem(sys.modules, "lightning.fabric", fabric)
    monkeypatch.setattr(FakeFabric, "rank_to_play", 3)


@pytest.mark.usefixtures("fake_lightning")
def test_created_fabric_attests_its_rank_on_launch() -> None:
    plan = ParallelPlan(dp_shard=4)
    bound = LightningFabricLauncher().create(plan=plan, precision="bf16-mixed")
    assert isinstance(bound, TopologyBoundFabric) and bound.plan is plan
    assert bound.fabric.kwargs["strategy"] == "fsdp"
    assert bound.precision_name == "bf16-mixed"  # proxied to Fabric
    with pytest.raises(RuntimeError, match=r"not attested yet: call launch\(\) first"):
        bound.attest_topology()
    bound.launch()
    assert bound.attest_topology().as_dict() == {
        "rank": 3,
        "world_size": 4,
        "coordinate": {"dp_replicate": 0, "dp_shard": 3, "tp": 0, "pp": 0, "cp": 0},
    }
    with pytest.raises(AttributeError, match="_secret"):
        bound._secret  # noqa: B018


@pytest.mark.usefixtures("fake_lightning")
def test_fabric_launch_with_a_function_passes_the_attested_wrapper() -> None:
    bound = LightningFabricLauncher().create(plan=ParallelPlan(dp_replicate=4))
    seen: list[Any] = []

    def work(fabric: Any, scale: int) -> int:
        seen.append(fabric)
        return fabric.attest_topology().rank * scale

    assert bound.launch(work, 10) == 30
    assert seen == [bound]


@pytest.mark.usefixtures("fake_lightning")
def test_fabric_with_a_different_world_is_refused_at_launch() -> None:
    bound = LightningFabricLauncher().create(plan=ParallelPlan(dp_shard=4))
    bound.fabric.world_size = 2  # the runtime disagrees with the plan
    with pytest.raises(ValueError, match="requires world_size=4, but the process group has world_size=2"):
        bound.launch()


# ------------------------------------------------------------------------------- Ray (pure logic)


@pytest.mark.parametrize(
    ("plan", "workers"),
    [
        (ParallelPlan(), 1),
        (ParallelPlan(dp_replicate=2, tp=2, pp=2), 8),
        (ParallelPlan(dp_shard=4, ep=4, etp=1), 4),
        (ParallelPlan(dp_replicate=8, tp=2, pp=2, cp=2, ep=4, etp=2), 64),
    ],
)
def test_ray_launches_one_worker_per_plan_rank(plan: ParallelPlan, workers: int) -> None:
    assert RayTrainLauncher().scaling_config(plan) == {
        "num_workers": workers,
        "use_gpu": True,
        "resources_per_worker": None,
    }


def test_ray_scaling_config_keeps_valid_resources() -> None:
    config = RayTrainLauncher().scaling_config(
        ParallelPlan(dp_shard=2), use_gpu=False, resources_per_worker={"CPU": 4, "GPU": 0, "memory": 2.5e9}
    )
    assert config == {
        "num_workers": 2,
        "use_gpu": False,
        "resources_per_worker": {"CPU": 4, "GPU": 0, "memory": 2.5e9},
    }


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"use_gpu": 1}, TypeError, "use_gpu must be a bool, got 1"),
        (
            {"resources_per_worker": [("CPU", 1)]},
            TypeError,
            r"resources_per_worker must be a dict or None, got list",
        ),
        ({"resources_per_worker": {" ": 1}}, ValueError, "resource names must be non-blank strings, got ' '"),
        (
            {"resources_per_worker": {"CPU": -1}},
            ValueError,
            "resource 'CPU' must be a finite real >= 0, got -1",
        ),
        ({"resources_per_worker": {"CPU": float("inf")}}, ValueError, "resource 'CPU' .* got inf"),
        ({"resources_per_worker": {"CPU": True}}, ValueError, "resource 'CPU' .* got boolean True"),
        (
            {"resources_per_worker": {"GPU": 0}},
            ValueError,
            "use_gpu=True conflicts with the resource request GPU=0",
        ),
        (
            {"use_gpu": False, "resources_per_worker": {"GPU": 0.5}},
            ValueError,
            r"use_gpu=False conflicts .*GPU=0\.5",
        ),
    ],
)
def test_ray_scaling_config_refusals(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        RayTrainLauncher().scaling_config(ParallelPlan(), **kwargs)


def test_ray_train_loop_config_injects_the_plan_into_a_copy() -> None:
    plan = ParallelPlan(dp_shard=2, tp=2)
    mine = {"lr": 0.1}
    config = RayTrainLauncher().train_loop_config(plan, mine)
    assert config == {"lr": 0.1, PLAN_CONFIG_KEY: plan.as_dict()}
    assert mine == {"lr": 0.1}
    assert ParallelPlan.from_dict(config[PLAN_CONFIG_KEY]) == plan
    assert RayTrainLauncher().train_loop_config(plan) == {PLAN_CONFIG_KEY: plan.as_dict()}
    for key in (PLAN_CONFIG_KEY, TOPOLOGY_CONFIG_KEY):
        with pytest.raises(ValueError, match=rf"may not set the reserved key\(s\) {key}"):
            RayTrainLauncher().train_loop_config(plan, {key: 1})
    with pytest.raises(TypeError, match=r"train_loop_config must be a dict or None, got list"):
        RayTrainLauncher().train_loop_config(plan, [])  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ Ray (fake module)


class FakeContext:
    def __init__(self, world_size: int, rank: int) -> None:
        self.world_size, self.rank = world_size, rank

    def get_world_size(self) -> int:
        return self.world_size

    def get_world_rank(self) -> int:
        return self.rank


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Fake ``ray.train`` / ``ray.train.torch``: ``fit()`` runs the loop once per scaled worker."""
    state: dict[str, Any] = {"context": None, "trainers": [], "reported_world_size": None}
    train, torch_module = types.ModuleType("ray.train"), types.ModuleType("ray.train.torch")

    class ScalingConfig:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    class TorchTrainer:
        def __init__(
            self, loop: Any, *, train_loop_config: Any, scaling_config: Any, run_config: Any
        ) -> None:
            self.loop, self.config, self.scaling, self.run_config = (
                loop,
                train_loop_config,
                scaling_config,
                run_config,
            )
            state["trainers"].append(self)

        def fit(self) -> list[Any]:
            workers = self.scaling.kwargs["num_workers"]
            results = []
            for rank in range(workers):
                state["context"] = FakeContext(state["reported_world_size"] or workers, rank)
                results.append(self.loop(dict(self.config)))
            return results

    train.ScalingConfig = ScalingConfig  # type: ignore[attr-defined]
    train.get_context = lambda: state["context"]  # type: ignore[attr-defined]
    torch_module.TorchTrainer = TorchTrainer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))
    monkeypatch.setitem(sys.modules, "ray.train", train)
    monkeypatch.setitem(sys.modules, "ray.train.torch", torch_module)
    return state


def test_ray_launch_runs_every_rank_with_its_attestation(fake_ray: dict[str, Any]) -> None:
    plan = ParallelPlan(dp_replicate=2, tp=3, cp=2)

    def loop(config: dict[str, Any]) -> tuple[int, dict[str, int], float]:
        attestation = config[TOPOLOGY_CONFIG_KEY]
        assert config[PLAN_CONFIG_KEY] == plan.as_dict()
        return attestation.rank, attestation.as_dict()["coordinate"], config["lr"]

    results = RayTrainLauncher().launch(
        loop, plan=plan, train_loop_config={"lr": 0.5}, resources_per_worker={"GPU": 1}, run_config="rc"
    )
    assert [r[0] for r in results] == list(range(12))
    assert [r[1] for r in results] == [dict(plan.coordinate(rank)) for rank in range(12)]
    assert {r[2] for r in results} == {0.5}
    (trainer,) = fake_ray["trainers"]
    assert trainer.scaling.kwargs == {"num_workers": 12, "use_gpu": True, "resources_per_worker": {"GPU": 1}}
    assert trainer.run_config == "rc"


def test_ray_worker_in_a_wrong_sized_group_is_refused(fake_ray: dict[str, Any]) -> None:
    fake_ray["reported_world_size"] = 6
    with pytest.raises(ValueError, match="requires world_size=4, but the process group has world_size=6"):
        RayTrainLauncher().launch(lambda config: None, plan=ParallelPlan(dp_shard=4))
