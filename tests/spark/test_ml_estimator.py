"""The Spark ML face: MixleEstimator as a drop-in for MLlib's GaussianMixture, Pipeline fit / transform /
save / load round trips, named input columns with a model spec, Param validation, the summary."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle_spark.errors import ConvergenceWarning, DataValueError, SchemaError, SpecError

pytestmark = pytest.mark.spark

MEANS = np.array([[-5.0, 0.0], [0.0, 5.0], [5.0, 0.0]])
WEIGHTS = np.array([0.2, 0.3, 0.5])
SCALE = np.array([1.0, 0.7])
N = 2000
ROOT = Path(__file__).resolve().parents[2]


def _blobs(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    z = rng.choice(3, size=N, p=WEIGHTS)
    return MEANS[z] + rng.normal(size=(N, 2)) * SCALE


@pytest.fixture(scope="module")
def points(spark: Any) -> Any:
    """2000 rows of three well-separated 2-D Gaussians in columns x, y (2 partitions: one per task
    slot, so the fits run their E-steps in resident tasks)."""
    import pandas as pd

    x = _blobs()
    return spark.createDataFrame(pd.DataFrame({"x": x[:, 0], "y": x[:, 1]})).repartition(2).cache()


@pytest.fixture(scope="module")
def vectors(points: Any) -> Any:
    from pyspark.ml.feature import VectorAssembler

    return VectorAssembler(inputCols=["x", "y"], outputCol="features").transform(points).cache()


MLLIB_TIMEOUT = 300.0  # seconds; MLlib's fit of 2000 rows takes a few (and its Spark's start)


@dataclass
class _MLlibFit:
    """What tests/spark/_mllib_fit.py writes of MLlib's fit."""

    weights: list[float]
    means: np.ndarray
    covs: np.ndarray
    log_likelihood: float
    predictions: np.ndarray  # in the order of the points' first coordinate
    types: dict[str, str]


