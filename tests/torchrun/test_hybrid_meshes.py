"""2-D meshes on 4 processes (``make test-torchrun`` runs this file with 4): HSDP and FSDP2 x TP."""

from __future__ import annotations

from typing import Any

import pytest

from mixle_spark.parallel.training.contracts import ParallelPlan
from tests.torchrun._models import (
    assert_parameters_close,
    global_batches,
    local_share,
    make_module,
    reference_parameters,
    squared_error,
)

pytestmark = pytest.mark.torchrun


# torch's own note on the row-wise layer's output (a view); nothing here modifies it in place.
@pytest.mark.filterwarnings("ignore:FSDP2-wrapped module .* returned a view tensor:UserWarning")
@pytest.mark.parametrize(
    "plan",
    [ParallelPlan(dp_replicate=2, dp_shard=2), ParallelPlan(dp_shard=2, tp=2)],
    ids=["hsdp", "fsdp-tp"],
)
def test_two_dimensional_meshes_equal_one_process(dist: Any, plan: ParallelPlan) -> None:
    from mixle_spark.parallel.training.torch_training import TorchDistributedBackend

    if dist.get_world_size() != 4:
        pytest.skip("a 2 x 2 mesh needs 4 processes")
    tp_plan = {"0": "colwise", "2": "rowwise"} if plan.tp > 1 else None
    session = TorchDistributedBackend().prepare(
        make_module(), plan=plan, loss_fn=squared_error, lr=0.1, tp_plan=tp_plan
    )
    coordinate = dict(plan.coordinate(dist.get_rank()))
    # The ranks of one tensor-parallel group read the same rows: the batch is split over data ranks.
    data_rank = coordinate["dp_replicate"] * plan.dp_shard + coordinate["dp_shard"]
    for batch in global_batches(6):
        receipt = session.step(local_share(batch, data_rank, plan.data_parallel_size))
        assert receipt.global_examples == 25
    assert session.wrapping == "fsdp"
    assert_parameters_close(session.full_parameters(), reference_parameters(global_batches(6)))
