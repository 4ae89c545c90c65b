"""Rank receipts (stragglers, imbalance, rebalance weights, fit report) and the per-iteration EM trace."""

from __future__ import annotations

import json
import math
import re
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle_spark.em.observability import (
    EMTrace,
    FitReport,
    IterationTrace,
    JsonLinesSink,
    MlflowSink,
    PartitionTiming,
    RankRecord,
    detect_stragglers,
    fit_report,
    imbalance_receipt,
    plan_rebalance_weights,
    record_rank_round,
    stat_nbytes,
)

# -- rank receipts ---------------------------------------------------------------------------------


def _round(seconds: list[float], rnd: int = 0, nbytes: list[int] | None = None) -> list[RankRecord]:
    nbytes = nbytes or [0] * len(seconds)
    return [
        RankRecord(rank=r, round=rnd, e_step_seconds=s, bytes_processed=b)
        for r, (s, b) in enumerate(zip(seconds, nbytes, strict=True))
    ]


def test_one_slow_rank_is_found_within_a_single_round() -> None:
    # median 1.05, MAD 0.1: rank 3 is 4.8x the median at robust z 26.6
    assert detect_stragglers(_round([1.0, 1.1, 0.9, 5.0])) == (3,)
    assert detect_stragglers({0: 1.0, 1: 1.1, 2: 0.9, 3: 5.0}) == (3,)


def test_even_ranks_give_no_stragglers() -> None:
    assert detect_stragglers(_round([2.0, 2.0, 2.0, 2.0])) == ()
    assert detect_stragglers({}) == ()


def test_both_the_ratio_and_the_robust_z_must_pass() -> None:
    # rank 7 is 1.78x the median 4.5 but its robust z is 3.5 / (1.4826 * 2) = 1.18
    assert detect_stragglers({r: float(r + 1) for r in range(8)}) == ()
    # MAD 0: the ratio alone decides, at the threshold inclusive
    assert detect_stragglers({0: 1.0, 1: 1.0, 2: 1.0, 3: 1.5}) == (3,)
    assert detect_stragglers({0: 1.0, 1: 1.0, 2: 1.0, 3: 1.49}) == ()
    assert detect_stragglers({0: 1.0, 1: 1.0, 2: 1.0, 3: 1.6}, threshold_ratio=2.0) == ()
    # median 2, MAD 0.5: 4.0 has z 2.70 (flagged were the MAD not scaled by 1.4826), 4.3 has z 3.10
    assert detect_stragglers({0: 1.0, 1: 1.5, 2: 2.0, 3: 2.5, 4: 4.0}) == ()
    assert detect_stragglers({0: 1.0, 1: 1.5, 2: 2.0, 3: 2.5, 4: 4.3}) == (4,)


def test_stragglers_refuse_mixed_rounds_duplicates_and_bad_thresholds() -> None:
    with pytest.raises(ValueError, match=r"one round, got rounds \[0, 1\]"):
        detect_stragglers(_round([1.0, 2.0], rnd=0) + _round([1.0], rnd=1))
    with pytest.raises(ValueError, match="duplicate record for round 0, rank 1"):
        detect_stragglers([*_round([1.0, 2.0]), RankRecord(1, 0, 3.0)])
    with pytest.raises(ValueError, match=r"threshold_ratio must be a finite number > 0, got -1\.0"):
        detect_stragglers({0: 1.0}, threshold_ratio=-1.0)
    with pytest.raises(ValueError, match="z_threshold must be finite, got nan"):
        detect_stragglers({0: 1.0}, z_threshold=math.nan)
    with pytest.raises(ValueError, match=r"seconds of rank 2: .* got -3\.0"):
        detect_stragglers({0: 1.0, 2: -3.0})
    with pytest.raises(TypeError, match="detect_stragglers: expected RankRecord items, got 5"):
        detect_stragglers([5])  # type: ignore[list-item]