def _mllib_fit(tmp: Path) -> _MLlibFit:
    """MLlib's GaussianMixture(k=3, seed=3) on :func:`_blobs`, fitted by tests/spark/_mllib_fit.py in a
    Spark of its own, or a skip when it hangs.

    MLlib's EM has no covariance floor: a component that loses all its rows gets a NaN covariance, and
    the Fortran-to-Java LAPACK ``dsyev`` it then factorises loops forever on NaN (``dlascl``), in a
    task that cancelling its job does not stop. In the shared session that task held a task slot for
    the rest of the suite (every later resident fit found its slots busy); in a process of its own
    the hang is killed with it after :data:`MLLIB_TIMEOUT`.
    """
    np.save(tmp / "points.npy", _blobs())
    command = [
        sys.executable,
        "-m",
        "tests.spark._mllib_fit",
        str(tmp / "points.npy"),
        str(tmp / "fit.json"),
        "3",
        "3",
    ]
    with subprocess.Popen(
        command, cwd=ROOT, start_new_session=True, stderr=subprocess.PIPE, text=True
    ) as run:
        try:
            _out, err = run.communicate(timeout=MLLIB_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate()
            pytest.skip(
                f"MLlib GaussianMixture did not finish in {MLLIB_TIMEOUT:.0f}s (a NaN covariance hangs it)"
            )
    assert run.returncode == 0, err[-3000:]
    facts = json.loads((tmp / "fit.json").read_text())
    return _MLlibFit(
        facts["weights"],
        np.array(facts["means"]),
        np.array(facts["covs"]),
        facts["log_likelihood"],
        np.array(facts["predictions"]),
        facts["types"],
    )


@pytest.fixture(scope="module")
def fitted(vectors: Any) -> Any:
    """Our model, fitted with only k and seed set."""
    from mixle_spark.ml import MixleEstimator

    return MixleEstimator(k=3, seed=3).fit(vectors)


@pytest.fixture(scope="module")
def mllib_fitted(tmp_path_factory: pytest.TempPathFactory) -> _MLlibFit:
    """MLlib's model with the same k and seed (its own start)."""
    return _mllib_fit(tmp_path_factory.mktemp("mllib"))


def _by_first_coordinate(weights: list[float], gaussians: list[Any]) -> tuple[np.ndarray, ...]:
    order = np.argsort([g.mean[0] for g in gaussians])
    means = np.array([gaussians[i].mean.toArray() for i in order])
    covs = np.array([gaussians[i].cov.toArray() for i in order])
    return np.asarray(weights)[order], means, covs


def test_drop_in_for_mllib_gaussian_mixture(fitted: Any, mllib_fitted: _MLlibFit, vectors: Any) -> None:
    ours, theirs = fitted, mllib_fitted
    w, mu, cov = _by_first_coordinate(ours.weights, ours.gaussians)
    order = np.argsort(theirs.means[:, 0])
    w_ml, mu_ml, cov_ml = np.asarray(theirs.weights)[order], theirs.means[order], theirs.covs[order]
    # Different starts, same optimum on well-separated data.
    np.testing.assert_allclose(w, w_ml, atol=0.01)
    np.testing.assert_allclose(mu, mu_ml, atol=0.05)
    np.testing.assert_allclose(cov, cov_ml, atol=0.05)
    np.testing.assert_allclose(w, WEIGHTS, atol=0.03)
    np.testing.assert_allclose(mu, MEANS, atol=0.1)
    assert ours.summary.logLikelihood >= theirs.log_likelihood - 0.5
    # Same output columns and types as MLlib (plus the log-likelihood), input columns kept.
    out = ours.transform(vectors)
    assert out.columns == ["x", "y", "features", "logLikelihood", "prediction", "probability"]
    for name in ("features", "prediction", "probability"):
        assert type(out.schema[name].dataType).__name__ == theirs.types[name]
    # The same clustering, up to the order of the components.
    mine = out.select("x", "prediction").toPandas().sort_values("x")["prediction"].to_numpy()
    pairs = (mine, theirs.predictions)
    agreement = max(
        np.mean(np.array(perm)[pairs[0]] == pairs[1])
        for perm in ([0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0])
    )
    assert agreement > 0.995


def test_init_mode_and_steps_reach_the_fit(vectors: Any) -> None:
    import warnings

    from mixle_spark.estimation import optimize
    from mixle_spark.ml import MixleEstimator
    from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator

    est = MixtureEstimator([MultivariateGaussianEstimator()] * 3)
    for mode, init in (("random", "random"), ("kmeans||", "kmeans||"), ("k-means||", "kmeans||")):
        ours = MixleEstimator(k=3, seed=3, maxIter=2, initMode=mode, initSteps=1)
        assert ours.getInitMode() == ("random" if mode == "random" else "k-means||")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = ours.fit(vectors)
            want = optimize(
                vectors, est, max_its=2, tol=1e-6, seed=3, init=init, init_steps=1, column="features"
            )
        np.testing.assert_allclose(model.weights, want.w, rtol=1e-9)
    assert MixleEstimator().getInitMode() == "k-means||" and MixleEstimator().getInitSteps() == 2


@pytest.mark.filterwarnings("ignore::mixle_spark.errors.ConvergenceWarning")  # k = 4, 5 of 3 clusters: slow
def test_a_list_of_k_fits_every_candidate_and_keeps_the_best(vectors: Any, tmp_path: Path) -> None:
    from mixle_spark.ml import MixleEstimator
    from mixle_spark.model_selection import select_k
    from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator

    model = MixleEstimator(k=[1, 2, 3, 4, 5], seed=3).fit(vectors)
    assert model.getK() == 3 and len(model.weights) == 3
    found = model.summary.modelSelection
    assert found["criterion"] == "bic" and found["best_k"] == 3
    assert [row["k"] for row in found["table"]] == [1, 2, 3, 4, 5]
    want = select_k(
        vectors,
        MixtureEstimator([MultivariateGaussianEstimator()]),
        ks=[1, 2, 3, 4, 5],
        seed=3,
        tol=1e-6,
        column="features",
    )
    assert [row["bic"] for row in found["table"]] == pytest.approx([r.bic for r in want.table], rel=1e-9)
    assert MixleEstimator(k=[4, 2, 2]).getK() == [2, 4]
    MixleEstimator(k=[2, 4], selectionCriterion="aic").write().save(str(tmp_path / "est"))
    loaded = MixleEstimator.load(str(tmp_path / "est"))
    assert loaded.getK() == [2, 4] and loaded.getSelectionCriterion() == "aic"


def test_initial_model_starts_the_fit_and_is_saved_with_the_estimator(vectors: Any, tmp_path: Path) -> None:
    from mixle_spark.estimation import optimize
    from mixle_spark.ml import MixleEstimator
    from mixle_spark.spec import save_model
    from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a few iterations do not converge
        first = MixleEstimator(k=3, seed=3, maxIter=2, tol=0.0).fit(vectors)
        again = MixleEstimator(k=3, maxIter=2, tol=0.0, initialModel=first).fit(vectors)
        est = MixtureEstimator([MultivariateGaussianEstimator()] * 3)
        want = optimize(
            vectors, est, max_its=2, delta=0.0, prev_estimate=first.distribution, column="features"
        )
    np.testing.assert_allclose(again.weights, want.w, rtol=1e-9)
    # a path, saved with the estimator as the model's JSON (the file may go)
    path = save_model(first.distribution, tmp_path / "start.json")
    MixleEstimator(k=3, initialModel=str(path)).write().save(str(tmp_path / "est"))
    path.unlink()
    loaded = MixleEstimator.load(str(tmp_path / "est"))
    np.testing.assert_array_equal(loaded.getInitialModel().w, first.distribution.w)
    with pytest.raises(
        SpecError, match=r"param 'initialModel' is a mixture of 3 components, but the fit's has 2"
    ):
        MixleEstimator(k=2, initialModel=first).fit(vectors)
    with pytest.raises(SpecError, match=r"param 'initialModel' starts one fit; a list of k"):
        MixleEstimator(k=[2, 3], initialModel=first).fit(vectors)
    with pytest.raises(SpecError, match=r"param 'initialModel': .*no-such\.json"):
        MixleEstimator(initialModel=str(tmp_path / "no-such.json"))


def test_covariance_type_fits_a_form_or_chooses_one_with_k(vectors: Any, tmp_path: Path) -> None:
    from mixle_spark.ml import MixleEstimator, MixleModel
    from mixle_spark.model_selection import select_k
    from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator

    tied = MixleEstimator(k=3, seed=3, covarianceType="tied").fit(vectors)
    assert tied.distribution.covariance == "EEE" and tied.getCovarianceType() == "EEE"
    covars = [c.covar for c in tied.distribution.components]
    assert all(np.array_equal(c, covars[0]) for c in covars)
    tied.write().save(str(tmp_path / "tied"))
    assert MixleModel.load(str(tmp_path / "tied")).distribution.covariance == "EEE"
    # a list of forms is chosen with k, in the same passes as select_k's
    chosen = MixleEstimator(k=[2, 3], seed=3, covarianceType=["spherical", "diag", "full"]).fit(vectors)
    found = chosen.summary.modelSelection
    want = select_k(
        vectors, MixtureEstimator([MultivariateGaussianEstimator()]), ks=[2, 3], forms="VII,VVI,VVV",
        seed=3, tol=1e-6, column="features",
    )  # fmt: skip
    assert (found["best_k"], found["best_form"]) == (want.best_k, want.best_form)
    assert [(r["k"], r["form"]) for r in found["table"]] == [(r.k, r.form) for r in want.table]
    assert [r["bic"] for r in found["table"]] == pytest.approx([r.bic for r in want.table], rel=1e-9)
    assert chosen.getCovarianceType() == want.best_form == chosen.distribution.covariance
    MixleEstimator(covarianceType=["tied", "full"]).write().save(str(tmp_path / "est"))
    assert MixleEstimator.load(str(tmp_path / "est")).getCovarianceType() == ["EEE", "VVV"]


def test_summary(fitted: Any) -> None:
    model = fitted
    s = model.summary
    assert model.hasSummary and s.k == 3 and s.converged
    assert s.numIter >= 1 and len(s.logLikelihoodHistory) == s.numIter + 1
    # the returned model is the best one scored (the last, unless the last gain was a rounding-level loss)
    assert s.logLikelihood == max(s.logLikelihoodHistory)
    assert s.logLikelihood == pytest.approx(s.logLikelihoodHistory[-1], rel=1e-12)
    assert np.all(np.diff(s.logLikelihoodHistory[1:]) >= -1e-6 * abs(s.logLikelihood))
    sizes = s.clusterSizes
    assert len(sizes) == 3 and sum(sizes) == N
    np.testing.assert_allclose(sorted(sizes), sorted(WEIGHTS * N), atol=60)
    p = 3 * (2 + 3) + 2  # means, covariances (symmetric), weights - 1
    assert s.numParameters == p and s.numRows == N
    assert s.bic == pytest.approx(p * math.log(N) - 2 * s.logLikelihood)
    assert s.aic == pytest.approx(2 * p - 2 * s.logLikelihood)
    assert s.probability.columns == ["probability"] and s.cluster.columns == ["prediction"]
    assert s.predictions.count() == N
    assert list(s.timings) == ["encode", "seeding", "em", "total"] and s.trainingTime >= s.timings["em"] > 0
    assert len(s.iterationTimes) == len(s.logLikelihoodHistory)
    total = s.predictions.agg({"logLikelihood": "sum"}).collect()[0][0]
    assert total == pytest.approx(s.logLikelihood, rel=1e-9)


def test_predict_single_vector_matches_transform(fitted: Any, vectors: Any) -> None:
    from pyspark.ml.linalg import DenseVector, Vectors

    model = fitted
    rows = model.transform(vectors).limit(5).collect()
    for row in rows:
        assert model.predict(row.features) == row.prediction
        got = model.predictProbability(row.features)
        assert isinstance(got, DenseVector)
        np.testing.assert_allclose(got.toArray(), row.probability.toArray(), atol=1e-12)
    assert model.predict(Vectors.dense([5.0, 0.0])) == int(np.argmax([g.mean[0] for g in model.gaussians]))
    with pytest.raises(DataValueError, match=r"zero density.*DenseVector"):
        model.predictProbability(Vectors.dense([1.0, 2.0, 3.0]))
    with pytest.raises(SchemaError, match="param 'predictionCol': column 'prediction' already exists"):
        model.transform(model.transform(vectors).drop("logLikelihood"))
    means = model.gaussiansDF.collect()
    assert [r.mean for r in means] == [g.mean for g in model.gaussians]


def test_weight_col_and_left_out_output_columns(fitted: Any, vectors: Any) -> None:
    from pyspark.sql import functions as F

    from mixle_spark.ml import MixleEstimator

    ours = fitted
    ones = MixleEstimator(k=3, seed=3, weightCol="w").fit(vectors.withColumn("w", F.lit(1.0)))
    np.testing.assert_allclose(ones.weights, ours.weights, rtol=1e-9)
    assert ones.summary.logLikelihood == pytest.approx(ours.summary.logLikelihood, rel=1e-9)
    mixture = {"type": "mixture", "k": 3, "component": "multivariate_gaussian"}  # k left unset
    doubled = MixleEstimator(
        seed=3, weightCol="w", modelSpec=mixture, predictionCol="", probabilityCol=""
    ).fit(vectors.withColumn("w", F.lit(2.0)))
    assert doubled.getK() == 3
    assert doubled.summary.logLikelihood == pytest.approx(2 * ours.summary.logLikelihood, rel=1e-6)
    np.testing.assert_allclose(
        _by_first_coordinate(doubled.weights, doubled.gaussians)[1],
        _by_first_coordinate(ours.weights, ours.gaussians)[1],
        atol=1e-4,
    )
    assert doubled.transform(vectors).columns == ["x", "y", "features", "logLikelihood"]
    assert doubled.summary.clusterSizes == ours.summary.clusterSizes  # rows, not weights


def test_pipeline_fit_transform_save_load_round_trip(spark: Any, points: Any, tmp_path: Path) -> None:
    from chispa import assert_df_equality
    from pyspark.errors import AnalysisException
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import VectorAssembler

    from mixle_spark.ml import MixleEstimator, MixleModel

    estimator = MixleEstimator(k=3, seed=8, tol=0.5, numPartitions=2, logLikelihoodCol="ll")
    pipeline = Pipeline(stages=[VectorAssembler(inputCols=["x", "y"], outputCol="features"), estimator])
    fitted = pipeline.fit(points)
    before = fitted.transform(points)
    assert before.columns == ["x", "y", "features", "ll", "prediction", "probability"]

    fitted.write().overwrite().save(str(tmp_path / "model"))
    pipeline.save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "model"))
    after = loaded.transform(points)
    assert_df_equality(before, after, ignore_nullable=True)  # float64 round-trips exactly

    stage = loaded.stages[1]
    assert isinstance(stage, MixleModel) and not stage.hasSummary
    assert stage.uid == fitted.stages[1].uid == estimator.uid  # as MLlib: the estimator's uid
    assert stage.weights == fitted.stages[1].weights
    assert stage.getLogLikelihoodCol() == "ll" and stage.getK() == 3 and stage.getSeed() == 8
    reloaded = Pipeline.load(str(tmp_path / "pipeline")).getStages()[1]
    assert isinstance(reloaded, MixleEstimator) and reloaded.uid == estimator.uid
    assert {p.name: v for p, v in reloaded.extractParamMap().items()} == {
        p.name: v for p, v in estimator.extractParamMap().items()
    }
    stage.save(str(tmp_path / "alone"))
    assert MixleModel.load(str(tmp_path / "alone")).weights == stage.weights
    with pytest.raises(AnalysisException, match="already exists"):  # no silent overwrite
        stage.save(str(tmp_path / "alone"))
    stage.setPredictionCol("cluster").write().overwrite().save(str(tmp_path / "alone"))
    assert MixleModel.load(str(tmp_path / "alone")).getPredictionCol() == "cluster"


