"""``em_fit --backend dask|ray``: the bundled sample on a local Dask cluster / Ray runtime writes the
model the local backend writes (to round-off: the engines merge partial sums); an input these
backends cannot read, or a flag of another backend, is one error line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mixle_spark.spec import load_model
from tests.unit._cases import assert_models_close

ROOT = Path(__file__).resolve().parents[1]

ENGINES = [
    pytest.param("dask", "distributed", {"workers": 2}, marks=pytest.mark.dask, id="dask"),
    pytest.param(
        "ray", "ray.data", {"address": "local", "nodes": 1, "cpus": 2}, marks=pytest.mark.ray, id="ray"
    ),
]


def _job(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "em_fit.py"), "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(("engine", "library", "described"), ENGINES)
def test_the_sample_fit_writes_the_local_model(
    tmp_path: Path, engine: str, library: str, described: dict[str, object]
) -> None:
    pytest.importorskip(library)
    run = _job("--backend", engine, "--num-workers", "2", "--output", str(tmp_path / engine))
    assert run.returncode == 0, run.stderr
    local_run = _job("--backend", "local", "--output", str(tmp_path / "local"))
    assert local_run.returncode == 0, local_run.stderr
    got = load_model(tmp_path / engine / "model.json")
    assert_models_close(got, load_model(tmp_path / "local" / "model.json"), rtol=1e-9)
    summary = json.loads((tmp_path / engine / "summary.json").read_text())
    local_summary = json.loads((tmp_path / "local" / "summary.json").read_text())
    assert summary["rows"] == 5000 and summary["iterations"] == local_summary["iterations"]
    assert summary["log_likelihood"] == pytest.approx(local_summary["log_likelihood"], rel=1e-12)
    assert {key: summary[engine][key] for key in described} == described


@pytest.mark.parametrize(("engine", "library", "described"), ENGINES)
def test_a_csv_input_is_refused_in_one_line(
    tmp_path: Path, engine: str, library: str, described: object
) -> None:
    pytest.importorskip(library)
    csv = tmp_path / "x.csv"
    csv.write_text("x\n1.0\n2.0\n")
    spec = tmp_path / "model.json"
    spec.write_text(json.dumps({"type": "gaussian"}))
    run = _job(
        "--backend", engine, "--input", str(csv), "--model", str(spec), "--output", str(tmp_path / "out")
    )
    assert run.returncode == 2  # bad input, as for every other backend
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--backend {engine} reads Parquet" in lines[0], run.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("flag", "owner"), [("--dask-scheduler", "dask"), ("--ray-address", "ray")])
def test_an_engine_address_without_its_backend_is_a_usage_error(
    tmp_path: Path, flag: str, owner: str
) -> None:
    run = _job("--backend", "local", flag, "localhost:1", "--output", str(tmp_path / "out"))
    assert run.returncode == 2
    assert f"{flag} only applies to --backend {owner}" in run.stderr
