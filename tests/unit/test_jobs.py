"""jobs/em_fit.py on the bundled sample: fits, writes the model, recovers the segments; fails cleanly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mixle_spark.spec import load_model

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "customers_sample.parquet"
SPEC = ROOT / "conf" / "models" / "customers.json"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "em_fit.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )


def test_em_fit_recovers_the_sample_segments(tmp_path: Path) -> None:
    out = tmp_path / "model.json"
    proc = _run("--input", str(SAMPLE), "--model", str(SPEC), "--output", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "converged=True" in proc.stdout and f"wrote {out}" in proc.stdout
    model = load_model(out)
    truth = load_model(SAMPLE.with_suffix(".truth.json"))
    got = sorted((c.fields["amount"].mu, w) for c, w in zip(model.components, model.w, strict=True))
    want = sorted((c.fields["amount"].mu, w) for c, w in zip(truth.components, truth.w, strict=True))
    np.testing.assert_allclose([g[0] for g in got], [t[0] for t in want], atol=0.1)
    np.testing.assert_allclose([g[1] for g in got], [t[1] for t in want], atol=0.03)


def test_em_fit_refuses_to_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "model.json"
    out.write_text("keep me")
    proc = _run("--input", str(SAMPLE), "--model", str(SPEC), "--output", str(out))
    assert proc.returncode == 1
    assert "exists; pass --overwrite" in proc.stderr
    assert out.read_text() == "keep me"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--input", "nope.parquet"), "input not found: nope.parquet"),
        (("--model", "nope.json"), "model spec file not found: nope.json"),
    ],
)
def test_em_fit_bad_paths(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    base = {"--input": str(SAMPLE), "--model": str(SPEC), "--output": str(tmp_path / "m.json")}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    proc = _run(*[x for kv in base.items() for x in kv])
    assert proc.returncode == 1
    assert message in proc.stderr
    assert not (tmp_path / "m.json").exists()
