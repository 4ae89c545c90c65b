"""The reference's em_observability names (issue 55): StragglerReport, ImbalanceReceipt,
records_from_events; and mpi_out / torchrun_out (the progress stream printed on the root only)."""

from __future__ import annotations

import copy
import io
import json
import math
import pickle
import sys
from types import SimpleNamespace

import pytest

from mixle_spark.em.observability import (
    EMTrace,
    ImbalanceReceipt,
    RankRecord,
    StragglerReport,
    detect_stragglers,
    fit_report,
    imbalance_receipt,
    record_rank_round,
    records_from_events,
)


def _round(seconds: list[float], rnd: int = 0, nbytes: list[int] | None = None) -> list[RankRecord]:
    nbytes = nbytes or [0] * len(seconds)
    return [
        RankRecord(rank=r, round=rnd, e_step_seconds=s, bytes_processed=b, n_obs=10 * (r + 1))
        for r, (s, b) in enumerate(zip(seconds, nbytes, strict=True))
    ]


# -- StragglerReport ---------------------------------------------------------------------------------


def test_a_straggler_report_is_the_tuple_of_slow_ranks_with_its_evidence() -> None:
    report = detect_stragglers(_round([1.0, 1.1, 0.9, 5.0], rnd=4))
    assert isinstance(report, StragglerReport) and report == (3,) and repr(report) == "(3,)"
    assert report.slow_ranks == (3,) and report.has_stragglers
    assert report.round == 4
    assert report.rank_seconds == {0: 1.0, 1: 1.1, 2: 0.9, 3: 5.0}
    assert report.median_seconds == pytest.approx(1.05, rel=1e-15)
    assert report.mad_seconds == pytest.approx(0.1, rel=1e-12)  # |1-1.05|, |1.1-1.05|, ... median 0.1
    assert report.ratios[3] == pytest.approx(5.0 / 1.05, rel=1e-15)
    assert report.z_scores[3] == pytest.approx((5.0 - 1.05) / (1.4826 * 0.1), rel=1e-12)
    assert report.z_scores[2] == pytest.approx((0.9 - 1.05) / (1.4826 * 0.1), rel=1e-12)
    assert (report.threshold_ratio, report.z_threshold) == (1.5, 3.0)
    d = report.to_dict()
    assert d["slow_ranks"] == [3] and d["round"] == 4 and json.loads(json.dumps(d))["median_seconds"] == 1.05


def test_a_straggler_report_is_read_only_and_detached_from_the_callers_dicts() -> None:
    seconds = {0: 1.0, 1: 1.0, 2: 4.0}
    report = detect_stragglers(seconds, round=7)
    assert report == (2,) and report.round == 7
    seconds[0] = 100.0
    assert report.rank_seconds[0] == 1.0
    with pytest.raises(AttributeError, match="StragglerReport is read-only: cannot set 'round'"):
        report.round = 3  # type: ignore[misc]
    with pytest.raises(AttributeError, match="cannot delete 'ratios'"):
        del report.ratios
    for clone in (pickle.loads(pickle.dumps(report)), copy.deepcopy(report)):
        assert clone == (2,) and clone.ratios == report.ratios and clone.round == 7


def test_mad_zero_and_median_zero_give_infinite_scores() -> None:
    report = detect_stragglers({0: 1.0, 1: 1.0, 2: 1.0, 3: 1.5})
    assert report == (3,) and report.mad_seconds == 0.0
    assert report.z_scores == {0: 0.0, 1: 0.0, 2: 0.0, 3: math.inf}
    zero = detect_stragglers({0: 0.0, 1: 0.0, 2: 2.0})
    assert zero == (2,) and zero.ratios == {0: 1.0, 1: 1.0, 2: math.inf}
    empty = detect_stragglers({})
    assert empty == () and not empty.has_stragglers and empty.median_seconds == 0.0


def test_round_chooses_among_several_rounds() -> None:
    records = _round([1.0, 1.0, 1.0, 9.0], rnd=0) + _round([5.0, 1.0, 1.0, 1.0], rnd=1)
    assert detect_stragglers(records, round=0) == (3,)
    late = detect_stragglers(records, round=1)
    assert late == (0,) and late.round == 1 and late.rank_seconds[0] == 5.0
    assert detect_stragglers(records, round=9) == () and detect_stragglers(records, round=9).round == 9
    with pytest.raises(ValueError, match=r"got rounds \[0, 1\] \(pass round= to choose one\)"):
        detect_stragglers(records)
    with pytest.raises(ValueError, match="detect_stragglers: round: expected a non-negative int, got -1"):
        detect_stragglers(records, round=-1)


def test_fit_report_keeps_each_rounds_straggler_report() -> None:
    records = _round([1.0, 6.0, 1.0, 1.0], rnd=0, nbytes=[10, 10, 10, 10])
    records += _round([1.0, 5.0, 1.0, 1.0], rnd=1, nbytes=[10, 10, 10, 50])
    report = fit_report(records)
    assert all(isinstance(s, StragglerReport) for s in report.stragglers_by_round.values())
    assert report.stragglers_by_round[1].ratios[1] == 5.0
    assert report.imbalance_by_round[0].max_bytes_ratio == 1.0
    assert report.imbalance_by_round[1].skew_by_rank == {0: 10 / 20, 1: 10 / 20, 2: 10 / 20, 3: 50 / 20}
    as_dict = report.as_dict()
    assert as_dict["imbalance_by_round"][1]["max_over_min"] == 5.0
    json.dumps(as_dict)  # a JSON-able summary


