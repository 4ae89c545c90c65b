"""megatron_training on a real gloo group: the plan maps onto Megatron's names and is refused here."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mixle_spark.parallel.training.contracts import ParallelPlan

pytestmark = pytest.mark.torchrun

FIELDS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
          "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel",
          "use_distributed_optimizer", "bf16", "fp16", "fp8")  # fmt: skip


def test_the_plan_of_this_process_group_maps_onto_a_provider_and_megatron_is_refused_in_one_line(
    dist: Any,
) -> None:
    from mixle_spark.parallel.training.contracts import get_training_backend
    from mixle_spark.parallel.training.launchers import attest_worker_coordinate
    from mixle_spark.parallel.training.megatron_training import configure_provider, megatron_unavailable

    world, rank = dist.get_world_size(), dist.get_rank()
    plan = ParallelPlan(
        dp_shard=world // 2 or 1, tp=2 if world % 2 == 0 else 1, pp=1 if world % 2 == 0 else world
    )
    attestation = attest_worker_coordinate(plan, actual_world_size=world, rank=rank)
    assert attestation.rank == rank
    provider = configure_provider(SimpleNamespace(**dict.fromkeys(FIELDS)), plan, precision="bf16")
    assert (provider.tensor_model_parallel_size, provider.pipeline_model_parallel_size) == (plan.tp, plan.pp)
    assert provider.sequence_parallel == (plan.tp > 1) and provider.bf16 and provider.fp8 is None
    with pytest.raises(AttributeError, match=r"has no attribute\(s\) \['context_parallel_size'"):
        configure_provider(
            SimpleNamespace(tensor_model_parallel_size=1, pipeline_model_parallel_size=1), plan
        )

    backend = get_training_backend("megatron")
    with pytest.raises(ValueError, match=f"requires world_size={world + 1}"):
        backend.prepare(provider, plan=ParallelPlan(pp=world + 1))
    reason = megatron_unavailable()
    assert reason is not None and "\n" not in reason  # no CUDA in CI: nothing is run, and it says why
    with pytest.raises(RuntimeError, match=r"^Megatron training needs"):
        backend.prepare(provider, plan=plan)
    with pytest.raises(TypeError, match="unexpected keyword"):
        backend.prepare(provider, plan=plan, lr=0.1)
