"""A training job for ``torchrun --max-restarts 1``: rank 1 of the first attempt dies mid-step.

    python -m torch.distributed.run --nproc-per-node 2 --max-restarts 1 tests/torchrun/_elastic_job.py \
        CHECKPOINTS OUT STEPS KILL_AT

Writes OUT/rank-R.pt (the final parameters) and, from rank 0, OUT/run.json (restart count, the step
it resumed from, the loader state, the receipts' steps and the health flags).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from mixle_spark.parallel.training.contracts import ParallelPlan
from mixle_spark.parallel.training.fault_tolerant_training import (
    ElasticTrainer,
    ShardedBatches,
    restart_count,
)
from mixle_spark.parallel.training.torch_training import TorchDistributedBackend, init_process_group
from mixle_spark.parallel.training.training_health import TrainingHealthMonitor
from tests.torchrun._models import global_batches, make_module, squared_error


def main() -> None:
    root, out, steps, kill_at = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    dist = init_process_group(timeout_s=60)
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = (torch.cat(t) for t in zip(*global_batches(1, rows=90, seed=5), strict=True))
    session = TorchDistributedBackend().prepare(
        make_module(), plan=ParallelPlan(dp_replicate=world), loss_fn=squared_error, optimizer="adam", lr=0.02
    )

    def fetch(rows: object) -> tuple[torch.Tensor, torch.Tensor]:
        if restart_count() == 0 and rank == 1 and session.steps == kill_at:
            os._exit(17)  # dies mid-run: its peers are inside this step's gradient all-reduce
        index = torch.as_tensor(rows)
        return x[index], y[index]

    batches = ShardedBatches(len(x), 16, seed=11, rank=rank, world_size=world)
    monitor = TrainingHealthMonitor(min_samples=4)
    trainer = ElasticTrainer(session, batches, fetch, root, snapshot_every=3, monitor=monitor)
    receipts = trainer.run(steps)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(session.full_parameters(), out / f"rank-{rank}.pt")
    if rank == 0:
        run = {
            "restart_count": restart_count(),
            "resumed_from": trainer.resumed_from,
            "loader": batches.state.as_dict(),
            "steps": [r.step for r in receipts],
            "flags": monitor.flagged(),
        }
        (out / "run.json").write_text(json.dumps(run))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
