"""``em_fit --backend ray``: the bundled sample on a local Ray runtime writes the model the local
backend writes (to round-off: two actors merge two partial sums); an input the ray backend cannot
read, or a flag of another backend, is one error line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mixle_spark.spec import load_model
from tests.unit._cases import assert_models_close

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]


def _job(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "em_fit.py"), "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def test_the_sample_fit_on_ray_writes_the_local_model(tmp_path: Path) -> None:
    pytest.importorskip("ray.data")
    ray_run = _job("--backend", "ray", "--num-workers", "2", "--output", str(tmp_path / "ray"))
    assert ray_run.returncode == 0, ray_run.stderr
    local_run = _job("--backend", "local", "--output", str(tmp_path / "local"))
    assert local_run.returncode == 0, local_run.stderr
    ray_model = load_model(tmp_path / "ray" / "model.json")
    local_model = load_model(tmp_path / "local" / "model.json")
    assert_models_close(ray_model, local_model, rtol=1e-9)
    ray_summary = json.loads((tmp_path / "ray" / "summary.json").read_text())
    local_summary = json.loads((tmp_path / "local" / "summary.json").read_text())
    assert ray_summary["rows"] == 5000
    assert ray_summary["ray"] == {"address": "local", "nodes": 1, "cpus": 2}
    assert ray_summary["iterations"] == local_summary["iterations"]
    assert ray_summary["log_likelihood"] == pytest.approx(local_summary["log_likelihood"], rel=1e-12)


def test_a_csv_input_is_refused_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("ray.data")
    csv = tmp_path / "x.csv"
    csv.write_text("x\n1.0\n2.0\n")
    spec = tmp_path / "model.json"
    spec.write_text(json.dumps({"type": "gaussian"}))
    run = _job(
        "--backend", "ray", "--input", str(csv), "--model", str(spec), "--output", str(tmp_path / "out")
    )
    assert run.returncode == 2  # bad input, as for every other backend
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "--backend ray reads Parquet" in lines[0], run.stderr
    assert not (tmp_path / "out").exists()


def test_a_ray_address_without_the_ray_backend_is_a_usage_error(tmp_path: Path) -> None:
    run = _job("--backend", "local", "--ray-address", "auto", "--output", str(tmp_path / "out"))
    assert run.returncode == 2
    assert "--ray-address only applies to --backend ray" in run.stderr
