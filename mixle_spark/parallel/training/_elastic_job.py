"""Data-parallel training with ranks as threads: a rank lost mid-step, respawned, and a job resumed.

Private: :mod:`~mixle_spark.parallel.training.fault_tolerant_training` exports :class:`SimulatedRank`
and :class:`ElasticTrainingJob`. Each rank is a thread that computes its gradient on its own batch
against the canonical weights, then waits at a rendezvous; the driver releases the ranks it keeps
and cancels the ones a test kills there, so a "mid-step" failure lands at a known point (after the
rank's compute, before the update) rather than at a race. Only the all-reduce is simulated: the
driver sums the survivors' gradient sums and divides by their example count.

The driver keeps the ledger of committed batches: a rank's loader advances only when its batch
entered an update. A killed rank's batch is therefore replayed when it is respawned, and a job
resumed from a snapshot (model, optimizer and every loader position taken at one step) replays
exactly the batches after it: none twice, none lost. (The reference respawns a rank at the loader
position of the last snapshot, which reads the batches it committed since then a second time.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from mixle_spark.errors import describe_value
from mixle_spark.parallel.training._loader import LoaderState, as_loader_state
from mixle_spark.parallel.training._optional import require_torch
from mixle_spark.parallel.training._records import exact_int
from mixle_spark.parallel.training.dcp_checkpoint import (
    AsyncTrainingCheckpoint,
    ModuleState,
    async_save_training_state,
    load_training_state,
)
from mixle_spark.parallel.training.training_health import TrainingHealthMonitor

__all__ = ["ElasticTrainingJob", "SimulatedRank", "StepResult"]

_WHAT = "fault_tolerant_training"


@dataclass(frozen=True)
class StepResult:
    """One rank's contribution to a step: its loss sum, example count and gradient sums."""

    rank: int
    step: int
    loss_sum: float
    examples: int
    grads: tuple[Any, ...]


def _cross_entropy(module: Any, batch: Any) -> Any:
    torch = require_torch(_WHAT)
    x, y = batch
    return torch.nn.functional.cross_entropy(module(x), y, reduction="none")


def _positive_seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a positive number of seconds, got {describe_value(value)}")
    return float(value)