def test_a_planted_10x_skew_is_measured_exactly() -> None:
    records = _round([1.0, 1.0], rnd=0, nbytes=[50, 500]) + _round([1.0, 1.0], rnd=1, nbytes=[50, 500])
    receipt = imbalance_receipt(records)
    assert receipt["ranks"] == 2
    assert receipt["bytes_by_rank"] == {0: 100, 1: 1000}
    assert receipt["mean_bytes"] == 550.0
    assert receipt["relative_to_mean"] == {0: 100 / 550, 1: 1000 / 550}
    assert receipt["max_over_mean"] == 1000 / 550
    assert receipt["max_over_min"] == 10.0


def test_imbalance_edge_cases() -> None:
    even_zero = imbalance_receipt(_round([1.0, 1.0]))
    assert even_zero["relative_to_mean"] == {0: 1.0, 1: 1.0}
    assert (even_zero["max_over_mean"], even_zero["max_over_min"]) == (1.0, 1.0)
    assert imbalance_receipt(_round([1.0, 1.0], nbytes=[0, 8]))["max_over_min"] == math.inf
    assert imbalance_receipt([])["ranks"] == 0


def test_the_slower_rank_gets_less_weight_and_weights_sum_to_the_rank_count() -> None:
    weights = plan_rebalance_weights(_round([1.0, 2.0, 1.0]))
    # speeds 1, 0.5, 1 scaled by 3 / 2.5
    assert weights == pytest.approx({0: 1.2, 1: 0.6, 2: 1.2}, rel=1e-15)
    assert sum(weights.values()) == pytest.approx(3.0, rel=1e-15)
    assert weights[1] < weights[0]
    # a rank's time is its mean over rounds: rank 1 averages 2.0 here too
    two_rounds = _round([1.0, 1.0, 1.0], rnd=0) + _round([1.0, 3.0, 1.0], rnd=1)
    assert plan_rebalance_weights(two_rounds) == pytest.approx(weights, rel=1e-15)
    assert plan_rebalance_weights([]) == {}


def test_a_zero_duration_rank_cannot_be_weighted() -> None:
    with pytest.raises(ValueError, match="rank 2 has zero E-step seconds"):
        plan_rebalance_weights(_round([1.0, 2.0, 0.0]))


def test_fit_report_names_the_stragglers() -> None:
    records = _round([1.0, 6.0, 1.0, 1.0], rnd=0, nbytes=[10, 10, 10, 10])
    records += _round([1.0, 5.0, 1.0, 1.0], rnd=1, nbytes=[10, 10, 10, 50])
    report = fit_report(records)
    assert (report.rounds, report.ranks, report.records) == (2, 4, 8)
    assert report.total_seconds == 17.0 and report.e_step_seconds == 17.0 and report.m_step_seconds == 0.0
    assert report.critical_seconds == 11.0  # the slow rank sets the pace of both rounds
    assert report.bytes_processed == 120
    assert report.stragglers_by_round == {0: (1,), 1: (1,)}
    assert report.stragglers == (1,)
    assert report.imbalance["max_over_min"] == 3.0
    text = report.render()
    assert "STRAGGLERS=(1,)" in text
    assert "2 rounds, 4 ranks, 8 records" in text
    assert "round 1: ranks [1]" in text
    assert report.as_dict()["stragglers"] == (1,)


def test_empty_records_give_a_zero_report() -> None:
    report = fit_report([])
    assert isinstance(report, FitReport)
    assert (report.rounds, report.ranks, report.records, report.bytes_processed) == (0, 0, 0, 0)
    assert (report.total_seconds, report.critical_seconds) == (0.0, 0.0)
    assert report.stragglers == () and report.stragglers_by_round == {}
    assert report.imbalance["max_over_mean"] == 0.0
    assert "STRAGGLERS=()" in report.render()


