"""jobs/benchmark_precision.py (``jobs/benchmark.py --precision``): its options, its table, and a
tiny run of the local backend whose numbers mean what the table says (float32 halves the encoded
bytes, its log-likelihood within 1e-5 of float64's)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def bench(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(ROOT / "jobs"))  # it imports jobs/benchmark.py, as a script does
    spec = importlib.util.spec_from_file_location(
        "benchmark_precision", ROOT / "jobs" / "benchmark_precision.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_backends_are_parsed_in_a_fixed_order_and_a_bad_name_is_named(bench: Any) -> None:
    assert bench.parse_backends("connect, LOCAL") == ["local", "connect"]
    with pytest.raises(ValueError, match="expected names among local, spark, connect, got 'local,mpi'"):
        bench.parse_backends("local,mpi")
    with pytest.raises(ValueError, match="got ''"):
        bench.parse_backends("")


def test_too_few_iterations_are_refused(bench: Any, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--iterations", "1"])
    assert "--iterations: the steps after the first are timed, so >= 2; got 1" in capsys.readouterr().err


def test_a_tiny_local_run_halves_the_bytes_and_keeps_the_log_likelihood(
    bench: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    result = bench.run_one("local", rows=3000, dim=4, k=3, its=3, seed=0, rounds=1)
    assert set(result["seconds"]) == {"float64", "float32"} and len(result["rounds"]["float32"]) == 1
    stored = result["bytes_per_row"]
    # 8 bytes per value at float64, 4 at float32 (the pickle's framing aside)
    assert stored["float64"]["encoded"] == pytest.approx(32, abs=0.5)
    assert stored["float32"]["encoded"] == pytest.approx(16, abs=0.5)
    ll = result["ll"]
    assert ll["float32"] != ll["float64"] and ll["float32"] == pytest.approx(ll["float64"], rel=1e-5)
    ok = bench.report([result], 3000, 4, 3, 3, 1)
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[:4] == ["backend", "f64", "s/it", "f32"]
    row = table[2].split()
    assert row[0] == "local" and float(row[7]) == pytest.approx(stored["float64"]["encoded"], abs=0.05)
    assert table[-1].endswith("met" if ok else "MISSED")
