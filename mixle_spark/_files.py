"""Files written whole or not at all, with the permissions a plain ``open`` would give them.

Every file the package writes (models, traces, plans, the jobs' outputs) goes through
:func:`write_atomically`: a temporary file in the target's folder, flushed and fsynced, given the mode
the process's umask allows (``0o666 & ~umask``, as ``open`` would; a temporary file alone would stay
0600), then renamed into place, so a reader never sees a half-written file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = ["file_mode", "write_atomically"]


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
