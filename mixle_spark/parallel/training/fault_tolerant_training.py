"""Training that survives a lost rank: snapshots with the loader position, resumed on elastic restart.

Run under ``torchrun --max-restarts N``: when a rank dies, torchrun stops the others and starts the
whole group again. :class:`ElasticTrainer` then finds the newest published snapshot
(:mod:`~mixle_spark.parallel.training.dcp_checkpoint`), restores the model, the optimizer *and*
:class:`ShardedBatches`' position, and continues from that step: the run resumes rather than
restarts, and its final model equals an uninterrupted run's (the batches are a deterministic
function of the seed, the epoch and the batch index, never of the process that reads them).

Snapshots are asynchronous (:class:`~mixle_spark.parallel.training.dcp_checkpoint.AsyncTrainingCheckpoint`):
the write overlaps the next step and is published after it, so at most the steps since the last
published snapshot are recomputed.

:func:`resume_batches` resumes any loader with a deterministic ``epoch_batches(epoch)`` (as
:class:`ShardedBatches` has) at a :class:`LoaderState`: the batches not yet given, none twice.

In one process, :class:`ElasticTrainingJob` runs data-parallel steps over :class:`SimulatedRank`
threads (the reference's chaos harness): a rank killed mid-step is left out of that step's update and
rejoins, when respawned, at its first uncommitted batch; :meth:`ElasticTrainingJob.resume` restores a
snapshot and replays exactly the batches after it (defined in ``_elastic_job``, exported here).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from mixle_spark.parallel.training._elastic_job import ElasticTrainingJob, SimulatedRank, StepResult
from mixle_spark.parallel.training._loader import LoaderState, as_loader_state, resume_batches
from mixle_spark.parallel.training._records import StepReceipt, exact_int
from mixle_spark.parallel.training.dcp_checkpoint import (
    AsyncTrainingCheckpoint,
    latest_generation,
    load_training_state,
    save_training_state,
)

__all__ = [
    "ElasticTrainer",
    "ElasticTrainingJob",
    "LoaderState",
    "ShardedBatches",
    "SimulatedRank",
    "StepResult",
    "restart_count",
    "resume_batches",
]


def restart_count() -> int:
    """How many times torchrun has restarted this worker group (``TORCHELASTIC_RESTART_COUNT``)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


class ShardedBatches:
    """Deterministic global batches over ``n`` examples; each rank reads rows ``rank::world`` of each.

    Epoch ``e`` visits a permutation of ``range(n)`` drawn from ``(seed, e)``; global batch ``b`` is
    its slice ``[b * global_batch, (b + 1) * global_batch)`` (the last one shorter unless
    ``drop_last``). A batch's rows are the same for any world size, so a resumed run reads exactly
    what an uninterrupted one would.
    """

    def __init__(
        self,
        n: int,
        global_batch: int,
        *,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
    ) -> None:
        self.n = exact_int("n", n, 1)
        self.global_batch = exact_int("global_batch", global_batch, 1)
        self.seed = exact_int("seed", seed, 0)
        self.world_size = exact_int("world_size", world_size, 1)
        self.rank = exact_int("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be in [0, {self.world_size}), got {self.rank}")
        self.drop_last = bool(drop_last)
        if self.drop_last and self.global_batch > self.n:
            raise ValueError(f"global_batch={self.global_batch} exceeds n={self.n} with drop_last: no batch")
        self.epoch, self.batch_idx = 0, 0
        self._order: np.ndarray | None = None

    @property
    def batches_per_epoch(self) -> int:
        full, rest = divmod(self.n, self.global_batch)
        return full + (1 if rest and not self.drop_last else 0)

    def _permutation(self) -> np.ndarray:
        if self._order is None:
            self._order = np.random.default_rng([self.seed, self.epoch]).permutation(self.n)
        return self._order

    def global_indices(self) -> np.ndarray:
        """The rows of the next global batch (all ranks')."""
        start = self.batch_idx * self.global_batch
        return self._permutation()[start : start + self.global_batch]

    def epoch_batches(self, epoch: int) -> Iterator[np.ndarray]:
        """This rank's rows of each global batch of ``epoch`` in turn (a pure function of the epoch;
        :func:`resume_batches` resumes it at a :class:`LoaderState`)."""
        order = np.random.default_rng([self.seed, exact_int("epoch", epoch, 0)]).permutation(self.n)
        for b in range(self.batches_per_epoch):
            yield order[b * self.global_batch : (b + 1) * self.global_batch][self.rank :: self.world_size]

    def next_indices(self) -> np.ndarray:
        """This rank's rows of the next global batch, and advance."""
        rows = self.global_indices()[self.rank :: self.world_size]
        self.batch_idx += 1
        if self.batch_idx >= self.batches_per_epoch:
            self.epoch, self.batch_idx, self._order = self.epoch + 1, 0, None
        return rows

    @property
    def state(self) -> LoaderState:
        return LoaderState(self.seed, self.epoch, self.rank, self.world_size, self.batch_idx)

    def load_state(self, state: LoaderState | dict[str, Any]) -> None:
        """Continue from ``state`` (same seed; the rank's share follows this loader's rank and world)."""
        state = as_loader_state(state)
        if state.seed != self.seed:
            raise ValueError(
                f"loader state has seed {state.seed}, this loader {self.seed}: a different data order"
            )
        if not 0 <= state.batch_idx < self.batches_per_epoch:
            raise ValueError(
                f"loader state batch_idx={state.batch_idx} is outside [0, {self.batches_per_epoch})"
            )
        self.epoch, self.batch_idx, self._order = state.epoch, state.batch_idx, None


