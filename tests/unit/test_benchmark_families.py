"""jobs/benchmark_families.py: it covers every scalar family, and what it times agrees with scipy.

The benchmark's ratios mean something only if each family's ``seq_log_density`` computes scipy's
``logpdf`` / ``logpmf`` on the same values, and a family added to the package cannot be left out of it
silently.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from mixle_spark.stats.base import registered_distributions

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location(
        "benchmark_families", ROOT / "jobs" / "benchmark_families.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_scalar_family_is_benchmarked_or_excused() -> None:
    bench = _bench()
    families = set(bench.scalar_families())
    assert families - set(bench.TWINS) - set(bench.NO_TWIN) == set()
    assert set(bench.TWINS) <= set(registered_distributions()) and set(bench.NO_TWIN) <= families
    assert {"gaussian", "poisson", "rayleigh", "pareto"} <= set(bench.TWINS)


def test_every_twin_agrees_with_the_family_on_fresh_draws() -> None:
    bench = _bench()
    rows = bench.run(values=3000, rounds=1, tolerance=1e-10)
    assert [r["family"] for r in rows] == sorted(bench.TWINS)
    assert all(r["difference"] <= 1e-10 and r["mixle_ms"] > 0 and r["scipy_ms"] > 0 for r in rows)


def test_a_disagreeing_family_fails_the_run() -> None:
    bench = _bench()
    params, make = bench.TWINS["gaussian"]
    bench.TWINS["gaussian"] = (params, lambda p: make({**p, "sigma2": p["sigma2"] * 1.01}))
    with pytest.raises(SystemExit, match="gaussian: seq_log_density differs from scipy"):
        bench.run(values=500, rounds=1, tolerance=1e-9, names=["gaussian"])


def test_relative_difference_counts_a_support_mismatch_as_infinite() -> None:
    bench = _bench()
    assert bench.max_relative_difference(np.array([0.0, -np.inf]), np.array([0.0, -1.0])) == np.inf
    assert bench.max_relative_difference(np.array([-2.0, -np.inf]), np.array([-2.0, -np.inf])) == 0.0
