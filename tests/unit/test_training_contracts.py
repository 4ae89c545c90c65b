"""Training contracts: enums, the N-D ParallelPlan mesh, capabilities, update records, the registry."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from mixle_spark.errors import UnknownNameError
from mixle_spark.parallel.training import contracts as contracts
from mixle_spark.parallel.training.contracts import (
    PHYSICAL_AXES,
    BackendCapabilities,
    CollectiveKind,
    DistributedTrainingBackend,
    DistributedUpdate,
    ParallelAxis,
    ParallelPlan,
    ParameterLayout,
    PayloadKind,
    StateLayout,
    StepReceipt,
    UnsupportedParallelismError,
    available_training_backends,
    get_training_backend,
    register_training_backend,
)

PLAN_FIELDS = (
    "dp_replicate",
    "dp_shard",
    "tp",
    "pp",
    "cp",
    "ep",
    "etp",
    "microbatches",
    "gradient_accumulation_steps",
)

# ---------------------------------------------------------------------------------------------- enums


@pytest.mark.parametrize(
    ("enum", "values"),
    [
        (ParallelAxis, ["dp_replicate", "dp_shard", "tp", "pp", "cp", "ep", "etp"]),
        (
            PayloadKind,
            ["gradient", "sufficient_statistic", "parameter", "activation", "kv_block", "token", "message"],
        ),
        (
            CollectiveKind,
            [
                "none",
                "all_reduce",
                "reduce_scatter",
                "all_gather",
                "all_to_all",
                "broadcast",
                "p2p",
                "custom",
            ],
        ),
        (StateLayout, ["replicated", "sharded", "pipeline_local", "expert_local", "offloaded"]),
    ],
)
def test_enum_members_are_their_lower_case_values(enum: Any, values: list[str]) -> None:
    assert [m.value for m in enum] == values
    for member, value in zip(enum, values, strict=True):
        assert member.name.lower() == value
        assert member == value
        assert isinstance(member, str)
        assert str(member) == value
        assert f"{member}" == value
        assert hash(member) == hash(value)
        assert enum(value) is member
    assert {m: 1 for m in enum}[values[0]] == 1


def test_physical_axes_are_the_five_mesh_dimensions_slowest_first() -> None:
    assert [a.value for a in PHYSICAL_AXES] == ["dp_replicate", "dp_shard", "tp", "pp", "cp"]


# ----------------------------------------------------------------------------------- ParallelPlan


@pytest.mark.parametrize(
    ("kwargs", "world_size", "dp_size", "mesh"),
    [
        ({}, 1, 1, (("dp_replicate",), (1,))),
        ({"dp_shard": 4}, 4, 4, (("dp_shard",), (4,))),
        ({"dp_replicate": 2, "dp_shard": 3, "tp": 5}, 30, 6, (("dp_replicate", "dp_shard", "tp"), (2, 3, 5))),
        (
            {"dp_replicate": 8, "tp": 2, "pp": 2, "cp": 2, "ep": 4, "etp": 2},
            64,
            8,
            (("dp_replicate", "tp", "pp", "cp"), (8, 2, 2, 2)),
        ),
        ({"dp_shard": 4, "ep": 2, "etp": 2}, 4, 4, (("dp_shard",), (4,))),
        ({"pp": 3, "microbatches": 6, "gradient_accumulation_steps": 5}, 3, 1, (("pp",), (3,))),
    ],
)
def test_world_size_is_the_product_of_the_physical_axes_only(
    kwargs: dict[str, int], world_size: int, dp_size: int, mesh: Any
) -> None:
    plan = ParallelPlan(**kwargs)
    assert plan.world_size == world_size
    assert plan.data_parallel_size == dp_size
    assert plan.mesh == mesh
    assert plan.mesh_axis_names == mesh[0]
    assert plan.mesh_shape == mesh[1]
    assert math.prod(plan.mesh_shape) == world_size


def test_reference_plan_with_experts() -> None:
    plan = ParallelPlan(dp_replicate=8, tp=2, pp=2, cp=2, ep=4, etp=2)
    assert plan.active_axes == (
        ParallelAxis.DP_REPLICATE,
        ParallelAxis.TP,
        ParallelAxis.PP,
        ParallelAxis.CP,
        ParallelAxis.EP,
        ParallelAxis.ETP,
    )
    assert plan.axis_sizes == {"dp_replicate": 8, "dp_shard": 1, "tp": 2, "pp": 2, "cp": 2, "ep": 4, "etp": 2}
    assert plan.as_dict() == {
        "dp_replicate": 8,
        "dp_shard": 1,
        "tp": 2,
        "pp": 2,
        "cp": 2,
        "ep": 4,
        "etp": 2,
        "microbatches": 1,
        "gradient_accumulation_steps": 1,
        "world_size": 64,
        "data_parallel_size": 8,
    }
    assert ParallelPlan.from_dict(plan.as_dict()) == plan
    assert plan.size("ep") == plan.size(ParallelAxis.EP) == plan.size(" EP ") == 4


@pytest.mark.parametrize("field", PLAN_FIELDS)
@pytest.mark.parametrize(
    ("bad", "shown"), [(0, "0"), (-2, "-2"), (True, "boolean True"), (2.0, "2.0"), ("2", "'2'")]
)
def test_every_plan_field_must_be_an_exact_positive_integer(field: str, bad: Any, shown: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field} must be an exact positive integer, got .*{shown}"):
        ParallelPlan(**{field: bad})


def test_numpy_integers_are_canonicalised_to_int() -> None:
    plan = ParallelPlan(dp_shard=np.int64(2), tp=np.int32(3))
    assert plan.world_size == 6
    assert type(plan.dp_shard) is int and type(plan.tp) is int
    assert plan == ParallelPlan(dp_shard=2, tp=3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dp_replicate": 2, "ep": 4}, r"ep=4 must divide the data-parallel domain dp_replicate\*dp_shard=2"),
        ({"tp": 4, "ep": 2}, r"ep=2 must divide the data-parallel domain dp_replicate\*dp_shard=1"),
        ({"dp_replicate": 2, "dp_shard": 3, "ep": 4}, r"ep=4 must divide .* dp_replicate\*dp_shard=6"),
        (
            {"dp_shard": 4, "ep": 2, "etp": 8},
            r"ep\*etp=16 \(ep=2, etp=8\) must divide .*dp_replicate\*dp_shard\*tp\*cp=4",
        ),
        ({"etp": 2}, r"ep\*etp=2 \(ep=1, etp=2\) must divide .*=1"),
        ({"dp_shard": 2, "pp": 4, "ep": 2, "etp": 2}, r"ep\*etp=4 .*dp_replicate\*dp_shard\*tp\*cp=2"),
    ],
)
def test_expert_groups_must_divide_the_domains_they_are_cut_from(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ParallelPlan(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{"dp_shard": 4, "ep": 4}, {"tp": 2, "etp": 2}, {"dp_replicate": 2, "cp": 2, "ep": 2, "etp": 2}],
)
def test_expert_groups_that_divide_are_accepted_and_do_not_grow_the_world(kwargs: dict[str, int]) -> None:
    plan = ParallelPlan(**kwargs)
    without_experts = ParallelPlan(**{k: v for k, v in kwargs.items() if k not in ("ep", "etp")})
    assert plan.world_size == without_experts.world_size


@pytest.mark.parametrize(
    "axes", [("dp_replicate", "tp", "cp"), ("dp_shard", "pp", "cp"), ("dp_replicate", "dp_shard", "tp")]
)
def test_coordinates_of_a_2x3x2_mesh_are_row_major_with_the_last_axis_fastest(axes: tuple[str, ...]) -> None:
    plan = ParallelPlan(**dict(zip(axes, (2, 3, 2), strict=True)))
    assert plan.mesh == (axes, (2, 3, 2))
    assert plan.world_size == 12
    expected = list(itertools.product(range(2), range(3), range(2)))  # last index fastest
    for rank, (i, j, k) in enumerate(expected):
        assert rank == i * 6 + j * 2 + k
        want = {a.value: 0 for a in PHYSICAL_AXES} | dict(zip(axes, (i, j, k), strict=True))
        coordinate = plan.coordinate(rank)
        assert coordinate == tuple(want.items())
        assert plan.rank(coordinate) == rank
        assert plan.rank(dict(zip(axes, (i, j, k), strict=True))) == rank
    assert sorted(plan.rank(plan.coordinate(r)) for r in range(12)) == list(range(12))


def test_reference_coordinates() -> None:
    plan = ParallelPlan(dp_replicate=2, tp=2)
    assert [(c[0][1], c[2][1]) for c in map(plan.coordinate, range(4))] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    five = ParallelPlan(dp_replicate=2, dp_shard=2, tp=2, pp=2, cp=2)
    assert dict(five.coordinate(13)) == {"dp_replicate": 0, "dp_shard": 1, "tp": 1, "pp": 0, "cp": 1}
    assert five.rank({ParallelAxis.DP_SHARD: 1, ParallelAxis.TP: 1, ParallelAxis.CP: 1}) == 13


@pytest.mark.parametrize(
    ("rank", "match"),
    [(12, r"rank must be in \[0, 12\) for this plan, got 12"), (-1, "got -1"), (True, "got boolean True")],
)
def test_coordinate_refuses_ranks_outside_the_mesh(rank: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ParallelPlan(dp_replicate=2, tp=3, cp=2).coordinate(rank)


@pytest.mark.parametrize(
    ("coordinate", "error", "match"),
    [
        ({"tp": 3}, ValueError, r"coordinate\['tp'\]=3 is out of range for tp=3"),
        ({"ep": 0}, ValueError, "ep is not a mesh dimension"),
        ({"xx": 0}, UnknownNameError, r"unknown parallel axis 'xx'; expected one of: cp, dp_replicate"),
        ([("tp", 1), ("TP", 1)], ValueError, "coordinate repeats axis 'tp'"),
        ({"cp": -1}, ValueError, r"coordinate\['cp'\] must be an exact integer >= 0, got -1"),
    ],
)
def test_rank_refuses_bad_coordinates(coordinate: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ParallelPlan(dp_replicate=2, tp=3, cp=2, ep=2).rank(coordinate)


def test_size_of_an_unknown_axis_lists_the_axes() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown parallel axis 'zp'; expected one of: .*etp.*tp"):
        ParallelPlan().size("zp")


def test_validate_world_size_names_both_sizes() -> None:
    plan = ParallelPlan(dp_shard=2, tp=2)
    assert plan.validate_world_size(4) == 4
    with pytest.raises(ValueError, match=r"requires world_size=4, but the process group has world_size=3"):
        plan.validate_world_size(3)
    with pytest.raises(ValueError, match=r"world_size must be an exact positive integer, got boolean True"):
        plan.validate_world_size(True)
    with pytest.raises(ValueError, match=r"got 4\.0"):
        plan.validate_world_size(4.0)


def test_from_dict_refuses_unknown_keys_and_inconsistent_sizes() -> None:
    with pytest.raises(ValueError, match=r"unknown ParallelPlan keys \['dp'\]"):
        ParallelPlan.from_dict({"dp": 2})
    with pytest.raises(ValueError, match=r"world_size=8 disagrees with the axis sizes \(world_size=2\)"):
        ParallelPlan.from_dict({"tp": 2, "world_size": 8})


# ----------------------------------------------------------------------------- BackendCapabilities

DP_ONLY = BackendCapabilities("dp_only", {ParallelAxis.DP_REPLICATE, ParallelAxis.DP_SHARD})


def test_dp_only_capabilities_refuse_tensor_parallelism_naming_the_axis() -> None:
    DP_ONLY.validate(ParallelPlan(dp_replicate=2, dp_shard=4))
    with pytest.raises(
        UnsupportedParallelismError, match=r"dp_only does not execute requested parallel axes: tp=2;"
    ) as info:
        DP_ONLY.validate(ParallelPlan(dp_shard=2, tp=2))
    assert isinstance(info.value, NotImplementedError)
    assert info.value.axes == (ParallelAxis.TP,)
    with pytest.raises(NotImplementedError, match=r"axes: pp=2, ep=2; it executes: dp_replicate, dp_shard"):
        DP_ONLY.validate(ParallelPlan(dp_replicate=2, pp=2, ep=2))
    assert DP_ONLY.unsupported_axes(ParallelPlan(tp=2, cp=2)) == (ParallelAxis.TP, ParallelAxis.CP)


def test_capabilities_refuse_unsupported_precision_and_incompatible_axes() -> None:
    tp, cp = ParallelAxis.TP, ParallelAxis.CP
    caps = BackendCapabilities(
        "torchish",
        {ParallelAxis.DP_REPLICATE, ParallelAxis.DP_SHARD, tp, cp},
        precisions={"fp32", "fp16", "bf16"},
        incompatible_axis_sets=({tp, cp},),
    )
    caps.validate(ParallelPlan(tp=2), precision="bf16")
    with pytest.raises(
        ValueError, match=r"torchish does not support precision='fp8'; supported: bf16, fp16, fp32"
    ):
        caps.validate(ParallelPlan(tp=2), precision="fp8")
    with pytest.raises(
        UnsupportedParallelismError, match=r"does not compose axes cp\+tp in one session"
    ) as info:
        caps.validate(ParallelPlan(tp=2, cp=2))
    assert set(info.value.axes) == {ParallelAxis.TP, ParallelAxis.CP}
    assert caps.as_dict() == {
        "name": "torchish",
        "axes": ["cp", "dp_replicate", "dp_shard", "tp"],
        "precisions": ["bf16", "fp16", "fp32"],
        "distributed_optimizer": False,
        "reshardable_checkpoint": False,
        "elastic_restart": False,
        "requirements": [],
        "incompatible_axis_sets": [["cp", "tp"]],
    }
    assert BackendCapabilities("x", frozenset()).precisions == frozenset({"bf16", "fp32"})


def test_capabilities_accept_axis_values_and_store_frozensets_of_members() -> None:
    values: Any = (["tp", "DP_SHARD"], ["fp32"], [("tp", "cp")])
    caps = BackendCapabilities("x", values[0], values[1], incompatible_axis_sets=values[2])
    assert caps.axes == frozenset({ParallelAxis.TP, ParallelAxis.DP_SHARD})
    assert all(type(a) is ParallelAxis for a in caps.axes)
    assert caps.precisions == frozenset({"fp32"})
    assert caps.incompatible_axis_sets == (frozenset({ParallelAxis.TP, ParallelAxis.CP}),)


def test_capabilities_validate_their_own_fields() -> None:
    with pytest.raises(UnknownNameError, match="unknown parallel axis 'model'"):
        BackendCapabilities("x", {"model"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"BackendCapabilities.axes must be a collection, got string 'tp'"):
        BackendCapabilities("x", "tp")  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"BackendCapabilities.name must be a non-blank string, got string ' '"
    ):
        BackendCapabilities(" ", frozenset())
    with pytest.raises(TypeError, match=r"elastic_restart must be a bool, got 1"):
        BackendCapabilities("x", frozenset(), elastic_restart=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"plan must be a ParallelPlan, got dict"):
        DP_ONLY.validate({"tp": 2})  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- ParameterLayout


def test_parameter_layout_round_trips_to_a_dict() -> None:
    layout = ParameterLayout(
        "w", (4, 0, 3), (("tp", "Shard(0)"), (ParallelAxis.DP_SHARD, "Shard(1)")), "tied"
    )
    assert layout.as_dict() == {
        "logical_id": "w",
        "global_shape": [4, 0, 3],
        "placements": {"tp": "Shard(0)", "dp_shard": "Shard(1)"},
        "shared_group": "tied",
        "optimizer_state": "replicated",
    }


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"logical_id": "  "}, ValueError, "logical_id must be a non-blank string, got string '  '"),
        ({"global_shape": [2, 3]}, TypeError, r"global_shape must be a tuple, got list \[2, 3\]"),
        ({"global_shape": (2, -1)}, ValueError, r"global_shape\[1\] must be an exact integer >= 0, got -1"),
        ({"global_shape": (2.0,)}, ValueError, r"global_shape\[0\] .* got 2\.0"),
        ({"placements": (("tp", "a"), ("tp", "b"))}, ValueError, "placements repeat axis 'tp'"),
        ({"placements": (("tp",),)}, ValueError, r"an \(axis, placement\) pair, got \('tp',\)"),
        ({"placements": (("tp", ""),)}, ValueError, "placement must be a non-blank string, got string ''"),
        ({"shared_group": ""}, ValueError, "shared_group must be a non-blank string"),
        (
            {"optimizer_state": "sharded"},
            TypeError,
            "optimizer_state must be a StateLayout, got string 'sharded'",
        ),
    ],
)
def test_parameter_layout_validation(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    args: dict[str, Any] = {"logical_id": "w", "global_shape": (2,)} | kwargs
    with pytest.raises(error, match=match):
        ParameterLayout(**args)


# ------------------------------------------------------------------------------ DistributedUpdate


def _update(**changes: Any) -> DistributedUpdate:
    fields: dict[str, Any] = {
        "node_id": "n0",
        "payload": PayloadKind.SUFFICIENT_STATISTIC,
        "collective": CollectiveKind.ALL_REDUCE,
        "mesh_axes": (ParallelAxis.DP_SHARD,),
        "state_layout": StateLayout.REPLICATED,
        "exact": False,
    }
    return DistributedUpdate(**(fields | changes))


@pytest.mark.parametrize("collective", [c for c in CollectiveKind if c is not CollectiveKind.NONE])
def test_a_collective_cannot_claim_guaranteed_exactness(collective: CollectiveKind) -> None:
    with pytest.raises(ValueError, match=rf"a distributed collective \({collective.value}\) cannot claim"):
        _update(collective=collective, exact=True)
    assert _update(collective=collective, contract_exact=True).contract_exact is True


def test_exact_is_allowed_without_a_collective() -> None:
    update = _update(collective=CollectiveKind.NONE, mesh_axes=(), exact=True, contract_exact=True)
    assert update.exact is True
    assert update.as_dict()["collective"] == "none"


def test_update_with_evidence_round_trips_to_a_dict() -> None:
    update = _update(
        determinism_observed=True,
        maximum_absolute_error=0,
        maximum_relative_error=1e-15,
        numerics_evidence_id="run-7",
        numerics_sample_count=3,
        notes=("tree reduce",),
    )
    assert update.maximum_absolute_error == 0.0 and isinstance(update.maximum_absolute_error, float)
    assert update.as_dict() == {
        "node_id": "n0",
        "payload": "sufficient_statistic",
        "collective": "all_reduce",
        "mesh_axes": ["dp_shard"],
        "state_layout": "replicated",
        "exact": False,
        "notes": ["tree reduce"],
        "contract_exact": False,
        "determinism_observed": True,
        "maximum_absolute_error": 0.0,
        "maximum_relative_error": 1e-15,
        "numerics_evidence_id": "run-7",
        "numerics_sample_count": 3,
    }


EVIDENCE = {
    "determinism_observed": False,
    "maximum_absolute_error": 1e-12,
    "maximum_relative_error": 1e-14,
}


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"node_id": ""}, ValueError, "node_id must be a non-blank string, got string ''"),
        ({"payload": "gradient"}, TypeError, "payload must be a PayloadKind member, got string 'gradient'"),
        ({"collective": "all_reduce"}, TypeError, "collective must be a CollectiveKind member"),
        ({"state_layout": None}, TypeError, "state_layout must be a StateLayout member, got null"),
        ({"mesh_axes": [ParallelAxis.TP]}, TypeError, r"mesh_axes must be a tuple of ParallelAxis, got list"),
        (
            {"mesh_axes": ("tp",)},
            TypeError,
            r"mesh_axes must be a tuple of ParallelAxis, got tuple \('tp',\)",
        ),
        ({"mesh_axes": (ParallelAxis.TP, ParallelAxis.TP)}, ValueError, "mesh_axes repeat an axis: tp, tp"),
        ({"exact": 0}, TypeError, "exact must be a bool, got 0"),
        ({"contract_exact": "yes"}, TypeError, "contract_exact must be a bool, got string 'yes'"),
        ({"determinism_observed": 1}, TypeError, "determinism_observed must be a bool or None, got 1"),
        ({"notes": ["x"]}, TypeError, r"notes must be a tuple of strings, got list \['x'\]"),
        (
            {"maximum_absolute_error": -1.0},
            ValueError,
            r"maximum_absolute_error must be a finite real >= 0 .*-1\.0",
        ),
        ({"maximum_relative_error": math.inf}, ValueError, r"maximum_relative_error .* got inf"),
        ({"maximum_relative_error": math.nan}, ValueError, r"maximum_relative_error .* got nan"),
        ({"numerics_sample_count": True}, ValueError, r"numerics_sample_count .* got boolean True"),
        (
            {"numerics_evidence_id": "e1"},
            ValueError,
            r"requires both an id and positive sample count, .*'e1'",
        ),
        ({"numerics_sample_count": 4, **EVIDENCE}, ValueError, r"requires both .*numerics_sample_count=4"),
        (
            {"numerics_evidence_id": "e1", "numerics_sample_count": 2, "determinism_observed": True},
            ValueError,
            r"numerics evidence 'e1' lacks \['maximum_absolute_error', 'maximum_relative_error'\]",
        ),
        (
            {"maximum_absolute_error": 0.5},
            ValueError,
            r"maximum_absolute_error=0\.5 given without numerics_evidence_id",
        ),
    ],
)
def test_distributed_update_validation(changes: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        _update(**changes)


# ------------------------------------------------------------------------------------ StepReceipt


def test_step_receipt_derives_global_counts() -> None:
    receipt = StepReceipt(1, 0.5, 4, 16, 2, 2, 4, "sgd", "fp32")
    assert (receipt.global_examples, receipt.global_tokens) == (16, 64)
    observed = StepReceipt(1, 0.5, 4, 16, 2, 2, 4, "sgd", "fp32", global_examples_observed=15)
    assert (observed.global_examples, observed.global_tokens) == (15, 64)
    as_dict = observed.as_dict()
    assert as_dict["global_examples"] == 15 and as_dict["global_tokens"] == 64
    assert as_dict["loss"] == 0.5 and as_dict["skipped"] is False
    assert hash(receipt) == hash(StepReceipt(1, 0.5, 4, 16, 2, 2, 4, "sgd", "fp32"))


def test_step_receipt_detaches_extra_from_the_caller() -> None:
    extra: dict[str, Any] = {"grad_norm": [1.0, 2.0], "nested": {"ids": {1, 2}}}
    receipt = StepReceipt(0, 1, 1, 1, 1, 1, 1, "adamw", "bf16", extra=extra)
    extra["grad_norm"].append(3.0)
    extra["nested"]["ids"].add(3)
    assert receipt.extra == {"grad_norm": [1.0, 2.0], "nested": {"ids": {1, 2}}}
    receipt.as_dict()["extra"]["grad_norm"].append(9.0)
    assert receipt.extra["grad_norm"] == [1.0, 2.0]
    assert type(receipt.loss) is float


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"step": -1}, ValueError, "step must be an exact integer >= 0, got -1"),
        ({"local_tokens": 1.0}, ValueError, r"local_tokens must be an exact integer >= 0, got 1\.0"),
        ({"collective_bytes": True}, ValueError, "collective_bytes .* got boolean True"),
        ({"microbatches": 0}, ValueError, "microbatches must be an exact integer >= 1, got 0"),
        ({"data_parallel_size": 0}, ValueError, "data_parallel_size must be an exact integer >= 1, got 0"),
        ({"loss": math.inf}, ValueError, "loss must be finite, got inf"),
        ({"loss": math.nan}, ValueError, "loss must be finite, got nan"),
        ({"loss": True}, TypeError, "loss must be a real number, got boolean True"),
        ({"loss": "0.1"}, TypeError, "loss must be a real number, got string '0.1'"),
        ({"optimizer": ""}, ValueError, "optimizer must be a non-blank string, got string ''"),
        ({"precision": None}, ValueError, "precision must be a non-blank string, got null"),
        ({"skipped": "no"}, TypeError, "skipped must be a bool, got string 'no'"),
        ({"extra": []}, TypeError, r"extra must be a dict, got list \[\]"),
        (
            {"global_tokens_observed": -1},
            ValueError,
            "global_tokens_observed must be an exact integer >= 0, got -1",
        ),
        (
            {"global_examples_observed": 3},
            ValueError,
            "global_examples_observed=3 is smaller than .*local_examples=4",
        ),
    ],
)
def test_step_receipt_validation(changes: dict[str, Any], error: type[Exception], match: str) -> None:
    fields: dict[str, Any] = dict(
        step=1,
        loss=0.5,
        local_examples=4,
        local_tokens=16,
        microbatches=2,
        accumulation_steps=2,
        data_parallel_size=4,
        optimizer="sgd",
        precision="fp32",
    )
    with pytest.raises(error, match=match):
        StepReceipt(**(fields | changes))


# --------------------------------------------------------------------------------------- registry


class FakeBackend:
    """The smallest DistributedTrainingBackend: capabilities plus prepare."""

    def __init__(self, name: str = "fake") -> None:
        self.capabilities = BackendCapabilities(name, {ParallelAxis.DP_REPLICATE})

    def prepare(self, module: Any, *, plan: ParallelPlan, **kwargs: Any) -> Any:
        self.capabilities.validate(plan)
        return (module, plan)


@pytest.fixture
def clean_registry() -> Iterator[None]:
    """Run with an empty training registry and restore it afterwards."""
    registered, resolved = dict(contracts._REGISTERED), dict(contracts._RESOLVED)
    contracts._REGISTERED.clear()
    contracts._RESOLVED.clear()
    yield
    contracts._REGISTERED.clear()
    contracts._REGISTERED.update(registered)
    contracts._RESOLVED.clear()
    contracts._RESOLVED.update(resolved)


def test_the_torch_and_megatron_backends_are_registered_lazily_without_importing_torch() -> None:
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from mixle_spark.parallel import available_training_backends\n"
        "print(available_training_backends())\n"
        "print(sorted(m for m in ('torch', 'lightning', 'megatron') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["('megatron', 'torch_native')", "[]"]


@pytest.mark.usefixtures("clean_registry")
def test_registering_an_instance_resolves_it_case_and_hyphen_insensitively() -> None:
    backend = FakeBackend()
    assert isinstance(backend, DistributedTrainingBackend)
    register_training_backend("My-Backend", backend)
    assert available_training_backends() == ("my_backend",)
    assert get_training_backend("my_backend") is backend
    assert get_training_backend(" MY-BACKEND ") is backend


@pytest.mark.usefixtures("clean_registry")
def test_a_lazy_factory_is_called_exactly_once_on_first_use() -> None:
    calls: list[int] = []

    def factory() -> FakeBackend:
        calls.append(1)
        return FakeBackend("lazy")

    register_training_backend("lazy", factory)
    assert calls == []
    first = get_training_backend("lazy")
    assert get_training_backend("LAZY") is first
    register_training_backend("lazy", factory)  # the same factory again: a no-op, the cache survives
    assert get_training_backend("lazy") is first
    assert first.capabilities.name == "lazy"
    assert len(calls) == 1


@pytest.mark.usefixtures("clean_registry")
def test_a_class_is_registered_as_its_own_factory() -> None:
    register_training_backend("cls", FakeBackend)
    backend = get_training_backend("cls")
    assert type(backend) is FakeBackend
    assert get_training_backend("cls") is backend


@pytest.mark.usefixtures("clean_registry")
def test_a_different_object_under_a_taken_name_is_refused_unless_override() -> None:
    first, second = FakeBackend("a"), FakeBackend("b")
    register_training_backend("dup", first)
    register_training_backend("DUP", first)  # same object: no-op
    with pytest.raises(
        ValueError, match=r"distributed training backend 'dup' is already registered \(FakeBackend\)"
    ):
        register_training_backend("Dup", second)
    assert get_training_backend("dup") is first
    register_training_backend("dup", second, override=True)
    assert get_training_backend("dup") is second


@pytest.mark.usefixtures("clean_registry")
def test_override_drops_the_cached_instance_of_a_replaced_factory() -> None:
    register_training_backend("x", lambda: FakeBackend("old"))
    assert get_training_backend("x").capabilities.name == "old"
    register_training_backend("x", lambda: FakeBackend("new"), override=True)
    assert get_training_backend("x").capabilities.name == "new"


@pytest.mark.usefixtures("clean_registry")
def test_a_factory_that_builds_no_backend_raises_and_is_not_cached() -> None:
    calls: list[int] = []

    def broken() -> object:
        calls.append(1)
        return object()

    register_training_backend("broken", broken)
    for expected_calls in (1, 2):
        with pytest.raises(
            TypeError, match=r"registered backend 'broken' does not implement DistributedTrainingBackend"
        ):
            get_training_backend("broken")
        assert len(calls) == expected_calls


@pytest.mark.usefixtures("clean_registry")
def test_registry_refuses_bad_names_and_objects() -> None:
    register_training_backend("real", FakeBackend())
    with pytest.raises(UnknownNameError, match=r"unknown training backend 'nope'; expected one of: real"):
        get_training_backend("nope")
    with pytest.raises(ValueError, match=r"a training backend needs a non-blank name, got ' '"):
        register_training_backend(" ", FakeBackend())
    with pytest.raises(TypeError, match=r"a training backend name must be a string, got 3"):
        register_training_backend(3, FakeBackend())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"training backend 'n' must implement .* got 42"):
        register_training_backend("n", 42)
    bad = FakeBackend()
    bad.capabilities = "dp"  # type: ignore[assignment]
    with pytest.raises(TypeError, match=r"capabilities must be a BackendCapabilities, got string 'dp'"):
        register_training_backend("bad", bad)
    assert available_training_backends() == ("real",)


@pytest.mark.usefixtures("clean_registry")
def test_unknown_name_with_an_empty_registry() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown training backend 'torch_native'"):
        get_training_backend("torch_native")
