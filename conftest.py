"""What pytest collects from the package itself (``--doctest-modules`` over ``mixle_spark/``).

The reference's submodule paths (``mixle_spark/parallel/planner.py`` and the others, see
docs/package-map.md) are aliases: importing one puts the module where the code lives in its place
(``mixle_spark.parallel.planner`` is ``mixle_spark.parallel.planning.planner``). pytest would import
such a file and find a module whose ``__file__`` is elsewhere, an import mismatch; the real module's
doctests are collected from its own file, so the alias files are left out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

PARALLEL = Path(__file__).resolve().parent / "mixle_spark" / "parallel"
ALIAS_LINE = "sys.modules[__name__] = "


def is_reference_alias(path: Path) -> bool:
    """True for a module of ``mixle_spark/parallel`` that replaces itself in ``sys.modules``."""
    if path.suffix != ".py" or path.resolve().parent != PARALLEL:
        return False
    lines = path.read_text(encoding="utf-8").splitlines()
    return any(line.startswith(ALIAS_LINE) for line in lines)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    return True if is_reference_alias(collection_path) else None
