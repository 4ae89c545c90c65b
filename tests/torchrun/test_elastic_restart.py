"""fault_tolerant_training under ``torchrun --max-restarts 1``: a killed rank's job resumes, not restarts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.torchrun._models import assert_parameters_close

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]


def _torchrun(tmp: Path, name: str, kill_at: int) -> tuple[dict[str, Any], list[Any]]:
    import torch

    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "--max-restarts", "1", "--monitor-interval", "0.5",
        str(ROOT / "tests" / "torchrun" / "_elastic_job.py"),
        str(tmp / f"{name}-checkpoints"), str(tmp / name), "14", str(kill_at),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads((tmp / name / "run.json").read_text())
    return run, [torch.load(tmp / name / f"rank-{r}.pt") for r in range(2)]


def _uninterrupted() -> dict[str, Any]:
    """One process, plain torch, on the job's global batches (2 ranks equal one process: see
    test_torch_training): the parameters an uninterrupted run ends with."""
    import torch

    from mixle_spark.parallel.training.fault_tolerant_training import ShardedBatches
    from tests.torchrun._models import global_batches, make_module, squared_error

    x, y = (torch.cat(t) for t in zip(*global_batches(1, rows=90, seed=5), strict=True))
    module = make_module()
    opt = torch.optim.Adam(module.parameters(), lr=0.02)
    batches = ShardedBatches(len(x), 16, seed=11)
    for _ in range(14):
        index = torch.as_tensor(batches.next_indices())
        opt.zero_grad()
        squared_error(module, (x[index], y[index])).mean().backward()
        opt.step()
    return {k: v.detach().clone() for k, v in module.named_parameters()}


def test_a_rank_killed_mid_run_resumes_from_the_last_snapshot_with_its_loader_position(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch.distributed")
    killed, got = _torchrun(tmp_path, "killed", kill_at=8)
    # The snapshot of step 6 was published after step 7; rank 1 died inside step 9 (8 committed).
    assert killed["restart_count"] == 1 and killed["resumed_from"] == 6
    assert killed["steps"] == list(range(7, 15))
    assert killed["flags"] == {"restart": [7]}
    assert killed["loader"] == {"seed": 11, "epoch": 2, "batch_idx": 2, "rank": 0, "world_size": 2}
    want = _uninterrupted()
    for params in got:
        assert_parameters_close(params, want, rtol=1e-5, atol=1e-7)
    assert_parameters_close(got[1], got[0], rtol=0, atol=0)  # the ranks hold the same model
    published = sorted(p.name for p in (tmp_path / "killed-checkpoints").iterdir())
    assert published == ["generation-000000006", "generation-000000009", "generation-000000012"]
