"""Long fits on Spark: a killed driver resumes to the same estimates, a persistent executor error
stops the fit cleanly, the silent-corruption audit finds a bad partition, the trace is filled from
partition timings, and the degenerate-component policy matches the local backend."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.em.resilient import CheckpointStore
from mixle_spark.em.sdc_audit import SDCAudit, SilentCorruptionError
from mixle_spark.errors import ExecutorError
from mixle_spark.estimation import optimize
from mixle_spark.stats import (
    GaussianAccumulator,
    GaussianAccumulatorFactory,
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
)

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
START = MixtureDistribution([GaussianDistribution(-2.0, 1.0), GaussianDistribution(3.0, 0.5)], [0.3, 0.7])


def _x() -> np.ndarray:
    return np.asarray(START.sampler(11).sample(4000))


def _df(spark: Any, x: np.ndarray, parts: int = 4) -> Any:
    return spark.createDataFrame(pa.table({"x": x})).repartition(parts)


_KILL_SCRIPT = """
import sys, time, numpy as np, pyarrow as pa
from mixle_spark.estimation import optimize
from mixle_spark.io import spark_session
from mixle_spark.stats import GaussianDistribution, GaussianEstimator, MixtureDistribution, MixtureEstimator

class Slow:
    def write(self, text):
        sys.stdout.write(text); sys.stdout.flush(); time.sleep(0.5); return len(text)
    def flush(self): pass

start = MixtureDistribution([GaussianDistribution(-2.0, 1.0), GaussianDistribution(3.0, 0.5)], [0.3, 0.7])
x = np.asarray(start.sampler(11).sample(4000))
spark = spark_session("kill-test", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})
spark.sparkContext.setLogLevel("ERROR")
df = spark.createDataFrame(pa.table({"x": x}))
optimize(df, MixtureEstimator([GaussianEstimator()] * 2), max_its=30, delta=None, seed=4,
         checkpoint_dir=sys.argv[1], out=Slow(), num_chunks=2)
