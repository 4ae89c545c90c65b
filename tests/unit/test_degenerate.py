"""A component that degenerates mid-fit is caught at the iteration that produced it and handled by
the ``on_degenerate`` policy (stop / floor / reseed), never passed on as NaN."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle_spark.em.resilient import CheckpointStore
from mixle_spark.errors import DegenerateComponentError, NonFiniteLikelihoodError
from mixle_spark.estimation import FLOOR_WEIGHT, MAX_RESEEDS, optimize
from mixle_spark.stats import (
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
    RecordEstimator,
)


class FragileGaussianEstimator(GaussianEstimator):
    """A Gaussian whose M-step breaks (as an overflowing statistic would) from its ``fail_from``-th call."""

    def __init__(self, fail_from: int) -> None:
        super().__init__()
        self.fail_from = fail_from
        self.calls = 0

    def with_scan(self, scan):  # type: ignore[no-untyped-def]
        return self  # one object counts every call (a bound copy would count its own)

    def estimate(self, nobs, value):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls >= self.fail_from:
            raise ValueError(
                f"GaussianDistribution: sigma2 must be a positive finite number, got inf (call {self.calls})"
            )
        return super().estimate(nobs, value)


START = MixtureDistribution([GaussianDistribution(-2.0, 1.0), GaussianDistribution(2.0, 1.0)], [0.5, 0.5])


def _data() -> list[float]:
    truth = MixtureDistribution([GaussianDistribution(-3.0, 1.0), GaussianDistribution(3.0, 1.0)], [0.4, 0.6])
    return list(np.asarray(truth.sampler(3).sample(2000)))


def _fit(policy: str, tmp_path: Path | None = None, **kw):  # type: ignore[no-untyped-def]
    est = MixtureEstimator([GaussianEstimator(), FragileGaussianEstimator(fail_from=3)])
    return optimize(_data(), est, max_its=6, delta=None, prev_estimate=START, on_degenerate=policy, **kw)


def test_stop_names_the_iteration_and_component_and_keeps_the_last_good_model(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    before = optimize(
        _data(), MixtureEstimator([GaussianEstimator()] * 2), max_its=2, delta=None, prev_estimate=START
    )
    with pytest.raises(
        DegenerateComponentError,
        match=r"iteration 2: the M-step could not build component 1 \(ValueError: GaussianDistribution: "
        r"sigma2 must be a positive finite number, got inf \(call 3\)\); stopped \(on_degenerate='stop'\)",
    ) as info:
        _fit("stop", checkpoint_dir=ckpt)
    err = info.value
    assert isinstance(err, NonFiniteLikelihoodError)
    assert err.iteration == 2 and [j for j, _ in err.failures] == [1]
    assert err.last_model.to_dict() == before.to_dict()  # the model iteration 2 started from
    assert [it for it, _ in CheckpointStore(ckpt).list()] == [2, 1]  # nothing after the failure


def test_floor_keeps_the_previous_parameters_and_a_floor_weight() -> None:
    model = _fit("floor")
    prev = optimize(
        _data(), MixtureEstimator([GaussianEstimator()] * 2), max_its=2, delta=None, prev_estimate=START
    )
    trace = model.fit_result.trace
    floored = [t for t in trace if any("floored component 1" in e for e in t.events)]
    assert [t.iteration for t in floored] == [2, 3, 4, 5]  # the component breaks at every M-step from 2 on
    assert model.components[1].to_dict() == prev.components[1].to_dict()  # kept from iteration 2's start
    assert model.w[1] >= FLOOR_WEIGHT / (1 + FLOOR_WEIGHT)
    assert np.isfinite(model.fit_result.log_likelihood)


def test_reseed_revives_a_dead_component_and_recovers_both_clusters() -> None:
    start = MixtureDistribution(
        [GaussianDistribution(0.0, 4.0), GaussianDistribution(1000.0, 1e-4)], [0.5, 0.5]
    )
    est = MixtureEstimator([GaussianEstimator()] * 2)
    stuck = optimize(_data(), est, max_its=30, delta=None, prev_estimate=start)
    assert stuck.w[1] == 0.0
    assert "component(s) [1] have weight 0 (no rows)" in stuck.fit_result.trace[0].events
    fixed = optimize(_data(), est, max_its=30, delta=None, prev_estimate=start, on_degenerate="reseed")
    mus = sorted(c.mu for c in fixed.components)
    assert mus == pytest.approx([-3.0, 3.0], abs=0.15)
    assert sorted(fixed.w) == pytest.approx([0.4, 0.6], abs=0.03)
    floored = optimize(_data(), est, max_its=3, delta=None, prev_estimate=start, on_degenerate="floor")
    assert floored.w[1] == pytest.approx(FLOOR_WEIGHT / (1 + FLOOR_WEIGHT), rel=1e-9)


def test_a_nested_mixture_cannot_be_floored_so_the_fit_stops() -> None:
    est = RecordEstimator(
        {"x": MixtureEstimator([GaussianEstimator(), FragileGaussianEstimator(fail_from=2)])}
    )
    rows = [{"x": v} for v in _data()]
    with pytest.raises(
        DegenerateComponentError, match=r"the mixture is nested, so on_degenerate='floor' cannot"
    ):
        optimize(rows, est, max_its=4, delta=None, on_degenerate="floor")


class FlakyGaussianEstimator(FragileGaussianEstimator):
    """Breaks at every odd call from ``fail_from`` on: each reseed (an even call) succeeds, and the
    next M-step of the reseeded component breaks again."""

    def with_scan(self, scan):  # type: ignore[no-untyped-def]
        return self  # one object counts every call (a bound copy would count its own)

    def estimate(self, nobs, value):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls >= self.fail_from and self.calls % 2 == 1:
            raise ValueError(
                f"GaussianDistribution: sigma2 must be a positive finite number, got inf (call {self.calls})"
            )
        return GaussianEstimator.estimate(self, nobs, value)


def test_reseed_stops_a_component_that_keeps_degenerating() -> None:
    est = MixtureEstimator([GaussianEstimator(), FlakyGaussianEstimator(fail_from=3)])
    with pytest.raises(
        DegenerateComponentError,
        match=rf"^iteration 5: component 1 degenerated again after {MAX_RESEEDS} reseeds; stopped: the data "
        r"may not support this many components",
    ) as info:
        optimize(_data(), est, max_its=10, delta=None, prev_estimate=START, on_degenerate="reseed")
    assert info.value.iteration == 5 and info.value.last_model is not None


def test_a_reseed_that_cannot_build_the_component_stops_with_the_reason() -> None:
    with pytest.raises(
        DegenerateComponentError,
        match=r"^iteration 2: reseeding component 1 failed: the fresh start could not build component 1 "
        r"\(ValueError: GaussianDistribution: sigma2 must be a positive finite number, got inf \(call 4\)\); "
        r"stopped$",
    ):
        _fit("reseed")


def test_reseed_counts_survive_a_resume(tmp_path: Path) -> None:
    """Reseed counts are checkpointed: a resumed fit goes on counting from the checkpoint's."""

    def run(max_its: int) -> Any:
        est = MixtureEstimator([GaussianEstimator(), FlakyGaussianEstimator(fail_from=3)])
        return optimize(
            _data(),
            est,
            max_its=max_its,
            delta=None,
            prev_estimate=START,
            on_degenerate="reseed",
            checkpoint_dir=tmp_path / "ckpt",
        )

    run(4)  # iterations 2 and 3 reseed component 1: two restarts, checkpointed at iteration 4
    # The resumed run's fresh estimator breaks again at its 3rd call (iteration 6: the third restart)
    # and 5th (iteration 7: a fourth, over MAX_RESEEDS). Counting from zero it would stop at 9.
    with pytest.raises(DegenerateComponentError, match=r"^iteration 7: component 1 degenerated again"):
        run(10)
