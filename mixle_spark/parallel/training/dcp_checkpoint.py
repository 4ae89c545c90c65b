"""Sharded training checkpoints through ``torch.distributed.checkpoint``, as immutable generations.

Layout under a checkpoint root::

    root/generation-000000012/   one committed step: DCP's shard files and .metadata,
        rank-00000.json ...      each rank's sidecar (its loader position or other state, RNG),
        manifest.json            size and SHA-256 of every file above, step, world size, plan,
        _SUCCESS                 written last, before the atomic rename that publishes the generation
    root/.staging-000000012/     a save in progress (never loaded; a crashed one is removed on the next save)

Every rank calls :func:`save_training_state` (or :func:`async_save_training_state`, or
:class:`AsyncTrainingCheckpoint`'s ``save``) with the same step; rank 0 writes the manifest and
publishes by one ``rename``. A generation is never overwritten, and pruning (``keep``) removes only
generation directories this module wrote (a real directory, not a symlink, with our manifest).
:func:`load_training_state` and :func:`load_training_metadata` verify every file against the manifest
first and refuse a generation that is incomplete or altered, naming the file.

What is saved is a *session* (anything with ``state_dict()`` / ``load_state_dict()`` holding
``"model"`` and ``"optimizer"``, such as a
:class:`~mixle_spark.parallel.training.torch_training.TorchDistributedSession`), a plain module and
optimizer wrapped in :class:`ModuleState`, or state already frozen (:func:`save_frozen_training_state`).
:func:`save_sharded` / :func:`load_sharded` save one module and optimizer at a path of the caller's,
sealed with the same manifest.

The manifest proves a checkpoint is whole and unchanged since it was written, not who wrote it: DCP
files hold pickled objects, so load only checkpoints your own jobs wrote, from a directory only they
can write.

A change of world size is refused unless ``allow_world_size_change=True``: DCP reshards the model
and optimizer, but each rank's sidecar (say, its loader position) belongs to the old layout, so the
caller then gets every old rank's sidecar and decides (:func:`load_training_metadata` takes a
``rank_local_transform`` that maps them onto this rank, and otherwise hands this rank none).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mixle_spark.errors import MixleError, describe_value
from mixle_spark.parallel.training._dcp_generations import (
    MANIFEST,
    PREFIX,
    SUCCESS,
    WHAT,
    CheckpointIntegrityError,
    barrier,
    check_step,
    dcp,
    discard_staging,
    dist_or_none,
    generations,
    latest_generation,
    open_staging,
    publish,
    rank_world,
    real_dir,
    rename_synced,
    seal,
    stage,
    verify_generation,
)
from mixle_spark.parallel.training._optional import require_torch

__all__ = [
    "MANIFEST",
    "SUCCESS",
    "AsyncTrainingCheckpoint",
    "CheckpointIntegrityError",
    "CheckpointWriteError",
    "LoadedCheckpoint",
    "ModuleState",
    "async_save_training_state",
    "generations",
    "latest_generation",
    "load_sharded",
    "load_training_metadata",
    "load_training_state",
    "save_frozen_training_state",
    "save_sharded",
    "save_training_state",
    "verify_generation",
]


class CheckpointWriteError(MixleError, RuntimeError):
    """An asynchronous checkpoint write failed (on this rank or another); nothing was published."""


@dataclass(frozen=True)
class LoadedCheckpoint:
    """What :func:`load_training_state` restored: the generation, its step, and sidecar state.

    ``extra`` is this rank's sidecar state; after an allowed world-size change it is None and
    ``all_extra`` holds every old rank's, in rank order.
    """

    path: Path
    step: int
    world_size: int
    extra: Any
    all_extra: tuple[Any, ...]


class ModuleState:
    """A plain ``module`` and ``optimizer`` seen as a session: ``state_dict()`` / ``load_state_dict()``.

    Through ``torch.distributed.checkpoint.state_dict`` (``get_state_dict`` / ``set_state_dict``), so
    an FSDP2-sharded module gives and takes its shards and DCP reshards them on load.
    """

    def __init__(self, module: Any, optimizer: Any) -> None:
        self.module, self.optimizer = module, optimizer

    def state_dict(self) -> dict[str, Any]:
        require_torch(WHAT)
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optim = get_state_dict(self.module, self.optimizer)
        return {"model": model, "optimizer": optim}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(
            self.module, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
        )


def _state_of(source: Any) -> dict[str, Any]:
    """The tensors to save: a frozen mapping as given, else ``source.state_dict()``; never the step."""
    state = dict(source) if isinstance(source, Mapping) else source.state_dict()
    return {k: v for k, v in state.items() if k != "step"}


def _rng_state() -> str:
    torch = require_torch(WHAT)
    return base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode("ascii")


def _write_sidecar(staging: Path, rank: int, world: int, step: int, extra: Any) -> None:
    sidecar = {"rank": rank, "world_size": world, "step": step, "extra": extra, "rng": _rng_state()}
    try:
        text = json.dumps(sidecar)
    except (TypeError, ValueError) as err:
        raise TypeError(f"extra must be JSON-ready (dicts, lists, numbers, strings): {err}") from err
    (staging / f"rank-{rank:05d}.json").write_text(text)


_SINGLE_PROCESS_NOTICE = "torch.distributed is disabled, unavailable or uninitialized"


def _no_dist() -> bool:
    return dist_or_none() is None


@contextlib.contextmanager
def _quiet_single_process() -> Iterator[None]:
    """Silence DCP's warning that it assumes one process: without a process group, we mean one."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_SINGLE_PROCESS_NOTICE, category=UserWarning)
        yield


