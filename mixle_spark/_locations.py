"""Where a path mixle_spark writes really is: one resolver for every output, checkpoint, trace, model
and report path, so that a URI is never taken for a local folder (``dbfs:/mnt/x`` once became
``./dbfs:/mnt/x`` on a driver's disk, gone with the cluster).

:func:`resolve` reads what a Databricks user writes:

- a local path, or a ``file:`` URI (``file:///p``, ``file:/p``, ``file://localhost/p``): this
  machine's filesystem, with :func:`mixle_spark._files.named_path`'s checks (no symbolic link, no
  ``..`` a link leads elsewhere). ``/dbfs/...`` and ``/Volumes/...`` are local paths on a Databricks
  driver (its FUSE mounts);
- ``dbfs:/x``: ``/dbfs/x`` where that mount exists (a Databricks driver), else the Spark session's
  Hadoop filesystem;
- any other URI (``s3://``, ``s3a://``, ``abfss://``, ``gs://``, ``hdfs://``, ...): the Hadoop
  filesystem of the classic Spark session running in this process, when its configuration knows the
  scheme (the cluster's credentials apply); else :mod:`pyarrow.fs` when it knows the scheme (``s3``,
  ``gs``, ``hdfs``, ``abfs``); else :class:`~mixle_spark.errors.UnsupportedLocationError`, one line
  naming the scheme. A scheme is two or more letters before a ``:`` (``C:`` is a drive letter).

A remote location is served by a :class:`RemoteFiles` (:class:`ArrowFiles` here, the Hadoop one in
:mod:`mixle_spark.io._hadoop`), whose few calls the writers use: what is at a URI, a listing, a read,
a write (exclusive or not), a rename that never replaces, a delete. Object stores rename by copying:
a file is still written whole (a temporary object copied into place), a directory file by file.
"""

from __future__ import annotations

import os
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mixle_spark.errors import UnsupportedLocationError

__all__ = [
    "DBFS_MOUNT",
    "ArrowFiles",
    "Location",
    "RemoteFiles",
    "join",
    "needs_session",
    "resolve",
    "scheme_of",
    "shown_inside",
]

DBFS_MOUNT = "/dbfs"
"""Where a Databricks driver mounts ``dbfs:/`` (a ``dbfs:/x`` URI is the local ``/dbfs/x`` there)."""

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):")


def scheme_of(text: str) -> str | None:
    """The URI scheme ``text`` starts with (lower case), or None for a plain path."""
    found = _SCHEME.match(text)
    return None if found is None else found.group(1).lower()


