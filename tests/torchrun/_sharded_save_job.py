"""Two ranks train an FSDP2-sharded module, then ``save_sharded`` it (for test_sharded_reshard.py).

    python -m torch.distributed.run --nproc-per-node 2 tests/torchrun/_sharded_save_job.py OUT

Writes OUT/ck (the sharded checkpoint after 3 steps), and from rank 0 OUT/saved.pt (the parameters
then) and OUT/next.pt (after one more step on global batch 3).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from mixle_spark.parallel.training.contracts import ParallelPlan
from mixle_spark.parallel.training.dcp_checkpoint import save_sharded
from mixle_spark.parallel.training.torch_training import TorchDistributedBackend, init_process_group
from tests.torchrun._models import global_batches, local_share, make_module, squared_error


def main() -> None:
    out = Path(sys.argv[1])
    dist = init_process_group(timeout_s=60)
    rank, world = dist.get_rank(), dist.get_world_size()
    session = TorchDistributedBackend().prepare(
        make_module(), plan=ParallelPlan(dp_shard=world), loss_fn=squared_error, optimizer="adam", lr=0.05
    )
    batches = global_batches(4)
    for batch in batches[:3]:
        session.step(local_share(batch, rank, world))
    save_sharded(session.module, session.optimizer, out / "ck")
    saved = session.full_parameters()
    session.step(local_share(batches[3], rank, world))
    after = session.full_parameters()
    if rank == 0:
        torch.save(saved, out / "saved.pt")
        torch.save(after, out / "next.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
