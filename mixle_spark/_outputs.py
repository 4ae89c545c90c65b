"""Outputs wherever they are: files and directories written through :func:`mixle_spark._locations.resolve`
(a local path, a ``file:`` URI, ``dbfs:/``, ``s3://``, ...), with one ownership rule.

- :func:`write_file`: one file, whole or not at all (a temporary file created exclusively under an
  unpredictable name, renamed into place), replacing only what the same writer wrote (``ours``).
- :func:`publish_directory`: :func:`mixle_spark._files.atomic_directory` for any location; on another
  filesystem the files go to a staging directory beside the output, renamed into place.
- :func:`check_location_free`, :func:`check_writable`: the checks a job runs on every output before
  any work (the writer's own earlier output only, no link, a parent it can write in).
- :func:`read_location`: a bounded read from a local path or a URI.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mixle_spark._files import (
    OutputLayout,
    RemoteFolder,
    atomic_directory,
    check_output_free,
    host_name,
    named_path,
    process_alive,
    read_bytes_bounded,
    refuse_output,
    write_atomically,
    write_marker,
)
from mixle_spark._locations import Location, resolve

__all__ = [
    "check_file",
    "check_location_free",
    "check_writable",
    "publish_directory",
    "read_location",
    "write_file",
]


_HEAD_BYTES = 16384


def write_file(
    path: str | os.PathLike[str],
    data: str | bytes,
    *,
    what: str = "output",
    ours: Callable[[bytes], bool] | None = None,
    claim: str = "was not written by mixle_spark",
    overwrite: bool = True,
    overwrite_flag: str = "overwrite=True",
    read_bytes: int = _HEAD_BYTES,
) -> str:
    """Write one file at ``path`` (a local path or a URI: :func:`mixle_spark._locations.resolve`)
    whole or not at all, replacing only what this package wrote.

    An existing file is replaced only when ``ours(its first read_bytes bytes)`` says it is this
    writer's (or no ``ours`` is given) and ``overwrite``; a directory, a symbolic link or another file
    is refused with one line naming the path (FileExistsError / UnsafePathError), and nothing is
    written (:func:`check_file`). The data goes to a temporary file beside the target, created
    exclusively under an unpredictable name, then is renamed into place. Returns the path as given.
    """
    location = resolve(path, what)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    kind = check_file(
        path,
        what=what,
        ours=ours,
        claim=claim,
        overwrite=overwrite,
        overwrite_flag=overwrite_flag,
        read_bytes=read_bytes,
    )
    if location.local is None:
        files, uri = location.remote, location.uri
        parent, _slash, name = uri.rpartition("/")
        temp = f"{parent}/.{name}.tmp-{host_name()}-{os.getpid()}-{uuid.uuid4().hex}"
        files.write(temp, payload, True)
        try:
            if kind == "file":
                files.delete(uri)
            files.rename(temp, uri)
        except BaseException:
            with contextlib.suppress(Exception):
                files.delete(temp)
            raise
        return location.shown
    write_atomically(named_path(location.local, what), payload)
    return location.shown


def check_file(
    path: str | os.PathLike[str],
    *,
    what: str = "output",
    ours: Callable[[bytes], bool] | None = None,
    claim: str = "was not written by mixle_spark",
    overwrite: bool = True,
    overwrite_flag: str = "overwrite=True",
    read_bytes: int = _HEAD_BYTES,
) -> str:
    """Refuse, before anything is written, a file :func:`write_file` may not replace at ``path``
    (see there) or whose place cannot be written; what is there: ``"missing"`` or ``"file"``."""
    location = resolve(path, what)
    shown = location.shown
    if location.local is None:
        files, uri = location.remote, location.uri
        kind = files.kind(uri)
        head = files.read(uri)[:read_bytes] if kind == "file" else b""
        _check_file_free(shown, what, kind, head, ours, claim, overwrite, overwrite_flag)
        return kind
    real = named_path(location.local, what)
    kind = "missing" if not os.path.lexists(real) else ("file" if real.is_file() else "other")
    head = b""
    if kind == "file":
        with open(real, "rb") as fh:
            head = fh.read(read_bytes)
    _check_file_free(shown, what, kind, head, ours, claim, overwrite, overwrite_flag)
    _check_parent(real, shown, what)
    return kind


def _check_file_free(
    shown: str,
    what: str,
    kind: str,
    head: bytes,
    ours: Callable[[bytes], bool] | None,
    claim: str,
    overwrite: bool,
    overwrite_flag: str,
) -> None:
    if kind == "missing":
        return
    if kind != "file":
        raise FileExistsError(f"{what} {shown} exists and is not a regular file; name a file")
    if ours is not None and head and not ours(head):
        raise FileExistsError(f"{what} {shown} exists and {claim}; choose another path or remove it yourself")
    if not overwrite:
        raise FileExistsError(f"{what} {shown} exists; pass {overwrite_flag} to replace it")


def _check_parent(real: Path, shown: str, what: str) -> None:
    """Refuse, before anything is written, a path whose nearest existing parent is not a directory
    this process can write in."""
    parent = real.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise NotADirectoryError(f"{what} {shown}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"{what} {shown}: cannot write in {parent} (permission denied)")


def check_writable(path: str | os.PathLike[str], what: str = "output") -> None:
    """Refuse (NotADirectoryError, PermissionError, UnsafePathError, UnsupportedLocationError), before
    any work, an output whose place cannot be written: a link, a parent that is a file or that this
    process cannot write in, a URI no filesystem here serves."""
    location = resolve(path, what)
    if location.local is not None:
        _check_parent(named_path(location.local, what), location.shown, what)
    elif location.remote.kind(location.uri.rpartition("/")[0] or location.uri) == "file":
        raise NotADirectoryError(f"{what} {location.shown}: its parent is a file, not a directory")


def read_location(
    path: str | os.PathLike[str], limit: int, what: str, error: type[Exception], short: str | None = None
) -> bytes:
    """The bytes of file ``path`` (a local path or a URI), refused with ``error`` past ``limit``
    bytes (:func:`read_bytes_bounded`; the message names it ``short``, default ``what``);
    FileNotFoundError naming ``what`` when there is none."""
    location = resolve(path, what)
    named = f"{short or what} {location.shown}"
    if location.local is not None:
        if not location.local.exists():
            raise FileNotFoundError(f"{what} not found: {location.shown}")
        return read_bytes_bounded(location.local, limit, named, error)
    files, uri = location.remote, location.uri
    if files.kind(uri) != "file":
        raise FileNotFoundError(f"{what} not found: {location.shown}")
    size = files.size(uri)
    if size > limit:
        raise error(f"{named} is {size:,} bytes; the limit is {limit:,} bytes")
    return bytes(files.read(uri))


def _check_remote_free(files: Any, uri: str, shown: str, overwrite: bool, layout: OutputLayout) -> None:
    """:func:`_check_free` on another filesystem (``files``: :class:`mixle_spark._locations.RemoteFiles`)."""
    kind = files.kind(uri)
    if kind == "missing":
        return
    if kind == "dir":
        folder = RemoteFolder(files, uri)
        if all(e.name in layout.keep for e in folder.entries()):
            return
        why = layout.foreign(folder)
    else:
        why = "it is a file, not a directory"
    refuse_output(shown, why, overwrite, layout)


def check_location_free(location: Location, overwrite: bool, layout: OutputLayout) -> None:
    """:func:`check_output_free` for a resolved :class:`mixle_spark._locations.Location`: a local one
    as a path, another filesystem's through its listing (what a killed run of this host left beside
    it is cleaned up first there too)."""
    if location.local is not None:
        check_output_free(location.local, overwrite, layout)
        return
    _sweep_remote(location.remote, location.uri)
    _check_remote_free(location.remote, location.uri, location.shown, overwrite, layout)


def _sweep_remote(files: Any, uri: str) -> None:
    """:func:`sweep_stale` on another filesystem: staging entries of dead processes of this host."""
    parent, _slash, name = uri.rstrip("/").rpartition("/")
    pattern = re.compile(rf"^\.{re.escape(name)}\.(tmp|old)-([^-]+)-(\d+)-[0-9a-f]{{32}}$")
    if not parent or files.kind(parent) != "dir":
        return
    for entry, _kind in sorted(files.list(parent)):
        found = pattern.match(entry)
        if found is None or found.group(2) != host_name() or process_alive(int(found.group(3))):
            continue
        stale = f"{parent}/{entry}"
        if found.group(1) == "old" and files.kind(uri) == "missing":
            files.rename(stale, uri)  # the previous output, whole: nothing is lost
        else:
            files.delete(stale, recursive=True)


def _upload(files: Any, local: Path, uri: str) -> None:
    """Every file under local directory ``local`` written under ``uri`` (each exclusively)."""
    for path in sorted(local.rglob("*")):
        if path.is_file() and not path.is_symlink():
            files.write(f"{uri}/{path.relative_to(local).as_posix()}", path.read_bytes(), True)


@contextmanager
def publish_directory(location: Location, overwrite: bool, layout: OutputLayout) -> Iterator[Path]:
    """:func:`atomic_directory` for a resolved :class:`mixle_spark._locations.Location`: a local
    staging directory is yielded; on success it becomes the output. On another filesystem its files
    are written into a staging directory beside the output (checked first and again before the swap,
    as locally), which is then renamed into place, the previous output moved aside first and deleted
    once the new one is in (object stores rename by copying: each file stays whole)."""
    if location.local is not None:
        with atomic_directory(location.local, overwrite, layout) as local_staging:
            yield local_staging
        return
    files, uri, shown = location.remote, location.uri.rstrip("/"), location.shown
    check_location_free(location, overwrite, layout)
    work = Path(tempfile.mkdtemp(prefix="mixle_spark-output-"))
    parent, _slash, name = uri.rpartition("/")
    tag = f"{host_name()}-{os.getpid()}-{uuid.uuid4().hex}"
    staging, retired = f"{parent}/.{name}.tmp-{tag}", f"{parent}/.{name}.old-{tag}"
    try:
        yield work
        if layout.marker is not None:
            write_marker(work, layout.marker)
        try:
            _upload(files, work, staging)
            _check_remote_free(files, uri, shown, overwrite, layout)  # what came meanwhile
            replaced = files.kind(uri) != "missing"
            if replaced:
                files.rename(uri, retired)
                for entry, _kind in files.list(retired):
                    if entry in layout.keep:
                        files.rename(f"{retired}/{entry}", f"{staging}/{entry}")
            files.rename(staging, uri)
            if replaced:
                files.delete(retired, recursive=True)
        except BaseException:
            with contextlib.suppress(Exception):
                if files.kind(staging) != "missing":
                    files.delete(staging, recursive=True)
            raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
