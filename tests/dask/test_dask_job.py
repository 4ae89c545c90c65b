"""``em_fit --backend dask``: the bundled sample on a local Dask cluster writes the model the local
backend writes; an input the dask backend cannot read is one error line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.dask

ROOT = Path(__file__).resolve().parents[2]


def _job(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "em_fit.py"), "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def test_the_sample_fit_on_dask_writes_the_local_model(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    dask_run = _job("--backend", "dask", "--num-workers", "2", "--output", str(tmp_path / "dask"))
    assert dask_run.returncode == 0, dask_run.stderr
    local_run = _job("--backend", "local", "--output", str(tmp_path / "local"))
    assert local_run.returncode == 0, local_run.stderr
    dask_model = json.loads((tmp_path / "dask" / "model.json").read_text())
    local_model = json.loads((tmp_path / "local" / "model.json").read_text())
    assert dask_model == local_model
    summary = json.loads((tmp_path / "dask" / "summary.json").read_text())
    assert summary["rows"] == 5000 and summary["dask"]["workers"] == 2


def test_a_csv_input_is_refused_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    csv = tmp_path / "x.csv"
    csv.write_text("x\n1.0\n2.0\n")
    spec = tmp_path / "model.json"
    spec.write_text(json.dumps({"type": "gaussian"}))
    run = _job(
        "--backend", "dask", "--input", str(csv), "--model", str(spec), "--output", str(tmp_path / "out")
    )
    assert run.returncode == 2  # bad input, as for every other backend
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "--backend dask reads Parquet" in lines[0], run.stderr
    assert not (tmp_path / "out").exists()
