"""A loader's position (:class:`LoaderState`) and :func:`resume_batches`, shared by the fault-tolerant
training modules (:mod:`~mixle_spark.parallel.training.fault_tolerant_training` re-exports them)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from mixle_spark.errors import describe_value
from mixle_spark.parallel.training._records import exact_int

__all__ = ["LoaderState", "as_loader_state", "resume_batches"]


@dataclass(frozen=True)
class LoaderState:
    """Where a loader is: the next batch is ``batch_idx`` of ``epoch`` in the stream of ``rank`` of
    ``world_size``, a deterministic function of ``seed``."""

    seed: int
    epoch: int
    rank: int
    world_size: int
    batch_idx: int = 0  # the reference's field order: (seed, epoch, rank, world_size, batch_idx)

    def __post_init__(self) -> None:
        for name in ("seed", "epoch", "batch_idx", "rank"):
            exact_int(name, getattr(self, name), 0)
        exact_int("world_size", self.world_size, 1)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be in [0, world_size={self.world_size}), got {self.rank}")

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def advanced(self, batches: int = 1, *, batches_per_epoch: int | None = None) -> LoaderState:
        """The state ``batches`` batches on (rolling into the next epochs at ``batches_per_epoch``)."""
        exact_int("batches", batches, 0)
        epoch, idx = self.epoch, self.batch_idx + batches
        if batches_per_epoch is not None:
            epoch, idx = (
                epoch + idx // exact_int("batches_per_epoch", batches_per_epoch, 1),
                idx % batches_per_epoch,
            )
        return LoaderState(self.seed, epoch, self.rank, self.world_size, idx)


def as_loader_state(state: Any) -> LoaderState:
    """``state`` as a :class:`LoaderState` (from itself or its :meth:`~LoaderState.as_dict`)."""
    if isinstance(state, LoaderState):
        return state
    if isinstance(state, Mapping) and set(state) == {"seed", "epoch", "batch_idx", "rank", "world_size"}:
        return LoaderState(**state)
    raise TypeError(
        "state must be a LoaderState or its as_dict() (seed, epoch, batch_idx, rank, world_size), got "
        f"{describe_value(state)}"
    )


_END = object()


def resume_batches(loader: Any, state: Any) -> Iterator[Any]:
    """The batches of ``state.epoch`` that ``loader`` has not yet given, from ``state.batch_idx`` on.

    ``loader`` has ``epoch_batches(epoch)``: an iterator over one epoch's batches that is a pure
    function of the loader's seed, rank and world size and of the epoch (as
    :meth:`~mixle_spark.parallel.training.fault_tolerant_training.ShardedBatches.epoch_batches` is).
    The epoch is replayed and its first ``batch_idx`` batches dropped, so what follows is exactly
    what an uninterrupted run would have read next: none twice, none lost. A ``state`` of another
    stream (a ``seed``, ``rank`` or ``world_size`` attribute of the loader that differs) is refused.
    """
    state = as_loader_state(state)
    for name in ("seed", "rank", "world_size"):
        have = getattr(loader, name, None)
        if have is not None and have != getattr(state, name):
            raise ValueError(
                f"loader state has {name}={getattr(state, name)}, this loader {name}={have}: it is the "
                "position in another stream; resume with the state this loader saved"
            )
    epoch_batches = getattr(loader, "epoch_batches", None)
    if not callable(epoch_batches):
        raise TypeError(f"loader must have epoch_batches(epoch), got {describe_value(loader)}")
    batches = iter(epoch_batches(state.epoch))
    for seen in range(state.batch_idx):
        if next(batches, _END) is _END:
            raise ValueError(
                f"loader state batch_idx={state.batch_idx} is past the end of epoch {state.epoch} "
                f"({seen} batches)"
            )
    return batches