def test_a_fitted_model_learns_new_rows_with_update(spark: Any, fitted: Any, tmp_path: Path) -> None:
    """The fit keeps its statistics (keepStatistics, default true), saved with the model; update(df)
    folds new rows in as mixle_spark.em.incremental.update does on the local backend."""
    import pandas as pd
    from pyspark.ml.feature import VectorAssembler

    from mixle_spark.em.incremental import update
    from mixle_spark.ml import MixleModel

    new = _blobs(seed=5)[:600] + np.array([0.5, 0.0])
    frame = spark.createDataFrame(pd.DataFrame({"x": new[:, 0], "y": new[:, 1]}))
    df = VectorAssembler(inputCols=["x", "y"], outputCol="features").transform(frame)
    assert fitted.distribution.statistics.rows == N
    fitted.write().overwrite().save(str(tmp_path / "m"))
    loaded = MixleModel.load(str(tmp_path / "m"))
    updated = loaded.update(df, decay=0.5)
    want = update(fitted.distribution, [row for row in new], decay=0.5)
    np.testing.assert_allclose(updated.weights, want.w, rtol=1e-9)
    for got, exp in zip(updated.distribution.components, want.components, strict=True):
        np.testing.assert_allclose(got.mu, exp.mu, rtol=1e-9)
        np.testing.assert_allclose(got.covar, exp.covar, rtol=1e-9)
    result = updated.updateResult
    assert result.rows == 600 and result.decay == 0.5 and updated.distribution.statistics.rows == N + 600
    assert updated.uid == fitted.uid and updated.getK() == 3
    assert updated.transform(df).count() == 600