@pytest.mark.parametrize(
    ("changes", "error", "pattern"),
    [
        ({"rank": -1}, ValueError, r"RankRecord\.rank: expected a non-negative int, got -1"),
        ({"round": True}, TypeError, r"RankRecord\.round: expected a non-negative int, got boolean True"),
        ({"n_obs": 1.5}, TypeError, r"RankRecord\.n_obs: .* got 1\.5"),
        ({"bytes_processed": "10"}, TypeError, r"RankRecord\.bytes_processed: .* got string '10'"),
        ({"accumulator_bytes": -8}, ValueError, r"RankRecord\.accumulator_bytes: .* got -8"),
        ({"e_step_seconds": math.nan}, ValueError, r"RankRecord\.e_step_seconds: .* got nan"),
        ({"e_step_seconds": math.inf}, ValueError, r"RankRecord\.e_step_seconds: .* got inf"),
        ({"m_step_seconds": -0.5}, ValueError, r"RankRecord\.m_step_seconds: .* got -0\.5"),
        ({"m_step_seconds": None}, TypeError, r"RankRecord\.m_step_seconds: .* got null"),
        ({"extra": {"rank": 3}}, ValueError, r"RankRecord\.extra: key 'rank' shadows"),
        ({"extra": ["gpu"]}, TypeError, r"RankRecord\.extra: expected a mapping, got list \['gpu'\]"),
    ],
)
def test_rank_record_validation_names_the_field_and_value(
    changes: dict[str, Any], error: type[Exception], pattern: str
) -> None:
    kwargs: dict[str, Any] = {"rank": 0, "round": 0, "e_step_seconds": 1.0, **changes}
    with pytest.raises(error, match=pattern):
        RankRecord(**kwargs)


def test_rank_record_normalises_and_round_trips() -> None:
    record = RankRecord(np.int64(2), 1, np.float32(0.5), n_obs=10, extra={"host": "a"})
    assert type(record.rank) is int and type(record.e_step_seconds) is float
    assert record.seconds == 0.5
    assert RankRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record


def test_record_rank_round_appends_and_refuses_duplicates() -> None:
    held: list[RankRecord] = []
    first = record_rank_round(held, RankRecord(1, 0, 1.0))
    record_rank_round(held, RankRecord(1, 1, 1.0))
    assert held == [first, RankRecord(1, 1, 1.0)]
    with pytest.raises(ValueError, match="round 0, rank 1 is already there"):
        record_rank_round(held, RankRecord(1, 0, 2.0))
    assert len(held) == 2
    trace = EMTrace()
    record_rank_round(trace, RankRecord(0, 3, 1.0))
    with pytest.raises(ValueError, match="round 3, rank 0"):
        record_rank_round(trace, RankRecord(0, 3, 1.0))
    assert trace.rank_records == [RankRecord(0, 3, 1.0)] and len(trace) == 0
    with pytest.raises(TypeError, match="expected a RankRecord, got dict"):
        record_rank_round(held, {"rank": 0})  # type: ignore[arg-type]


# -- the per-iteration trace -----------------------------------------------------------------------

PARTS = [
    PartitionTiming(0, 1.0, 100, 10),
    PartitionTiming(1, 1.0, 100, 20),
    PartitionTiming(2, 2.0, 100, 30),
    PartitionTiming(3, 9.0, 100, 40),
]


def _entry(iteration: int, ll: float, delta: float | None, **kw: Any) -> IterationTrace:
    return IterationTrace.from_pass(
        iteration=iteration, log_likelihood=ll, delta=delta, weight=400.0, seconds=4.0, parts=PARTS, **kw
    )


def test_from_pass_arithmetic() -> None:
    t = _entry(2, -1234.5, 0.5, component_weights=np.array([0.25, 0.75]), events=["checkpoint written"])
    assert (t.rows, t.partitions, t.stat_bytes) == (400, 4, 100)
    assert t.rows_per_second == 100.0
    assert t.partition_seconds == (1.0, 1.5, 9.0)  # median of an even count: (1 + 2) / 2
    assert t.skew == 6.0
    # deviations from 1.5 are 0.5, 0.5, 0.5, 7.5: MAD 0.5, z of partition 3 = 7.5 / 0.7413
    assert t.stragglers == (3,)
    assert t.component_weights == (0.25, 0.75) and type(t.component_weights[0]) is float
    assert t.events == ("checkpoint written",)
    assert t.weight == 400.0 and t.delta == 0.5


