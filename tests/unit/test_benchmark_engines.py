"""jobs/benchmark_engines.py at a tiny size: every engine and precision runs, and what it reports
agrees with numpy float64 (a benchmark whose runs disagree would time different work)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("benchmark_engines", ROOT / "jobs" / "benchmark_engines.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.torch
def test_every_engine_runs_and_agrees_with_numpy_float64() -> None:
    pytest.importorskip("torch")
    bench = _bench()
    rows = bench.run(3000, dim=3, components=4, iterations=2, rounds=2)
    assert [(r["engine"], r["precision"]) for r in rows] == list(bench.RUNS)
    assert all(r["seconds"] > 0 and r["speedup"] > 0 and len(r["times"]) == 4 for r in rows)
    tolerance = {"float64": 1e-12, "float32": 1e-5, "bfloat16": 1e-2}
    for row in rows:
        assert row["ll_difference"] <= tolerance[row["precision"]], row


def test_a_missing_engine_is_reported_not_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    from mixle_spark.engines import _registry

    bench = _bench()
    monkeypatch.setattr(_registry, "_ENGINES", {})
    monkeypatch.setattr(_registry, "find_spec", lambda name: None)
    rows = bench.run(
        500, dim=2, components=2, iterations=1, runs=[("numpy", "float64"), ("torch", "float32")]
    )
    assert rows[1]["seconds"] is None and "pip install 'mixle-spark[torch]'" in rows[1]["note"]
    assert rows[0]["seconds"] > 0 and rows[0]["speedup"] == 1.0