def test_input_cols_with_string_indexer_and_model_spec(spark: Any, tmp_path: Path) -> None:
    import pandas as pd
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import StringIndexer

    from mixle_spark.ml import MixleEstimator

    rng = np.random.default_rng(5)
    z = rng.random(N) < 0.35
    amount = np.where(z, rng.normal(20.0, 2.0, N), rng.normal(60.0, 5.0, N))
    channel = np.where(z, rng.choice(["web", "app"], N, p=[0.9, 0.1]), rng.choice(["store", "app"], N))
    df = spark.createDataFrame(pd.DataFrame({"amount": amount, "channel": channel, "z": z})).repartition(2)
    spec = {"type": "record", "fields": {"amount": "gaussian", "channel_idx": "integer_categorical"}}
    pipeline = Pipeline(
        stages=[
            StringIndexer(inputCol="channel", outputCol="channel_idx"),
            MixleEstimator(k=2, seed=3, tol=0.5, inputCols=["amount", "channel_idx"], modelSpec=spec),
        ]
    )
    fitted = pipeline.fit(df)
    model = fitted.stages[1]
    out = fitted.transform(df).toPandas()
    assert list(out.columns) == [
        "amount", "channel", "z", "channel_idx", "logLikelihood", "prediction", "probability"
    ]  # fmt: skip
    small = int(np.argmin(model.weights))
    assert np.mean((out["prediction"] == small) == out["z"]) > 0.99
    assert min(model.weights) == pytest.approx(0.35, abs=0.03)
    assert model.summary.numParameters == 2 * (2 + 2) + 1  # gaussian 2, three labels 2, weights 1
    row = out.iloc[0]
    record = {"amount": row["amount"], "channel_idx": row["channel_idx"]}
    assert model.predict(record) == row["prediction"]
    assert model.predict([row["amount"], row["channel_idx"]]) == row["prediction"]
    with pytest.raises(TypeError, match="component 0 is RecordDistribution"):
        _ = model.gaussians
    fitted.write().save(str(tmp_path / "pm"))
    again = PipelineModel.load(str(tmp_path / "pm")).transform(df).toPandas()
    pd.testing.assert_frame_equal(out.drop(columns="probability"), again.drop(columns="probability"))