def test_from_pass_rows_override_zero_seconds_and_no_parts() -> None:
    assert _entry(0, -1.0, None, rows=1000).rows_per_second == 250.0
    t = IterationTrace.from_pass(
        iteration=0, log_likelihood=-1.0, delta=None, weight=0.0, seconds=0.0, parts=[]
    )
    assert (t.rows, t.rows_per_second, t.partitions, t.stat_bytes) == (0, 0.0, 0, 0)
    assert t.partition_seconds == (0.0, 0.0, 0.0) and t.skew == 1.0 and t.stragglers == ()
    even = IterationTrace.from_pass(
        iteration=1, log_likelihood=-1.0, delta=0.1, weight=2.0, seconds=1.0,
        parts=[PartitionTiming(0, 0.5, 1, 8), PartitionTiming(1, 0.5, 1, 8)],
    )  # fmt: skip
    assert even.skew == 1.0 and even.stragglers == () and even.rows == 2


def _trace() -> EMTrace:
    trace = EMTrace(metadata={"backend": "LocalEncodedData", "rows": 400, "seed": 7})
    trace.append(_entry(0, math.nan, None))
    trace.append(_entry(1, -1234.56789012, 0.0123, component_weights=(0.4, 0.6), events=("audit ok",)))
    trace.append(_entry(2, -1234.5, 0.06789012, component_weights=(0.5, 0.5)))
    return trace


def _dumped(trace: EMTrace) -> list[str]:
    return [json.dumps(r.to_dict()) for r in trace]  # NaN != NaN, but its JSON text is equal


def test_jsonl_round_trip_is_exact(tmp_path: Path) -> None:
    trace = _trace()
    record_rank_round(trace, RankRecord(0, 0, 1.5, bytes_processed=64))
    path = tmp_path / "deep" / "trace.jsonl"
    trace.to_jsonl(path)
    assert list(path.parent.iterdir()) == [path]  # the temporary file is gone
    back = EMTrace.from_jsonl(path)
    assert back.metadata == trace.metadata
    assert _dumped(back) == _dumped(trace)
    assert math.isnan(back[0].log_likelihood) and back[0].delta is None
    assert back[1].log_likelihood == -1234.56789012 and back[1].component_weights == (0.4, 0.6)
    assert back[1].partition_seconds == (1.0, 1.5, 9.0) and back[1].events == ("audit ok",)
    assert back.rank_records == trace.rank_records
    assert json.dumps(EMTrace.from_dict(json.loads(json.dumps(trace.to_dict()))).to_dict()) == json.dumps(
        trace.to_dict()
    )


def test_json_lines_sink_writes_a_readable_file_as_it_goes(tmp_path: Path) -> None:
    trace = _trace()
    path = tmp_path / "runs" / "fit.jsonl"
    sink = JsonLinesSink(path, trace.metadata)
    assert EMTrace.from_jsonl(path).metadata == trace.metadata and len(EMTrace.from_jsonl(path)) == 0
    sink(trace[0])
    sink(trace[1])
    partial = EMTrace.from_jsonl(path)
    assert _dumped(partial) == _dumped(trace)[:2]
    sink.close()
    with pytest.raises(ValueError, match="is closed"):
        sink(trace[2])
    # a resumed fit appends without a second header
    with JsonLinesSink(path, {"ignored": True}, append=True) as resumed:
        resumed(trace[2])
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and sum('"metadata"' in line for line in lines) == 1
    whole = EMTrace.from_jsonl(path)
    assert whole.metadata == trace.metadata and _dumped(whole) == _dumped(trace)
    # append to a missing file starts with a header
    fresh = tmp_path / "fresh.jsonl"
    JsonLinesSink(fresh, {"a": 1}, append=True)(trace[1])
    assert EMTrace.from_jsonl(fresh).metadata == {"a": 1} and len(EMTrace.from_jsonl(fresh)) == 1


