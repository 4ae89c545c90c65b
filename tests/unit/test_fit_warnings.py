"""Failures that speak (issue 52): a Gaussian variance on its floor, a component with no data left and
the best k at the edge of the range tried each warn, naming the field and component, in the Python
API, the fit job's stderr and summary.json (the Pipeline's summary: tests/spark/test_ml_estimator.py).

Before, a 0/1 column modelled as a Gaussian put its variance on the 1e-8 floor in every component,
added about 9 to the log-likelihood per row, made BIC pick the largest k offered, and summary.json said
``"warnings": []``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mixle_spark.diagnostics import fit_warnings
from mixle_spark.errors import FitQualityWarning
from mixle_spark.estimation import optimize
from mixle_spark.model_selection import select_k
from mixle_spark.stats import (
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
    MultivariateGaussianDistribution,
    PoissonDistribution,
    RecordDistribution,
    RecordEstimator,
)

ROOT = Path(__file__).resolve().parents[2]
FLOOR_LINE = r"field 'flag': the Gaussian variance sits on its floor in component 0, component 1"


def _flagged(n: int = 2000, seed: int = 0) -> pa.Table:
    """A spend column in two segments and a 0/1 flag that follows the segment."""
    rng = np.random.default_rng(seed)
    z = rng.random(n) < 0.4
    return pa.table(
        {"spend": np.where(z, rng.normal(20, 3, n), rng.normal(80, 9, n)), "flag": z.astype(float)}
    )


def _estimator(k: int = 2) -> MixtureEstimator:
    return MixtureEstimator(
        [RecordEstimator({"spend": GaussianEstimator(), "flag": GaussianEstimator()})] * k
    )


def test_a_zero_one_column_as_a_gaussian_warns_naming_the_field_and_components() -> None:
    with pytest.warns(FitQualityWarning, match=FLOOR_LINE + r".*model it as bernoulli"):
        model = optimize(_flagged(), _estimator(), max_its=30, seed=1)
    assert sorted(round(c.fields["flag"].mu) for c in model.components) == [0, 1]
    with pytest.warns(FitQualityWarning, match=FLOOR_LINE):
        optimize(_flagged().to_pandas(), _estimator(), max_its=30, seed=1, backend="mp", num_workers=2)


def test_a_healthy_fit_warns_of_nothing() -> None:
    table = _flagged().drop_columns(["flag"])
    with_spend = MixtureEstimator([RecordEstimator({"spend": GaussianEstimator()})] * 2)
    model = optimize(table, with_spend, max_its=30, seed=1)  # pytest turns a warning here into an error
    assert fit_warnings(model, 2000) == []


def test_collapsed_vector_coordinates_and_empty_components_are_named() -> None:
    tight = MultivariateGaussianDistribution([0.0, 0.0], [[1.0, 0.0], [0.0, 1e-9]])
    wide = MultivariateGaussianDistribution([5.0, 5.0], [[2.0, 0.3], [0.3, 4.0]])
    mixture = MixtureDistribution([wide, tight, wide], [0.7, 0.3 - 1e-9, 1e-9])
    assert fit_warnings(mixture, 1000) == [
        "the model: the Gaussian variance sits on its floor in component 1 (coordinate 1): the values "
        "there are all alike (a 0/1, integer or constant column?); model it as bernoulli, categorical or "
        "integer_categorical, or drop it: a floored variance adds about 9 to the log-likelihood per row and "
        "BIC then prefers more components",
        "the model: component 2 has weight 1e-09 (fewer than half a row of 1,000): no data is left there; a "
        "mixture with fewer components fits as well",
    ]
    nested = RecordDistribution({"visits": MixtureDistribution([PoissonDistribution(2.0)] * 2, [1.0, 0.0])})
    assert fit_warnings(nested, 1000) == [
        "field 'visits': component 1 has weight 0: no data is left there; a mixture with fewer "
        "components fits as well"
    ]
    assert fit_warnings(GaussianDistribution(0.0, 1.0), 10) == []


def test_select_k_warns_when_the_best_k_is_the_largest_tried() -> None:
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(m, 0.3, 300) for m in (0.0, 5.0, 10.0, 15.0)])
    est = MixtureEstimator([GaussianEstimator()] * 2)
    with pytest.warns(FitQualityWarning, match=r"best number of components by bic is 3, the largest of those "
                      r"tried \(1\.\.3\): more components may fit better; try larger k"):  # fmt: skip
        chosen = select_k(list(x), est, ks=[1, 2, 3], max_its=50, seed=1)
    assert chosen.best_k == 3


def test_the_job_prints_the_warnings_and_keeps_them_in_the_summary(tmp_path: Path) -> None:
    pq.write_table(_flagged(), tmp_path / "flagged.parquet")
    fields = {"spend": {"type": "gaussian"}, "flag": {"type": "gaussian"}}
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps({"type": "mixture", "k": 2, "component": {"type": "record", "fields": fields}})
    )
    proc = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "em_fit.py"), "--backend", "local", "--input",
         str(tmp_path / "flagged.parquet"), "--model", str(spec), "--output", str(tmp_path / "out"),
         "--k", "1:2", "--seed", "1", "--quiet"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("em_fit: warning: ")]
    kept = json.loads((tmp_path / "out" / "summary.json").read_text())["warnings"]
    assert [f"em_fit: warning: {w}" for w in kept] == said
    assert any(w.startswith("field 'flag': the Gaussian variance sits on its floor") for w in kept), kept
    edge = "the best number of components by bic is 2, the largest of those tried (1..2): more components"
    assert f"{edge} may fit better; try larger k" in kept
