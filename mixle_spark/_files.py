"""Files written whole or not at all, with the permissions a plain ``open`` would give them, and
outputs replaced only when mixle_spark wrote them.

Every file the package writes (models, traces, plans, the jobs' outputs) goes through
:func:`write_atomically`: a temporary file in the target's folder, flushed and fsynced, given the mode
the process's umask allows (``0o666 & ~umask``, as ``open`` would; a temporary file alone would stay
0600), then renamed into place, so a reader never sees a half-written file.

A directory output (the fit job's, a table of Parquet / CSV / JSON files) is built in a staging
directory beside it and renamed into place (:func:`atomic_directory`). What is already at the path is
replaced only when it is the same writer's earlier output, recognised by what that writer leaves there
(an :class:`OutputLayout`); anything else (a folder of other files, a regular file) is refused with
one line naming the path and what it holds, and nothing is written or deleted. No path is written or
deleted through a symbolic link, nor through a ``..`` that a link makes lead elsewhere
(:func:`named_path`): a wrong ``--output`` must cost an error message, never someone's files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mixle_spark.errors import UnsafePathError

__all__ = [
    "TABLE_MARKER",
    "Folder",
    "OutputLayout",
    "RemoteFolder",
    "atomic_directory",
    "check_output_free",
    "delta_layout",
    "file_mode",
    "folder_entries",
    "folder_json",
    "holds",
    "host_name",
    "named_path",
    "process_alive",
    "read_bytes_bounded",
    "refuse_output",
    "remove_tree",
    "sweep_stale",
    "table_layout",
    "write_atomically",
    "write_marker",
]


def file_mode() -> int:
    """The mode a new file gets from ``open``: ``0o666`` less the process's umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomically(path: str | os.PathLike[str], text: str | bytes | Iterable[str]) -> Path:
    """Write ``text`` (a string, bytes, or lines already ending in newlines) to ``path`` atomically."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(text, bytes):
                fh.write(text)
            elif isinstance(text, str):
                fh.write(text.encode("utf-8"))
            else:
                fh.writelines(line.encode("utf-8") for line in text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return target


def read_bytes_bounded(path: Path, limit: int, what: str, error: type[Exception]) -> bytes:
    """The bytes of ``path``, refused with ``error`` (naming ``what``, its size and ``limit``) before
    more than ``limit`` bytes are read: a huge file, or a device or pipe that never ends, is not read
    whole into memory."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size  # 0 for a device or a pipe: their end is found by reading
        data = b"" if size > limit else fh.read(limit + 1)
    if size > limit or len(data) > limit:
        found = f"{size:,} bytes" if size > limit else f"more than {limit:,} bytes"
        raise error(f"{what} is {found}; the limit is {limit:,} bytes")
    return data


def remove_tree(path: Path, keep_dir: bool) -> None:
    """Remove ``path`` (or, with ``keep_dir``, what it holds)."""
    if not keep_dir:
        shutil.rmtree(path, ignore_errors=True)
    elif path.is_dir():
        for child in path.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()


def named_path(path: str | os.PathLike[str], what: str = "output") -> Path:
    """The real absolute path of ``path``; UnsafePathError when writing there would land elsewhere.

    Refused: a symbolic link as the last component (writing, replacing or deleting it would reach
    whatever it points to: ``--output link-to-my-thesis``), and a ``..`` after a link that makes the
    path lead somewhere other than it reads (``work/link/../out`` reads as ``work/out``), compared by
    ``os.path.realpath``. Links among the parents are followed (a home on another disk, macOS's
    ``/tmp``): that is where the user asks to write, and only the writer's own files there are ever
    replaced. ``what`` names the path in the message ("output", "checkpoint directory", ...).
    """
    text = os.fspath(path)
    lexical = os.path.abspath(text)  # ".." removes the component before it, as a reader reads it
    if os.path.islink(lexical):
        raise UnsafePathError(
            f"{what} {text} is a symbolic link (to {os.readlink(lexical)}); mixle_spark never writes or "
            "deletes through a link: name the real path"
        )
    real, expected = os.path.realpath(text), os.path.realpath(lexical)
    if real != expected:
        raise UnsafePathError(
            f"{what} {text} leads to {real}, not to {expected}: a '..' after a symbolic link leaves the "
            "named path; name the real path"
        )
    return Path(real)


