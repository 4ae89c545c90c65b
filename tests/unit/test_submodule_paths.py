"""The reference's twenty ``mixle.utils.parallel.<name>`` submodules, importable as
``mixle_spark.parallel.<name>``: each path is the module where the code lives (the same object)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_architecture import PACKAGE, REFERENCE_ALIASES, alias_target

# The reference's submodule list (seed/parallel_api_reference.txt) and where each lives here.
PATHS = {
    "balance": "mixle_spark.parallel.planning.balance",
    "dcp_checkpoint": "mixle_spark.parallel.training.dcp_checkpoint",
    "em_observability": "mixle_spark.em.observability",
    "fault_tolerant_training": "mixle_spark.parallel.training.fault_tolerant_training",
    "lightning_data": "mixle_spark.parallel.training.lightning_data",
    "megatron_training": "mixle_spark.parallel.training.megatron_training",
    "model_decomposition": "mixle_spark.parallel.planning.model_decomposition",
    "model_parallel": "mixle_spark.parallel.backends.model_parallel",
    "mpi": "mixle_spark.parallel.backends.mpi",
    "multiprocessing": "mixle_spark.parallel.backends.multiprocessing",
    "planner": "mixle_spark.parallel.planning.planner",
    "ray_data": "mixle_spark.parallel.backends.ray",
    "resilient_em": "mixle_spark.em.resilient",
    "sdc_audit": "mixle_spark.em.sdc_audit",
    "torch_neural": "mixle_spark.parallel.training.torch_neural",
    "torch_training": "mixle_spark.parallel.training.torch_training",
    "torchrun": "mixle_spark.parallel.backends.torchrun",
    "training_contracts": "mixle_spark.parallel.training.contracts",
    "training_health": "mixle_spark.parallel.training.training_health",
    "training_launchers": "mixle_spark.parallel.training.launchers",
}


def test_the_twenty_paths_of_the_reference_page() -> None:
    page = Path("/work/shared/seed/parallel_api_reference.txt")
    if page.exists():  # the seed page lists them under "Submodules"
        listed = [
            line.split("mixle.utils.parallel.")[1].split()[0]
            for line in page.read_text(encoding="utf-8").splitlines()
            if line.startswith("- mixle.utils.parallel.") and line.endswith(" module")
        ]
        assert listed == sorted(PATHS)
    assert len(PATHS) == 20


@pytest.mark.parametrize("name", sorted(PATHS))
def test_each_path_is_the_real_module(name: str) -> None:
    alias = importlib.import_module(f"mixle_spark.parallel.{name}")
    real = importlib.import_module(PATHS[name])
    assert alias is real and sys.modules[f"mixle_spark.parallel.{name}"] is real
    assert alias.__name__ == PATHS[name]
    parallel = importlib.import_module("mixle_spark.parallel")
    assert getattr(parallel, name) is real  # `from mixle_spark.parallel import planner` too
    exec(f"from mixle_spark.parallel import {name} as via_from", namespace := {})
    assert namespace["via_from"] is real
    source = (PACKAGE / "parallel" / f"{name}.py").read_text(encoding="utf-8")
    docstring = ast.get_docstring(ast.parse(source)) or ""
    assert f"``mixle.utils.parallel.{name}`` path" in docstring and f":mod:`{PATHS[name]}`" in docstring


def test_the_alias_files_are_aliases_and_nothing_else() -> None:
    """The architecture test exempts aliases from the layering (one names an EM module, where the
    reference put them): each of the twenty is one, and a file doing anything more is not."""
    assert REFERENCE_ALIASES == {f"mixle_spark.parallel.{n}": t for n, t in PATHS.items()}
    alias = (PACKAGE / "parallel" / "em_observability.py").read_text(encoding="utf-8")
    assert alias_target(ast.parse(alias)) == "mixle_spark.em.observability"
    for planted in (
        alias + "\ndef fit():\n    return None\n",
        alias.replace("sys.modules[__name__] = em_observability", "sys.modules['x'] = em_observability"),
        alias.replace("from mixle_spark.em import observability as em_observability", "import json"),
        alias.replace("import sys\n", "import sys\nimport mixle_spark.estimation\n"),
        alias.replace("import sys\n", "import sys\nfrom mixle_spark.em import routine\n"),
    ):
        assert alias_target(ast.parse(planted)) is None


def test_importing_a_path_loads_no_optional_library() -> None:
    """The namespace stays lazy: importing ``mixle_spark.parallel.planner`` (or any path whose real
    module imports no optional library at load) loads neither torch, pyspark nor mpi4py."""
    script = """
import sys
import mixle_spark.parallel.planner, mixle_spark.parallel.model_decomposition, mixle_spark.parallel.mpi
import mixle_spark.parallel.torch_training, mixle_spark.parallel.multiprocessing
import mixle_spark.parallel.ray_data
from mixle_spark.parallel.planner import Resources, calibrate_resources, estimate_model_nbytes
print(sorted(m for m in ("torch", "pyspark", "mpi4py", "ray", "dask", "lightning") if m in sys.modules))
print(mixle_spark.parallel.planner.__name__)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["[]", "mixle_spark.parallel.planning.planner"]


def test_the_doctest_run_leaves_the_alias_files_to_their_real_modules() -> None:
    """``--doctest-modules`` over ``mixle_spark/parallel`` collects without an import mismatch (the
    root conftest leaves the alias files out; their modules' doctests run from their own files)."""
    root = PACKAGE.parent
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "mixle_spark/parallel",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    collected = proc.stdout
    assert "mixle_spark/parallel/planning/_sharding.py::" in collected
    assert "mixle_spark/parallel/planner.py::" not in collected