def test_a_torn_last_line_is_skipped_and_mended_but_other_garbage_raises(tmp_path: Path) -> None:
    trace = _trace()
    path = tmp_path / "fit.jsonl"
    trace.to_jsonl(path)
    with open(path, "a") as fh:
        fh.write('{"iteration": 3, "log_lik')  # the fit died mid-write
    assert _dumped(EMTrace.from_jsonl(path)) == _dumped(trace)
    JsonLinesSink(path, append=True)(trace[2])
    assert len(EMTrace.from_jsonl(path)) == 4
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"metadata": {}}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl: line 2 is not JSON"):
        EMTrace.from_jsonl(bad)
    bad.write_text('{"metadata": {}}\n[1, 2]\n')
    with pytest.raises(ValueError, match="line 2 is neither a metadata header nor an iteration"):
        EMTrace.from_jsonl(bad)


def test_from_dict_names_missing_fields() -> None:
    d = _entry(1, -1.0, 0.5).to_dict()
    del d["rows"], d["skew"]
    with pytest.raises(ValueError, match=r"missing field\(s\) \['rows', 'skew'\]"):
        IterationTrace.from_dict(d)


def test_to_pandas_columns() -> None:
    frame = _trace().to_pandas()
    assert list(frame.columns) == [
        "iteration", "log_likelihood", "delta", "rows", "weight", "seconds", "rows_per_second",
        "stat_bytes", "partitions", "partition_seconds_min", "partition_seconds_median",
        "partition_seconds_max", "skew", "stragglers", "component_weights", "events",
    ]  # fmt: skip
    assert frame["iteration"].tolist() == [0, 1, 2]
    assert math.isnan(frame["delta"][0]) and frame["delta"][1] == 0.0123
    assert frame["partition_seconds_median"].tolist() == [1.5, 1.5, 1.5]
    assert frame["partition_seconds_max"].tolist() == [9.0, 9.0, 9.0]
    assert frame["component_weights"][1] == (0.4, 0.6) and frame["component_weights"][0] is None
    assert list(EMTrace().to_pandas().columns) == list(frame.columns)


def test_progress_line() -> None:
    line = IterationTrace.from_pass(
        iteration=3, log_likelihood=-1234.56789012, delta=0.0123, weight=1e6, seconds=0.412,
        parts=[PartitionTiming(0, 0.2, 500_000, 6300), PartitionTiming(1, 0.21, 500_000, 6300)],
    ).progress_line()  # fmt: skip
    assert re.fullmatch(
        r"iteration {4}3  log-likelihood -1234\.56789012  gain 0\.0123  rows 1000000  0\.412s  "
        r"2\.43M rows/s  skew 1\.02  stats 12\.3 KiB",
        line,
    ), line
    slow = _entry(0, -5.0, None, events=("checkpoint written", "audit ok: partitions [1, 4]"))
    assert re.search(r"gain -  rows 400  4\.000s  100 rows/s  skew 6\.00  stats 100 B", slow.progress_line())
    assert slow.progress_line().endswith("  stragglers [3]  checkpoint written; audit ok: partitions [1, 4]")


def test_summary() -> None:
    text = _trace().summary()
    assert "3 iterations (0-2)" in text
    assert "final log-likelihood -1234.50000000 (last gain 0.06789)" in text
    assert "total 12.000s, mean 100 rows/s" in text
    assert "worst skew 6.00 at iteration 0; stragglers in iterations [0, 1, 2]" in text
    assert EMTrace().summary() == "EM trace: no iterations"


def test_trace_is_list_like_and_typed() -> None:
    trace = _trace()
    assert len(trace) == 3 and [t.iteration for t in trace] == [0, 1, 2]
    assert trace[-1].iteration == 2 and [t.iteration for t in trace[1:]] == [1, 2]
    assert trace.records[0] is trace[0]
    with pytest.raises(TypeError, match="expected an IterationTrace, got dict"):
        trace.append({"iteration": 3})  # type: ignore[arg-type]


# -- MLflow ----------------------------------------------------------------------------------------


