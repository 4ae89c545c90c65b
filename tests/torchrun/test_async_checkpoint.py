"""dcp_checkpoint's asynchronous save and load_training_metadata on a real gloo process group (issue 55)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.torchrun._models import global_batches, local_share, make_module, squared_error

pytestmark = pytest.mark.torchrun


def test_an_async_save_publishes_every_ranks_state_and_a_failure_on_one_rank_stops_all(
    dist: Any, shared_dir: Path
) -> None:
    import torch

    from mixle_spark.parallel.training.contracts import ParallelPlan
    from mixle_spark.parallel.training.dcp_checkpoint import (
        CheckpointWriteError,
        async_save_training_state,
        load_training_metadata,
        load_training_state,
    )
    from mixle_spark.parallel.training.torch_training import TorchDistributedBackend

    rank, world = dist.get_rank(), dist.get_world_size()

    def session() -> Any:
        return TorchDistributedBackend().prepare(
            make_module(), plan=ParallelPlan(dp_shard=world), loss_fn=squared_error, optimizer="adam", lr=0.05
        )

    trained = session()
    batches = global_batches(4)
    for batch in batches[:2]:
        trained.step(local_share(batch, rank, world))
    at_save = trained.full_parameters()
    handle = async_save_training_state(trained, shared_dir, step=2, extra={"rank": rank, "batch": 2})
    for batch in batches[2:]:  # training goes on while the write runs
        trained.step(local_share(batch, rank, world))
    assert handle.wait() == shared_dir / "generation-000000002"
    meta = load_training_metadata(shared_dir)
    assert (meta["step"], meta["saved_world_size"], meta["extra"]) == (2, world, {"rank": rank, "batch": 2})
    assert meta["parallel_plan"]["dp_shard"] == world
    resumed = session()
    load_training_state(resumed, shared_dir)
    for name, value in resumed.full_parameters().items():
        assert torch.equal(value, at_save[name]), name

    state = {k: v for k, v in trained.state_dict().items() if k != "step"}
    if rank == world - 1:
        state["optimizer"] = {**state["optimizer"], "hook": lambda: 0}  # this rank's write fails
    broken = async_save_training_state(state, shared_dir, step=4)
    with pytest.raises(
        CheckpointWriteError, match=r"asynchronous checkpoint of step 4 .* nothing was published"
    ):
        broken.wait()
    dist.barrier()
    assert sorted(p.name for p in shared_dir.iterdir()) == ["generation-000000002"]