def _plan_dict(session: Any) -> Any:
    as_dict = getattr(getattr(session, "plan", None), "as_dict", None)
    return as_dict() if callable(as_dict) else None


def save_training_state(
    session: Any, root: Any, *, step: int, extra: Any = None, keep: int | None = 3
) -> Path:
    """Save ``session``'s model and optimizer (sharded, by every rank) as generation ``step``.

    Collective: every rank calls it with the same ``step``. ``session`` may also be a
    :class:`ModuleState` or a mapping of frozen state (``{"model": ..., "optimizer": ...}``).
    ``extra`` is this rank's JSON-ready sidecar state (a loader position, counters). Returns the
    published generation's path.
    """
    checkpoint = dcp()
    check_step(step, keep)
    rank, world = rank_world()
    path = real_dir(root, create=True)
    staging = stage(path, step, rank)
    barrier()
    with _quiet_single_process():
        checkpoint.save(_state_of(session), checkpoint_id=str(staging), no_dist=_no_dist())
    _write_sidecar(staging, rank, world, step, extra)
    barrier()
    final = path / f"{PREFIX}{step:09d}"
    if rank == 0:
        publish(path, staging, step, world, _plan_dict(session), keep)
    barrier()
    return final


def save_frozen_training_state(
    model_state: Mapping[str, Any],
    optimizer_state: Mapping[str, Any],
    root: Any,
    *,
    step: int,
    extra: Any = None,
    keep: int | None = 3,
) -> Path:
    """:func:`save_training_state` of state dictionaries already taken (and copied) by the caller."""
    if not isinstance(model_state, Mapping) or not isinstance(optimizer_state, Mapping):
        raise TypeError(
            "model_state and optimizer_state must be state dictionaries, got "
            f"{describe_value(model_state)} and {describe_value(optimizer_state)}"
        )
    return save_training_state(
        {"model": model_state, "optimizer": optimizer_state}, root, step=step, extra=extra, keep=keep
    )


