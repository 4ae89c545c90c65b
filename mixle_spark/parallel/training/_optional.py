"""Lazy imports of the training modules' optional libraries, each refused in one line naming its extra.

Nothing here imports torch, lightning or megatron at module load: the EM fit path never reaches them
(``tests/unit/test_architecture.py`` checks it).
"""

from __future__ import annotations

import importlib
from typing import Any

from mixle_spark.parallel._torch_group import TORCH_REQUIREMENT, require_torch, require_torch_distributed

__all__ = ["group_rank_world", "require", "require_torch", "require_torch_distributed"]

_EXTRAS = {
    "torch": ("torch", TORCH_REQUIREMENT),
    "lightning": ("lightning", "lightning>=2.2"),
}


def require(module: str, *, extra: str, what: str) -> Any:
    """Import ``module``, or raise a one-line ImportError naming what needs it and the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        name, requirement = _EXTRAS.get(extra, (extra, extra))
        raise ImportError(f"{what} needs {requirement}: pip install 'mixle-spark[{name}]'") from err


def group_rank_world(what: str) -> tuple[int, int]:
    """This process's rank and the world size of the default process group; ``(0, 1)`` without one."""
    dist = require_torch_distributed(what)
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return 0, 1