def test_input_cols_default_is_a_record_of_gaussians_and_max_iter_zero_warns(points: Any) -> None:
    from mixle_spark.errors import ConvergenceWarning
    from mixle_spark.ml import MixleEstimator

    with pytest.warns(ConvergenceWarning, match="did not converge in 0 iterations"):
        model = MixleEstimator(k=3, seed=1, maxIter=0, inputCols=["y", "x"]).fit(points)
    assert model.summary.numIter == 0 and not model.summary.converged
    for gaussian, component in zip(model.gaussians, model.distribution.components, strict=True):
        fields = component.fields
        assert list(gaussian.mean) == [fields["y"].mu, fields["x"].mu]  # inputCols order
        np.testing.assert_array_equal(
            gaussian.cov.toArray(), np.diag([fields["y"].sigma2, fields["x"].sigma2])
        )


# -- Param validation ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"k": 0}, SpecError, r"param 'k': expected an integer >= 1, got 0"),
        ({"k": "three"}, TypeError, r"param 'k'.*string 'three'"),
        ({"k": 2.5}, TypeError, r"param 'k'.*2\.5"),
        ({"maxIter": -1}, SpecError, r"param 'maxIter'.*got -1"),
        ({"tol": -0.5}, SpecError, r"param 'tol'.*got -0\.5"),
        ({"tol": float("nan")}, SpecError, r"param 'tol'.*got nan"),
        ({"aggregationDepth": 0}, SpecError, r"param 'aggregationDepth'.*got 0"),
        ({"initFraction": 1.5}, SpecError, r"param 'initFraction'.*\(0, 1\].*got 1\.5"),
        (
            {"initMode": "kmeans++"},
            SpecError,
            r"param 'initMode': expected one of 'k-means\|\|', 'random', got string 'kmeans\+\+'",
        ),
        ({"initSteps": 0}, SpecError, r"param 'initSteps': expected an integer >= 1, got 0"),
        ({"k": []}, SpecError, r"param 'k': expected an integer >= 1 or a non-empty list of them, got \[\]"),
        ({"k": [2, 0]}, SpecError, r"param 'k': expected an integer >= 1, got 0"),
        (
            {"selectionCriterion": "icl"},
            SpecError,
            r"param 'selectionCriterion': expected one of 'bic', 'aic'",
        ),
        ({"numPartitions": 0}, SpecError, r"param 'numPartitions'.*got 0"),
        (
            {"covarianceType": "banded"},
            SpecError,
            r"^param 'covarianceType' must be one of EII, VII, .* tied_spherical, got 'banded'$",
        ),
        ({"covarianceType": ["full", "x"]}, SpecError, r"^param 'covarianceType': forms: every form must be"),
        ({"featuresCol": ""}, SpecError, r"param 'featuresCol'.*got ''"),
        ({"inputCols": ["a", "a"]}, SpecError, r"param 'inputCols'.*\['a', 'a'\]"),
        ({"inputCols": "a"}, TypeError, r"param 'inputCols'.*string 'a'"),
        ({"modelSpec": "gausian"}, SpecError, r"param 'modelSpec'.*unknown estimator family 'gausian'"),
        (
            {"modelSpec": {"type": "gaussian", "mean": 1}},
            SpecError,
            r"param 'modelSpec'.*unknown key 'mean'",
        ),
    ],
)
def test_bad_params_are_refused_when_set(params: dict[str, Any], error: type, match: str) -> None:
    from mixle_spark.ml import MixleEstimator

    with pytest.raises(error, match=match):
        MixleEstimator(**params)
    (name, value), estimator = next(iter(params.items())), MixleEstimator()
    with pytest.raises(error, match=match):
        getattr(estimator, "set" + name[0].upper() + name[1:])(value)
    with pytest.raises(error, match=match):  # a param map given to fit is checked too
        estimator.copy({estimator.getParam(name): value})


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"featuresCol": "nope"}, SchemaError, r"param 'featuresCol': column 'nope' not found"),
        ({"featuresCol": "name"}, SchemaError, r"param 'featuresCol' \('name'\).*string"),
        ({"inputCols": ["x", "w"], "featuresCol": "v"}, SpecError, r"featuresCol.*'v'.*inputCols.*not both"),
        ({"inputCols": ["x", "nope"]}, SchemaError, r"param 'inputCols': column\(s\) \['nope'\] not found"),
        ({"weightCol": "nope"}, SchemaError, r"param 'weightCol': column 'nope' not found"),
        (
            {"k": 3, "modelSpec": {"type": "mixture", "k": 2, "component": "gaussian"}},
            SpecError,
            r"param 'k' = 3 contradicts param 'modelSpec', a mixture of 2",
        ),
        (
            {"inputCols": ["x", "w"], "modelSpec": {"type": "record", "fields": {"x": "gaussian"}}},
            SpecError,
            r"param 'modelSpec' reads columns \['x'\], but param 'inputCols' is \['x', 'w'\]",
        ),
    ],
)
def test_bad_param_combinations_are_refused_at_fit(
    spark: Any, params: dict[str, Any], error: type, match: str
) -> None:
    from pyspark.ml.linalg import Vectors

    from mixle_spark.ml import MixleEstimator

    df = spark.createDataFrame([(Vectors.dense([1.0, 2.0]), 1.0, 0.5, "a")], ["v", "x", "w", "name"])
    with pytest.raises(error, match=match):
        MixleEstimator(**params).fit(df)