# -- ImbalanceReceipt ----------------------------------------------------------------------------------


def test_an_imbalance_receipt_has_the_references_fields_and_the_old_mapping() -> None:
    records = _round([1.0, 1.0], rnd=0, nbytes=[50, 500]) + _round([1.0, 1.0], rnd=1, nbytes=[50, 500])
    receipt = imbalance_receipt(records)
    assert isinstance(receipt, ImbalanceReceipt) and receipt.round is None
    assert receipt.bytes_per_rank == {0: 100, 1: 1000}
    assert receipt.n_obs_per_rank == {0: 20, 1: 40}
    assert receipt.mean_bytes == 550.0
    assert receipt.skew_by_rank == {0: 100 / 550, 1: 1000 / 550}
    assert receipt.max_bytes_ratio == 1000 / 550 and receipt.max_over_min == 10.0
    old = {
        "ranks": 2,
        "bytes_by_rank": {0: 100, 1: 1000},
        "mean_bytes": 550.0,
        "relative_to_mean": {0: 100 / 550, 1: 1000 / 550},
        "max_over_mean": 1000 / 550,
        "max_over_min": 10.0,
    }
    assert dict(receipt) == old and receipt == old and list(receipt) == list(old)
    assert receipt != {**old, "ranks": 3}
    with pytest.raises(KeyError, match="ImbalanceReceipt: no key 'bytes'"):
        receipt["bytes"]


def test_a_planted_skew_in_one_round_is_measured_exactly() -> None:
    # rank 0 reads 10x what each of its three peers reads: 10 / mean(10, 1, 1, 1) = 10 / 3.25
    records = _round([1.0] * 4, rnd=0, nbytes=[8] * 4) + _round([1.0] * 4, rnd=1, nbytes=[80, 8, 8, 8])
    receipt = imbalance_receipt(records, round=1)
    assert receipt.round == 1
    assert receipt.skew_by_rank[0] == pytest.approx(10 / 3.25, rel=1e-15)
    assert receipt.max_bytes_ratio == pytest.approx(10 / 3.25, rel=1e-15)
    assert receipt.max_over_min == 10.0
    assert imbalance_receipt(records, round=0).max_bytes_ratio == 1.0
    assert imbalance_receipt(records, round=5) == {
        "ranks": 0, "bytes_by_rank": {}, "mean_bytes": 0.0, "relative_to_mean": {},
        "max_over_mean": 0.0, "max_over_min": 0.0,
    }  # fmt: skip
    assert imbalance_receipt(records, round=1) == imbalance_receipt(list(reversed(records)), round=1)
    assert imbalance_receipt(records, round=1) != imbalance_receipt(records, round=0)


# -- records_from_events ----------------------------------------------------------------------------


def test_records_come_back_from_reference_style_events() -> None:
    event = SimpleNamespace(
        kind="em_round",
        features={
            "rank": 2,
            "round": 1,
            "e_step_seconds": 0.5,
            "m_step_seconds": 0.25,
            "total_seconds": 0.75,
            "bytes_processed": 64,
            "accumulator_bytes": 8,
            "n_obs": 4,
            "host": "node-a",
        },
    )
    other = SimpleNamespace(kind="fit_done", features={"rank": 0})
    as_dict = {"kind": "em_round", "features": {"rank": 0, "round": 1, "e_step_seconds": 1.0}}
    records = records_from_events([event, other, as_dict, RankRecord(1, 1, 2.0)])
    assert [(r.rank, r.round) for r in records] == [(2, 1), (0, 1), (1, 1)]
    assert records[0].extra == {"host": "node-a"} and records[0].seconds == 0.75
    assert records[0].bytes_processed == 64 and records[0].n_obs == 4
    # seconds 0.5, 1, 2: rank 1 is 2x the median at robust z 1 / (1.4826 * 0.5) = 1.35
    assert detect_stragglers(records) == () and detect_stragglers(records, z_threshold=1.3) == (1,)