class SimulatedRank:
    """One data-parallel rank: a thread per step that computes a gradient and waits to be released.

    ``batch_fn()`` gives the rank's batch for the step; ``loss_fn(module, batch)`` one loss per
    example (cross-entropy of ``module(x)`` against ``y`` for a batch ``(x, y)`` by default).
    """

    def __init__(
        self,
        rank_id: int,
        model_factory: Callable[[], Any],
        batch_fn: Callable[[], Any],
        loss_fn: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        self.rank_id = exact_int("rank_id", rank_id, 0)
        self.model_factory, self.batch_fn = model_factory, batch_fn
        self.loss_fn = loss_fn or _cross_entropy
        self._thread: threading.Thread | None = None
        self._started, self._go, self._done = threading.Event(), threading.Event(), threading.Event()
        self._cancelled = False
        self._result: StepResult | None = None
        self._error: BaseException | None = None

    def start_step(self, step: int, canonical_state: Mapping[str, Any], *, timeout_s: float = 30.0) -> None:
        """Start computing ``step`` against ``canonical_state``; the thread then waits for :meth:`release`."""
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError(f"rank {self.rank_id} still has a step in flight")
        step = exact_int("step", step, 0)
        timeout_s = _positive_seconds("timeout_s", timeout_s)
        self._started, self._go, self._done = threading.Event(), threading.Event(), threading.Event()
        self._cancelled, self._result, self._error = False, None, None
        started, go, done = self._started, self._go, self._done

        def run() -> None:
            try:
                module = self.model_factory()
                module.load_state_dict(canonical_state)
                module.zero_grad(set_to_none=True)
                losses = self.loss_fn(module, self.batch_fn())
                if getattr(losses, "ndim", None) != 1 or losses.shape[0] < 1:
                    raise ValueError(
                        f"loss_fn must return one loss per example (a 1-D tensor), got shape "
                        f"{tuple(getattr(losses, 'shape', ()))}"
                    )
                total = losses.sum()
                total.backward()
                grads = tuple(
                    p.grad.detach().clone() if p.grad is not None else p.detach().new_zeros(p.shape)
                    for p in module.parameters()
                )
                result = StepResult(self.rank_id, step, float(total.item()), int(losses.shape[0]), grads)
                started.set()
                if go.wait(timeout_s) and not self._cancelled:
                    self._result = result
            except Exception as err:  # surfaced by join() on the driver
                self._error = err
                started.set()
            finally:
                done.set()

        self._thread = threading.Thread(target=run, name=f"simulated-rank-{self.rank_id}", daemon=True)
        self._thread.start()

    def wait_started(self, timeout_s: float) -> bool:
        """Whether the rank reached the rendezvous (or failed) within ``timeout_s``."""
        return self._started.wait(max(0.0, timeout_s))

    def release(self) -> None:
        """Let the rank's result through: it survives this step."""
        self._go.set()

    def cancel(self) -> None:
        """Kill the rank at the rendezvous: its result is dropped, its thread exits."""
        self._cancelled = True
        self._go.set()

    def join(self, timeout_s: float) -> StepResult | None:
        """The step's result (None when cancelled); raises the rank's own error, or on timeout."""
        finished = self._done.wait(max(0.0, timeout_s))
        if finished and self._thread is not None:
            self._thread.join(max(0.0, timeout_s))  # done is set just before the thread returns
            finished = not self._thread.is_alive()
        if not finished:
            raise TimeoutError(f"rank {self.rank_id} did not finish its step within {timeout_s:g} s")
        if self._error is not None:
            raise RuntimeError(f"rank {self.rank_id} failed its step: {self._error!r}") from self._error
        return self._result


class ElasticTrainingJob:
    """A data-parallel loop over ``world_size`` :class:`SimulatedRank` threads that survives lost ranks.

    Parameters
    ----------
    model_factory : callable
        ``model_factory()`` builds the module (the canonical one and each rank's replica).
    world_size : int
        Ranks.
    batch_fn_for_rank : callable
        ``batch_fn_for_rank(rank, loader_state) -> batch``: the rank's batch at that position, a pure
        function of it (so a replayed batch is the same batch).
    checkpoint_dir : path
        Root of the snapshots :meth:`checkpoint` writes and :meth:`resume` reads.
    seed, lr : int, float
        The loaders' seed; SGD's learning rate.
    step_timeout_s : float
        How long a step waits for a rank before declaring it dead.
    health_monitor : TrainingHealthMonitor, optional
        Observes each step; the first step after a respawn or resume is flagged ``restart``.
    loss_fn : callable, optional
        ``loss_fn(module, batch)``: one loss per example (cross-entropy by default).
    batches_per_epoch : int, optional
        When given, loaders roll into the next epoch after this many batches.

    A step's update is the mean of the per-example gradients over the surviving ranks' examples. A
    rank killed at step ``s`` (``run_step(s, kill_ranks={r})``) computes, is cancelled at the
    rendezvous and is left out; it stays dead, its loader where it was, until :meth:`respawn_rank`.
    Drive the job from the thread that built it (its state has no locks).
    """

    def __init__(
        self,
        model_factory: Callable[[], Any],
        world_size: int,
        batch_fn_for_rank: Callable[[int, LoaderState], Any],
        checkpoint_dir: Any,
        *,
        seed: int = 0,
        lr: float = 1e-2,
        step_timeout_s: float = 30.0,
        health_monitor: TrainingHealthMonitor | None = None,
        loss_fn: Callable[[Any, Any], Any] | None = None,
        batches_per_epoch: int | None = None,
    ) -> None:
        torch = require_torch(_WHAT)
        self.world_size = exact_int("world_size", world_size, 1)
        self.seed = exact_int("seed", seed, 0)
        self.step_timeout_s = _positive_seconds("step_timeout_s", step_timeout_s)
        if batches_per_epoch is not None:
            exact_int("batches_per_epoch", batches_per_epoch, 1)
        self.batches_per_epoch = batches_per_epoch
        self.model_factory, self.batch_fn_for_rank, self.loss_fn = model_factory, batch_fn_for_rank, loss_fn
        self.checkpoint_dir = checkpoint_dir
        self.model = model_factory()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.health = health_monitor if health_monitor is not None else TrainingHealthMonitor()
        self.loader_states = {
            r: LoaderState(self.seed, 0, r, self.world_size, 0) for r in range(self.world_size)
        }
        self.ranks = {r: self._rank(r) for r in range(self.world_size)}
        self.dead_ranks: set[int] = set()
        self.next_step = 0
        self.pending_restart = False
        self.history: list[dict[str, Any]] = []
        self.committed: list[tuple[int, int, int]] = []  # (rank, epoch, batch_idx) of every batch used
        self.last_checkpoint: AsyncTrainingCheckpoint | None = None
        self._owner = threading.get_ident()

    def _rank(self, r: int) -> SimulatedRank:
        return SimulatedRank(
            r, self.model_factory, lambda: self.batch_fn_for_rank(r, self.loader_states[r]), self.loss_fn
        )

    def _driver(self, method: str) -> None:
        if threading.get_ident() != self._owner:
            raise RuntimeError(
                f"ElasticTrainingJob.{method} must be called from the thread that built the job"
            )

    def _collect(
        self, live: list[int], kill: set[int]
    ) -> tuple[dict[int, StepResult], set[int], dict[int, str]]:
        """Release or cancel each live rank at the rendezvous; the results, the dead, the failures."""
        deadline = time.monotonic() + self.step_timeout_s
        dead: set[int] = set(kill)
        failures: dict[int, str] = {}
        results: dict[int, StepResult] = {}
        for r in live:
            arrived = self.ranks[r].wait_started(deadline - time.monotonic())
            (self.ranks[r].cancel if r in kill or not arrived else self.ranks[r].release)()
            if not arrived:
                dead.add(r)
                failures[r] = f"did not reach the rendezvous within step_timeout_s={self.step_timeout_s:g}"
        for r in live:
            if r in dead:
                continue
            try:
                result = self.ranks[r].join(deadline - time.monotonic())
            except (RuntimeError, TimeoutError) as err:
                self.ranks[r].cancel()
                dead.add(r)
                failures[r] = str(err)
                continue
            if result is not None:
                results[r] = result
        return results, dead, failures

    def run_step(self, step: int | None = None, kill_ranks: Collection[int] = ()) -> dict[str, Any]:
        """Run one step (``next_step`` by default), killing ``kill_ranks`` at its rendezvous.

        Returns the step's record: ``step``, ``loss`` (mean over the survivors' examples),
        ``grad_norm`` (of the update's gradient), ``survivors``, ``newly_dead``, ``rank_failures``,
        ``restart``, ``committed`` (each survivor's ``(epoch, batch_idx)``) and ``flags``.
        """
        self._driver("run_step")
        torch = require_torch(_WHAT)
        step = self.next_step if step is None else exact_int("step", step, self.next_step)
        kill = set(kill_ranks)
        bad = sorted(
            (
                r
                for r in kill
                if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.world_size
            ),
            key=repr,
        )
        if bad:
            raise ValueError(f"kill_ranks must hold ranks in [0, {self.world_size}), got {bad}")
        if kill & self.dead_ranks:
            raise ValueError(f"kill_ranks holds ranks already dead: {sorted(kill & self.dead_ranks)}")
        live = [r for r in range(self.world_size) if r not in self.dead_ranks]
        if not live:
            raise RuntimeError("every rank is dead: respawn_rank one before the next step")
        started = time.perf_counter()
        canonical = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        for r in live:
            self.ranks[r].start_step(step, canonical, timeout_s=self.step_timeout_s)
        results, dead, failures = self._collect(live, kill)
        self.dead_ranks |= dead
        if not results:
            raise RuntimeError(f"every live rank died at step {step}: nothing to commit")
        order = sorted(results)
        examples = sum(results[r].examples for r in order)
        grads = [sum(parts) / examples for parts in zip(*(results[r].grads for r in order), strict=True)]
        self.optimizer.zero_grad(set_to_none=True)
        for p, g in zip(self.model.parameters(), grads, strict=True):
            p.grad = g
        self.optimizer.step()
        committed = {r: (self.loader_states[r].epoch, self.loader_states[r].batch_idx) for r in order}
        for r in order:
            self.committed.append((r, *committed[r]))
            self.loader_states[r] = self.loader_states[r].advanced(batches_per_epoch=self.batches_per_epoch)
        loss = sum(results[r].loss_sum for r in order) / examples
        grad_norm = float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads)))
        receipt = self.health.observe_step(
            step,
            loss=loss,
            grad_norm=grad_norm,
            examples=examples,
            seconds=time.perf_counter() - started,
            restart=self.pending_restart,
        )
        record = {
            "step": step,
            "loss": loss,
            "grad_norm": grad_norm,
            "survivors": order,
            "newly_dead": sorted(dead),
            "rank_failures": failures,
            "restart": self.pending_restart,
            "committed": committed,
            "flags": receipt.flags,
        }
        self.pending_restart, self.next_step = False, step + 1
        self.history.append(record)
        return record

    def respawn_rank(self, rank_id: int) -> LoaderState:
        """Bring dead rank ``rank_id`` back at its first uncommitted batch; the next step is a restart.

        It joins the current canonical weights; no other rank rewinds.
        """
        self._driver("respawn_rank")
        rank_id = exact_int("rank_id", rank_id, 0)
        if rank_id not in self.dead_ranks:
            raise ValueError(f"rank {rank_id} is not dead (dead ranks: {sorted(self.dead_ranks)})")
        self.dead_ranks.discard(rank_id)
        self.ranks[rank_id] = self._rank(rank_id)
        self.pending_restart = True
        return self.loader_states[rank_id]

    def checkpoint(self) -> AsyncTrainingCheckpoint:
        """Snapshot the model, optimizer and every rank's loader position at ``next_step``, in the
        background; ``wait()`` the handle (the next checkpoint or :meth:`resume` waits for it too)."""
        self._driver("checkpoint")
        if self.last_checkpoint is not None:
            self.last_checkpoint.wait()
        extra = {
            "loader_states": {str(r): s.as_dict() for r, s in self.loader_states.items()},
            "world_size": self.world_size,
        }
        self.last_checkpoint = async_save_training_state(
            ModuleState(self.model, self.optimizer), self.checkpoint_dir, step=self.next_step, extra=extra
        )
        return self.last_checkpoint

    def resume(self) -> int:
        """Restore the newest snapshot under ``checkpoint_dir``: weights, optimizer, every loader
        position; all ranks live. Returns the step to continue from (the next is a restart)."""
        self._driver("resume")
        if self.last_checkpoint is not None:
            self.last_checkpoint.wait()
        loaded = load_training_state(ModuleState(self.model, self.optimizer), self.checkpoint_dir)
        saved = loaded.extra or {}
        if saved.get("world_size") != self.world_size:
            raise ValueError(
                f"snapshot {str(loaded.path)!r} holds {saved.get('world_size')} ranks' loader positions, "
                f"this job has {self.world_size} ranks"
            )
        states = {int(r): as_loader_state(s) for r, s in saved["loader_states"].items()}
        if sorted(states) != list(range(self.world_size)) or any(
            s.seed != self.seed for s in states.values()
        ):
            raise ValueError(
                f"snapshot {str(loaded.path)!r} holds the loader positions of another run (seeds "
                f"{sorted({s.seed for s in states.values()})}, this job's seed is {self.seed})"
            )
        self.loader_states = states
        self.dead_ranks.clear()
        self.ranks = {r: self._rank(r) for r in range(self.world_size)}
        self.next_step, self.pending_restart = loaded.step, True
        return loaded.step