def test_model_spec_accepts_estimator_objects_and_json() -> None:
    from mixle_spark.ml import MixleEstimator
    from mixle_spark.stats import GaussianEstimator, MixtureEstimator

    from_object = MixleEstimator(modelSpec=MixtureEstimator([GaussianEstimator()] * 2))
    from_json = MixleEstimator(modelSpec=from_object.getModelSpec())
    assert from_object.getModelSpec() == from_json.getModelSpec()
    assert '"type": "mixture"' in from_json.getModelSpec()
    assert MixleEstimator().getSeed() == MixleEstimator().getSeed()  # a fixed default seed


# -- a spec file's fit section (the forms and errors are in tests/unit/test_ml_model_spec.py) ---------
X_SPEC = {
    "description": "the x coordinate of the blobs",
    "estimator": {"type": "mixture", "k": 2, "component": "gaussian"},
    "fit": {"max_its": 3, "delta": 1e-12, "seed": 7, "print_iter": 1},
}


def test_a_spec_file_and_its_dict_apply_the_fit_section(points: Any, tmp_path: Path) -> None:
    from mixle_spark.errors import ConvergenceWarning
    from mixle_spark.ml import MixleEstimator

    path = tmp_path / "x.json"
    path.write_text(json.dumps(X_SPEC))
    fitted = {}
    for form, spec, params in (
        ("path", path, {}),
        ("dict", X_SPEC, {}),
        ("maxIter=5", str(path), {"maxIter": 5}),
    ):
        its = params.get("maxIter", 3)
        with pytest.warns(ConvergenceWarning, match=f"did not converge in {its} iterations"):
            model = MixleEstimator(modelSpec=spec, featuresCol="x", **params).fit(points)
        assert model.summary.numIter == its and model.fitResult.max_its == its, form
        assert model.fitResult.seed == 7 and model.fitResult.delta == 1e-12, form
        assert model.fitResult.tol is None, form  # the spec's delta (a total gain; no Param) is the rule
        assert (model.getMaxIter(), model.getSeed()) == (its, 7), form
        fitted[form] = model
    assert fitted["path"].weights == fitted["dict"].weights
    assert fitted["path"].summary.logLikelihood < fitted["maxIter=5"].summary.logLikelihood


def test_tol_is_per_row_and_a_specs_delta_a_total(points: Any) -> None:
    from mixle_spark.ml import MixleEstimator

    spec = {**X_SPEC, "fit": {"max_its": 60, "tol": 1e-5, "seed": 7}}
    model = MixleEstimator(modelSpec=spec, featuresCol="x").fit(points)
    assert model.getTol() == 1e-5 and model.fitResult.tol == 1e-5 and model.fitResult.converged
    total = {**X_SPEC, "fit": {"max_its": 60, "delta": 1e-5 * N, "seed": 7}}  # the same rule on N rows
    same = MixleEstimator(modelSpec=total, featuresCol="x").fit(points)
    assert same.fitResult.tol is None and same.fitResult.delta == 1e-5 * N
    assert model.summary.numIter == same.summary.numIter > 1 and model.weights == same.weights
    looser = MixleEstimator(modelSpec=spec, featuresCol="x", tol=1e-2).fit(points)  # the Param wins
    assert looser.fitResult.tol == 1e-2 and looser.summary.numIter < model.summary.numIter
    assert MixleEstimator().getTol() == 1e-6


