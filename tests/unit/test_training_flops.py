"""training_health's FLOP and MFU accounting against hand-computed values (issue 55); numpy only."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from mixle_spark.parallel.training.training_health import (
    MFUSample,
    ModelFlopConfig,
    TrainingHealthMonitor,
    flop_config_from_causal_lm,
    measure_peak_flops,
    theoretical_flops_per_iter,
)


def test_flops_per_step_follow_6n_plus_attention() -> None:
    # per token: 6 * 10_000 + 12 * 4 layers * 4 heads * 16 head_dim * 128 = 60_000 + 393_216 = 453_216
    shape = dict(n_params=10_000, n_layer=4, n_head=4, d_model=64, seq_len=128)
    assert theoretical_flops_per_iter(**shape, batch_size=8) == 453_216 * 128 * 8 == 464_093_184
    assert ModelFlopConfig(**shape).flops_per_iter(8) == 464_093_184
    assert ModelFlopConfig(n_params=1_000).flops_per_iter(32) == 6 * 1_000 * 32  # no attention, one token
    with pytest.raises(ValueError, match="d_model=10 must be a multiple of n_head=4"):
        ModelFlopConfig(n_params=1, n_layer=1, n_head=4, d_model=10)
    with pytest.raises(ValueError, match=r"batch_size must be an exact integer >= 1, got 2\.0"):
        theoretical_flops_per_iter(**shape, batch_size=2.0)  # type: ignore[arg-type]


class _Param:
    def __init__(self, *shape: int) -> None:
        self.shape = shape

    def numel(self) -> int:
        return int(np.prod(self.shape))


class _CausalLM:
    """Shaped as a causal LM: token embedding 50 x 16, position embedding 32 x 16, two layers."""

    n_layer, n_head, d_model = 2, 4, 16

    def __init__(self) -> None:
        self.pos = type("Embedding", (), {"weight": _Param(32, 16)})()

    def parameters(self) -> list[_Param]:
        return [
            _Param(50, 16),
            self.pos.weight,
            _Param(16, 48),
            _Param(16, 16),
            _Param(16, 48),
            _Param(16, 16),
        ]


def test_the_flop_config_of_a_causal_lm_leaves_out_its_position_embedding() -> None:
    config = flop_config_from_causal_lm(_CausalLM(), seq_len=32)
    assert config == ModelFlopConfig(
        n_params=800 + 2 * (768 + 256), n_layer=2, n_head=4, d_model=16, seq_len=32
    )


def test_mfu_is_achieved_over_peak_flops() -> None:
    sample = MFUSample(step=3, step_flops=2e12, step_time_s=0.5, peak_flops_per_sec=1e13)
    assert (sample.achieved_flops_per_sec, sample.mfu) == (4e12, 0.4)
    with pytest.raises(ValueError, match=r"step_time_s must be a finite positive number, got 0\.0"):
        MFUSample(step=3, step_flops=2e12, step_time_s=0.0, peak_flops_per_sec=1e13)

    monitor = TrainingHealthMonitor(flop_config=ModelFlopConfig(n_params=1_000), peak_flops_per_sec=1e9)
    first = monitor.observe_step(0, loss=1.0, examples=32, seconds=0.001)  # 192_000 FLOPs in 1 ms
    assert first.flops_per_second == pytest.approx(1.92e8) and first.mfu == pytest.approx(0.192)
    monitor.observe_step(1, loss=1.0, examples=64, seconds=0.004)  # 384_000 FLOPs in 4 ms: MFU 0.096
    monitor.observe_step(2, loss=1.0)  # no timing: no sample
    report = monitor.report()["mfu"]
    assert report["n_samples"] == 2 and report["peak_flops_per_sec"] == 1e9
    assert (report["mean"], report["min"], report["max"]) == pytest.approx((0.144, 0.096, 0.192))
    assert monitor.report()["median_flops_per_second"] == pytest.approx((1.92e8 + 0.96e8) / 2)
    assert [s.step for s in monitor.mfu_samples] == [0, 1]
    assert TrainingHealthMonitor().report()["mfu"]["mean"] is None


def test_a_measured_peak_is_the_throughput_of_a_matrix_product() -> None:
    peak = measure_peak_flops(size=128, repeats=2)
    a = np.ones((128, 128), dtype=np.float32)
    start = time.perf_counter()
    for _ in range(5):
        a @ a
    one = (time.perf_counter() - start) / 5
    assert 1e6 < peak < 1e15 and peak >= 0.2 * 2 * 128**3 / one  # near the rate of the same product
    monitor = TrainingHealthMonitor(flop_config=ModelFlopConfig(n_params=10), peak_flops_per_sec="measure")
    assert monitor.peak_flops_per_sec is not None and monitor.peak_flops_per_sec > 1e6


def test_flop_accounting_refuses_what_it_cannot_use() -> None:
    with pytest.raises(ValueError, match="peak_flops_per_sec needs flop_config"):
        TrainingHealthMonitor(peak_flops_per_sec=1e12)
    with pytest.raises(
        ValueError, match="peak_flops_per_sec must be a positive number or 'measure', got string 'max'"
    ):
        TrainingHealthMonitor(flop_config=ModelFlopConfig(n_params=1), peak_flops_per_sec="max")
    with pytest.raises(ValueError, match=r"peak_flops_per_sec must be a finite positive number, got -1\.0"):
        TrainingHealthMonitor(flop_config=ModelFlopConfig(n_params=1), peak_flops_per_sec=-1.0)
    with pytest.raises(TypeError, match="flop_config must be a ModelFlopConfig or None, got 5"):
        TrainingHealthMonitor(flop_config=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"seconds must be a finite positive number, got -0\.5"):
        TrainingHealthMonitor().observe_step(0, loss=1.0, examples=4, seconds=-0.5)
    with pytest.raises(ValueError, match="model has no attribute 'n_head': pass n_head="):
        flop_config_from_causal_lm(_NoShape(), seq_len=4, n_layer=1)
    with pytest.raises(TypeError, match="model must have parameters"):
        flop_config_from_causal_lm(object(), seq_len=4)
    with pytest.raises(ValueError, match="dtype must be 'float32' or 'float64', got string 'bf16'"):
        measure_peak_flops(dtype="bf16")


class _NoShape:
    def parameters(self) -> list[Any]:
        return [_Param(3, 3)]
