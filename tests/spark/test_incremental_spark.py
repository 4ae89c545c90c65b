"""Kept statistics and incremental updates on Spark equal the local backend's (1e-9 relative): a fit
with ``keep_statistics=True`` over a DataFrame, then ``update`` (incremental and stepwise, with decay,
a label the fit did not see arriving), on a classic session and under Spark Connect.

The scenario and its comparisons (``tables``, ``updates``, ``assert_same_*``) are shared with the
mpi, dask and ray suites (tests/mpi/test_mpi_incremental.py, tests/dask/test_incremental_dask.py,
tests/ray/test_incremental_ray.py)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.em.incremental import update
from mixle_spark.estimation import optimize
from mixle_spark.stats import CategoricalEstimator, GaussianEstimator, MixtureEstimator, RecordEstimator

pytestmark = pytest.mark.spark

RTOL = 1e-9
EST = MixtureEstimator(
    [RecordEstimator({"x": GaussianEstimator(), "c": CategoricalEstimator(pseudo_count=0.5)})] * 2
)
FIT: dict[str, Any] = {"seed": 3, "max_its": 15, "delta": None, "keep_statistics": True, "print_iter": 0}
# delta=0: every update makes max_its passes, so the pass count cannot hinge on a rounding
UPDATES: dict[str, dict[str, Any]] = {
    "incremental": {"method": "incremental", "decay": 0.8, "max_its": 3, "delta": 0.0},
    "stepwise": {"method": "stepwise", "half_life": 400.0, "time_unit": "points"},
}


def _table(n: int, seed: int, labels: tuple[list[str], list[str]]) -> pa.Table:
    rng = np.random.default_rng(seed)
    z = rng.integers(0, 2, n)
    c = np.where(z == 0, rng.choice(labels[0], n), rng.choice(labels[1], n))
    order = np.argsort(c, kind="stable")  # partitions see different vocabularies, "z" in the last
    return pa.table({"x": rng.normal(np.where(z == 0, -2.0, 2.0))[order], "c": c[order]})


def tables() -> tuple[pa.Table, pa.Table]:
    """2000 rows to fit, then 600 new ones of which about half carry the unseen label "z"."""
    return _table(2000, 1, (["a", "b"], ["b", "c"])), _table(600, 2, (["a", "z"], ["c", "z"]))


def _leaves(value: Any) -> list[float]:
    """The numbers of a statistics value tree, in order (dict entries by key)."""
    if isinstance(value, dict):
        return [x for key in sorted(value, key=str) for x in _leaves(value[key])]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _leaves(v)]
    if isinstance(value, np.ndarray):
        return [float(v) for v in value.ravel()]
    return [float(value)] if isinstance(value, (int, float, np.number)) else []


def _without_scales(spec: Any) -> Any:
    if isinstance(spec, dict):
        return {k: _without_scales(v) for k, v in spec.items() if k != "scale"}
    return [_without_scales(v) for v in spec] if isinstance(spec, list) else spec


def _scales(spec: Any) -> list[float]:
    if isinstance(spec, dict):
        own = [float(spec["scale"])] if "scale" in spec else []
        return own + [v for part in spec.values() for v in _scales(part)]
    return [v for part in spec for v in _scales(part)] if isinstance(spec, list) else []


def assert_same_model(got: Any, want: Any) -> None:
    """Weights, means, variances, pmaps (labels in the same order) and kept statistics to RTOL."""
    np.testing.assert_allclose(got.w, want.w, rtol=RTOL)
    for a, b in zip(got.components, want.components, strict=True):
        ax, bx = a.fields["x"], b.fields["x"]
        np.testing.assert_allclose([ax.mu, ax.sigma2], [bx.mu, bx.sigma2], rtol=RTOL)
        ac, bc = a.fields["c"].pmap, b.fields["c"].pmap
        assert list(ac) == list(bc)
        np.testing.assert_allclose(list(ac.values()), list(bc.values()), rtol=RTOL)
    s, t = got.statistics, want.statistics
    assert (s.rows, s.updates, s.last_batch) == (t.rows, t.updates, t.last_batch)
    # the vocabularies, in the same order; each Gaussian's scale (the column's variance, from scans
    # merged per partition) to rounding
    assert _without_scales(s.estimator.to_dict()) == _without_scales(t.estimator.to_dict())
    np.testing.assert_allclose(_scales(s.estimator.to_dict()), _scales(t.estimator.to_dict()), rtol=RTOL)
    totals = ("weight", "log_likelihood", "scored_weight")
    np.testing.assert_allclose([getattr(s, k) for k in totals], [getattr(t, k) for k in totals], rtol=RTOL)
    np.testing.assert_allclose(_leaves(s.value), _leaves(t.value), rtol=RTOL)


def assert_same_update(got: Any, want: Any) -> None:
    """The models and what the updates report."""
    assert_same_model(got, want)
    r, s = got.update_result, want.update_result
    assert (r.rows, r.method, r.passes, r.unseen_rows) == (s.rows, s.method, s.passes, s.unseen_rows)
    numbers = ("weight", "decay", "mean_log_likelihood_before", "reference_mean_log_likelihood", "drift")
    np.testing.assert_allclose([getattr(r, k) for k in numbers], [getattr(s, k) for k in numbers], rtol=RTOL)
    np.testing.assert_allclose(r.history, s.history, rtol=RTOL)


def updates(model: Any, new: Any, **backend: Any) -> dict[str, Any]:
    """``model`` updated with ``new`` by each method (the same ``model`` each time), by method."""
    return {method: update(model, new, **options, **backend) for method, options in UPDATES.items()}


@pytest.fixture(scope="module")
def local() -> tuple[Any, dict[str, Any]]:
    old, new = tables()
    model = optimize(old, EST, **FIT)
    return model, updates(model, new)


def test_the_local_updates_see_the_new_label(local: tuple[Any, dict[str, Any]]) -> None:
    model, updated = local
    unseen = tables()[1].column("c").to_pylist().count("z")
    assert model.statistics.rows == 2000 and 250 < unseen < 350
    for method, result in updated.items():
        r = result.update_result
        assert (r.rows, r.unseen_rows, r.passes) == (600, unseen, 3 if method == "incremental" else 1)
        assert np.isfinite(r.mean_log_likelihood_before) and r.history[0] == -np.inf
        assert result.statistics.rows == 2600 and result.statistics.updates == 1
        assert all(list(c.fields["c"].pmap) == ["a", "b", "c", "z"] for c in result.components)


# -- classic Spark ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spark_fit(spark: Any) -> Any:
    old, _new = tables()
    return optimize(spark.createDataFrame(old), EST, **FIT)  # the default layout: resident E-steps


def test_a_fit_keeps_the_local_statistics(spark_fit: Any, local: tuple[Any, dict[str, Any]]) -> None:
    assert spark_fit.statistics.rows == 2000
    assert_same_model(spark_fit, local[0])


@pytest.mark.parametrize("method", list(UPDATES))
def test_an_update_equals_the_local_one(
    spark: Any, spark_fit: Any, local: tuple[Any, dict[str, Any]], method: str
) -> None:
    _old, new = tables()  # three partitions for two task slots: one Spark job a pass
    got = update(spark_fit, spark.createDataFrame(new), num_chunks=3, **UPDATES[method])
    assert_same_update(got, local[1][method])


@pytest.mark.parametrize("method", list(UPDATES))
def test_a_small_update_runs_whole_in_one_task(
    spark: Any,
    spark_fit: Any,
    local: tuple[Any, dict[str, Any]],
    method: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Default options, new rows the optimizer sizes small: one job whose one task runs the local
    backend's update over them; the same update, and the lines ``out`` gets are the local ones."""
    from mixle_spark.parallel.backends.spark import SparkEncodedData

    taken: list[bool] = []
    whole = SparkEncodedData.in_one_task

    def spy(self: Any, fn: Any) -> Any:
        done = whole(self, fn)
        taken.append(done[0])
        return done

    monkeypatch.setattr(SparkEncodedData, "in_one_task", spy)
    _old, new = tables()
    sc = spark.sparkContext
    sc.setJobGroup(f"one-task-update-{method}", "a small update")
    said: list[str] = []
    got = update(spark_fit, spark.createDataFrame(new), out=said.append, **UPDATES[method])
    jobs = sc.statusTracker().getJobIdsForGroup(f"one-task-update-{method}")
    sc.setLocalProperty("spark.jobGroup.id", None)
    assert taken == [True] and len(jobs) == 1
    assert_same_update(got, local[1][method])
    assert said == [local[1][method].update_result.summary()]
    assert got.update_result.seconds > 0
    # a drift the update refuses raises here, as on the passes' path (the one task's failure is not
    # the answer: the rows are encoded and read as usual, and DriftError carries the result)
    from mixle_spark.em.incremental import DriftError

    with pytest.raises(DriftError, match="nothing was updated") as refused:
        update(spark_fit, spark.createDataFrame(new), max_drop=0.0, on_drift="raise", **UPDATES[method])
    assert taken[-1] is False and refused.value.result.rows == 600


