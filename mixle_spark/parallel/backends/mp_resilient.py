"""The mp backend's resilient and audited handles (the reference's ``ResilientMPEncodedData``, in its
``resilient_em``, and ``AuditedMPEncodedData``, in its ``sdc_audit``).

Both keep the data in shards ``0 .. num_workers - 1`` (a shard is the rows worker ``i`` of a plain
:class:`~mixle_spark.parallel.backends.multiprocessing.MPEncodedData` holds), fold each shard into
its own payload and merge the payloads in shard order, whichever worker computed them: the
estimates are those of ``MPEncodedData`` on the same data, to the last bit, whatever failed.

:class:`ResilientMPEncodedData` survives workers that die (killed, out of memory) or stop answering:
the driver keeps each shard's rows, starts a new process in the lost worker's place, has it encode its
shards again and recomputes only the shards whose payloads were lost (the E-step is a pure function
of the data and the model, so the recomputation is exact). A worker slot that has failed
``max_retries`` times is retired for good and its shards move to the surviving worker holding the
fewest rows. What happened is reported to the EM trace (``take_events``) and in ``restarts``,
``retired`` and ``last_round_recomputed_shards``.

:class:`AuditedMPEncodedData` adds the silent-corruption audit of :mod:`mixle_spark.em.sdc_audit`
inside the handle: in the E-steps the audit's ``due`` rounds, the shards it ``select``s are recomputed
by a *different* worker (which encodes the shard from the rows the driver keeps) with the reference
kernels, and the audit's ``check`` compares the two (raising :class:`~mixle_spark.errors.
SilentCorruptionError` before the M-step uses them, or warning). A worker whose memory or core
corrupts its statistics is caught even though it agrees with itself. On a mismatch a third worker
recomputes the shard and decides which of the two is wrong; that worker is quarantined (retired, its
shards moved) and, when it was the shard's owner, its shards are computed again by their new owners
before the merge, so a fit that only warns (``on_mismatch="warn"``) goes on with clean statistics.
The EM driver's own ``audit=`` recomputes on another worker too with this handle
(:meth:`pysp_partition_payloads`).
"""

from __future__ import annotations

import warnings
from typing import Any

from mixle_spark._audit import SDCAudit
from mixle_spark.errors import SilentCorruptionError
from mixle_spark.parallel.backends.multiprocessing import (
    MPEncodedData,
    WorkerError,
    _encode_shard,
    _tree_merge,
    send_error,
)
from mixle_spark.parallel.fold import PassOptions, Payload, Request, accumulate_chunks, seed_from
from mixle_spark.stats.base import Distribution, Estimator

__all__ = ["AuditedMPEncodedData", "ResilientMPEncodedData"]

_POLL_SECONDS = 0.2


def _shard_worker_main(conn: Any) -> None:
    """A worker that may hold several shards: ``("load", shard, args)`` encodes and keeps one,
    ``("estep", request, shards or None)`` folds each (every one it holds for None) into its own
    payload, ``("once", [(shard, args), ...], request)`` encodes and folds shards it does not keep."""
    shards: dict[int, list[Any]] = {}
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        kind = message[0]
        if kind == "stop":
            conn.send(("ok", None))
            return
        try:
            if kind == "load":
                shards[message[1]] = _encode_shard(*message[2])
                reply: Any = len(shards[message[1]])
            elif kind == "estep":
                wanted = sorted(shards) if message[2] is None else message[2]
                reply = [(s, accumulate_chunks(shards[s], message[1], s)) for s in wanted]
            else:  # "once"
                reply = [
                    (s, accumulate_chunks(_encode_shard(*args), message[2], s)) for s, args in message[1]
                ]
            conn.send(("ok", reply))
        except BaseException as err:  # reported to the driver, which re-raises it
            send_error(conn, err)


