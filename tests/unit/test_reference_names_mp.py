"""The mp backend's resilient and audited handles (issue 55): a worker killed mid-fit is restarted
(or retired) and only its shards are recomputed, so the fit is the clean fit; a worker whose
statistics are corrupted is caught by recomputing its shards on another worker."""

from __future__ import annotations

import io
import os
import signal
from typing import Any

import numpy as np
import pytest

from mixle_spark.em.sdc_audit import SDCAudit, SilentCorruptionWarning, inject_bit_flip
from mixle_spark.errors import SilentCorruptionError
from mixle_spark.estimation import initialize, optimize
from mixle_spark.parallel.backends.local import LocalEncodedData
from mixle_spark.parallel.backends.mp_resilient import AuditedMPEncodedData, ResilientMPEncodedData
from mixle_spark.parallel.backends.multiprocessing import MPEncodedData, WorkerError
from mixle_spark.stats import GaussianDistribution, GaussianEstimator, MixtureDistribution, MixtureEstimator

EST = MixtureEstimator([GaussianEstimator()] * 2)
TRUE = MixtureDistribution([GaussianDistribution(-2.0, 1.0), GaussianDistribution(3.0, 0.5)], [0.4, 0.6])
X = np.asarray(TRUE.sampler(5).sample(900), dtype=np.float64)
RTOL = 1e-9

pytestmark = pytest.mark.filterwarnings("ignore::mixle_spark.errors.ConvergenceWarning")


def _numbers(v: Any) -> list[float]:
    if isinstance(v, dict):
        return [x for k in sorted(v) for x in _numbers(v[k])]
    if isinstance(v, list | tuple):
        return [x for item in v for x in _numbers(item)]
    return [float(v)] if isinstance(v, int | float) and not isinstance(v, bool) else []


def _same(a: Any, b: Any, rtol: float = RTOL) -> None:
    x, y = np.array(_numbers(a.to_dict())), np.array(_numbers(b.to_dict()))
    assert x.shape == y.shape and x.size > 0
    np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * np.abs(y).max())


def _clean_fit(**kw: Any) -> Any:
    return optimize(LocalEncodedData(X, EST), EST, max_its=6, seed=0, **kw)


def _kill(handle: Any, *slots: int) -> None:
    for slot in slots:
        handle._procs[slot].kill()
        handle._procs[slot].join(timeout=10)


class _KillAt(io.StringIO):
    """A progress stream that kills worker ``slot`` when the fit reports iteration ``at``."""

    def __init__(self, handle_box: list[Any], slot: int, at: int) -> None:
        super().__init__()
        self.box, self.slot, self.at, self.done = handle_box, slot, at, False

    def write(self, text: str) -> int:
        if not self.done and text.startswith(f"iteration {self.at:4d}"):
            self.done = True
            _kill(self.box[0], self.slot)
        return super().write(text)


def test_a_worker_killed_mid_fit_is_restarted_and_the_fit_is_the_clean_fit() -> None:
    box: list[Any] = []
    out = _KillAt(box, slot=1, at=2)
    with ResilientMPEncodedData(X, EST, num_workers=3) as handle:
        box.append(handle)
        pids = [p.pid for p in handle._procs]
        model = optimize(handle, EST, max_its=6, seed=0, out=out)
        assert out.done and handle.restarts == 1 and handle.failures == {0: 0, 1: 1, 2: 0}
        assert handle._procs[1].pid != pids[1] and handle._procs[1].is_alive()
        assert [p.pid for i, p in enumerate(handle._procs) if i != 1] == [pids[0], pids[2]]
        assert handle.owner == {0: 0, 1: 1, 2: 2} and handle.retired == set()
    _same(model, _clean_fit())
    events = [e for record in model.fit_result.trace for e in record.events]
    assert any(
        e.startswith("mp worker 1 died (exit code -9") and "restarted with shard(s) [1]" in e for e in events
    )
    assert "mp worker 1 died" in out.getvalue()  # the progress log says so too


