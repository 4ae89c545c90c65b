"""Task retries do not change the estimates: every E-step task fails on its first attempt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mixle_spark.estimation import optimize
from mixle_spark.spec import model_from_dict
from mixle_spark.stats import GaussianDistribution, GaussianEstimator, MixtureDistribution, MixtureEstimator

pytestmark = pytest.mark.spark

START = MixtureDistribution([GaussianDistribution(-3.0, 1.0), GaussianDistribution(2.0, 0.5)], [0.4, 0.6])


def test_first_attempt_failures_give_identical_estimates() -> None:
    x = np.asarray(START.sampler(6).sample(600))
    script = Path(__file__).with_name("_retry_fit.py")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, str(script), json.dumps(x.tolist())],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
        env={**__import__("os").environ, "PYTHONPATH": str(root)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("MODEL "))
    got = model_from_dict(json.loads(line[len("MODEL ") :]))
    want = optimize(
        list(x), MixtureEstimator([GaussianEstimator()] * 2), max_its=4, delta=None, prev_estimate=START
    )
    assert "injected failure" in proc.stderr  # the failures really happened
    np.testing.assert_allclose(got.w, want.w, rtol=1e-12)
    for a, b in zip(got.components, want.components, strict=True):
        assert a.mu == pytest.approx(b.mu, rel=1e-12)
        assert a.sigma2 == pytest.approx(b.sigma2, rel=1e-12)