@pytest.mark.parametrize("method", list(UPDATES))
def test_an_update_encodes_the_new_rows_in_its_resident_session(
    spark: Any,
    spark_fit: Any,
    local: tuple[Any, dict[str, Any]],
    method: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Default options, new rows not small enough for one task: they are encoded by the barrier job
    that then serves the update's passes (one Spark job; the chunks with the unseen label rebased as
    they are read)."""
    import mixle_spark.parallel.backends.spark._handle as spark_backend

    monkeypatch.setattr(spark_backend, "ONE_TASK_BYTES", 0)
    _old, new = tables()
    with caplog.at_level(logging.INFO, logger="mixle_spark.parallel.backends.spark"):
        got = update(spark_fit, spark.createDataFrame(new), **UPDATES[method])
    assert_same_update(got, local[1][method])
    said = [r.getMessage() for r in caplog.records]
    assert any("resident E-steps started (encoding the data in the same job)" in line for line in said), said
    # resident tasks off: the rows encoded by a job, one job a pass, the same update
    assert_same_update(
        update(spark_fit, spark.createDataFrame(new), resident=False, **UPDATES[method]), local[1][method]
    )


# -- Spark Connect ------------------------------------------------------------------------------------
# Run inside tests/spark/test_spark_connect.py's Connect subprocess (one server for every Connect check).
# Each pass is a Spark job or two under Connect: the fit starts from the local fit's model and makes
# CONNECT_ITS EM passes (then its statistics pass) instead of seeding and fitting from scratch.
CONNECT_ITS = 2


def connect_updates(spark: Any) -> dict[str, Any]:
    """In the Connect child: the fit and one update per method over ``spark`` (a Connect session), as
    JSON-able data for :func:`check_connect_updates`."""
    from mixle_spark.spec import model_to_dict

    old, new = tables()
    start = optimize(old, EST, **FIT)  # the local fit, made again in the child (deterministic)
    model = optimize(spark.createDataFrame(old), EST, prev_estimate=start, **{**FIT, "max_its": CONNECT_ITS})
    out: dict[str, Any] = {"fit": model_to_dict(model)}
    for method, updated in updates(model, spark.createDataFrame(new), num_chunks=3).items():
        out[method] = {"model": model_to_dict(updated), "result": dataclasses.asdict(updated.update_result)}
    # default options: the small update runs whole in one task
    for method, updated in updates(model, spark.createDataFrame(new)).items():
        result = dataclasses.asdict(updated.update_result)
        out[f"{method}, one task"] = {"model": model_to_dict(updated), "result": result}
    return out


def check_connect_updates(out: dict[str, Any]) -> None:
    """What :func:`connect_updates` printed equals the local backend's."""
    from mixle_spark.em.incremental import UpdateResult
    from mixle_spark.spec import model_from_dict

    old, new = tables()
    start = optimize(old, EST, **FIT)
    want = optimize(old, EST, prev_estimate=start, **{**FIT, "max_its": CONNECT_ITS})
    assert_same_model(model_from_dict(out["fit"]), want)
    for method, want_updated in updates(want, new).items():
        for key in (method, f"{method}, one task"):
            got = model_from_dict(out[key]["model"])
            got.update_result = UpdateResult(**out[key]["result"])
            assert_same_update(got, want_updated)