class ElasticTrainer:
    """Train ``session`` for a number of steps, snapshotting every ``snapshot_every`` and resuming.

    Parameters
    ----------
    session : TorchDistributedSession
        From :meth:`~mixle_spark.parallel.training.torch_training.TorchDistributedBackend.prepare`.
    batches : ShardedBatches
        This rank's loader (its rank and world size the process group's).
    fetch : callable
        ``fetch(indices) -> batch``: this rank's rows as the session's ``loss_fn`` takes them.
    checkpoint_root : path
        Where the snapshots live (a directory every rank sees).
    snapshot_every : int
        Steps between snapshots. ``asynchronous`` (default) overlaps each write with the next step.
    monitor : TrainingHealthMonitor, optional
        Observes every receipt; the first step after a resume is flagged ``restart``.
    """

    def __init__(
        self,
        session: Any,
        batches: ShardedBatches,
        fetch: Callable[[np.ndarray], Any],
        checkpoint_root: Any,
        *,
        snapshot_every: int = 10,
        keep: int | None = 3,
        asynchronous: bool = True,
        monitor: Any = None,
    ) -> None:
        self.session, self.batches, self.fetch = session, batches, fetch
        self.root = checkpoint_root
        self.snapshot_every = exact_int("snapshot_every", snapshot_every, 1)
        self.keep = keep
        self.asynchronous = bool(asynchronous)
        self.monitor = monitor
        self.resumed_from: int | None = None

    def resume(self) -> int:
        """Restore the newest published snapshot, if any; the step to continue from."""
        if latest_generation(self.root) is None:
            return 0
        loaded = load_training_state(self.session, self.root)
        self.batches.load_state(loaded.extra["loader"])
        self.resumed_from = loaded.step
        return loaded.step

    def run(self, steps: int) -> list[StepReceipt]:
        """Train until ``steps`` committed steps (resuming first); the receipts of the steps run here."""
        steps = exact_int("steps", steps, 1)
        start = self.resume()
        snapshots = AsyncTrainingCheckpoint(self.root, keep=self.keep) if self.asynchronous else None
        receipts: list[StepReceipt] = []
        for step in range(start, steps):
            receipt = self.session.step(self.fetch(self.batches.next_indices()))
            if snapshots is not None:
                snapshots.wait()  # publish the snapshot whose write overlapped this step
            receipts.append(receipt)
            if self.monitor is not None:
                self.monitor.observe(receipt, restart=self.resumed_from is not None and step == start)
            if (step + 1) % self.snapshot_every == 0 and step + 1 < steps:
                extra = {"loader": self.batches.state.as_dict(), "restart_count": restart_count()}
                if snapshots is not None:
                    snapshots.save(self.session, step=step + 1, extra=extra)
                else:
                    save_training_state(self.session, self.root, step=step + 1, extra=extra, keep=self.keep)
        if snapshots is not None:
            snapshots.wait()
        return receipts