def test_only_the_lost_shards_are_recomputed_and_a_slot_that_keeps_failing_is_retired() -> None:
    model = initialize(LocalEncodedData(X, EST), EST, seed=0)
    expected = LocalEncodedData(X, EST).pysp_seq_estimate(EST, model)
    with ResilientMPEncodedData(X, EST, num_workers=3, max_retries=2, worker_timeout_s=30) as handle:
        assert handle.timeout == 30.0
        clean = handle.pysp_seq_estimate(EST, model)
        _same(clean, expected)
        assert handle.last_round_failed_workers == () and handle.last_round_recomputed_shards == frozenset()
        _kill(handle, 0, 2)  # two workers lost before a pass: both restarted, their shards redone
        _same(handle.pysp_seq_estimate(EST, model), clean, rtol=0.0)
        assert handle.last_round_failed_workers == (0, 2)
        assert handle.last_round_recomputed_shards == frozenset({0, 2}) and handle.restarts == 2
        _kill(handle, 2)  # worker 2's second failure: retired, shard 2 moves to the lightest worker
        assert handle.pysp_seq_log_density_sum(model) == pytest.approx(
            LocalEncodedData(X, EST).pysp_seq_log_density_sum(model), rel=1e-12
        )
        assert handle.retired == {2} and handle.owner == {0: 0, 1: 1, 2: 0}
        assert handle.last_round_recomputed_shards == frozenset({2})
        _same(handle.pysp_seq_estimate(EST, model), clean, rtol=0.0)
        events = handle.take_events()
        assert events[-1].startswith("mp worker 2 died") and "retired; shard(s) [2] moved" in events[-1]
        assert handle.take_events() == []
        os.kill(handle._procs[1].pid, signal.SIGSTOP)  # a worker that stops answering is killed
        handle.timeout = 0.5
        _same(handle.pysp_seq_estimate(EST, model), clean, rtol=0.0)
        assert "did not answer within 0.5 s and was killed" in handle.take_events()[0]
        with pytest.raises(WorkerError, match=r"every mp worker has failed .* the handle is closed"):
            for _ in range(3):
                _kill(handle, *handle._live())
                handle.pysp_seq_estimate(EST, model)
    assert all(not p.is_alive() for p in handle._procs)


def test_the_resilient_handle_refuses_bad_retries() -> None:
    with pytest.raises(ValueError, match="max_retries: expected an int >= 1, got 0"):
        ResilientMPEncodedData(X, EST, num_workers=2, max_retries=0)
    with pytest.raises(ValueError, match="max_retries: expected an int >= 1, got True"):
        ResilientMPEncodedData(X, EST, num_workers=2, max_retries=True)
    with pytest.raises(ValueError, match=r"worker_timeout_s: expected a finite number of seconds > 0, got 0"):
        ResilientMPEncodedData(X, EST, num_workers=2, worker_timeout_s=0)
    with pytest.raises(TypeError, match="give timeout= or worker_timeout_s=, not both"):
        ResilientMPEncodedData(X, EST, num_workers=2, worker_timeout_s=5.0, timeout=5.0)


def test_an_audited_fit_recomputes_shards_on_other_workers_and_equals_the_clean_fit() -> None:
    with AuditedMPEncodedData(X, EST, num_workers=3, audit=SDCAudit(every=2, fraction=1.0)) as handle:
        model = optimize(handle, EST, max_its=6, seed=0)
        assert handle.audit_round >= 6 and len(handle.audit_receipts) == (handle.audit_round + 1) // 2
        assert all(r.ok and r.parts == (0, 1, 2) for r in handle.audit_receipts)
        for placed in handle.audit_workers:
            assert sorted(placed) == [0, 1, 2]
            assert all(owner == shard and auditor != owner for shard, (owner, auditor) in placed.items())
        # the EM driver's own audit recomputes on another worker through this handle too
        driver = optimize(handle, EST, max_its=3, seed=0, audit=SDCAudit(fraction=1.0))
        # an auditor lost between the pass and the audit is replaced and the audit still completes
        start = initialize(LocalEncodedData(X, EST), EST, seed=0)
        expected = handle.pysp_seq_estimate(EST, start)
        handle.audit_round = 0
        gather = handle._gather

        def gather_then_kill(request: Any) -> Any:
            out = gather(request)
            _kill(handle, 2)
            return out

        handle._gather = gather_then_kill
        _same(handle.pysp_seq_estimate(EST, start), expected, rtol=0.0)
        assert handle.audit_receipts[-1].ok and handle.restarts == 1
        assert "during an audit: restarted with shard(s) [2]" in handle.take_events()[-2]
    _same(model, _clean_fit())
    _same(driver, optimize(LocalEncodedData(X, EST), EST, max_its=3, seed=0))
    events = [e for record in model.fit_result.trace for e in record.events]
    assert "audit ok: partitions [0, 1, 2] (recomputed on other workers)" in events


def _corrupt_worker(monkeypatch: pytest.MonkeyPatch, handle: Any, slot: int) -> list[int]:
    """Flip one bit of the statistics worker ``slot`` returns for its own shards (as a bad DIMM would:
    its merged and kept copies alike); the recomputations of other workers' shards are left alone."""
    hits: list[int] = []
    reply = handle._reply

    def corrupted(who: int) -> tuple[str, Any, str]:
        status, value, detail = reply(who)
        if who != slot or status != "ok" or not isinstance(value, list):
            return status, value, detail
        out = []
        for shard, payload in value:
            if payload[2] is not None and handle.owner[shard] == slot:
                bad = inject_bit_flip(payload[2], bit_offset=62)  # an exponent bit: a large error
                reports = tuple(
                    r._replace(kept=(r.kept[0], r.kept[1], bad)) if r.kept else r for r in payload[3]
                )
                payload = (payload[0], payload[1], bad, reports)
                hits.append(shard)
            out.append((shard, payload))
        return status, out, detail

    monkeypatch.setattr(handle, "_reply", corrupted)
    return hits


