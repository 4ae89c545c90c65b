"""dcp_checkpoint and training_health on a real gloo process group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mixle_spark.parallel.training.contracts import ParallelPlan
from tests.torchrun._models import (
    assert_parameters_close,
    global_batches,
    local_share,
    make_module,
    squared_error,
)

pytestmark = pytest.mark.torchrun


def _session(dist: Any, plan: ParallelPlan | None = None, **kwargs: Any) -> Any:
    from mixle_spark.parallel.training.torch_training import TorchDistributedBackend

    plan = plan or ParallelPlan(dp_shard=dist.get_world_size())
    return TorchDistributedBackend().prepare(make_module(), plan=plan, loss_fn=squared_error, **kwargs)


def _steps(dist: Any, session: Any, batches: list[Any]) -> list[Any]:
    return [session.step(local_share(b, dist.get_rank(), dist.get_world_size())) for b in batches]


def test_a_sharded_checkpoint_resumes_exactly_and_refuses_corruption(dist: Any, shared_dir: Path) -> None:
    from mixle_spark.parallel.training.dcp_checkpoint import (
        CheckpointIntegrityError,
        load_training_state,
        save_training_state,
    )

    batches = global_batches(8)
    straight = _session(dist, optimizer="adam", lr=0.05)
    _steps(dist, straight, batches[:4])
    rank = dist.get_rank()
    path = save_training_state(straight, shared_dir, step=4, extra={"loader": {"batch": 4, "rank": rank}})
    _steps(dist, straight, batches[4:])
    want = straight.full_parameters()

    files = sorted(p.name for p in path.iterdir())
    shards = [f for f in files if f.endswith(".distcp")]
    assert len(shards) == dist.get_world_size() and "_SUCCESS" in files and "manifest.json" in files
    resumed = _session(dist, optimizer="adam", lr=0.05)
    loaded = load_training_state(resumed, shared_dir)
    assert (loaded.step, loaded.extra, resumed.steps) == (4, {"loader": {"batch": 4, "rank": rank}}, 4)
    _steps(dist, resumed, batches[4:])
    assert_parameters_close(resumed.full_parameters(), want, rtol=1e-6, atol=1e-8)

    with pytest.raises(FileExistsError, match="generations are immutable"):
        save_training_state(straight, shared_dir, step=4)
    dist.barrier()
    if rank == 0:
        shard = path / shards[-1]
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0x01
        shard.write_bytes(bytes(data))
    dist.barrier()
    with pytest.raises(CheckpointIntegrityError, match=f"file '{shards[-1]}' does not match its manifest"):
        load_training_state(_session(dist), shared_dir)
    dist.barrier()
    if rank == 0:
        (path / "_SUCCESS").unlink()
    dist.barrier()
    with pytest.raises(CheckpointIntegrityError, match="is incomplete"):
        load_training_state(_session(dist), shared_dir, generation=path)
    with pytest.raises(FileNotFoundError, match="no published checkpoint generation"):
        load_training_state(_session(dist), shared_dir)


def test_health_receipts_flag_an_injected_nan_and_a_loss_spike_and_nothing_else(dist: Any) -> None:
    import torch

    from mixle_spark.parallel.training.training_health import TrainingHealthMonitor

    def run(nan_at: int | None, spike_at: int | None) -> tuple[TrainingHealthMonitor, Any]:
        plan = ParallelPlan(dp_replicate=dist.get_world_size())
        session = _session(dist, plan, lr=0.05, max_grad_norm=1.0)
        monitor = TrainingHealthMonitor()
        for i, (x, y) in enumerate(global_batches(40, rows=48, seed=9)):
            if i == spike_at:  # every rank's targets move far off: the global loss jumps > 10x
                y = y + 6.0
            x, y = local_share((x, y), dist.get_rank(), dist.get_world_size())
            if i == nan_at and dist.get_rank() == dist.get_world_size() - 1:  # one rank only
                x = x.clone()
                x[0, 0] = torch.nan
            receipt = session.step((x, y))
            monitor.observe(receipt)
        return monitor, session

    clean, _ = run(None, None)
    assert clean.flagged() == {} and clean.report()["healthy_steps"] == 40
    monitor, session = run(nan_at=15, spike_at=30)
    receipts = {r.step: r for r in monitor.receipts}
    assert monitor.flagged() == {
        "nonfinite_loss": [16],
        "nonfinite_grad_norm": [16],
        "loss_spike": [31],
        "grad_norm_spike": [31],
    }
    assert receipts[31].loss > 10 * receipts[30].loss
    assert all(
        torch.isfinite(p).all() for p in session.full_parameters().values()
    )  # the NaN step was skipped
    report = monitor.report()
    assert report["flag_counts"]["nonfinite_loss"] == 1 and report["median_examples_per_second"] > 0
