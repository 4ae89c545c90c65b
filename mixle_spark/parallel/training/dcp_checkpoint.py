"""Sharded training checkpoints through ``torch.distributed.checkpoint``, as immutable generations.

Layout under a checkpoint root::

    root/generation-000000012/   one committed step: DCP's shard files and .metadata,
        rank-00000.json ...      each rank's sidecar (its loader position or other state, RNG),
        manifest.json            size and SHA-256 of every file above, step, world size, plan,
        _SUCCESS                 written last, before the atomic rename that publishes the generation
    root/.staging-000000012/     a save in progress (never loaded; a crashed one is removed on the next save)

Every rank calls :func:`save_training_state` (or :class:`AsyncTrainingCheckpoint`'s ``save``) with
the same step; rank 0 writes the manifest and publishes by one ``rename``. A generation is never
overwritten, and pruning (``keep``) removes only generation directories this module wrote (a real
directory, not a symlink, with our manifest). :func:`load_training_state` verifies every file
against the manifest first and refuses a generation that is incomplete or altered, naming the file.

The manifest proves a generation is whole and unchanged since it was written, not who wrote it: DCP
files hold pickled objects, so load only checkpoints your own jobs wrote, from a directory only they
can write.

A change of world size is refused unless ``allow_world_size_change=True``: DCP reshards the model
and optimizer, but each rank's sidecar (say, its loader position) belongs to the old layout, so the
caller then gets every old rank's sidecar and decides.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mixle_spark.errors import MixleError
from mixle_spark.parallel.training._optional import (
    group_rank_world,
    require,
    require_torch,
    require_torch_distributed,
)
from mixle_spark.parallel.training._records import exact_int

__all__ = [
    "AsyncTrainingCheckpoint",
    "CheckpointIntegrityError",
    "LoadedCheckpoint",
    "generations",
    "latest_generation",
    "load_training_state",
    "save_training_state",
    "verify_generation",
]

_WHAT = "dcp_checkpoint"
_PREFIX, _STAGING = "generation-", ".staging-"
MANIFEST, SUCCESS = "manifest.json", "_SUCCESS"
_FORMAT = "mixle-spark dcp checkpoint 1"


class CheckpointIntegrityError(MixleError, ValueError):
    """A checkpoint generation is incomplete, or a file differs from its manifest."""


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


def _dcp() -> Any:
    """``torch.distributed.checkpoint``, or the one-line refusal naming the ``torch`` extra."""
    require_torch_distributed(_WHAT)
    return require("torch.distributed.checkpoint", extra="torch", what=_WHAT)


def _dist() -> Any:
    dist = require_torch_distributed(_WHAT)
    return dist if dist.is_initialized() else None


def _rank_world() -> tuple[int, int]:
    return group_rank_world(_WHAT)


def _barrier() -> None:
    dist = _dist()
    if dist is not None:
        dist.barrier()


def _real_dir(root: Any, *, create: bool) -> Path:
    path = Path(os.fspath(root))
    if ".." in path.parts:
        raise ValueError(f"checkpoint root {str(path)!r} contains '..'; give a path without it")
    if path.is_symlink():
        raise ValueError(f"checkpoint root {str(path)!r} is a symlink; give the directory itself")
    if create:
        path.mkdir(parents=True, exist_ok=True)
    elif not path.is_dir():
        raise FileNotFoundError(f"checkpoint root {str(path)!r} does not exist")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _ours(path: Path) -> bool:
    """A generation or staging directory this module wrote (a real directory with our marker)."""
    if path.is_symlink() or not path.is_dir():
        return False
    for name in (MANIFEST, ".mixle-staging"):
        marker = path / name
        if marker.is_file() and not marker.is_symlink():
            try:
                if json.loads(marker.read_text()).get("format") == _FORMAT:
                    return True
            except (OSError, ValueError, AttributeError):
                return False
    return False


def _step_of(path: Path) -> int | None:
    name = path.name
    for prefix in (_PREFIX, _STAGING):
        if name.startswith(prefix) and name[len(prefix) :].isdigit():
            return int(name[len(prefix) :])
    return None


def generations(root: Any) -> list[Path]:
    """Published generations under ``root`` (``_SUCCESS`` present), oldest first."""
    path = Path(os.fspath(root))
    if not path.is_dir():
        return []
    found = [
        p
        for p in path.iterdir()
        if p.name.startswith(_PREFIX) and _step_of(p) is not None and (p / SUCCESS).is_file()
    ]
    return sorted(found, key=lambda p: _step_of(p) or 0)


def latest_generation(root: Any) -> Path | None:
    """The newest published generation, or None."""
    found = generations(root)
    return found[-1] if found else None


def verify_generation(path: Any) -> dict[str, Any]:
    """The manifest of generation ``path`` after checking ``_SUCCESS`` and every file's size and hash.

    Raises :class:`CheckpointIntegrityError` naming the generation and the first bad file.
    """
    path = Path(os.fspath(path))
    if not (path / SUCCESS).is_file():
        raise CheckpointIntegrityError(
            f"checkpoint {str(path)!r} is incomplete (no {SUCCESS}): its save did not finish; not loading it"
        )
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as err:
        raise CheckpointIntegrityError(f"checkpoint {str(path)!r}: unreadable {MANIFEST} ({err})") from err
    if manifest.get("format") != _FORMAT:
        raise CheckpointIntegrityError(
            f"checkpoint {str(path)!r}: {MANIFEST} is not a mixle-spark checkpoint manifest"
        )
    for name, (size, digest) in sorted(manifest["files"].items()):
        file = path / name
        if not file.is_file() or file.is_symlink():
            raise CheckpointIntegrityError(f"checkpoint {str(path)!r}: file {name!r} is missing")
        if file.stat().st_size != size or _sha256(file) != digest:
            raise CheckpointIntegrityError(
                f"checkpoint {str(path)!r}: file {name!r} does not match its manifest (size or SHA-256 "
                "changed since it was written); not loading a corrupted checkpoint"
            )
    return manifest


def _state_of(session: Any) -> dict[str, Any]:
    state = session.state_dict()
    return {k: v for k, v in state.items() if k != "step"}


def _rng_state() -> str:
    torch = require_torch(_WHAT)
    return base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode("ascii")


def _stage(root: Path, step: int, rank: int) -> Path:
    """Rank 0 clears a crashed save of the same step (ours only) and creates the staging directory."""
    staging = root / f"{_STAGING}{step:09d}"
    final = root / f"{_PREFIX}{step:09d}"
    if final.exists() or final.is_symlink():  # every rank sees it, so every rank refuses
        raise FileExistsError(
            f"checkpoint generation {str(final)!r} exists; generations are immutable (save a later step)"
        )
    if rank == 0:
        if staging.exists() or staging.is_symlink():
            if not _ours(staging):
                raise FileExistsError(
                    f"{str(staging)!r} exists and was not written by this module; not touching it"
                )
            shutil.rmtree(staging)
        staging.mkdir()
        (staging / ".mixle-staging").write_text(json.dumps({"format": _FORMAT, "step": step}))
    return staging


def _write_sidecar(staging: Path, rank: int, world: int, step: int, extra: Any) -> None:
    sidecar = {"rank": rank, "world_size": world, "step": step, "extra": extra, "rng": _rng_state()}
    (staging / f"rank-{rank:05d}.json").write_text(json.dumps(sidecar))


def _publish(root: Path, staging: Path, step: int, world: int, plan: Any, keep: int | None) -> Path:
    """Rank 0: manifest, ``_SUCCESS``, atomic rename; then prune old generations of ours."""
    (staging / ".mixle-staging").unlink()
    files = {}
    for file in sorted(staging.rglob("*")):
        if file.is_file():
            files[str(file.relative_to(staging))] = (file.stat().st_size, _sha256(file))
    manifest = {"format": _FORMAT, "step": step, "world_size": world, "plan": plan, "files": files}
    with open(staging / MANIFEST, "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    (staging / SUCCESS).write_text("")
    final = root / f"{_PREFIX}{step:09d}"
    os.rename(staging, final)
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if keep is not None:
        for old in generations(root)[:-keep]:
            if _ours(old):
                shutil.rmtree(old)
    return final


def _check_step(step: Any, keep: Any) -> None:
    exact_int("step", step, 0)
    if keep is not None:
        exact_int("keep", keep, 1, "an exact integer >= 1 or None")


def save_training_state(
    session: Any, root: Any, *, step: int, extra: Any = None, keep: int | None = 3
) -> Path:
    """Save ``session``'s model and optimizer (sharded, by every rank) as generation ``step``.

    Collective: every rank calls it with the same ``step``. ``extra`` is this rank's JSON-ready
    sidecar state (a loader position, counters). Returns the published generation's path.
    """
    dcp = _dcp()

    _check_step(step, keep)
    rank, world = _rank_world()
    path = _real_dir(root, create=True)
    staging = _stage(path, step, rank)
    _barrier()
    dcp.save(_state_of(session), checkpoint_id=str(staging))
    _write_sidecar(staging, rank, world, step, extra)
    _barrier()
    final = path / f"{_PREFIX}{step:09d}"
    if rank == 0:
        _publish(path, staging, step, world, _plan_dict(session), keep)
    _barrier()
    return final


def _plan_dict(session: Any) -> Any:
    as_dict = getattr(getattr(session, "plan", None), "as_dict", None)
    return as_dict() if callable(as_dict) else None


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
    dcp = _dcp()

    rank, world = _rank_world()
    if generation is None:
        found = latest_generation(_real_dir(root, create=False))
        if found is None:
            raise FileNotFoundError(f"no published checkpoint generation under {os.fspath(root)!r}")
        generation = found
    path = Path(os.fspath(generation))
    manifest = verify_generation(path)
    saved_world = int(manifest["world_size"])
    if saved_world != world and not allow_world_size_change:
        raise ValueError(
            f"checkpoint {str(path)!r} was written by {saved_world} ranks, this job has {world}; pass "
            "allow_world_size_change=True to reshard the model and optimizer and remap the ranks' sidecar "
            "state yourself"
        )
    state = _state_of(session)
    dcp.load(state, checkpoint_id=str(path))
    session.load_state_dict({**state, "step": int(manifest["step"])})
    sidecars = [json.loads((path / f"rank-{r:05d}.json").read_text()) for r in range(saved_world)]
    if restore_rng and saved_world == world:
        torch = require_torch(_WHAT)
        raw = base64.b64decode(sidecars[rank]["rng"])
        torch.set_rng_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
    extras = tuple(s["extra"] for s in sidecars)
    return LoadedCheckpoint(
        path, int(manifest["step"]), saved_world, extras[rank] if saved_world == world else None, extras
    )


def _cloned(state: Any) -> Any:
    """A copy of every tensor in ``state`` (so an asynchronous write sees the state as it was)."""
    torch = require_torch(_WHAT)
    if isinstance(state, torch.Tensor):
        return state.detach().clone()
    if isinstance(state, Mapping):
        return {k: _cloned(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_cloned(v) for v in state)
    return state


class AsyncTrainingCheckpoint:
    """Snapshots that write in the background while training goes on.

    :meth:`save` copies the state (a memory copy, the only stall), starts the sharded write, writes
    this rank's sidecar and returns. The generation is published by the next :meth:`save` or by
    :meth:`wait` (both collective): until then it is a staging directory that no load will read, so
    a crash mid-write loses that snapshot only, never a published one.
    """

    def __init__(self, root: Any, *, keep: int | None = 3) -> None:
        _check_step(0, keep)
        self.root, self.keep = root, keep
        self._pending: tuple[Any, Path, int, Any] | None = None  # (the write's future, staging, step, plan)
        dist = _dist()
        # The background write synchronises ranks while training's collectives run on the default
        # group: it gets a group of its own (collective: every rank constructs its checkpointer).
        self._group = dist.new_group(backend="gloo") if dist is not None else None

    def save(self, session: Any, *, step: int, extra: Any = None) -> None:
        dcp = _dcp()

        _check_step(step, self.keep)
        self.wait()
        rank, world = _rank_world()
        path = _real_dir(self.root, create=True)
        staging = _stage(path, step, rank)
        _barrier()
        future = dcp.async_save(
            _cloned(_state_of(session)), checkpoint_id=str(staging), process_group=self._group
        )
        _write_sidecar(staging, rank, world, step, extra)
        self._pending = (future, staging, step, _plan_dict(session))

    def wait(self) -> Path | None:
        """Finish and publish the pending snapshot (collective); its generation path, or None."""
        if self._pending is None:
            return None
        future, staging, step, plan = self._pending
        self._pending = None
        future.result()
        _barrier()
        rank, world = _rank_world()
        path = Path(os.fspath(self.root))
        if rank == 0:
            _publish(path, staging, step, world, plan, self.keep)
        _barrier()
        return path / f"{_PREFIX}{step:09d}"

    def close(self) -> None:
        self.wait()
