"""Resident E-steps (one barrier job per fit) give the per-iteration path's estimates, and fall back."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.estimation import initialize, optimize
from mixle_spark.parallel.backends.spark import SparkEncodedData
from mixle_spark.stats import (
    GaussianAccumulator,
    GaussianAccumulatorFactory,
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
)

pytestmark = pytest.mark.spark

START = MixtureDistribution([GaussianDistribution(-3.0, 1.0), GaussianDistribution(2.0, 0.5)], [0.4, 0.6])
EST = MixtureEstimator([GaussianEstimator()] * 2)


@pytest.fixture(scope="module")
def frame(spark: Any) -> Any:
    x = np.asarray(START.sampler(12).sample(3000))
    return spark.createDataFrame(pa.table({"x": x})), list(x)


def _params(m: MixtureDistribution) -> np.ndarray:
    return np.array([[w, c.mu, c.sigma2] for w, c in zip(m.w, m.components, strict=True)])


def test_resident_equals_per_iteration_jobs_and_local(frame: Any) -> None:
    df, x = frame
    fits = []
    for resident in (True, False):
        with SparkEncodedData(df, estimator=EST, num_chunks=2, resident=resident) as handle:
            fits.append(optimize(handle, EST, max_its=6, delta=None, seed=3, init="random"))
            assert handle.resident_steps == (8 if resident else 0)  # init + 6 steps + final score
            assert not handle.executor.holds_slots()  # released when the fit ended: the session is free
            assert handle.frame.sparkSession.range(3).count() == 3
            init = initialize(handle, EST, seed=5)
            np.testing.assert_allclose(_params(init), _params(initialize(x, EST, seed=5)), rtol=1e-12)
    local = optimize(x, EST, max_its=6, delta=None, seed=3, init="random")
    for fit in fits:
        np.testing.assert_allclose(_params(fit), _params(local), rtol=1e-10)
        assert fit.fit_result.log_likelihood == pytest.approx(local.fit_result.log_likelihood, rel=1e-12)


def test_the_handle_runs_its_passes_through_the_executor_its_session_can_run(frame: Any) -> None:
    from mixle_spark.parallel.backends.spark._executors import JobExecutor, ResidentExecutor

    df, _x = frame
    with SparkEncodedData(df, estimator=EST, num_chunks=2) as handle:  # resident tasks, jobs behind them
        assert isinstance(handle.executor, ResidentExecutor) and handle.executor.jobs is handle.jobs
    with SparkEncodedData(df, estimator=EST, num_chunks=2, resident=False) as handle:  # jobs only
        assert isinstance(handle.jobs, JobExecutor) and handle.executor is handle.jobs
        handle.begin_fit()
        handle.pysp_seq_log_density_sum(START)
        handle.end_fit()
        assert handle.resident_steps == handle.resident_starts == 0 and handle.resident_off is None


def test_more_partitions_than_slots(frame: Any) -> None:
    df, x = frame
    with SparkEncodedData(df, estimator=EST, num_chunks=5) as handle:  # auto: falls back quietly
        fit = optimize(handle, EST, max_its=2, delta=None, prev_estimate=START)
        assert handle.resident_steps == 0
    np.testing.assert_allclose(
        _params(fit), _params(optimize(x, EST, max_its=2, delta=None, prev_estimate=START)), rtol=1e-10
    )
    with (
        SparkEncodedData(df, estimator=EST, num_chunks=5, resident=True) as handle,
        pytest.raises(ValueError, match=r"resident=True, but .*5 partitions but 2 task slots"),
    ):
        handle.pysp_seq_log_density_sum(START)


def _fail_if_resident() -> None:
    from pyspark import BarrierTaskContext, TaskContext

    if isinstance(TaskContext.get(), BarrierTaskContext):
        raise RuntimeError("injected failure in a resident task")


class _FailsWhenResident(GaussianAccumulator):
    def seq_update(self, enc: Any, weights: Any, estimate: Any) -> Any:
        _fail_if_resident()
        return super().seq_update(enc, weights, estimate)

    def add_feature_sums(self, sums: Any, enc: Any, estimate: Any) -> None:
        _fail_if_resident()  # the mixture's fast path calls this instead of seq_update
        super().add_feature_sums(sums, enc, estimate)


class _Factory(GaussianAccumulatorFactory):
    def make(self) -> _FailsWhenResident:
        return _FailsWhenResident(self.keys)


class _Estimator(GaussianEstimator):
    def accumulator_factory(self) -> _Factory:
        return _Factory(self.keys)


def test_a_failing_resident_task_falls_back_without_changing_estimates(frame: Any) -> None:
    df, x = frame
    est = MixtureEstimator([_Estimator()] * 2)
    with SparkEncodedData(df, estimator=est, num_chunks=2) as handle:
        fit = optimize(handle, est, max_its=3, delta=None, prev_estimate=START)
        assert handle.resident_steps == 0 and handle.resident_starts == 1
        assert "injected failure in a resident task" in (handle.resident_off or "")
        events = [e for rec in fit.fit_result.trace for e in rec.events]
        assert any(e.startswith("resident E-steps off for this fit: partition") for e in events), events
    want = optimize(x, EST, max_its=3, delta=None, prev_estimate=START)
    np.testing.assert_allclose(_params(fit), _params(want), rtol=1e-10)


def test_direct_calls_outside_a_fit_use_ordinary_jobs(frame: Any) -> None:
    df, _x = frame
    with SparkEncodedData(df, estimator=EST, num_chunks=2) as handle:
        handle.pysp_em_step(EST, START)
        assert handle.resident_steps == 0 and not handle.executor.holds_slots()
        assert df.sparkSession.range(5).count() == 5  # the task slots are free


def test_default_layout_is_one_partition_per_task_slot(spark: Any, frame: Any) -> None:
    _df, x = frame
    many = spark.createDataFrame(spark.sparkContext.parallelize([(float(v),) for v in x], 7), "x double")
    with SparkEncodedData(many, estimator=EST) as handle:
        assert handle.auto_layout and handle.num_partitions == 2  # local[2]: two slots, not 7 partitions
        fit = optimize(handle, EST, max_its=4, delta=None, seed=3, init="random")
        assert handle.resident_steps == 6 and handle.resident_starts == 1
    with SparkEncodedData(many, estimator=EST, resident=False) as handle:  # the job path: coalesced
        assert not handle.auto_layout and handle.num_partitions == 2  # to the slots, never shuffled
    local = optimize(x, EST, max_its=4, delta=None, seed=3, init="random")
    np.testing.assert_allclose(_params(fit), _params(local), rtol=1e-10)
    first = fit.fit_result.trace[0].events
    assert len(first) == 1 and first[0].startswith("resident E-steps started: 2 tasks hold 3,000 rows")


def test_a_killed_python_worker_restarts_the_session_and_keeps_the_estimates(
    frame: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import signal

    from mixle_spark.parallel.backends.spark._resident import ResidentSession

    df, x = frame
    original = ResidentSession.request
    calls = {"n": 0}

    def request(self: ResidentSession, payload: Any) -> list[Any]:
        calls["n"] += 1
        if calls["n"] == 4:  # (initialization, iterations 0, 1, then) iteration 2: kill a Python worker
            os.kill(self.pids[1], signal.SIGKILL)
        return original(self, payload)

    monkeypatch.setattr(ResidentSession, "request", request)
    with SparkEncodedData(df, estimator=EST, num_chunks=2) as handle:
        fit = optimize(handle, EST, max_its=6, delta=None, seed=3, init="random")
        assert handle.resident_starts == 2 and handle.resident_steps == 7  # one step ran as a job
        assert handle.resident_off is None
    local = optimize(x, EST, max_its=6, delta=None, seed=3, init="random")
    np.testing.assert_allclose(_params(fit), _params(local), rtol=1e-10)
    events = {rec.iteration: rec.events for rec in fit.fit_result.trace}
    assert events[2][0].startswith("resident E-steps lost: lost the resident task of partition 1")
    assert events[2][0].endswith("this step recomputed by a Spark job")
    assert events[3][0].startswith("resident E-steps restarted (1 of at most 3): 2 tasks hold 3,000 rows")
    assert [i for i, e in events.items() if e] == [0, 2, 3], events


def test_validation_data_on_spark_shares_the_slots_without_deadlock(spark: Any, frame: Any) -> None:
    df, x = frame
    v = np.asarray(START.sampler(13).sample(1000))
    dv = spark.createDataFrame(pa.table({"x": v}))
    fit = optimize(
        df, EST, max_its=4, delta=None, seed=3, init="random", vdata=dv
    )  # both handles want every slot
    want = optimize(x, EST, max_its=4, delta=None, seed=3, init="random", vdata=list(v))
    np.testing.assert_allclose(_params(fit), _params(want), rtol=1e-10)
    assert fit.fit_result.validation_log_likelihood == pytest.approx(
        want.fit_result.validation_log_likelihood, rel=1e-12
    )
    events = [e for rec in fit.fit_result.trace for e in rec.events]
    assert events[0].startswith("resident E-steps started")
    assert events[1] == (
        "resident E-steps off for this fit: another encoded-data handle (e.g. validation data) runs "
        "Spark jobs in this fit"
    )


def test_a_barrier_stage_without_free_slots_is_cancelled_and_the_fit_goes_on(
    spark: Any, frame: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading
    import time

    from mixle_spark.parallel.backends.spark import _resident

    df, x = frame
    sc = spark.sparkContext
    monkeypatch.setattr(_resident, "LAUNCH_TIMEOUT", 3.0)

    def occupy_one_slot() -> None:  # another job on the session holds one of the two slots
        sc.setJobGroup("someone-else", "a long job of another user")
        sc.parallelize([0], 1).map(lambda v: time.sleep(12) or v).collect()

    other = threading.Thread(target=occupy_one_slot)
    other.start()
    time.sleep(1.0)
    started = time.monotonic()
    with SparkEncodedData(df, estimator=EST) as handle:
        fit = optimize(handle, EST, max_its=3, delta=None, seed=3, init="random")
        assert handle.resident_steps == 0 and handle.resident_starts == 0
        assert "did not start 2 tasks within 3 s" in (handle.resident_off or "")
    assert time.monotonic() - started < 11  # not held up until the other job ends
    events = [e for rec in fit.fit_result.trace for e in rec.events]
    assert len(events) == 1 and events[0].startswith("resident E-steps off for this fit: the barrier stage")
    np.testing.assert_allclose(
        _params(fit), _params(optimize(x, EST, max_its=3, delta=None, seed=3, init="random")), rtol=1e-10
    )
    other.join()
    time.sleep(1.0)
    assert list(sc.statusTracker().getActiveJobsIds()) == []  # the barrier job was not resubmitted


# -- the encoding inside the first resident session (defer_encoding) ----------------------------------
def test_deferred_encoding_runs_in_the_first_resident_session_and_equals_the_eager_fit(
    spark: Any, frame: Any
) -> None:
    df, _x = frame
    fits, events = [], []
    for defer in (False, True):
        with SparkEncodedData(df, estimator=EST, defer_encoding=defer) as handle:
            fits.append(optimize(handle, EST, max_its=5, delta=None, seed=3, init="random"))
            assert handle.resident_starts == 1 and len(handle) == 3000
            events.append(" ".join(fits[-1].fit_result.trace[0].events))
        if defer:  # the chunks lived in the first session's tasks: this one reads the input again
            again = optimize(handle, EST, max_its=5, delta=None, seed=3, init="random")
            assert handle.resident_starts == 2
            np.testing.assert_allclose(_params(again), _params(fits[-1]), rtol=1e-12)
    np.testing.assert_allclose(_params(fits[1]), _params(fits[0]), rtol=1e-12)
    assert "encoding the data in the same job" in events[1]
    assert "encoding the data in the same job" not in events[0]
    # a vector column (its encoder learns a centre: the chunks are rebased as they are read)
    from pyspark.ml.functions import array_to_vector

    from mixle_spark.stats import MultivariateGaussianEstimator

    rng = np.random.default_rng(5)
    points = rng.normal(size=(2000, 3)) + np.where(rng.random(2000) < 0.5, 4.0, -4.0)[:, None]
    vectors = spark.createDataFrame(pa.table({"v": [list(p) for p in points]}))
    vectors = vectors.select(array_to_vector("v").alias("v"))
    mvn = MixtureEstimator([MultivariateGaussianEstimator()] * 2)
    want = optimize(points, mvn, max_its=4, delta=None, seed=2, init="random", print_iter=0)
    with SparkEncodedData(vectors, estimator=mvn, defer_encoding=True) as handle:
        got = optimize(handle, mvn, max_its=4, delta=None, seed=2, init="random", print_iter=0)
        assert handle.rebased_chunks > 0  # each partition's chunk encoded under its own centre
        assert "encoding the data in the same job" in " ".join(got.fit_result.trace[0].events)
    np.testing.assert_allclose(got.w, want.w, rtol=1e-9)
    for a, b in zip(got.components, want.components, strict=True):
        np.testing.assert_allclose(a.mu, b.mu, rtol=1e-9)
        np.testing.assert_allclose(a.covar, b.covar, rtol=1e-9)


def test_deferred_encoding_refuses_an_input_that_gives_other_rows_when_read_again(spark: Any) -> None:
    import random

    from pyspark.sql import functions as F

    from mixle_spark.errors import InputChangedError

    noise = F.udf(lambda: random.gauss(0.0, 1.0), "double").asNondeterministic()
    df = spark.range(0, 400, 1, 2).select(noise().alias("x"))
    with SparkEncodedData(df, estimator=EST, defer_encoding=True) as handle:
        first = optimize(handle, EST, max_its=2, delta=None, seed=1, init="random", print_iter=0)
        assert "encoding the data in the same job" in " ".join(first.fit_result.trace[0].events)
        for _ in range(2):  # and again at the next use: the handle is not read with other rows
            with pytest.raises(
                InputChangedError, match=r"gave other rows when read a second time \(partition 0, 1 of 2;"
            ):
                optimize(handle, EST, max_its=2, delta=None, seed=1, init="random", print_iter=0)


def test_deferred_encoding_raises_a_bad_value_at_the_first_pass_and_releases_the_slots(spark: Any) -> None:
    from mixle_spark.errors import DataValueError

    bad = spark.createDataFrame(pa.table({"x": [0.5, 1.0, float("nan"), 2.0] * 50}))
    with pytest.raises(DataValueError) as eager:
        SparkEncodedData(bad, estimator=EST)
    handle = SparkEncodedData(bad, estimator=EST, defer_encoding=True)  # nothing read yet
    with pytest.raises(DataValueError) as deferred:
        optimize(handle, EST, max_its=2, delta=None, seed=1, init="random", print_iter=0)
    assert str(deferred.value) == str(eager.value)  # the same row, value and count
    handle.close()
    # the slots are free again: a resident fit starts at once
    good = spark.createDataFrame(pa.table({"x": [0.5, 1.0, 1.5, 2.0] * 50}))
    with SparkEncodedData(good, estimator=EST, defer_encoding=True) as again:
        optimize(again, EST, max_its=2, delta=None, seed=1, init="random", print_iter=0)
        assert again.resident_starts == 1


def test_deferred_encoding_falls_back_to_a_job_when_resident_tasks_cannot_encode(
    frame: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mixle_spark.parallel.backends.spark._executors import FusedEncoding

    def refuse(_self: Any) -> str:
        return "no slots (test)"

    df, _x = frame
    with SparkEncodedData(df, estimator=EST) as handle:
        want = optimize(handle, EST, max_its=3, delta=None, seed=4, init="random", print_iter=0)
    monkeypatch.setattr(FusedEncoding, "start", refuse)
    with SparkEncodedData(df, estimator=EST, defer_encoding=True) as handle:
        got = optimize(handle, EST, max_its=3, delta=None, seed=4, init="random", print_iter=0)
        assert handle.resident_starts == 1  # the fit's own session, over the cached chunks
    events = " ".join(got.fit_result.trace[0].events)
    assert "the data encoded by a job: resident tasks could not encode it (no slots (test))" in events
    np.testing.assert_allclose(_params(got), _params(want), rtol=1e-12)
    # outside a fit the data is encoded by a job when first needed
    with SparkEncodedData(df, estimator=EST, defer_encoding=True) as handle:
        assert len(handle) == 3000 and handle.resident_starts == 0
