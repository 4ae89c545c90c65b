"""A Python worker killed mid-fit with ``--no-resident`` on ``local[2]`` (one Spark job per E-step;
local masters allow no task retries): the job exits 1 with one line saying what was lost and what to
do, and the same command run again resumes from its checkpoint to the model an uninterrupted run
writes, byte for byte.

The workers are killed from outside (SIGKILL to every child of PySpark's worker daemon, repeatedly
until the job ends), as an out-of-memory killer would.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _python_workers(root: int) -> list[int]:
    """Pids of the Python workers of the Spark under process ``root``: the children of a
    ``pyspark.daemon`` descended from it (other Sparks on the machine, the test session's among them,
    are left alone)."""
    parent, daemons = {}, set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):  # the process ended while we read it
            continue
        if b"pyspark.daemon" in cmdline:
            daemons.add(int(entry.name))

    def descends(pid: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parent.get(pid, 0)
        return False

    ours = {d for d in daemons if descends(d)}
    return [pid for pid, ppid in parent.items() if ppid in ours]


def _command(data: Path, spec: Path, out: Path, checkpoints: Path, trace: Path) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "jobs" / "em_fit.py"),
        *("--input", str(data), "--model", str(spec), "--output", str(out)),
        *("--master", "local[2]", "--no-resident", "--quiet", "--trace", str(trace)),
        *("--checkpoint-dir", str(checkpoints), "--checkpoint-every", "1"),
    ]


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


def test_a_killed_python_worker_stops_the_fit_with_one_line_and_a_rerun_resumes(tmp_path: Path) -> None:
    if not Path("/proc/self/stat").exists():
        pytest.skip("finds the Python workers through /proc (Linux)")
    rng = np.random.default_rng(5)
    x = np.concatenate(
        [rng.normal(-2.0, 1.0, 24_000), rng.normal(1.0, 0.7, 24_000), rng.normal(4.0, 1.5, 32_000)]
    )
    data, spec = tmp_path / "x.parquet", tmp_path / "spec.json"
    pq.write_table(pa.table({"x": rng.permutation(x)}), data, row_group_size=20_000)
    fit = {"max_its": 16, "delta": 0, "seed": 2}  # a job per iteration: killed after 3
    spec.write_text(
        json.dumps({"estimator": {"type": "mixture", "k": 3, "component": "gaussian"}, "fit": fit})
    )

    # 1. kill the workers once three iterations have been traced (and checkpointed), again and again
    # until the job ends
    trace = tmp_path / "trace.jsonl"
    command = _command(data, spec, tmp_path / "killed", tmp_path / "checkpoints", trace)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    job = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    killed, deadline = 0, time.monotonic() + 300
    while job.poll() is None and time.monotonic() < deadline:
        if trace.exists() and len(trace.read_text().splitlines()) >= 4:
            for pid in _python_workers(job.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
        time.sleep(0.05)
    _out, err = job.communicate(timeout=120)
    assert killed, "no Python worker was found to kill"
    assert job.returncode == 1, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-3000:]  # the failure is the one line on stderr
    assert re.fullmatch(
        r"em_fit: error: a Spark task failed because (a Python worker exited|the connection to a Python "
        r"worker broke), and it could not be retried; run again \(with --checkpoint-dir a fit resumes "
        r"where it stopped\) \(Spark's log: .*/mixle_spark-em_fit-\d+\.log\)",
        lines[0],
    ), lines[0]
    assert not (tmp_path / "killed").exists()  # nothing written
    log = Path(lines[0].rsplit("(Spark's log: ", 1)[1][:-1])
    assert log.is_file()  # named, so kept
    log.unlink()
    stopped_at = len(trace.read_text().splitlines())
    assert 4 <= stopped_at < 16
    assert any((tmp_path / "checkpoints").iterdir()), stopped_at

    # 2. the same command again resumes from the newest checkpoint and finishes
    again = _run(command)
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = re.search(r"em_fit: resumed from checkpoint .*checkpoints at iteration (\d+)", again.stderr)
    assert resumed is not None and 3 <= int(resumed.group(1)) < 16, again.stderr

    # 3. ... to the model an uninterrupted run writes
    clean = _run(
        _command(data, spec, tmp_path / "clean", tmp_path / "clean-checkpoints", tmp_path / "clean.jsonl")
    )
    assert clean.returncode == 0, clean.stderr[-3000:]
    resumed_model = (tmp_path / "killed" / "model.json").read_bytes()
    assert resumed_model == (tmp_path / "clean" / "model.json").read_bytes()
    summary = json.loads((tmp_path / "killed" / "summary.json").read_text())
    assert summary["iterations"] == 16
