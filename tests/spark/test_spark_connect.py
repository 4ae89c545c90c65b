"""The spark backend under a real Spark Connect session (no RDDs or broadcasts, DataFrame merges):
optimize, best_of, select_k, score, the segment profile's assignment counts, kept statistics and
updates, a Pipeline with MixleEstimator, each equal to the local backend's result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle_spark.estimation import best_of, optimize
from mixle_spark.model_selection import select_k
from mixle_spark.spec import model_from_dict
from mixle_spark.stats import GaussianDistribution, GaussianEstimator, MixtureDistribution, MixtureEstimator
from tests.spark.test_incremental_spark import check_connect_updates
from tests.spark.test_ml_estimator import check_connect_pipeline
from tests.spark.test_precision_spark import check_connect_precision
from tests.spark.test_streaming import check_connect_stream

pytestmark = pytest.mark.spark


def test_fit_and_score_under_spark_connect(spark: Any, tmp_path: Path) -> None:
    pytest.importorskip("grpc", reason="Spark Connect needs the pyspark[connect] client dependencies")
    truth = MixtureDistribution([GaussianDistribution(-3.0, 1.0), GaussianDistribution(2.0, 0.5)], [0.4, 0.6])
    x = np.asarray(truth.sampler(3).sample(1500))
    root = Path(__file__).resolve().parents[2]
    child = Path(__file__).with_name("_connect_fit.py")
    proc = subprocess.run(
        [sys.executable, str(child), json.dumps(x.tolist()), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    facts = result["facts"]
    assert (
        facts["handle"] == "SparkEncodedData" and facts["connect"] is True and facts["merge"] == "dataframe"
    )
    assert facts["executor"] == "JobExecutor"
    assert facts["columns"] == ["x", "log_likelihood", "prediction", "probability"]
    assert facts["rows"] == 1500
    # a checkpoint's data digest is the same under Connect and classic, whatever the row order
    import pyarrow as pa

    from mixle_spark.parallel.backends.registry import data_identity

    assert (
        facts["identity"]
        == facts["identity_reordered"]
        == data_identity(spark.createDataFrame(pa.table({"x": x})))
    )
    got = model_from_dict(result["model"])
    want = optimize(list(x), MixtureEstimator([GaussianEstimator()] * 2), max_its=5, delta=None, seed=4)
    np.testing.assert_allclose(got.w, want.w, rtol=1e-10)
    for a, b in zip(got.components, want.components, strict=True):
        assert a.mu == pytest.approx(b.mu, rel=1e-10)
        assert a.sigma2 == pytest.approx(b.sigma2, rel=1e-10)
    assert facts["ll_sum"] == pytest.approx(float(got.seq_log_density(x).sum()), rel=1e-10)
    proba = got.predict_proba(x)
    assert facts["assignments"]["rows"] == np.bincount(proba.argmax(axis=1), minlength=2).tolist()
    assert sum(facts["assignments"]["certainty_sum"]) == pytest.approx(proba.max(axis=1).sum(), rel=1e-9)
    # default options: the job path coalesces 5 input partitions to the session's 2 task slots
    assert facts["default_partitions"] == 2
    est = MixtureEstimator([GaussianEstimator()] * 2)
    ll, want_best = best_of(list(x), est, trials=3, max_its=4, delta=None, seed=7)
    assert facts["best_of_ll"] == pytest.approx(ll, rel=1e-10)
    _same_mixture(model_from_dict(result["best_of"]), want_best)
    chosen = select_k(list(x), est, ks=[1, 2, 3], max_its=4, delta=None, seed=11)
    assert result["best_k"] == chosen.best_k == 2
    assert sorted(result["select_k"]) == ["1", "2", "3"]
    for k, dumped in result["select_k"].items():
        _same_mixture(model_from_dict(dumped), chosen.models[int(k)])
    # kept statistics and updates (incremental, stepwise, a new label) equal the local backend's
    check_connect_updates(result["incremental"])
    # a stream folded by fit_stream under Connect equals the local backend batch by batch
    check_connect_stream(result["stream"], tmp_path)
    # a Pipeline with MixleEstimator fits, saves, loads and transforms under Connect
    check_connect_pipeline(result["pipeline"])
    # float32 chunks stored and fitted under Connect equal the local backend's float32 fit (1e-5)
    check_connect_precision(result["precision"])


def _same_mixture(got: Any, want: Any) -> None:
    np.testing.assert_allclose(got.w, want.w, rtol=1e-10)
    for a, b in zip(got.components, want.components, strict=True):
        assert a.mu == pytest.approx(b.mu, rel=1e-10)
        assert a.sigma2 == pytest.approx(b.sigma2, rel=1e-10)