def _sidecars(path: Path, manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every rank's sidecar, each checked to belong to this generation's step and world."""
    step, world = int(manifest["step"]), int(manifest["world_size"])
    out = []
    for r in range(world):
        name = f"rank-{r:05d}.json"
        if name not in manifest["files"]:
            raise CheckpointIntegrityError(f"checkpoint {str(path)!r}: no sidecar {name!r} in its manifest")
        sidecar = json.loads((path / name).read_text())
        if (sidecar.get("rank"), sidecar.get("world_size"), sidecar.get("step")) != (r, world, step):
            raise CheckpointIntegrityError(
                f"checkpoint {str(path)!r}: sidecar {name!r} was written for rank {sidecar.get('rank')} of "
                f"{sidecar.get('world_size')} at step {sidecar.get('step')}, not rank {r} of {world} at "
                f"step {step}"
            )
        out.append(sidecar)
    return out


def _resolve(root: Any, generation: Any) -> Path:
    if generation is not None:
        return Path(os.fspath(generation))
    found = latest_generation(real_dir(root, create=False))
    if found is None:
        raise FileNotFoundError(f"no published checkpoint generation under {os.fspath(root)!r}")
    return found


def load_training_state(
    session: Any,
    root: Any,
    *,
    generation: Any = None,
    restore_rng: bool = False,
    allow_world_size_change: bool = False,
) -> LoadedCheckpoint:
    """Restore ``session`` from the newest published generation under ``root`` (or ``generation``).

    Every rank verifies the generation against its manifest before anything is read.
    """
    checkpoint = dcp()
    rank, world = rank_world()
    path = _resolve(root, generation)
    manifest = verify_generation(path)
    saved_world = int(manifest["world_size"])
    if saved_world != world and not allow_world_size_change:
        raise ValueError(
            f"checkpoint {str(path)!r} was written by {saved_world} ranks, this job has {world}; pass "
            "allow_world_size_change=True to reshard the model and optimizer and remap the ranks' sidecar "
            "state yourself"
        )
    sidecars = _sidecars(path, manifest)
    state = _state_of(session)
    with _quiet_single_process():
        checkpoint.load(state, checkpoint_id=str(path), no_dist=_no_dist())
    session.load_state_dict({**state, "step": int(manifest["step"])})
    if restore_rng and saved_world == world:
        torch = require_torch(WHAT)
        raw = base64.b64decode(sidecars[rank]["rng"])
        torch.set_rng_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
    extras = tuple(s["extra"] for s in sidecars)
    return LoadedCheckpoint(
        path, int(manifest["step"]), saved_world, extras[rank] if saved_world == world else None, extras
    )


RankLocalTransform = Callable[[tuple[Any, ...], int, int, int], Any]


def load_training_metadata(
    root: Any, *, generation: Any = None, rank_local_transform: RankLocalTransform | None = None
) -> dict[str, Any]:
    """The step, plan and this rank's sidecar state of a verified generation; no tensor is read.

    Never hands this rank an old rank's state after a change of world size: ``extra`` is then None
    and ``rank_local_state_status`` is ``"transform_required"``, unless ``rank_local_transform
    (old_extras, saved_world_size, rank, world_size)`` returns this rank's state (``"transformed"``).
    With the same world size the status is ``"native"`` and a transform is refused.

    Returns a dict: ``generation`` (its path), ``step``, ``saved_world_size``, ``world_size``,
    ``world_size_changed``, ``parallel_plan`` (as saved), ``extra``, ``rank_local_state_status``,
    ``requires_rank_local_transform``.
    """
    rank, world = rank_world()
    path = _resolve(root, generation)
    manifest = verify_generation(path)
    if "step" not in manifest or "world_size" not in manifest:
        raise CheckpointIntegrityError(
            f"checkpoint {str(path)!r} is a sharded save (save_sharded), not a training generation; "
            "it has no training metadata"
        )
    sidecars = _sidecars(path, manifest)
    saved_world = int(manifest["world_size"])
    changed = saved_world != world
    if not changed:
        if rank_local_transform is not None:
            raise ValueError(
                f"rank_local_transform is for a change of world size; checkpoint {str(path)!r} was written "
                f"by {world} ranks, as many as this job has"
            )
        extra, status = sidecars[rank]["extra"], "native"
    elif rank_local_transform is None:
        extra, status = None, "transform_required"
    else:
        old = tuple(s["extra"] for s in sidecars)
        extra, status = rank_local_transform(old, saved_world, rank, world), "transformed"
    return {
        "generation": str(path),
        "step": int(manifest["step"]),
        "saved_world_size": saved_world,
        "world_size": world,
        "world_size_changed": changed,
        "parallel_plan": manifest.get("plan"),
        "extra": extra,
        "rank_local_state_status": status,
        "requires_rank_local_transform": status == "transform_required",
    }


def save_sharded(module: Any, optimizer: Any, path: Any) -> Path:
    """Save ``module`` and ``optimizer`` at ``path``, every rank writing its own shard (collective).

    ``path`` must not exist: the files are written to a staging directory beside it, sealed with a
    manifest (size and SHA-256 of each file, the world size) and published there by one rename.
    Any world size can load it (:func:`load_sharded`; DCP reshards). Returns ``path``.
    """
    checkpoint = dcp()
    rank, world = rank_world()
    final = Path(os.fspath(path))
    parent = real_dir(final.parent, create=True, what="checkpoint parent directory")
    final = parent / final.name
    staging = parent / f".sharded-staging-{final.name}"
    open_staging(staging, final, rank, None, f"checkpoint {str(final)!r} exists; save to a new path")
    barrier()
    state = ModuleState(module, optimizer).state_dict()
    with _quiet_single_process():
        checkpoint.save(state, checkpoint_id=str(staging), no_dist=_no_dist())
    barrier()
    if rank == 0:
        seal(staging, {"kind": "sharded", "world_size": world})
        rename_synced(staging, final)
    barrier()
    return final


def load_sharded(module: Any, optimizer: Any, path: Any) -> int:
    """Load a :func:`save_sharded` checkpoint (or a training generation) into ``module`` and
    ``optimizer`` in place, resharded to this job's layout; returns the world size that wrote it.

    The checkpoint is verified against its manifest first (:class:`CheckpointIntegrityError`).
    """
    checkpoint = dcp()
    path = Path(os.fspath(path))
    manifest = verify_generation(path)
    target = ModuleState(module, optimizer)
    state = target.state_dict()
    with _quiet_single_process():
        checkpoint.load(state, checkpoint_id=str(path), no_dist=_no_dist())
    target.load_state_dict(state)
    return int(manifest["world_size"])


def _cloned(state: Any) -> Any:
    """A copy of every tensor in ``state`` (so an asynchronous write sees the state as it was)."""
    torch = require_torch(WHAT)
    if isinstance(state, torch.Tensor):
        return state.detach().clone()
    if isinstance(state, Mapping):
        return {k: _cloned(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_cloned(v) for v in state)
    return state


def _one_line(error: BaseException) -> str:
    """``Type: message`` of the error, or of the first rank's error DCP wrapped, on one line."""
    failures = getattr(error, "failures", None)  # DCP's CheckpointException: {rank: the error}
    if isinstance(failures, Mapping) and failures:
        inner = next(iter(failures.values()))  # (exception, traceback) pairs
        inner = inner[0] if isinstance(inner, tuple) and inner else inner
        error = inner if isinstance(inner, BaseException) else error
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _any_rank(flag: bool) -> bool:
    """Whether ``flag`` is set on any rank (an all-reduce over the default group)."""
    dist = dist_or_none()
    if dist is None:
        return flag
    torch = require_torch(WHAT)
    value = torch.tensor([1 if flag else 0], dtype=torch.int32)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


class AsyncTrainingCheckpoint:
    """Snapshots that write in the background while training goes on.

    :meth:`save` copies the state (a memory copy, the only stall), starts the sharded write, writes
    this rank's sidecar and returns. The generation is published by the next :meth:`save` or by
    :meth:`wait` (both collective): until then it is a staging directory that no load will read, so
    a crash mid-write loses that snapshot only, never a published one. A write that fails (on any
    rank) or outlasts ``timeout_s`` raises :class:`CheckpointWriteError` from :meth:`wait` on every
    rank, and nothing is published.
    """

    def __init__(self, root: Any, *, keep: int | None = 3, timeout_s: float = 600.0) -> None:
        check_step(0, keep)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ValueError(
                f"timeout_s must be a positive number of seconds, got {describe_value(timeout_s)}"
            )
        self.root, self.keep, self.timeout_s = root, keep, float(timeout_s)
        self._pending: tuple[Any, Path, int, Any] | None = None  # (the write's future, staging, step, plan)
        dist = dist_or_none()
        # The background write synchronises ranks while training's collectives run on the default
        # group: it gets a group of its own (collective: every rank constructs its checkpointer).
        self._group = dist.new_group(backend="gloo") if dist is not None else None

    @property
    def done(self) -> bool:
        """True when no snapshot waits to be published (every save so far has been :meth:`wait` ed)."""
        return self._pending is None

    def save(self, session: Any, *, step: int, extra: Any = None) -> None:
        """Start snapshot ``step`` of ``session`` (a session, :class:`ModuleState` or frozen mapping)."""
        checkpoint = dcp()
        check_step(step, self.keep)
        self.wait()
        rank, world = rank_world()
        path = real_dir(self.root, create=True)
        staging = stage(path, step, rank)
        barrier()
        if self._group is None:
            # The write runs on DCP's thread, outside any catch_warnings here: one narrow filter for
            # its notice that it assumes one process (which is what we asked for, no_dist=True).
            warnings.filterwarnings("ignore", message=_SINGLE_PROCESS_NOTICE, category=UserWarning)
        with _quiet_single_process():
            future = checkpoint.async_save(
                _cloned(_state_of(session)),
                checkpoint_id=str(staging),
                process_group=self._group,
                no_dist=self._group is None,
            )
        _write_sidecar(staging, rank, world, step, extra)
        self._pending = (future, staging, step, _plan_dict(session))

    def wait(self) -> Path | None:
        """Finish and publish the pending snapshot (collective); its generation path, or None."""
        if self._pending is None:
            return None
        future, staging, step, plan = self._pending
        self._pending = None
        error: BaseException | None = None
        try:
            future.result(timeout=self.timeout_s)
        except FutureTimeout:
            error = TimeoutError(f"the write did not finish within timeout_s={self.timeout_s:g}")
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as err:  # DCP's CheckpointException is a BaseException; reported on every rank
            error = err
        if _any_rank(error is not None):
            rank, _ = rank_world()
            barrier()
            if rank == 0 and not isinstance(error, TimeoutError):
                discard_staging(staging)  # a timed-out write may still be running: the next save clears it
            barrier()
            where = f"({_one_line(error)})" if error is not None else "on another rank"
            raise CheckpointWriteError(
                f"asynchronous checkpoint of step {step} to {str(staging)!r} failed {where}; "
                "nothing was published"
            ) from error
        barrier()
        rank, world = rank_world()
        path = Path(os.fspath(self.root))
        if rank == 0:
            publish(path, staging, step, world, plan, self.keep)
        barrier()
        return path / f"{PREFIX}{step:09d}"

    def close(self) -> None:
        self.wait()


def async_save_training_state(
    session: Any,
    root: Any,
    *,
    step: int,
    extra: Any = None,
    keep: int | None = 3,
    timeout_s: float = 600.0,
) -> AsyncTrainingCheckpoint:
    """Start saving generation ``step`` in the background (collective); ``wait()`` the handle returned.

    Its :meth:`~AsyncTrainingCheckpoint.wait` publishes the generation and returns its path, or raises
    :class:`CheckpointWriteError` when the write failed on any rank (nothing is then published).
    """
    handle = AsyncTrainingCheckpoint(root, keep=keep, timeout_s=timeout_s)
    handle.save(session, step=step, extra=extra)
    return handle