def test_an_audited_handle_catches_a_worker_that_corrupts_its_statistics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    warn = SDCAudit(fraction=1.0, on_mismatch="warn")
    with AuditedMPEncodedData(X, EST, num_workers=3, audit=warn) as handle:
        model = initialize(handle, EST, seed=0)
        clean = handle.pysp_seq_estimate(EST, model)  # audit round 0: every shard agrees
        assert handle.audit_receipts[-1].ok
        assert handle.take_events() == ["audit ok: partitions [0, 1, 2] (recomputed on other workers)"]
        hits = _corrupt_worker(monkeypatch, handle, 1)
        with pytest.warns(SilentCorruptionWarning, match=r"iteration 1, partition 1, stats"):
            fixed = handle.pysp_seq_estimate(EST, model)
        assert hits == [1] and [m.part for m in handle.audit_receipts[-1].mismatches] == [1]
        owner, auditor = handle.audit_workers[-1][1]
        assert owner == 1 and auditor != 1
        # a third worker sided with the auditor: worker 1 is retired, its shard moved and computed
        # again by its new owner, so the estimate is the clean one to the last bit
        assert handle.retired == {1} and handle.owner == {0: 0, 1: 0, 2: 2}
        assert "disagreed with worker" in handle.quarantined[1] and "on shard 1" in handle.quarantined[1]
        _same(fixed, clean, rtol=0.0)
        events = handle.take_events()
        assert events[0].startswith("audit MISMATCH in partitions [1] of [0, 1, 2]")
        assert events[1].startswith("mp worker 1 disagreed with worker")
        assert events[1].endswith("retired; shard(s) [1] moved")

        # worker 2 goes bad too; two workers left, so no third opinion: the default audit stops the fit
        handle.audit = SDCAudit(fraction=1.0)
        hits = _corrupt_worker(monkeypatch, handle, 2)
        with pytest.raises(SilentCorruptionError, match=r"iteration 2, partition 2, stats") as caught:
            handle.pysp_seq_estimate(EST, model)
        assert hits == [2] and {m.part for m in caught.value.mismatches} == {2}
        assert handle.retired == {1}
        assert handle.take_events() == ["shard 2: no third worker to tell whether worker 2 or 0 is wrong"]


def test_the_references_audit_keywords_build_the_audit() -> None:
    from mixle_spark.parallel.fold import seed_from

    with AuditedMPEncodedData(X, EST, num_workers=1, audit_rate=0.5, audit_rtol=1e-8, rng=7) as handle:
        assert handle.audit == SDCAudit(every=1, fraction=0.5, rtol=1e-8, seed=seed_from(7))
        model = initialize(handle, EST, seed=0)
        _same(handle.pysp_seq_estimate(EST, model), LocalEncodedData(X, EST).pysp_seq_estimate(EST, model))
        # one worker: the shard is recomputed by its owner (with the reference kernels) and agrees
        assert handle.audit_receipts[-1].ok and handle.audit_workers[-1] == {0: (0, 0)}
        handle.audit = None  # audit_rate=0 means no audit, as in the reference
        handle.pysp_seq_estimate(EST, model)
        assert len(handle.audit_receipts) == 1


def test_the_audited_handle_refuses_bad_audit_settings() -> None:
    with pytest.raises(TypeError, match=r"give audit= or the reference's \['audit_rate'\], not both"):
        AuditedMPEncodedData(X, EST, num_workers=2, audit=SDCAudit(), audit_rate=0.5)
    with pytest.raises(TypeError, match=r"audit must be an SDCAudit .* got 'yes'"):
        AuditedMPEncodedData(X, EST, num_workers=2, audit="yes")
    with pytest.raises(
        ValueError, match=r"audit_rate: expected a fraction of the shards in \[0, 1\], got 1.5"
    ):
        AuditedMPEncodedData(X, EST, num_workers=2, audit_rate=1.5)
    with pytest.raises(ValueError, match=r"SDCAudit: rtol must be a finite number >= 0, got -1\.0"):
        AuditedMPEncodedData(X, EST, num_workers=2, audit_rtol=-1.0)


def test_a_plain_mp_handle_still_dies_with_its_worker() -> None:
    with MPEncodedData(X, EST, num_workers=2) as handle:
        model = initialize(handle, EST, seed=0)
        _kill(handle, 1)
        with pytest.raises(WorkerError, match="mp worker 1 died"):
            handle.pysp_seq_estimate(EST, model)