class _FakeMlflow(types.ModuleType):
    def __init__(self, run: Any = None) -> None:
        super().__init__("mlflow")
        self.calls: list[tuple[dict[str, float], int]] = []
        self.client_calls: list[tuple[str, str, float, int]] = []
        self.run = run
        outer = self

        class Client:
            def log_metric(self, run_id: str, key: str, value: float, step: int) -> None:
                outer.client_calls.append((run_id, key, value, step))

        self.tracking = types.SimpleNamespace(MlflowClient=Client)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.calls.append((dict(metrics), step))

    def active_run(self) -> Any:
        return self.run


def test_mlflow_sink_logs_each_iteration_at_its_step(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeMlflow()
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    sink = MlflowSink()
    trace = _trace()
    for t in trace:
        sink(t)
    assert [step for _, step in fake.calls] == [0, 1, 2]
    first, second = fake.calls[0][0], fake.calls[1][0]
    # iteration 0: NaN log-likelihood skipped, no delta yet
    assert first == {"em_rows_per_second": 100.0, "em_seconds": 4.0, "em_skew": 6.0, "em_stat_bytes": 100.0}
    assert second["em_log_likelihood"] == -1234.56789012 and second["em_delta"] == 0.0123
    MlflowSink(prefix="fit/")(trace[1])
    assert set(fake.calls[-1][0]) == {
        "fit/log_likelihood", "fit/rows_per_second", "fit/seconds", "fit/skew", "fit/stat_bytes", "fit/delta",
    }  # fmt: skip
    MlflowSink(run_id="abc")(trace[2])
    assert len(fake.calls) == 4 and len(fake.client_calls) == 6
    assert ("abc", "em_log_likelihood", -1234.5, 2) in fake.client_calls


def test_mlflow_sink_without_mlflow_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(
        ImportError, match=re.escape("MlflowSink needs mlflow: pip install 'mixle-spark[mlflow]'")
    ):
        MlflowSink()
    assert MlflowSink.active() is False


def test_mlflow_active_needs_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", _FakeMlflow(run=None))
    assert MlflowSink.active() is False
    monkeypatch.setitem(sys.modules, "mlflow", _FakeMlflow(run=object()))
    assert MlflowSink.active() is True
    broken = _FakeMlflow()
    broken.active_run = lambda: (_ for _ in ()).throw(RuntimeError("no tracking server"))  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "mlflow", broken)
    assert MlflowSink.active() is False


# -- statistics size -------------------------------------------------------------------------------


class _Slotted:
    __slots__ = ("counts", "unset")

    def __init__(self) -> None:
        self.counts = np.zeros(5, dtype=np.int64)  # 40


class _Plain:
    def __init__(self) -> None:
        self.total = 2.0  # 8
        self.name = "ab"  # 2
        self.fn = len  # opaque: 0


class _Unmeasurable:
    @property
    def nbytes(self) -> int:
        raise RuntimeError("cannot tell")


def test_stat_nbytes_on_nested_values() -> None:
    value = (
        np.zeros((2, 3)),  # 48
        {"mu": np.arange(4, dtype=np.int32), "n": 3},  # 2 + 16 + 1 + 8
        [1.5, None, "abc", True, b"xy"],  # 8 + 8 + 3 + 8 + 2
        np.float32(1.0),  # 4
    )
    assert stat_nbytes(value) == 48 + 27 + 29 + 4
    assert stat_nbytes(_Slotted()) == 40
    assert stat_nbytes(_Plain()) == 10
    shared = np.ones(10)
    assert stat_nbytes([shared, shared]) == 80  # counted once, as pickle would ship it
    loop: list[Any] = [1.0]
    loop.append(loop)
    assert stat_nbytes(loop) == 8
    objects = np.empty(2, dtype=object)
    objects[0], objects[1] = np.zeros(2), "abcd"
    assert stat_nbytes(objects) == 16 + 4
    assert stat_nbytes(_Unmeasurable()) == 0
    assert stat_nbytes(None) == 8
