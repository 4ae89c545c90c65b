"""What the tests of outputs share: a folder of someone's own files, a byte-for-byte snapshot of a
tree (links not followed), the id of a process that has ended, and a job script loaded as a module
(to run its ``main`` in the test's process)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

JOBS = Path(__file__).resolve().parents[1] / "jobs"


def users_folder(path: Path) -> Path:
    """A folder of someone's own files (nothing mixle_spark wrote): notes.txt and sub/data.bin."""
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("my thesis, chapter 3\n")
    (path / "sub").mkdir()
    (path / "sub" / "data.bin").write_bytes(bytes(range(256)))
    return path


def snapshot(root: Path) -> dict[str, object]:
    """Everything under ``root``, links not followed: file bytes, link targets, directories."""
    found: dict[str, object] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = ("link", os.readlink(path))
            elif path.is_dir():
                found[key] = "dir"
            else:
                found[key] = path.read_bytes()
    return found


def dead_pid() -> int:
    """The id of a process that has ended (a killed run's, to the staging sweep)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def job_module(name: str, alias: str = "") -> ModuleType:
    """``jobs/NAME.py`` loaded as a module of its own (``alias`` tells apart loads of one job)."""
    spec = importlib.util.spec_from_file_location(f"_job_{name}{alias}", JOBS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
