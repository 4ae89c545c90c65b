"""MixleEstimator's Params ``engine`` and ``precision`` (issue 55): checked when set, saved with the
estimator, taken from a spec's fit section, and passed to the fit's ``encoded_data``.

The Spark backend's storage at float32 is another change of issue 55: here the fit's call of
``encoded_data`` is recorded, and run without the two controls (so the test holds before and after it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle_spark.errors import SpecError

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def vectors(spark: Any) -> Any:
    import pandas as pd
    from pyspark.ml.feature import VectorAssembler

    rng = np.random.default_rng(7)
    x = np.concatenate([rng.normal(-4.0, 1.0, size=(300, 2)), rng.normal(4.0, 1.0, size=(200, 2))])
    frame = spark.createDataFrame(pd.DataFrame({"x": x[:, 0], "y": x[:, 1]})).repartition(2)
    return VectorAssembler(inputCols=["x", "y"], outputCol="features").transform(frame).cache()


def test_the_params_are_checked_when_set_and_saved_with_the_estimator(spark: Any, tmp_path: Path) -> None:
    from mixle_spark.ml import MixleEstimator

    estimator = MixleEstimator(k=2)
    assert (estimator.getEngine(), estimator.getPrecision()) == ("numpy", "float64")
    assert estimator.setPrecision("fp32").getPrecision() == "float32"
    with pytest.raises(
        SpecError,
        match=r"^param 'precision': expected one of 'float64', 'float32', 'bfloat16' .*got string 'fp8'$",
    ):
        estimator.setPrecision("fp8")
    with pytest.raises(
        SpecError, match=r"^param 'engine': expected one of 'numpy', 'torch', got string 'jax'$"
    ):
        MixleEstimator(engine="jax")
    estimator.setEngine("NumPy").write().save(str(tmp_path / "est"))
    loaded = MixleEstimator.load(str(tmp_path / "est"))
    assert (loaded.getEngine(), loaded.getPrecision()) == ("numpy", "float32")
    assert loaded.isSet(loaded.precision) and "param 'precision'" not in loaded.explainParam("precision")


def test_the_fit_asks_encoded_data_for_the_engine_and_precision(
    vectors: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mixle_spark.ml.estimator as module
    from mixle_spark.ml import MixleEstimator

    asked: list[dict[str, Any]] = []
    real = module.encoded_data

    def recording(data: Any, estimator: Any, **options: Any) -> Any:
        asked.append(dict(options))
        options.pop("engine", None), options.pop("precision", None)
        return real(data, estimator, **options)

    monkeypatch.setattr(module, "encoded_data", recording)
    model = MixleEstimator(k=2, seed=1, maxIter=5, precision="float32").fit(vectors)
    assert (asked[-1]["engine"], asked[-1]["precision"]) == ("numpy", "float32")
    assert model.getPrecision() == "float32" and sorted(np.round(model.weights, 1)) == [0.4, 0.6]
    MixleEstimator(k=2, seed=1, maxIter=2).fit(vectors)
    assert "engine" not in asked[-1] and "precision" not in asked[-1]  # numpy in float64: not asked
    spec = {"estimator": "multivariate_gaussian", "fit": {"precision": "fp32", "max_its": 2}}
    from_spec = MixleEstimator(k=2, seed=1, modelSpec=spec).fit(vectors)
    assert asked[-1]["precision"] == "float32" and from_spec.getPrecision() == "float32"
    explicit = MixleEstimator(k=2, seed=1, modelSpec=spec, precision="float64").fit(vectors)
    assert "precision" not in asked[-1] and explicit.getPrecision() == "float64"  # the Param wins
    with pytest.raises(
        SpecError,
        match=r"^params 'engine' / 'precision': engine='numpy' computes in "
        r".*bfloat16 needs engine='torch'\)$",
    ):
        MixleEstimator(k=2, precision="bf16").fit(vectors)