print("FINISHED", flush=True)
"""


def test_a_sigkilled_spark_driver_resumes_to_identical_estimates(spark: Any, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILL_SCRIPT, str(ckpt)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,  # so the kill takes the driver's JVM and workers with it
    )
    assert proc.stdout is not None
    seen = []
    deadline = time.monotonic() + 300
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("iteration    3 "):
            os.killpg(proc.pid, signal.SIGKILL)
            break
        assert time.monotonic() < deadline, seen
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, seen
    saved = CheckpointStore(ckpt).latest()
    assert saved is not None and 3 <= saved[0] <= 5
    df = spark.createDataFrame(pa.table({"x": _x()}))
    est = MixtureEstimator([GaussianEstimator()] * 2)
    got = optimize(df, est, max_its=30, delta=None, seed=4, checkpoint_dir=ckpt, num_chunks=2)
    want = optimize(df, est, max_its=30, delta=None, seed=4, num_chunks=2)
    assert got.fit_result.resumed_from == saved[0]
    assert got.to_dict() == want.to_dict()


def test_a_persistent_executor_error_stops_the_fit_and_writes_nothing_after_it(
    spark: Any, tmp_path: Path
) -> None:
    class BrokenAccumulator(GaussianAccumulator):
        def add_feature_sums(self, sums, enc, estimate):  # type: ignore[no-untyped-def]
            from pyspark import TaskContext

            ctx = TaskContext.get()
            if ctx is not None and ctx.partitionId() == 1 and float(np.asarray(sums)[0]) != 0.0:
                raise RuntimeError("disk full on executor (injected)")
            return super().add_feature_sums(sums, enc, estimate)

    class BrokenFactory(GaussianAccumulatorFactory):
        def make(self):  # type: ignore[no-untyped-def]
            return BrokenAccumulator(self.keys)

    class BrokenEstimator(GaussianEstimator):
        def accumulator_factory(self):  # type: ignore[no-untyped-def]
            return BrokenFactory(self.keys)

    ckpt = tmp_path / "ckpt"
    df = _df(spark, _x(), parts=3)
    with pytest.raises(
        ExecutorError, match=r"E-step failed in partition 1 .*RuntimeError: disk full on executor"
    ):
        optimize(df, MixtureEstimator([BrokenEstimator()] * 2), max_its=5, delta=None, prev_estimate=START,
                 checkpoint_dir=ckpt)  # fmt: skip
    assert CheckpointStore(ckpt).list() == []  # nothing partial


def test_the_audit_passes_clean_data_and_does_not_change_the_fit(spark: Any) -> None:
    df = _df(spark, _x())
    est = MixtureEstimator([GaussianEstimator()] * 2)
    plain = optimize(df, est, max_its=4, delta=None, prev_estimate=START)
    audited = optimize(
        df, est, max_its=4, delta=None, prev_estimate=START, audit=SDCAudit(every=2, fraction=0.5)
    )
    assert audited.to_dict() == plain.to_dict()
    events = {t.iteration: t.events for t in audited.fit_result.trace}
    assert [i for i, e in events.items() if any(x.startswith("audit ok: partitions") for x in e)] == [0, 2]
    audits = [next(x for x in e if x.startswith("audit ok")) for i, e in events.items() if i in (0, 2)]
    assert all(len(eval(a[len("audit ok: partitions ") :])) == 1 for a in audits), audits  # half of 2


def test_the_audit_names_a_corrupting_partition(spark: Any) -> None:
    from mixle_spark.stats._mixture_kernels import reference_active

    class CorruptingAccumulator(GaussianAccumulator):
        def add_feature_sums(self, sums, enc, estimate):  # the fused kernel's path only
            from pyspark import TaskContext

            ctx = TaskContext.get()
            if ctx is not None and ctx.partitionId() == 1 and not reference_active():
                sums = np.array(sums, dtype=float)
                sums[1] += 1e-6 * abs(sums[1])  # a small silent error
            return super().add_feature_sums(sums, enc, estimate)

    class CorruptingFactory(GaussianAccumulatorFactory):
        def make(self):  # type: ignore[no-untyped-def]
            return CorruptingAccumulator(self.keys)

    class CorruptingEstimator(GaussianEstimator):
        def accumulator_factory(self):  # type: ignore[no-untyped-def]
            return CorruptingFactory(self.keys)

    df = _df(spark, _x())
    est = MixtureEstimator([CorruptingEstimator()] * 2)
    with pytest.raises(
        SilentCorruptionError, match=r"iteration 0, partition 1, stats\[2\]\[1\]\[0\]\[1\]: first pass"
    ):
        optimize(df, est, max_its=3, delta=None, prev_estimate=START, audit=SDCAudit(fraction=1.0))


def test_the_trace_reports_every_partition(spark: Any, tmp_path: Path) -> None:
    df = _df(spark, _x(), parts=4)
    path = tmp_path / "trace.jsonl"
    model = optimize(df, MixtureEstimator([GaussianEstimator()] * 2), max_its=3, delta=None,
                     prev_estimate=START, trace_path=path)  # fmt: skip
    trace = model.fit_result.trace
    assert [t.iteration for t in trace] == [0, 1, 2, 3]
    for t in trace:
        assert t.partitions == 2 and t.rows == 4000  # the 4 input partitions laid out for the 2 slots
        assert t.skew >= 1.0 and t.rows_per_second > 0
        assert t.partition_seconds[0] <= t.partition_seconds[1] <= t.partition_seconds[2]
    # every EM pass merges statistics; the last record is the final model's scoring pass, which ships
    # none without keep_statistics (em_fit keeps them: tests/unit/test_jobs.py)
    assert all(t.stat_bytes > 0 for t in trace[:-1]) and trace[-1].stat_bytes == 0
    assert trace[1].component_weights == pytest.approx(tuple(model.fit_result.trace[1].component_weights))
    from mixle_spark.em.observability import EMTrace

    written = EMTrace.from_jsonl(path)
    assert [r.to_dict() for r in written] == [r.to_dict() for r in trace]
