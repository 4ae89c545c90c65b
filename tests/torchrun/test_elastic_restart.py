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


def test_a_rank_killed_mid_run_resumes_from_the_last_snapshot_with_its_loader_position(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch.distributed")
    straight, want = _torchrun(tmp_path, "straight", kill_at=-1)
    assert straight["restart_count"] == 0 and straight["resumed_from"] is None
    assert straight["steps"] == list(range(1, 15)) and straight["flags"] == {}

    killed, got = _torchrun(tmp_path, "killed", kill_at=8)
    # The snapshot of step 6 was published after step 7; rank 1 died inside step 9 (8 committed).
    assert killed["restart_count"] == 1 and killed["resumed_from"] == 6
    assert killed["steps"] == list(range(7, 15))
    assert killed["flags"] == {"restart": [7]}
    assert killed["loader"] == straight["loader"] == {
        "seed": 11, "epoch": 2, "batch_idx": 2, "rank": 0, "world_size": 2,
    }  # fmt: skip
    for params in (*want, *got):
        assert_parameters_close(params, want[0], rtol=1e-6, atol=1e-8)
    published = sorted(p.name for p in (tmp_path / "killed-checkpoints").iterdir())
    assert published == ["generation-000000006", "generation-000000009", "generation-000000012"]