def holds(entries: Iterable[os.DirEntry[str]]) -> str:
    """``it holds a, b/ and 3 more``: what a refusal names (``/`` marks a directory)."""
    names = sorted(e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in entries)
    if len(names) > 3:
        return f"it holds {', '.join(names[:3])} and {len(names) - 3} more"
    return "it holds " + (f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else names[0])


_JSON_LIMIT = 1 << 26  # 64 MiB: a marker or a summary is far smaller


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in file ``path`` (not a link, under 64 MiB); {} for anything else."""
    try:
        if path.is_symlink() or path.stat().st_size > _JSON_LIMIT:
            return {}
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


@dataclass(frozen=True)
class RemoteEntry:
    """An entry of a :class:`RemoteFolder`, answering as :class:`os.DirEntry` does."""

    name: str
    kind: str  # "file" or "dir"

    def is_dir(self, follow_symlinks: bool = True) -> bool:
        return self.kind == "dir"

    def is_file(self, follow_symlinks: bool = True) -> bool:
        return self.kind == "file"


@dataclass(frozen=True)
class RemoteFolder:
    """A directory on another filesystem (``files``, a :class:`mixle_spark._locations.RemoteFiles`)
    as an :class:`OutputLayout` reads it: its entries and its small JSON files."""

    files: Any
    uri: str

    def entries(self) -> list[RemoteEntry]:
        return [RemoteEntry(name, kind) for name, kind in self.files.list(self.uri)]

    def json_object(self, name: str) -> dict[str, Any]:
        where = f"{self.uri.rstrip('/')}/{name}"
        try:
            if self.files.kind(where) != "file" or self.files.size(where) > _JSON_LIMIT:
                return {}
            found = json.loads(self.files.read(where).decode("utf-8"))
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}


Folder = Path | RemoteFolder
"""A directory an :class:`OutputLayout` judges: a local path or a :class:`RemoteFolder`."""


def folder_entries(directory: Folder) -> list[Any]:
    """The entries of ``directory`` (:class:`os.DirEntry` or :class:`RemoteEntry`)."""
    if isinstance(directory, RemoteFolder):
        return directory.entries()
    with os.scandir(directory) as found:
        return list(found)


def folder_json(directory: Folder, name: str) -> dict[str, Any]:
    """The JSON object in file ``name`` of ``directory``; {} for anything else."""
    if isinstance(directory, RemoteFolder):
        return directory.json_object(name)
    return _json_object(directory / name)


@dataclass(frozen=True)
class OutputLayout:
    """What one writer leaves at its output path, so that replacing it replaces only that.

    ``foreign(directory)`` says why a non-empty directory (a local path or a :class:`RemoteFolder`:
    :func:`folder_entries`, :func:`folder_json` read either) is not this writer's output (None when it
    is); a refusal reads ``output PATH exists and {claim} ({why}); choose another {output_flag} or
    remove it yourself``, and an output of the writer that may not be replaced
    ``output PATH exists; pass {overwrite_flag} to replace it``. ``marker`` (the writer's name) makes
    :func:`atomic_directory` list the files it wrote in :data:`TABLE_MARKER`.
    """

    claim: str
    foreign: Callable[[Folder], str | None]
    overwrite_flag: str = "--overwrite"
    output_flag: str = "--output"
    marker: str | None = None
    keep: frozenset[str] = frozenset()
    """Entries of the output that are not part of it but the same run's other outputs nested in it
    (``--checkpoint-dir OUT/_checkpoints``): an output holding only these is free, ``foreign`` is
    not asked about them, and a replaced output hands them on to the new one."""


TABLE_MARKER = "_mixle_spark_files.json"
"""The file a table directory mixle_spark writes holds: the names of the files written with it.
Its leading ``_`` hides it from Spark, pyarrow, Dask and Ray readers."""
_MARKER_FORMAT = "mixle_spark.written_files"
# What table writers leave when no marker lists the files (a directory written before markers, or by
# an engine alone), named as the engines name them, not as people do: Spark's part-NNNNN-UUID...,
# Dask's part.N.parquet, Ray's <32 hex>_....parquet; Spark's _SUCCESS and checksums; Parquet
# summary files.
_TABLE_FILE = re.compile(
    r"part-\d{5,}-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}[\w.-]*"
    r"|part\.\d+\.parquet|[0-9a-f]{32}_[\w.-]*\.parquet"
    r"|_SUCCESS|_metadata|_common_metadata|\.[^/]+\.crc"
)


def _marker_files(directory: Folder) -> set[str] | None:
    """The file names :data:`TABLE_MARKER` in ``directory`` lists; None without a valid marker."""
    marker = folder_json(directory, TABLE_MARKER)
    files = marker.get("files") if marker.get("format") == _MARKER_FORMAT else None
    return set(files) if isinstance(files, list) and all(isinstance(f, str) for f in files) else None


def _not_a_table(directory: Folder) -> str | None:
    """Why ``directory`` is not a table of files a writer left: something other than the files its
    marker lists (or, without a marker, than part files, ``_SUCCESS`` and checksums)."""
    listed = _marker_files(directory)

    def written(name: str) -> bool:
        if listed is None:
            return _TABLE_FILE.fullmatch(name) is not None
        return name in listed or name == TABLE_MARKER

    odd = [e for e in folder_entries(directory) if not (e.is_file(follow_symlinks=False) and written(e.name))]
    return holds(odd) if odd else None


def _not_a_delta_table(directory: Folder) -> str | None:
    entries = folder_entries(directory)
    logs = [e for e in entries if e.name == "_delta_log" and e.is_dir(follow_symlinks=False)]
    return None if logs else holds(entries)


def table_layout(
    writer: str, overwrite_flag: str = "--mode overwrite", output_flag: str = "--output"
) -> OutputLayout:
    """A directory of Parquet / CSV / JSON files ``writer`` writes (and marks with :data:`TABLE_MARKER`)."""
    return OutputLayout(f"was not written by {writer}", _not_a_table, overwrite_flag, output_flag, writer)


def delta_layout(overwrite_flag: str = "--mode overwrite", output_flag: str = "--output") -> OutputLayout:
    """A Delta table: any one may be overwritten (Delta keeps the old version; other files stay)."""
    return OutputLayout("is not a Delta table", _not_a_delta_table, overwrite_flag, output_flag)


def _check_free(final: Path, shown: str, overwrite: bool, layout: OutputLayout) -> None:
    """Raise FileExistsError unless ``final`` (a path :func:`named_path` accepted) is absent, an
    empty directory, or (with ``overwrite``) the writer's own earlier output."""
    if not os.path.lexists(final):
        return
    if final.is_dir() and not final.is_symlink():
        if all(e.name in layout.keep for e in folder_entries(final)):
            return
        why = layout.foreign(final)
    else:
        why = "it is a file, not a directory" if final.is_file() else "it is not a directory"
    refuse_output(shown, why, overwrite, layout)


def refuse_output(shown: str, why: str | None, overwrite: bool, layout: OutputLayout) -> None:
    """The refusal of an existing output: foreign (``why``), or the writer's own without ``overwrite``."""
    if why is not None:
        raise FileExistsError(
            f"output {shown} exists and {layout.claim} ({why}); choose another {layout.output_flag} "
            "or remove it yourself"
        )
    if not overwrite:
        raise FileExistsError(f"output {shown} exists; pass {layout.overwrite_flag} to replace it")


def check_output_free(target: str | os.PathLike[str], overwrite: bool, layout: OutputLayout) -> Path:
    """The real path of output ``target``, once it is safe to write: not through a link
    (:func:`named_path`), and absent, an empty directory, or (with ``overwrite``) ``layout``'s
    writer's own earlier output. What a killed run left beside it is cleaned up first
    (:func:`sweep_stale`). Raises UnsafePathError or FileExistsError naming the path."""
    final = named_path(target)
    sweep_stale(final)
    _check_free(final, os.fspath(target), overwrite, layout)
    return final


def host_name() -> str:
    """This host's name as staging names carry it (no "-", which separates their parts)."""
    return socket.gethostname().replace("-", "_") or "host"


def _staging_name(final: Path, kind: str) -> Path:
    """``.NAME.KIND-HOST-PID-UUID`` beside ``final``: whose it is, so a later run can tell a killed
    run's leftovers from a live run's."""
    return final.with_name(f".{final.name}.{kind}-{host_name()}-{os.getpid()}-{uuid.uuid4().hex}")


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process, or no pid at all: left alone
        return True
    return True


def sweep_stale(final: Path) -> list[Path]:
    """Remove what a killed run left beside ``final`` (its staging directory; and if it died between
    moving the old output aside and moving the new one in, put the old output back). Only entries
    named as :func:`atomic_directory` names them, of processes of this host that no longer run, and
    never a symbolic link (a link is not what a run left). Returns the paths removed or restored."""
    done: list[Path] = []
    host = host_name()
    pattern = re.compile(rf"^\.{re.escape(final.name)}\.(tmp|old)-([^-]+)-(\d+)-[0-9a-f]{{32}}$")
    if not final.parent.is_dir():
        return done
    for path in sorted(final.parent.iterdir()):
        found = pattern.match(path.name)
        if found is None or path.is_symlink() or found.group(2) != host or process_alive(int(found.group(3))):
            continue
        if found.group(1) == "old" and not os.path.lexists(final):
            os.replace(path, final)  # the previous output, whole: nothing is lost
        elif path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        done.append(path)
    return done


def _hand_on(retired: Path | None, staging: Path, keep: frozenset[str]) -> list[str]:
    """Move the kept entries (the run's other outputs nested in it) of the output moved aside
    (``retired``) into the new one; the names moved."""
    if retired is None or not retired.is_dir() or retired.is_symlink():
        return []
    moved = [name for name in sorted(keep) if os.path.lexists(retired / name)]
    for name in moved:
        os.replace(retired / name, staging / name)
    return moved


def write_marker(staging: Path, writer: str) -> None:
    files = sorted(e.name for e in folder_entries(staging))
    marker = {"format": _MARKER_FORMAT, "version": 1, "writer": writer, "files": files}
    write_atomically(staging / TABLE_MARKER, json.dumps(marker, indent=1) + "\n")


@contextmanager
def atomic_directory(target: str | os.PathLike[str], overwrite: bool, layout: OutputLayout) -> Iterator[Path]:
    """Yield an empty staging directory beside ``target``; on success it becomes ``target``.

    ``target`` is checked first and again just before the swap (:func:`check_output_free`): only
    ``layout``'s writer's own earlier output is ever replaced, and only with ``overwrite``. On an
    exception the staging directory is removed and ``target`` is untouched. A replaced ``target`` is
    moved aside first and deleted only once the new one is in place.
    """
    final = check_output_free(target, overwrite, layout)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = _staging_name(final, "tmp")
    staging.mkdir()
    try:
        yield staging
        if layout.marker is not None:
            write_marker(staging, layout.marker)
        _check_free(named_path(target), os.fspath(target), overwrite, layout)  # what came meanwhile
        retired = None
        if os.path.lexists(final):
            retired = _staging_name(final, "old")
            os.replace(final, retired)
        moved = _hand_on(retired, staging, layout.keep)
        try:
            os.replace(staging, final)
        except BaseException:
            for name in moved:  # put the other outputs back where they were, whole
                os.replace(staging / name, retired / name)  # type: ignore[operator]
            if retired is not None:
                os.replace(retired, final)
            raise
        if retired is not None:
            shutil.rmtree(retired) if retired.is_dir() else retired.unlink()
    finally:
        if staging.exists():
            shutil.rmtree(staging)
