"""Files written whole or not at all, with the permissions a plain ``open`` would give them.

Every file the package writes (models, traces, plans, the jobs' outputs) goes through
:func:`write_atomically`: a temporary file in the target's folder, flushed and fsynced, given the mode
the process's umask allows (``0o666 & ~umask``, as ``open`` would; a temporary file alone would stay
0600), then renamed into place, so a reader never sees a half-written file. A table of files
(Parquet, CSV, JSON) is written alike, as a directory (:func:`write_table_files`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["file_mode", "read_bytes_bounded", "remove_tree", "write_atomically", "write_table_files"]


def file_mode() -> int:
    """The mode a new file gets from ``open``: ``0o666`` less the process's umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomically(path: str | os.PathLike[str], text: str | Iterable[str]) -> Path:
    """Write ``text`` (a string, or lines already ending in newlines) to ``path`` atomically."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            if isinstance(text, str):
                fh.write(text)
            else:
                fh.writelines(text)
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


def write_table_files(df: Any, text: str, local: Path | None, format: str, existed: bool) -> None:
    """Spark writes ``df`` as ``format`` files; a local table is written to a staging directory
    renamed into place (replacing ``existed`` only once the new one is whole)."""
    writer = df.write.format(format)
    if format == "csv":
        writer = writer.option("header", "true")
    if local is None:
        writer.mode("overwrite" if existed else "error").save(text)
        return
    staging = local.with_name(f".{local.name}.tmp-{uuid.uuid4().hex}")
    try:
        writer.mode("error").save(staging.as_uri())
        if existed:
            retired = local.with_name(f".{local.name}.old-{uuid.uuid4().hex}")
            os.replace(local, retired)
            os.replace(staging, local)
            shutil.rmtree(retired) if retired.is_dir() else retired.unlink()
        else:
            if local.is_dir():
                local.rmdir()  # an empty directory
            os.replace(staging, local)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