def test_a_spec_files_trials_run_best_of(points: Any, tmp_path: Path) -> None:
    from mixle_spark.estimation import best_of, trial_seeds
    from mixle_spark.ml import MixleEstimator
    from mixle_spark.spec import estimator_from_spec

    spec = {**X_SPEC, "fit": {**X_SPEC["fit"], "trials": 2}}
    path = tmp_path / "x.json"
    path.write_text(json.dumps(spec))
    estimator = MixleEstimator(modelSpec=path, featuresCol="x")
    path.unlink()  # read when the Param was set: the estimator holds the content
    estimator.write().save(str(tmp_path / "est"))
    loaded = MixleEstimator.load(str(tmp_path / "est"))
    assert json.loads(loaded.getModelSpec()) == spec
    unconverged = r"trial \d \(the best of 2\): EM did not converge in 3 iterations"
    with pytest.warns(ConvergenceWarning, match=unconverged):  # the returned trial stopped at max_its
        model = loaded.fit(points)
    with pytest.warns(ConvergenceWarning, match=unconverged):
        ll, want = best_of(
            list(_blobs()[:, 0]),
            estimator_from_spec(spec["estimator"]),
            trials=2,
            max_its=3,
            delta=1e-12,
            seed=7,
            print_iter=0,
        )
    assert model.fitResult.seed in trial_seeds(7, 2) and model.fitResult.seed == want.fit_result.seed
    assert model.summary.logLikelihood == pytest.approx(ll, rel=1e-9)
    np.testing.assert_allclose(model.weights, want.w, rtol=1e-9)


# -- Spark Connect ---------------------------------------------------------------------------------
def connect_pipeline(spark: Any, folder: str) -> dict[str, Any]:
    """Fit, transform, save and load a Pipeline through ``spark``, a Spark Connect session; the facts
    as JSON-able values. Run by tests/spark/_connect_fit.py, the Connect child of
    tests/spark/test_spark_connect.py (one Connect server for every Connect test; checked by
    :func:`check_connect_pipeline`)."""
    import pandas as pd
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import VectorAssembler

    from mixle_spark.ml import MixleEstimator
    from mixle_spark.spec import model_to_dict

    x = _blobs()
    df = spark.createDataFrame(pd.DataFrame({"x": x[:, 0], "y": x[:, 1]}))
    # default layout, as a Databricks user fits: the job path coalesces the input to the session's tasks
    estimator = MixleEstimator(k=3, seed=3, maxIter=3)
    pipeline = Pipeline(stages=[VectorAssembler(inputCols=["x", "y"], outputCol="features"), estimator])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 3 iterations do not converge
        fitted = pipeline.fit(df)
    path = os.path.join(folder, "pipeline_model")
    fitted.write().save(path)
    fitted.write().overwrite().save(path)
    before = fitted.transform(df).toPandas()
    after = PipelineModel.load(path).transform(df).toPandas()
    summary = fitted.stages[1].summary
    return {
        "session": type(spark).__module__,
        "columns": list(before.columns),
        "same": bool(
            before.drop(columns=["features", "probability"]).equals(
                after.drop(columns=["features", "probability"])
            )
            and list(before["probability"]) == list(after["probability"])
        ),
        "cluster_sizes": summary.clusterSizes,
        "num_iter": summary.numIter,
        "ll": summary.logLikelihood,
        "ll_sum": float(before["logLikelihood"].sum()),
        "model": model_to_dict(fitted.stages[1].distribution),
    }


def check_connect_pipeline(facts: dict[str, Any]) -> None:
    """The Pipeline fitted under Spark Connect (:func:`connect_pipeline`) saves, loads and transforms to
    the same rows, and its model is the local backend's from the same rows and seed."""
    from mixle_spark.estimation import optimize
    from mixle_spark.spec import estimator_from_spec, model_from_dict

    assert facts["session"].startswith("pyspark.sql.connect")
    assert facts["columns"] == ["x", "y", "features", "logLikelihood", "prediction", "probability"]
    assert facts["same"] and facts["num_iter"] == 2 and sum(facts["cluster_sizes"]) == N
    assert facts["ll_sum"] == pytest.approx(facts["ll"], rel=1e-9)
    estimator = estimator_from_spec({"type": "mixture", "k": 3, "component": "multivariate_gaussian"})
    want = optimize(list(_blobs()), estimator, max_its=3, tol=1e-6, seed=3)
    assert want.fit_result.converged and want.fit_result.n_iter == 2  # k-means|| seeding: close at once
    got = model_from_dict(facts["model"])
    np.testing.assert_allclose(got.w, want.w, rtol=1e-9)
    for a, b in zip(got.components, want.components, strict=True):
        np.testing.assert_allclose(a.mu, b.mu, rtol=1e-9, atol=1e-9)  # data scale ~5: a mean near 0
        np.testing.assert_allclose(a.covar, b.covar, rtol=1e-9, atol=1e-12)


def test_summary_writes_the_fit_report(points: Any, tmp_path: Path) -> None:
    from pyspark.ml.feature import VectorAssembler

    from mixle_spark.ml import MixleEstimator

    features = VectorAssembler(inputCols=["x", "y"], outputCol="features").transform(points)
    model = MixleEstimator(k=3, seed=1, maxIter=30, tol=1e-6).fit(features)
    page = model.summary.report(tmp_path / "report.html", sample_rows=300)
    html = page.read_text()
    for section in ("log-likelihood", "weights", "parameters", "projection"):
        assert f'id="{section}"' in html
    assert "2,000" in html or "2000" in html  # the training rows in the overview


