"""The on-disk protocol of :mod:`~mixle_spark.parallel.training.dcp_checkpoint`: generations and manifests.

A directory is *sealed* by rank 0 once every rank's files are in it: ``manifest.json`` (size and SHA-256
of every file, plus what produced it) is written and synced, then ``_SUCCESS``. A generation is a sealed
directory published under its root by one atomic ``rename`` from a staging name; a sharded checkpoint
(:func:`~mixle_spark.parallel.training.dcp_checkpoint.save_sharded`) is the same, published at the path
the caller names. :func:`verify_generation` checks a sealed directory before anything in it is read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from mixle_spark.errors import MixleError
from mixle_spark.parallel.training._optional import group_rank_world, require, require_torch_distributed
from mixle_spark.parallel.training._records import exact_int

__all__ = [
    "MANIFEST",
    "SUCCESS",
    "CheckpointIntegrityError",
    "generations",
    "latest_generation",
    "verify_generation",
]

WHAT = "dcp_checkpoint"
PREFIX, STAGING = "generation-", ".staging-"
MANIFEST, SUCCESS = "manifest.json", "_SUCCESS"
STAGING_MARKER = ".mixle-staging"
FORMAT = "mixle-spark dcp checkpoint 1"


class CheckpointIntegrityError(MixleError, ValueError):
    """A checkpoint generation is incomplete, or a file differs from its manifest."""


def dcp() -> Any:
    """``torch.distributed.checkpoint``, or the one-line refusal naming the ``torch`` extra."""
    require_torch_distributed(WHAT)
    return require("torch.distributed.checkpoint", extra="torch", what=WHAT)


def dist_or_none() -> Any:
    """``torch.distributed`` when a default process group is initialised, else None."""
    dist = require_torch_distributed(WHAT)
    return dist if dist.is_available() and dist.is_initialized() else None


def rank_world() -> tuple[int, int]:
    return group_rank_world(WHAT)


def barrier() -> None:
    dist = dist_or_none()
    if dist is not None:
        dist.barrier()


def real_dir(root: Any, *, create: bool, what: str = "checkpoint root") -> Path:
    path = Path(os.fspath(root))
    if ".." in path.parts:
        raise ValueError(f"{what} {str(path)!r} contains '..'; give a path without it")
    if path.is_symlink():
        raise ValueError(f"{what} {str(path)!r} is a symlink; give the directory itself")
    if create:
        path.mkdir(parents=True, exist_ok=True)
    elif not path.is_dir():
        raise FileNotFoundError(f"{what} {str(path)!r} does not exist")
    return path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ours(path: Path) -> bool:
    """A generation or staging directory this module wrote (a real directory with our marker)."""
    if path.is_symlink() or not path.is_dir():
        return False
    for name in (MANIFEST, STAGING_MARKER):
        marker = path / name
        if marker.is_file() and not marker.is_symlink():
            try:
                if json.loads(marker.read_text()).get("format") == FORMAT:
                    return True
            except (OSError, ValueError, AttributeError):
                return False
    return False


def step_of(path: Path) -> int | None:
    name = path.name
    for prefix in (PREFIX, STAGING):
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
        if p.name.startswith(PREFIX) and step_of(p) is not None and (p / SUCCESS).is_file()
    ]
    return sorted(found, key=lambda p: step_of(p) or 0)


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
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointIntegrityError(
            f"checkpoint {str(path)!r}: {MANIFEST} is not a mixle-spark checkpoint manifest"
        )
    for name, (size, digest) in sorted(manifest["files"].items()):
        file = path / name
        if ".." in Path(name).parts or not file.is_file() or file.is_symlink():
            raise CheckpointIntegrityError(f"checkpoint {str(path)!r}: file {name!r} is missing")
        if file.stat().st_size != size or sha256(file) != digest:
            raise CheckpointIntegrityError(
                f"checkpoint {str(path)!r}: file {name!r} does not match its manifest (size or SHA-256 "
                "changed since it was written); not loading a corrupted checkpoint"
            )
    return manifest


def check_step(step: Any, keep: Any) -> None:
    exact_int("step", step, 0)
    if keep is not None:
        exact_int("keep", keep, 1, "an exact integer >= 1 or None")


def open_staging(staging: Path, final: Path, rank: int, step: int | None, refusal: str) -> None:
    """Refuse an existing ``final`` (``refusal``); rank 0 clears a crashed staging of ours and makes it."""
    if final.exists() or final.is_symlink():  # every rank sees it, so every rank refuses
        raise FileExistsError(refusal)
    if rank == 0:
        if staging.exists() or staging.is_symlink():
            if not ours(staging):
                raise FileExistsError(
                    f"{str(staging)!r} exists and was not written by this module; not touching it"
                )
            shutil.rmtree(staging)
        staging.mkdir()
        (staging / STAGING_MARKER).write_text(json.dumps({"format": FORMAT, "step": step}))


def stage(root: Path, step: int, rank: int) -> Path:
    """The staging directory of generation ``step`` (made by rank 0; see :func:`open_staging`)."""
    staging = root / f"{STAGING}{step:09d}"
    final = root / f"{PREFIX}{step:09d}"
    refusal = f"checkpoint generation {str(final)!r} exists; generations are immutable (save a later step)"
    open_staging(staging, final, rank, step, refusal)
    return staging


def seal(staging: Path, fields: dict[str, Any]) -> None:
    """Rank 0: the manifest of every file in ``staging`` (with ``fields``), synced, then ``_SUCCESS``."""
    (staging / STAGING_MARKER).unlink()
    files = {}
    for file in sorted(staging.rglob("*")):
        if file.is_file():
            files[str(file.relative_to(staging))] = (file.stat().st_size, sha256(file))
    manifest = {"format": FORMAT, **fields, "files": files}
    with open(staging / MANIFEST, "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    (staging / SUCCESS).write_text("")


def rename_synced(staging: Path, final: Path) -> None:
    os.rename(staging, final)
    fd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(root: Path, staging: Path, step: int, world: int, plan: Any, keep: int | None) -> Path:
    """Rank 0: seal, atomic rename; then prune old generations of ours."""
    seal(staging, {"step": step, "world_size": world, "plan": plan})
    final = root / f"{PREFIX}{step:09d}"
    rename_synced(staging, final)
    if keep is not None:
        for old in generations(root)[:-keep]:
            if ours(old):
                shutil.rmtree(old)
    return final


def discard_staging(staging: Path) -> None:
    """Remove a staging directory of ours whose save failed (never anything else)."""
    if staging.is_dir() and (staging / STAGING_MARKER).is_file() and ours(staging):
        shutil.rmtree(staging)