def test_records_come_back_from_a_trace_file(tmp_path) -> None:
    trace = EMTrace(metadata={"backend": "mp"})
    record_rank_round(trace, RankRecord(0, 0, 1.0, bytes_processed=10))
    record_rank_round(trace, RankRecord(1, 0, 3.0, bytes_processed=30, extra={"host": "b"}))
    path = tmp_path / "trace.jsonl"
    trace.to_jsonl(path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines.append({"iteration": 1, "log_likelihood": -1.0})  # an iteration line is skipped
    assert records_from_events(lines) == trace.rank_records
    assert records_from_events([r.to_dict() for r in trace.rank_records]) == trace.rank_records


def test_records_from_events_refuses_what_it_cannot_read() -> None:
    with pytest.raises(TypeError, match=r"item 1: expected a RankRecord, .* got 5"):
        records_from_events([RankRecord(0, 0, 1.0), 5])
    with pytest.raises(ValueError, match=r"item 0: a rank record needs \['round'\]"):
        records_from_events([{"rank": 0, "e_step_seconds": 1.0}])
    bad_total = {
        "kind": "em_round",
        "features": {"rank": 0, "round": 0, "e_step_seconds": 1.0, "total_seconds": 3.0},
    }
    with pytest.raises(ValueError, match=r"total_seconds 3\.0 of round 0, rank 0 is not"):
        records_from_events([bad_total])
    with pytest.raises(ValueError, match=r"RankRecord\.e_step_seconds: .* got -1\.0"):
        records_from_events([{"rank": 0, "round": 0, "e_step_seconds": -1.0}])


# -- mpi_out / torchrun_out --------------------------------------------------------------------------


class _FakeComm:
    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size


def test_mpi_out_prints_on_the_root_only(capsys: pytest.CaptureFixture[str]) -> None:
    from mixle_spark.parallel.backends.mpi import mpi_out

    assert mpi_out(_FakeComm(0, 3)) is sys.stdout
    assert mpi_out(_FakeComm(2, 3), root=2) is sys.stdout
    other = mpi_out(_FakeComm(1, 3))
    assert other is not sys.stdout and other.writable()
    assert other.write("iteration 1\n") == len("iteration 1\n")
    print("root line", file=mpi_out(_FakeComm(0, 3)))
    print("dropped line", file=other)
    assert capsys.readouterr().out == "root line\n"
    with pytest.raises(ValueError, match="root: expected a rank >= 0 below the world size 3, got 3"):
        mpi_out(_FakeComm(0, 3), root=3)
    with pytest.raises(ValueError, match="root: expected a rank >= 0 below the world size 2, got -1"):
        mpi_out(_FakeComm(0, 2), root=-1)


def test_mpi_out_defaults_to_comm_world() -> None:
    pytest.importorskip("mpi4py")
    from mixle_spark.parallel.backends.mpi import mpi_out

    assert mpi_out() is sys.stdout  # a plain pytest run is rank 0 of a world of one


def test_a_fit_writes_its_progress_to_the_stream_mpi_out_gives() -> None:
    import numpy as np

    from mixle_spark.estimation import optimize
    from mixle_spark.parallel.backends.mpi import mpi_out
    from mixle_spark.stats import GaussianEstimator

    x = np.random.default_rng(0).normal(size=200).tolist()
    quiet = mpi_out(_FakeComm(1, 2))
    loud = io.StringIO()
    a = optimize(x, GaussianEstimator(), max_its=3, seed=1, out=quiet)
    b = optimize(x, GaussianEstimator(), max_its=3, seed=1, out=loud)
    assert a.mu == b.mu and "iteration" in loud.getvalue()


def test_torchrun_out_reads_the_launch_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    from mixle_spark.parallel.backends import torchrun

    def no_torch(what: str) -> None:
        raise ImportError("no torch here")

    monkeypatch.delenv("RANK", raising=False)
    assert torchrun.torchrun_out() is sys.stdout  # one process
    monkeypatch.setenv("RANK", "1")
    assert torchrun.torchrun_out() is not sys.stdout
    assert torchrun.torchrun_out(root=1) is sys.stdout
    monkeypatch.setattr(torchrun, "torch_distributed", no_torch)  # torch not installed: RANK decides
    assert torchrun.torchrun_out() is not sys.stdout and torchrun.torchrun_out(root=1) is sys.stdout
    monkeypatch.setenv("RANK", "one")
    with pytest.raises(ValueError, match="RANK: expected a non-negative integer from torchrun, got 'one'"):
        torchrun.torchrun_out()


def test_torchrun_out_asks_an_initialised_group(monkeypatch: pytest.MonkeyPatch) -> None:
    from mixle_spark.parallel.backends import torchrun

    asked: list[object] = []

    class Dist:
        def is_available(self) -> bool:
            return True

        def is_initialized(self) -> bool:
            return True

        def get_rank(self, group: object = None) -> int:
            asked.append(group)
            return 3

        def get_world_size(self, group: object = None) -> int:
            return 4

    monkeypatch.setenv("RANK", "0")  # the group's rank wins over the environment
    monkeypatch.setattr(torchrun, "torch_distributed", lambda what: Dist())
    assert torchrun.torchrun_out() is not sys.stdout
    assert torchrun.torchrun_out(root=3, group="g") is sys.stdout and asked[-1] == "g"
    with pytest.raises(ValueError, match="below the world size 4, got 4"):
        torchrun.torchrun_out(root=4)


def test_torchrun_out_in_a_real_gloo_group_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    dist = pytest.importorskip("torch.distributed")
    from mixle_spark.parallel.backends.torchrun import torchrun_out

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RANK", "5")  # ignored once the group exists
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        assert torchrun_out() is sys.stdout
        with pytest.raises(ValueError, match="below the world size 1, got 1"):
            torchrun_out(root=1)
    finally:
        dist.destroy_process_group()