def _check_timeout(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise ValueError(f"worker_timeout_s: expected a finite number of seconds > 0, got {value!r}")
    return float(value)


class _Lost(Exception):
    """A worker died or stopped answering (internal: the handle recovers from it)."""


def _check_retries(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_retries: expected an int >= 1, got {value!r}")
    return value


class ResilientMPEncodedData(MPEncodedData):
    """:class:`~mixle_spark.parallel.backends.multiprocessing.MPEncodedData` that restarts lost
    workers and recomputes only their shards (see the module docstring).

    Parameters
    ----------
    data, estimator, model, **options
        As for ``MPEncodedData`` (``num_workers``, ``timeout``: seconds before a silent worker is
        killed and replaced, ...). The driver keeps each shard's rows for the life of the handle.
        Passes are resilient once the handle is built: a worker lost while the shards are first
        encoded fails the construction, as with ``MPEncodedData``.
    worker_timeout_s : float, optional
        The reference's name for ``timeout``.
    max_retries : int
        Failures after which a worker slot is retired and its shards move to a surviving worker
        (default 2: a slot is restarted once). When every slot is retired the handle raises
        :class:`~mixle_spark.parallel.backends.multiprocessing.WorkerError`.
    """

    _worker_target = staticmethod(_shard_worker_main)

    def __init__(
        self,
        data: Any,
        estimator: Estimator | None = None,
        model: Distribution | None = None,
        *,
        max_retries: int = 2,
        worker_timeout_s: float | None = None,
        **options: Any,
    ) -> None:
        self.max_retries = _check_retries(max_retries)
        if worker_timeout_s is not None:  # the reference's name for ``timeout``
            if "timeout" in options:
                raise TypeError("ResilientMPEncodedData: give timeout= or worker_timeout_s=, not both")
            options["timeout"] = _check_timeout(worker_timeout_s)
        self.restarts = 0
        self.retired: set[int] = set()
        self.failures: dict[int, int] = {}
        self.owner: dict[int, int] = {}
        self.last_round_recomputed_shards: frozenset[int] = frozenset()
        self.last_round_failed_workers: tuple[int, ...] = ()
        self._shard_args: list[tuple[Any, ...]] = []
        self._events: list[str] = []
        super().__init__(data, estimator, model, **options)

    # -- workers -----------------------------------------------------------------------------------
    def _load_workers(self, loads: list[tuple[Any, ...]]) -> None:
        self._shard_args = [tuple(load[1:-1]) for load in loads]
        self.owner = {s: s for s in range(len(loads))}
        self.failures = dict.fromkeys(range(self.num_workers), 0)
        for s, conn in enumerate(self._conns):
            conn.send(("load", s, self._shard_args[s]))
        self._collect()

    def _live(self) -> list[int]:
        return [w for w in range(self.num_workers) if w not in self.retired]

    def _shards_of(self, slot: int) -> list[int]:
        return sorted(s for s, w in self.owner.items() if w == slot)

    def _reply(self, slot: int) -> tuple[str, Any, str]:
        """``(status, value, detail)`` of worker ``slot``'s next reply; raises _Lost when it died or
        did not answer within ``timeout`` (then it is killed)."""
        conn, proc = self._conns[slot], self._procs[slot]
        waited = 0.0
        try:
            while not conn.poll(_POLL_SECONDS):
                waited += _POLL_SECONDS
                if not proc.is_alive():
                    raise _Lost(f"died (exit code {proc.exitcode})")
                if waited >= self.timeout:
                    proc.kill()
                    raise _Lost(f"did not answer within {self.timeout:g} s and was killed")
            status, *rest = conn.recv()
        except (EOFError, OSError):
            raise _Lost(self._death(slot)) from None
        return status, rest[0], rest[1] if len(rest) > 1 else ""

    def _death(self, slot: int) -> str:
        """How worker ``slot``, whose pipe broke, died."""
        self._procs[slot].join(timeout=5)
        return f"died (exit code {self._procs[slot].exitcode})"

    def _ask(self, slot: int, message: tuple[Any, ...]) -> Any:
        """Send ``message`` to worker ``slot`` and return its answer (a worker's error is raised)."""
        try:
            self._conns[slot].send(message)
        except OSError:
            raise _Lost(self._death(slot)) from None
        status, value, detail = self._reply(slot)
        if status != "ok":
            _raise_worker_error(slot, value, detail)
        return value

    def _bury(self, slot: int) -> None:
        proc, conn = self._procs[slot], self._conns[slot]
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=5)
        conn.close()

    def _recover(self, slot: int, why: str) -> None:
        """Worker ``slot`` was lost: start it again with its shards, or retire it and move them."""
        while True:
            self.failures[slot] += 1
            self._bury(slot)
            shards = self._shards_of(slot)
            if self.failures[slot] >= self.max_retries:
                self._retire(slot, f"{why} ({self.failures[slot]} failures)", shards)
                return
            self._procs[slot], self._conns[slot] = self._spawn(slot)
            try:
                for s in shards:
                    self._ask(slot, ("load", s, self._shard_args[s]))
            except _Lost as err:
                why = f"{err} while loading its shards again"
                continue
            self.restarts += 1
            self._events.append(f"mp worker {slot} {why}: restarted with shard(s) {shards}")
            return

    def _retire(self, slot: int, why: str, shards: list[int]) -> None:
        self.retired.add(slot)
        live = self._live()
        if not live:
            self.close()
            raise WorkerError(
                f"every mp worker has failed (the last, worker {slot}, {why}); the handle is closed"
            )
        self._events.append(f"mp worker {slot} {why}: retired; shard(s) {shards} moved")
        for s in shards:
            load = {w: sum(self.shards[t][1] - self.shards[t][0] for t in self._shards_of(w)) for w in live}
            target = min(live, key=lambda w: (load[w], w))
            self.owner[s] = target
            try:
                self._ask(target, ("load", s, self._shard_args[s]))
            except _Lost as err:
                self._recover(target, str(err))  # reloads (or moves on) every shard it owns, s too
                live = self._live()

    # -- the pass ----------------------------------------------------------------------------------
    def _gather(self, request: Request) -> dict[int, Payload]:
        """Every shard's own payload for ``request``, recovering from lost workers."""
        results: dict[int, Payload] = {}
        todo: dict[int, list[int] | None] = dict.fromkeys(self._live())
        failed: list[int] = []
        recomputed: set[int] = set()
        first_error: tuple[int, Any, str] | None = None
        while todo:
            lost: dict[int, str] = {}
            for slot, wanted in todo.items():
                try:
                    self._conns[slot].send(("estep", request, wanted))
                except OSError:
                    lost[slot] = self._death(slot)
            for slot in todo:
                if slot in lost:
                    continue
                try:
                    status, value, detail = self._reply(slot)
                except _Lost as err:
                    lost[slot] = str(err)
                    continue
                if status != "ok":
                    first_error = first_error or (slot, value, detail)
                    continue
                results.update(value)
            for slot, why in sorted(lost.items()):
                failed.append(slot)
                self._recover(slot, f"{why} during a pass")
            if first_error is not None:
                _raise_worker_error(*first_error)
            todo = {}
            for s in sorted(set(range(len(self.shards))) - set(results)):
                recomputed.add(s)
                todo.setdefault(self.owner[s], []).append(s)  # type: ignore[union-attr]
        self.last_round_failed_workers = tuple(failed)
        self.last_round_recomputed_shards = frozenset(recomputed)
        return results

    def _estep(self, request: Request) -> Payload:
        if self._closed:
            raise ValueError("this encoded-data handle is closed")
        results = self._gather(request)
        return _tree_merge(request[0], [results[s] for s in range(len(self.shards))])  # type: ignore[return-value]

    def take_events(self) -> list[str]:
        """What happened to the workers since the last call (restarts, retirements, audits)."""
        events, self._events = self._events, []
        return events

    def partition_ids(self) -> range:
        """The ids partitions report in ``last_parts``: the shards."""
        return range(len(self.shards))


def _raise_worker_error(slot: int, err: Any, detail: str) -> None:
    note = getattr(err, "add_note", None)  # Python >= 3.11
    if note is not None:
        note(f"raised in mp worker {slot}:\n{detail}")
    raise err


def _check_audit(audit: Any) -> Any:
    if not all(callable(getattr(audit, name, None)) for name in ("due", "select", "check")):
        raise TypeError(
            "AuditedMPEncodedData: audit must be an SDCAudit (mixle_spark.em.sdc_audit.SDCAudit: due, "
            f"select, check), got {audit!r}"
        )
    return audit


def _audit_from(audit: Any, rate: Any, rtol: Any, atol: Any, rng: Any) -> Any:
    """``audit``, or the SDCAudit the reference's keywords describe (None: never audit)."""
    given = [
        k
        for k, v in (("audit_rate", rate), ("audit_rtol", rtol), ("audit_atol", atol), ("rng", rng))
        if v is not None
    ]
    if audit is not None:
        if given:
            raise TypeError(f"AuditedMPEncodedData: give audit= or the reference's {given}, not both")
        return _check_audit(audit)
    rate = 0.1 if rate is None else rate
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 <= rate <= 1.0:
        raise ValueError(f"audit_rate: expected a fraction of the shards in [0, 1], got {rate!r}")
    if rate == 0:
        return None
    tolerances = {k: v for k, v in (("rtol", rtol), ("atol", atol)) if v is not None}
    return SDCAudit(
        every=1, fraction=float(rate), seed=seed_from(rng) if rng is not None else 0, **tolerances
    )


class AuditedMPEncodedData(ResilientMPEncodedData):
    """:class:`ResilientMPEncodedData` whose E-steps audit shards on a second worker (see the module
    docstring).

    Parameters
    ----------
    data, estimator, model, max_retries, **options
        As for :class:`ResilientMPEncodedData`.
    audit : SDCAudit, optional
        When (``every``), how much (``fraction``), how strictly (``rtol``, ``atol``) and what a
        mismatch does (``on_mismatch``): :class:`mixle_spark.em.sdc_audit.SDCAudit`. Its rounds are
        this handle's E-steps, counted from 0.
    audit_rate, audit_rtol, audit_atol, rng
        The reference's keywords instead of ``audit``: every E-step audits ``audit_rate`` of the
        shards (default 0.1; at least one, and none at all for 0), shards drawn from ``rng`` (a seed or
        a numpy random state). The tolerances default to the audit's 1e-9, not the reference's 1e-12:
        the recomputation runs the independent reference kernels, which round differently.

    Attributes
    ----------
    audit_receipts : list of AuditReceipt
        One per audited E-step.
    audit_workers : list of dict
        Per audited E-step: shard -> (worker that computed it, worker that recomputed it).
    quarantined : dict
        Worker -> why it was retired after an audit (a third worker agreed with the other one).
    """

    def __init__(
        self,
        data: Any,
        estimator: Estimator | None = None,
        model: Distribution | None = None,
        *,
        audit: Any = None,
        audit_rate: float | None = None,
        audit_rtol: float | None = None,
        audit_atol: float | None = None,
        rng: Any = None,
        **options: Any,
    ) -> None:
        self.audit = _audit_from(audit, audit_rate, audit_rtol, audit_atol, rng)
        self.audit_round = 0
        self.audit_receipts: list[Any] = []
        self.audit_workers: list[dict[int, tuple[int, int]]] = []
        self.quarantined: dict[int, str] = {}
        super().__init__(data, estimator, model, **options)

    def _estep(self, request: Request) -> Payload:
        factory, model, initialize = request[:3]
        options: PassOptions | None = request[3] if len(request) > 3 else None
        update = factory is not None and model is not None and initialize is None
        if not update or (options is not None and options.only is not None):
            return super()._estep(request)  # initial, scoring and recomputing passes are not audited
        rnd, self.audit_round = self.audit_round, self.audit_round + 1
        if self.audit is None or not self.audit.due(rnd):
            return super()._estep(request)
        chosen = frozenset(self.audit.select(rnd, range(len(self.shards))))
        asked = options.keep if options is not None else frozenset()
        keep = PassOptions(keep=asked | chosen, reference=options is not None and options.reference)
        results = self._gather((factory, model, None, keep))
        first = {s: results[s][3][0].kept for s in chosen if results[s][3]}
        second = self._recompute_elsewhere(factory, model, chosen, reference=True)
        try:
            receipt = self.audit.check(rnd, first, second)  # raises before the M-step sees them
        except SilentCorruptionError as err:
            self._find_suspects(rnd, factory, model, first, second, {m.part for m in err.mismatches})
            raise
        self.audit_receipts.append(receipt)
        self._events.append(f"{receipt.describe()} (recomputed on other workers)")
        redo = self._find_suspects(rnd, factory, model, first, second, {m.part for m in receipt.mismatches})
        if redo:  # a quarantined worker's shards, computed again by their new owners
            again = self._gather((factory, model, None, PassOptions(keep=keep.keep, only=redo)))
            results.update({s: again[s] for s in redo})
        merged = _tree_merge(factory, [results[s] for s in range(len(self.shards))])
        assert merged is not None  # every shard has a payload
        nobs, ll, value, reports = merged
        reports = tuple(r if r.part in asked else r._replace(kept=None) for r in reports)
        return nobs, ll, value, reports

    def _agree(self, rnd: int, a: Any, b: Any) -> bool:
        """Whether two payloads of one shard agree by the audit's tolerances."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return bool(self.audit.check(rnd, {0: a}, {0: b}).ok)
            except SilentCorruptionError:
                return False

    def _find_suspects(
        self, rnd: int, factory: Any, model: Any, first: dict[int, Any], second: dict[int, Any], bad: set[int]
    ) -> frozenset[int]:
        """For each mismatched shard, a third worker's recomputation tells which of its owner and its
        auditor is wrong; that worker is retired (quarantined) and its shards move to survivors. The
        shards a quarantined owner computed in this pass are returned, to be computed again."""
        redo: set[int] = set()
        placed = self.audit_workers[-1] if self.audit_workers else {}
        for s in sorted(bad):
            owner, auditor = placed.get(s, (self.owner[s], self.owner[s]))
            live = self._live()
            if owner not in live or auditor not in live or len(live) < 3 or owner == auditor:
                self._events.append(
                    f"shard {s}: no third worker to tell whether worker {owner} or {auditor} is wrong"
                )
                continue
            third = self._recompute_elsewhere(factory, model, frozenset({s}), True, avoid={owner, auditor})
            witness = third[s]
            owner_ok, auditor_ok = self._agree(rnd, witness, first[s]), self._agree(rnd, witness, second[s])
            if owner_ok == auditor_ok:
                self._events.append(
                    f"shard {s}: a third worker's recomputation settles nothing; no worker retired"
                )
                continue
            suspect, fair = (auditor, owner) if owner_ok else (owner, auditor)
            shards = self._shards_of(suspect)
            self.failures[suspect] = self.max_retries
            self._bury(suspect)
            why = (
                f"disagreed with worker {fair} and a third worker on shard {s} (silent corruption suspected)"
            )
            self.quarantined[suspect] = why
            self._retire(suspect, why, shards)
            if suspect == owner:
                redo.update(shards)
        return frozenset(redo)

    def _recompute_elsewhere(
        self,
        factory: Any,
        model: Distribution | None,
        shards: frozenset[int],
        reference: bool,
        avoid: set[int] | None = None,
    ) -> dict[int, Any]:
        """``shards``' own payloads ``(weight, log-likelihood, statistics)`` recomputed by workers
        other than their owners (the owner only when it is the last live worker); with ``avoid``, by
        workers other than those (a third opinion, not recorded in ``audit_workers``)."""
        request = (factory, model, None, PassOptions(keep=shards, reference=reference))
        out: dict[int, Any] = {}
        placed: dict[int, tuple[int, int]] = {}
        pending = sorted(shards)
        while pending:
            live = self._live()
            plan: dict[int, list[int]] = {}
            for s in pending:
                shunned = {self.owner[s]} if avoid is None else avoid
                others = [w for w in live if w not in shunned] or live
                auditor = others[(s + self.audit_round) % len(others)]
                plan.setdefault(auditor, []).append(s)
                placed[s] = (self.owner[s], auditor)
            lost: dict[int, str] = {}
            for slot, wanted in plan.items():
                try:
                    self._conns[slot].send(("once", [(s, self._shard_args[s]) for s in wanted], request))
                except OSError:
                    lost[slot] = self._death(slot)
            for slot in plan:
                if slot in lost:
                    continue
                try:
                    status, value, detail = self._reply(slot)
                except _Lost as err:
                    lost[slot] = str(err)
                    continue
                if status != "ok":
                    _raise_worker_error(slot, value, detail)
                out.update({s: payload[3][0].kept for s, payload in value})
            for slot, why in sorted(lost.items()):
                self._recover(slot, f"{why} during an audit")
            pending = [s for s in pending if s not in out]
        if avoid is None:
            self.audit_workers.append(dict(sorted(placed.items())))
        return out

    def pysp_partition_payloads(
        self, estimator: Estimator, model: Distribution, parts: Any, *, reference: bool = True
    ) -> dict[int, tuple[float, float, Any]]:
        """The own payloads of shards ``parts``, recomputed by workers other than their owners (so the
        EM driver's ``audit=`` crosses workers too)."""
        factory = self.bind(estimator).accumulator_factory()
        return self._recompute_elsewhere(factory, model, frozenset(int(p) for p in parts), reference)
