"""Tests of the torch training modules and the torchrun backend on a real process group.

Tests marked ``torchrun`` run only when pytest itself is started by ``torchrun`` (``make
test-torchrun`` does, with 2 and then 3 processes; gloo on CPU)::

    torchrun --nproc-per-node 2 -m pytest tests/torchrun -m torchrun -q -p no:cacheprovider

Every process runs the same tests in the same order, so their collective calls match; ranks other
than 0 report quietly. In a plain ``pytest`` run they are skipped, and the other tests here (which
start ``torchrun`` themselves) run when torch is installed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def launched() -> bool:
    """Whether this pytest was started by torchrun (its environment names a rank and a world)."""
    return "TORCHELASTIC_RUN_ID" in os.environ and "WORLD_SIZE" in os.environ


def pytest_configure(config: pytest.Config) -> None:
    if launched() and os.environ.get("RANK", "0") != "0":
        config.option.verbose = -2
        config.option.reportchars = ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs several processes: run under torchrun (make test-torchrun)")
    for item in items:
        if item.get_closest_marker("torchrun") is not None and not launched():
            item.add_marker(skip)


@pytest.fixture(scope="session")
def dist() -> Iterator[Any]:
    """``torch.distributed`` with the default (gloo) group initialised once for the session."""
    from mixle_spark.parallel.training.torch_training import init_process_group

    module = init_process_group(timeout_s=120)
    assert module is not None
    yield module
    module.barrier()


@pytest.fixture()
def shared_dir(dist: Any) -> Iterator[Path]:
    """A directory every rank sees (made by rank 0, removed after the test once all ranks are done)."""
    box = [tempfile.mkdtemp(prefix="mixle-torchrun-") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    yield Path(box[0])
    dist.barrier()
    if dist.get_rank() == 0:
        shutil.rmtree(box[0], ignore_errors=True)
