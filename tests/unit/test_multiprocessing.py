"""The ``mp`` backend: worker processes holding encoded shards give the local backend's estimates."""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import DataTypeError, SpecError
from mixle_spark.estimation import initialize, optimize
from mixle_spark.parallel import (
    LocalEncodedData,
    ModelParallelEstimator,
    MPEncodedData,
    Resources,
    UnsupportedControlError,
    encoded_data,
)
from mixle_spark.parallel.backends.multiprocessing import WorkerError
from mixle_spark.stats import (
    CategoricalEstimator,
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
    MultivariateGaussianDistribution,
    MultivariateGaussianEstimator,
    RecordEstimator,
)

RNG = np.random.default_rng(11)
MVN = MixtureDistribution(
    [MultivariateGaussianDistribution(RNG.normal(0, 3, 3), np.eye(3) * (1 + j)) for j in range(3)],
    [0.2, 0.3, 0.5],
)
MVN_EST = MixtureEstimator([MultivariateGaussianEstimator(dim=3)] * 3)
X = np.asarray(MVN.sampler(3).sample(6000))


def _children() -> set[int]:
    return {p.pid for p in multiprocessing.active_children() if p.pid is not None}


def _close(a: Any, b: Any, rtol: float = 1e-12) -> None:
    x, y = np.array(_numbers(a.to_dict())), np.array(_numbers(b.to_dict()))
    np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * np.abs(y).max())


def _numbers(v: Any) -> list[float]:
    if isinstance(v, dict):
        return [x for k in sorted(v) for x in _numbers(v[k])]
    if isinstance(v, (list, tuple)):
        return [x for item in v for x in _numbers(item)]
    return [float(v)] if isinstance(v, (int, float)) and not isinstance(v, bool) else []


@pytest.fixture(scope="module")
def handle() -> Any:
    with MPEncodedData(X, MVN_EST, num_workers=2, num_chunks=2) as h:
        yield h


def test_em_step_scoring_and_initialization_equal_local(handle: Any) -> None:
    local = LocalEncodedData(X, estimator=MVN_EST)
    assert len(handle) == 6000 and handle.shards == [(0, 3000), (3000, 6000)]
    n, ll, got = handle.pysp_em_step(MVN_EST, MVN)
    want_n, want_ll, want = local.pysp_em_step(MVN_EST, MVN)
    assert n == want_n
    assert ll == pytest.approx(want_ll, rel=1e-12)
    _close(got, want)
    assert handle.pysp_seq_log_density_sum(MVN)[1] == pytest.approx(local.pysp_seq_log_density_sum(MVN)[1])
    _close(initialize(handle, MVN_EST, seed=4), initialize(local, MVN_EST, seed=4))


def test_an_error_in_an_e_step_is_raised_and_the_workers_stay_usable(handle: Any) -> None:
    wrong = MixtureDistribution([GaussianDistribution(0.0, 1.0)] * 2, [0.5, 0.5])
    with pytest.raises(SpecError, match="the estimate has 2 components, the accumulator 3"):
        handle.pysp_em_step(MVN_EST, wrong)
    assert handle.pysp_em_step(MVN_EST, MVN)[0] == 6000.0


def test_optimize_through_the_registry_equals_local() -> None:
    before = _children()
    est = MixtureEstimator([GaussianEstimator()] * 2)
    x = np.concatenate([RNG.normal(-2, 1, 700), RNG.normal(3, 0.5, 500)])
    want = optimize(x, est, max_its=6, delta=None, seed=5, print_iter=0)
    got = optimize(
        x, est, max_its=6, delta=None, seed=5, print_iter=0, backend="MULTIPROCESSING", num_workers=3
    )
    _close(got, want, rtol=1e-10)
    threaded = ModelParallelEstimator(est, num_workers=2)
    _close(optimize(x, threaded, max_its=6, delta=None, seed=5, print_iter=0, backend="mp"), want, rtol=1e-10)
    assert _children() <= before  # optimize closed the handles it built


def test_records_with_vocabularies_and_weights_equal_local() -> None:
    table = pa.table(
        {"x": RNG.normal(size=400), "c": RNG.choice(["a", "b", "c"], 400), "w": RNG.uniform(0.5, 2, 400)}
    )
    est = MixtureEstimator([RecordEstimator({"x": GaussianEstimator(), "c": CategoricalEstimator()})] * 2)
    local = LocalEncodedData(table, estimator=est, weights="w")
    start = initialize(local, est, seed=9)
    with encoded_data(table, est, backend="mp", resources=Resources.local(3), weights="w") as h:
        assert h.num_workers == 3
        _close(initialize(h, est, seed=9), start)
        _close(h.pysp_em_step(est, start)[2], local.pysp_em_step(est, start)[2])


def test_a_bad_value_is_reported_at_its_global_row_and_no_worker_is_left() -> None:
    rows: list[Any] = list(RNG.normal(size=50))
    rows[41] = "oops"
    before = _children()
    with pytest.raises(DataTypeError, match=r"got string 'oops' \(row 42 of 50\)"):
        MPEncodedData(rows, GaussianEstimator(), num_workers=2)
    assert _children() <= before


def test_a_dead_worker_closes_the_handle() -> None:
    before = _children()
    h = MPEncodedData(X[:100], MVN_EST, num_workers=2)
    os.kill(h._procs[1].pid, signal.SIGKILL)
    with pytest.raises(WorkerError, match="mp worker 1 died"):
        h.pysp_em_step(MVN_EST, MVN)
    assert _children() <= before
    with pytest.raises(ValueError, match="closed"):
        h.pysp_em_step(MVN_EST, MVN)
    h.close()  # idempotent


def test_controls_the_mp_backend_cannot_honour_are_refused() -> None:
    with pytest.raises(UnsupportedControlError, match=r"'mp' backend cannot honour comm='w'"):
        encoded_data(X, MVN_EST, backend="mp", comm="w")
    with pytest.raises(ValueError, match="num_workers must be None or an integer >= 1, got 0"):
        MPEncodedData(X, MVN_EST, num_workers=0)
