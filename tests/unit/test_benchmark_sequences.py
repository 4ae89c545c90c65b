"""jobs/benchmark_sequences.py: its data generator and its per-sequence numpy baseline are right.

The benchmark's ratio is only meaningful if the baseline computes what mixle computes: the loop's
Baum-Welch statistics must equal the local backend's, and the generated sequences must follow the
model they claim to.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location(
        "benchmark_sequences", ROOT / "jobs" / "benchmark_sequences.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_numpy_baseline_matches_the_batched_e_step() -> None:
    bench = _bench()
    seqs = bench.make_sequences(300, 12.0, seed=3)
    model = bench.start_model()
    from mixle_spark.stats import GaussianEstimator, HiddenMarkovEstimator

    est = HiddenMarkovEstimator([GaussianEstimator() for _ in range(bench.K)])
    reference = bench.numpy_forward_backward(seqs, model)
    assert bench.check_baseline(reference, seqs, est, model) < 1e-11
    # every sequence contributes one unit of initial weight, every element one of state weight
    assert np.isclose(reference["initial"].sum(), 300.0, rtol=1e-12)
    assert np.isclose(reference["weight"].sum(), len(seqs.values), rtol=1e-12)
    assert np.isclose(reference["transitions"].sum(), len(seqs.values) - 300, rtol=1e-12)


def test_generated_sequences_follow_the_model() -> None:
    bench = _bench()
    seqs = bench.make_sequences(40_000, 20.0, seed=5)
    lengths = np.diff(seqs.offsets.to_numpy())
    assert lengths.min() >= 1
    assert abs(lengths.mean() - 20.0) < 0.1
    # the stationary mean of the emissions: pi_inf @ MU, with pi_inf from the transition matrix
    values = seqs.values.to_numpy()
    first = values[seqs.offsets.to_numpy()[:-1]]
    assert abs(first.mean() - bench.PI @ bench.MU) < 0.05
    second_state_mix = bench.PI @ bench.A
    second = values[seqs.offsets.to_numpy()[:-1] + 1][lengths > 1]
    assert abs(second.mean() - second_state_mix @ bench.MU) < 0.05
