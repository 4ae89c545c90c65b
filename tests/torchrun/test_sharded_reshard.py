"""A checkpoint ``save_sharded`` wrote from two FSDP2 ranks loads into one plain process (issue 55)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.torchrun._models import assert_parameters_close, global_batches, make_module, squared_error

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]


def test_two_ranks_sharded_state_loads_into_one_process_with_its_optimizer(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch.distributed.checkpoint")
    from mixle_spark.parallel.training.dcp_checkpoint import load_sharded

    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        str(ROOT / "tests" / "torchrun" / "_sharded_save_job.py"), str(tmp_path),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    checkpoint = tmp_path / "ck"
    assert json.loads((checkpoint / "manifest.json").read_text())["world_size"] == 2
    assert len(list(checkpoint.glob("*.distcp"))) == 2  # one shard file per rank

    module = make_module(seed=5)  # other initial weights: everything must come from the checkpoint
    optimizer = torch.optim.Adam(module.parameters(), lr=0.05)
    assert load_sharded(module, optimizer, checkpoint) == 2
    params = {k: v.detach().clone() for k, v in module.named_parameters()}
    assert_parameters_close(params, torch.load(tmp_path / "saved.pt"), rtol=0, atol=0)

    optimizer.zero_grad()
    squared_error(module, global_batches(4)[3]).mean().backward()
    optimizer.step()  # Adam's moments and step count came over from the two ranks' shards
    params = {k: v.detach().clone() for k, v in module.named_parameters()}
    assert_parameters_close(params, torch.load(tmp_path / "next.pt"), rtol=1e-5, atol=1e-7)