def needs_session(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` may need the Spark session's Hadoop filesystem: a URI that is neither a
    ``file:`` one nor ``dbfs:/`` on a driver with the ``/dbfs`` mount."""
    scheme = None if isinstance(path, Path) else scheme_of(os.fspath(path))
    return scheme not in (None, "file") and not (scheme == "dbfs" and os.path.isdir(DBFS_MOUNT))


def join(uri: str, name: str) -> str:
    """``uri/name`` (URIs always use ``/``)."""
    return f"{uri.rstrip('/')}/{name}" if uri else name


def shown_inside(path: str | os.PathLike[str], name: str) -> str:
    """File ``name`` inside ``path`` as a message names it: a local path as :class:`~pathlib.Path`
    joins it, a URI with ``/`` (``Path`` would fold its ``//``)."""
    text = os.fspath(path)
    return (
        join(text, name)
        if scheme_of(text) is not None and not isinstance(path, Path)
        else str(Path(text) / name)
    )


class RemoteFiles(Protocol):
    """The calls writers make on a filesystem other than the local one; URIs are absolute."""

    name: str

    def kind(self, uri: str) -> str: ...  # "missing", "file" or "dir"
    def list(self, uri: str) -> list[tuple[str, str]]: ...  # (name, "file" | "dir")
    def size(self, uri: str) -> int: ...
    def read(self, uri: str) -> bytes: ...
    def write(self, uri: str, data: bytes, exclusive: bool) -> None: ...  # parents made
    def rename(self, source: str, target: str) -> None: ...  # FileExistsError when target exists
    def delete(self, uri: str, recursive: bool = False) -> None: ...
    def mkdirs(self, uri: str) -> None: ...


class ArrowFiles:
    """A :mod:`pyarrow.fs` filesystem (``filesystem``) with paths inside it; :meth:`path` turns what
    the user wrote into such a path."""

    def __init__(self, filesystem: Any) -> None:
        self._fs = filesystem
        self.name = f"pyarrow {type(filesystem).__name__}"

    def kind(self, uri: str) -> str:
        from pyarrow.fs import FileType

        found = self._fs.get_file_info(uri).type
        return {FileType.NotFound: "missing", FileType.Directory: "dir"}.get(found, "file")

    def list(self, uri: str) -> list[tuple[str, str]]:
        from pyarrow.fs import FileSelector, FileType

        infos = self._fs.get_file_info(FileSelector(uri, allow_not_found=True, recursive=False))
        return [(i.base_name, "dir" if i.type == FileType.Directory else "file") for i in infos]

    def size(self, uri: str) -> int:
        return int(self._fs.get_file_info(uri).size or 0)

    def read(self, uri: str) -> bytes:
        with self._fs.open_input_stream(uri, compression=None) as stream:
            return bytes(stream.read())

    def write(self, uri: str, data: bytes, exclusive: bool) -> None:
        if exclusive and self.kind(uri) != "missing":  # object stores have no exclusive create here
            raise FileExistsError(f"{uri} exists")
        parent = uri.rpartition("/")[0]
        if parent:
            self._fs.create_dir(parent, recursive=True)
        # Object stores publish an object only when its stream closes: readers never see a part.
        with self._fs.open_output_stream(uri, compression=None) as stream:
            stream.write(data)

    def rename(self, source: str, target: str) -> None:
        if self.kind(target) != "missing":
            raise FileExistsError(f"{target} exists")
        try:
            self._fs.move(source, target)
        except NotImplementedError:  # no rename (an object store without one): a server-side copy
            if self.kind(source) == "dir":
                raise
            self._fs.copy_file(source, target)
            self._fs.delete_file(source)

    def delete(self, uri: str, recursive: bool = False) -> None:
        if self.kind(uri) == "dir":
            self._fs.delete_dir(uri) if recursive else self._fs.delete_dir_contents(uri)
        else:
            self._fs.delete_file(uri)

    def mkdirs(self, uri: str) -> None:
        self._fs.create_dir(uri, recursive=True)


@dataclass(frozen=True)
class Location:
    """A resolved path: ``local`` (a local path, not yet checked for links) or ``files`` with ``uri``
    (the path in that filesystem). ``shown`` is what the user wrote, for messages."""

    shown: str
    local: Path | None = None
    files: RemoteFiles | None = None
    uri: str = ""

    @property
    def is_local(self) -> bool:
        return self.local is not None

    @property
    def remote(self) -> RemoteFiles:
        """The filesystem of a location that is not local."""
        if self.files is None:
            raise TypeError(f"{self.shown} is a local path, not a location of another filesystem")
        return self.files

    def child(self, name: str) -> Location:
        """The location of ``name`` inside this one."""
        shown = join(self.shown, name)
        if self.local is not None:
            return Location(shown, local=self.local / name)
        return Location(shown, files=self.files, uri=join(self.uri, name))


def _file_uri_path(text: str, what: str) -> str:
    parts = urllib.parse.urlsplit(text)
    if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
        raise UnsupportedLocationError(
            f"{what} {text}: expected a local file URI such as 'file:///tmp/out' (no host other than "
            "localhost, no query or fragment)"
        )
    return urllib.request.url2pathname(parts.path)


def _arrow_files(text: str) -> tuple[ArrowFiles, str] | None:
    try:
        from pyarrow.fs import FileSystem

        filesystem, path = FileSystem.from_uri(text)
    except (ValueError, OSError, ImportError):  # pyarrow knows no such scheme, or cannot reach it
        return None
    return ArrowFiles(filesystem), path


def _hadoop_files(text: str) -> Any:
    try:
        from mixle_spark.io._hadoop import hadoop_files
    except ImportError:  # pragma: no cover - mixle_spark.io is part of the package
        return None
    return hadoop_files(text)


def resolve(path: str | os.PathLike[str], what: str = "output") -> Location:
    """Where ``path`` is (see the module docstring); ``what`` names it in messages ("--output",
    "checkpoint directory", ...). Raises :class:`~mixle_spark.errors.UnsupportedLocationError`
    for a URI no filesystem here can write."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what} must be a path or a URI string, got {type(path).__name__}")
    text = os.fspath(path)
    if not text:
        raise UnsupportedLocationError(f"{what} must not be empty")
    scheme = None if isinstance(path, Path) else scheme_of(text)
    if scheme is None:
        return Location(text, local=Path(text))
    if scheme == "file":
        return Location(text, local=Path(_file_uri_path(text, what)))
    if scheme == "dbfs" and os.path.isdir(DBFS_MOUNT):
        rest = urllib.parse.urlsplit(text).path
        return Location(text, local=Path(DBFS_MOUNT) / rest.lstrip("/"))
    hadoop = _hadoop_files(text)
    if hadoop is not None:
        return Location(text, files=hadoop, uri=text.rstrip("/") or text)
    arrow = _arrow_files(text)
    if arrow is not None:
        files, inside = arrow
        return Location(text, files=files, uri=inside.rstrip("/") or inside)
    raise UnsupportedLocationError(
        f"{what} {text}: no filesystem here writes '{scheme}:' URIs (no classic Spark session whose "
        f"Hadoop configuration knows the scheme, and pyarrow does not); "
        + (
            f"on Databricks give the {DBFS_MOUNT}/... path, or run the job with its Spark session"
            if scheme == "dbfs"
            else "start the job with a Spark session configured for it, or give a local path"
        )
    )
