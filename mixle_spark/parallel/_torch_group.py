"""torch, and the default process group of a ``torchrun`` launch, for the torchrun EM backend and the
training package alike.

Nothing here imports torch at module load: a fit that uses neither never loads it
(``tests/unit/test_architecture.py``). Each refusal is one line naming what needs torch and the extra
to install.
"""

from __future__ import annotations

import importlib
import os
from datetime import timedelta
from typing import Any

__all__ = ["MIN_TORCH", "TORCH_REQUIREMENT", "default_group", "require_torch", "require_torch_distributed"]

MIN_TORCH = (2, 4)
"""The oldest torch the package runs with (the ``torch`` extra's floor)."""

TORCH_REQUIREMENT = f"torch>={MIN_TORCH[0]}.{MIN_TORCH[1]}"
""":data:`MIN_TORCH` as the refusals (and the training modules' other torch imports) name it."""


def require_torch(what: str) -> Any:
    """``torch`` (:data:`MIN_TORCH` or newer), or a one-line ImportError naming ``what`` and the extra."""
    try:
        torch = importlib.import_module("torch")
    except ImportError as err:
        raise ImportError(f"{what} needs {TORCH_REQUIREMENT}: pip install 'mixle-spark[torch]'") from err
    major, minor = (int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if (major, minor) < MIN_TORCH:
        raise ImportError(
            f"{what} needs {TORCH_REQUIREMENT} (found {torch.__version__}): "
            "pip install -U 'mixle-spark[torch]'"
        )
    return torch


def require_torch_distributed(what: str) -> Any:
    """``torch.distributed`` (after :func:`require_torch`), refused in one line like it."""
    require_torch(what)
    try:
        return importlib.import_module("torch.distributed")
    except ImportError as err:
        raise ImportError(f"{what} needs {TORCH_REQUIREMENT}: pip install 'mixle-spark[torch]'") from err


def default_group(what: str, *, backend: str | None = None, timeout_s: float | None = None) -> Any:
    """``torch.distributed`` with its default process group, initialised from the ``torchrun``
    environment when it is not yet; None when there is no group and this is not a distributed launch
    (no ``WORLD_SIZE`` in the environment).

    Before initialising, the launch's topology (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ...) is
    checked (:meth:`~mixle_spark.parallel.planning.Resources.from_torchrun`). ``backend`` None is
    nccl when CUDA is available, else gloo. Under torchrun's agent every restart of an elastic job
    gets its own key space in the agent's store (the agent keeps one store across restarts, and a
    new group would otherwise read the dead attempt's peer addresses: "Connection refused").
    ``timeout_s`` None is torch's default.
    """
    dist = require_torch_distributed(what)
    if dist.is_initialized():
        return dist
    if "WORLD_SIZE" not in os.environ:
        return None
    from mixle_spark.parallel.planning.planner import Resources

    Resources.from_torchrun()  # refuses an inconsistent RANK / LOCAL_RANK / WORLD_SIZE topology
    torch = require_torch(what)
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    timeout = {} if timeout_s is None else {"timeout": timedelta(seconds=timeout_s)}
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and "MASTER_PORT" in os.environ:
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
        client = dist.TCPStore(
            os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False, **timeout
        )
        store = dist.PrefixStore(f"mixle-spark/attempt-{attempt}/", client)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, **timeout)
    else:
        dist.init_process_group(backend, **timeout)
    return dist
