"""torch_training on a real gloo process group: DDP, FSDP2 and tensor parallelism equal one process."""

from __future__ import annotations

from typing import Any

import pytest

from mixle_spark.parallel.training.contracts import ParallelPlan, get_training_backend
from tests.torchrun._models import (
    assert_parameters_close,
    global_batches,
    local_share,
    make_module,
    reference_parameters,
    squared_error,
)

pytestmark = pytest.mark.torchrun


def _train(dist: Any, plan: ParallelPlan, steps: int = 8, **kwargs: Any) -> Any:
    from mixle_spark.parallel.training.torch_training import TorchDistributedBackend

    session = TorchDistributedBackend().prepare(
        make_module(), plan=plan, loss_fn=squared_error, lr=0.1, **kwargs
    )
    receipts = [
        session.step(local_share(b, dist.get_rank(), dist.get_world_size())) for b in global_batches(steps)
    ]
    return session, receipts


@pytest.mark.parametrize("axis", ["dp_replicate", "dp_shard"])
def test_data_parallel_training_equals_one_process_on_the_same_global_batches(dist: Any, axis: str) -> None:
    plan = ParallelPlan(**{axis: dist.get_world_size()})
    session, receipts = _train(dist, plan)
    assert session.wrapping == {"dp_replicate": "ddp", "dp_shard": "fsdp"}[axis]
    assert_parameters_close(session.full_parameters(), reference_parameters(global_batches(8)))
    # The receipt counts the global batch (25 rows, unevenly split) and the global mean loss.
    assert [r.global_examples for r in receipts] == [25] * 8
    assert receipts[-1].local_examples == len(range(dist.get_rank(), 25, dist.get_world_size()))
    assert receipts[0].loss > receipts[-1].loss > 0 and not any(r.skipped for r in receipts)


def test_microbatches_and_accumulation_change_nothing_but_memory(dist: Any) -> None:
    from mixle_spark.parallel.training.torch_training import TorchDistributedBackend

    world = dist.get_world_size()
    plan = ParallelPlan(dp_replicate=world, microbatches=2, gradient_accumulation_steps=2)
    session = TorchDistributedBackend().prepare(make_module(), plan=plan, loss_fn=squared_error, lr=0.1)
    for batch in global_batches(4):
        first, second = (batch[0][:12], batch[1][:12]), (batch[0][12:], batch[1][12:])
        assert session.train_batch(local_share(first, dist.get_rank(), world)) is None
        with pytest.raises(RuntimeError, match="finish gradient accumulation before saving"):
            session.state_dict()
        receipt = session.train_batch(local_share(second, dist.get_rank(), world))
        assert receipt is not None and receipt.accumulation_steps == 2 and receipt.global_examples == 25
    assert_parameters_close(session.full_parameters(), reference_parameters(global_batches(4)))


def test_tensor_parallel_training_equals_one_process(dist: Any) -> None:
    """Every rank sees the whole batch; the hidden layer is split column-wise then row-wise."""
    from mixle_spark.parallel.training.torch_training import (
        TorchDistributedBackend,
        describe_parameter_layouts,
    )

    world = dist.get_world_size()
    plan = ParallelPlan(tp=world)
    session = TorchDistributedBackend().prepare(
        make_module(), plan=plan, loss_fn=squared_error, lr=0.1, tp_plan={"0": "colwise", "2": "rowwise"}
    )
    for batch in global_batches(6):
        receipt = session.step(batch)
        assert receipt.global_examples == 25
    assert_parameters_close(session.full_parameters(), reference_parameters(global_batches(6)))
    layouts = {p.logical_id: dict(p.placements) for p in describe_parameter_layouts(session.module, plan)}
    assert layouts["0.weight"]["tp"] == "shard(0)" and layouts["2.weight"]["tp"] == "shard(1)"


def test_the_backend_is_registered_and_refuses_what_it_does_not_run(dist: Any) -> None:
    from mixle_spark.parallel.training.contracts import UnsupportedParallelismError

    backend = get_training_backend("torch_native")
    world = dist.get_world_size()
    with pytest.raises(UnsupportedParallelismError, match="pp=2"):
        backend.prepare(make_module(), plan=ParallelPlan(pp=2), loss_fn=squared_error)
    with pytest.raises(
        ValueError, match=f"requires world_size={world + 1}, but the process group has world_size={world}"
    ):
        backend.prepare(make_module(), plan=ParallelPlan(dp_replicate=world + 1), loss_fn=squared_error)
    with pytest.raises(ValueError, match=r"plan\.tp=.* needs tp_plan"):
        backend.prepare(make_module(), plan=ParallelPlan(tp=world), loss_fn=squared_error)