def test_summary_report_reads_the_columns_a_model_spec_names(points: Any, tmp_path: Path) -> None:
    """A record modelSpec reads its fields' columns and no featuresCol: the summary's profile and its
    report (with a k chosen from a list) read those columns too."""
    from mixle_spark.errors import FitQualityWarning
    from mixle_spark.ml import MixleEstimator

    spec = {"type": "record", "fields": {"x": "gaussian", "y": "gaussian"}}
    estimator = MixleEstimator(modelSpec=spec, k=[3, 5, 7], seed=1, maxIter=200, tol=1e-3)
    with pytest.warns(FitQualityWarning, match="best number of components by bic is 3, the smallest"):
        model = estimator.fit(points)  # three blobs
    summary = model.summary
    assert summary.inputCols is None and summary.modelSelection["best_k"] == model.getK()
    assert sum(c["rows"] for c in summary.segmentProfile["components"]) == N
    page = summary.report(tmp_path / "report.html", sample_rows=300)
    html = page.read_text()
    for section in ("overview", "model-selection", "segments", "parameters", "projection"):
        assert f'id="{section}"' in html
    projection = html[html.index('id="projection"') :]
    assert "Skipped" not in projection and "the model&#x27;s numeric fields" in projection


@pytest.mark.parametrize(
    ("saved_class", "module"),
    [("this.s", "this"), ("unittest.__main__.X", "unittest.__main__"), ("os.system", "os")],
)
def test_loading_a_stage_imports_nothing_its_metadata_names(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, saved_class: str, module: str
) -> None:
    """The metadata's "class" is looked up among our stage classes; a module it names is never
    imported (``this`` prints the Zen of Python, ``unittest.__main__`` runs test discovery in the
    working directory, and its SystemExit would escape ``except Exception``)."""
    from mixle_spark.errors import ModelFormatError
    from mixle_spark.ml import MixleEstimator, MixleModel

    MixleEstimator(k=2).write().save(str(tmp_path / "est"))
    (part,) = (tmp_path / "est" / "metadata").glob("part-*")
    metadata = json.loads(part.read_text())
    part.write_text(json.dumps({**metadata, "class": saved_class}))
    for crc in (tmp_path / "est" / "metadata").glob(".*.crc"):
        crc.unlink()
    marker = tmp_path / "discovered"
    (tmp_path / "test_planted.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    imported = module in sys.modules
    for stage in (MixleEstimator, MixleModel):
        with pytest.raises(ModelFormatError, match=rf"class '{re.escape(saved_class)}', which is not "):
            stage.load(str(tmp_path / "est"))
    assert (module in sys.modules) == imported
    assert not marker.exists()
    assert "Beautiful is better" not in capsys.readouterr().out


def test_the_writer_replaces_only_a_stage_it_saved(fitted: Any, tmp_path: Path) -> None:
    """Issue 51, reproduction 4: ``write().overwrite().save(v)`` deleted unrelated files in ``v`` (also
    through a link to it), and ``save`` without overwrite wrote into a folder of other files."""
    from mixle_spark.errors import UnsafePathError

    folder = tmp_path / "v"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    (tmp_path / "link").symlink_to(folder)
    for target in (folder, tmp_path / "link"):
        for writer in (fitted.write(), fitted.write().overwrite()):
            error = UnsafePathError if target.is_symlink() else FileExistsError
            with pytest.raises(error, match=rf"{target}"):
                writer.save(str(target))
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    fitted.write().save(str(tmp_path / "stage"))
    fitted.write().overwrite().save(str(tmp_path / "stage"))  # a stage it saved: replaced
    assert sorted(p.name for p in (tmp_path / "stage").iterdir()) == ["metadata", "model"]


def test_a_pipeline_fit_warns_of_a_floored_variance_and_keeps_it_on_the_summary(spark: Any) -> None:
    """Issue 52: a 0/1 column modelled as a Gaussian, through a Pipeline: a FitQualityWarning naming
    the field and components, kept in ``model.summary.warnings`` (and so in the report)."""
    import pandas as pd
    from pyspark.ml import Pipeline

    from mixle_spark.errors import FitQualityWarning
    from mixle_spark.ml import MixleEstimator

    rng = np.random.default_rng(2)
    z = rng.random(600) < 0.4
    frame = pd.DataFrame(
        {"spend": np.where(z, rng.normal(20, 3, 600), rng.normal(80, 9, 600)), "flag": z * 1.0}
    )
    spec = {"type": "record", "fields": {"spend": "gaussian", "flag": "gaussian"}}
    stage = MixleEstimator(k=2, seed=1, inputCols=["spend", "flag"], modelSpec=spec)
    with pytest.warns(FitQualityWarning, match=r"field 'flag': the Gaussian variance sits on its floor"):
        fitted = Pipeline(stages=[stage]).fit(spark.createDataFrame(frame).repartition(2))
    said = fitted.stages[0].summary.warnings
    assert len(said) == 1 and said[0].startswith("field 'flag': the Gaussian variance sits on its floor in ")
