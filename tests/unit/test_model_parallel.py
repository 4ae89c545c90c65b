"""Model-parallel E-steps: threaded folds are bit-identical to the plain estimator's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import SpecError
from mixle_spark.estimation import optimize
from mixle_spark.parallel import (
    ComponentParallelEncodedData,
    ComponentParallelEstimator,
    LocalEncodedData,
    ModelParallelEncodedData,
    ModelParallelEstimator,
    Resources,
    UnrealizedModelPlacementError,
    auto_parallel_estimator,
    component_parallel_fold,
    encoded_data,
    model_parallel_fold,
)
from mixle_spark.stats import (
    CategoricalDistribution,
    CategoricalEstimator,
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
    MultivariateGaussianDistribution,
    MultivariateGaussianEstimator,
    RecordDistribution,
    RecordEstimator,
)
from mixle_spark.stats.base import estimator_from_dict

RNG = np.random.default_rng(5)


def _mvn_mixture(k: int, d: int) -> MixtureDistribution:
    comps = [MultivariateGaussianDistribution(RNG.normal(0, 3, d), np.eye(d) * (1 + j % 3)) for j in range(k)]
    return MixtureDistribution(comps, np.full(k, 1.0 / k))


def _exactly_equal(a: Any, b: Any) -> None:
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _exactly_equal(x, y)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _exactly_equal(a[key], b[key])
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


def _fold_both(est: Any, model: Any, enc: Any, w: np.ndarray, workers: int, **kw: Any) -> tuple[Any, Any]:
    serial = est.accumulator_factory().make()
    ll_serial = serial.seq_update(enc, w, model)
    threaded = est.accumulator_factory().make()
    ll_threaded = model_parallel_fold(threaded, model, enc, w, workers, **kw)
    np.testing.assert_array_equal(ll_threaded, ll_serial)
    _exactly_equal(threaded.value(), serial.value())
    return serial, threaded


def test_fused_mixture_blocks_threaded_are_bit_identical() -> None:
    model = _mvn_mixture(6, 4)
    x = model.sampler(1).sample(20_000)  # several blocks (see block_rows)
    est = MixtureEstimator([MultivariateGaussianEstimator(dim=4)] * 6)
    enc = est.encoder().encode(x)
    w = RNG.uniform(0.5, 2.0, len(x))
    for workers in (2, 3):
        _fold_both(est, model, enc, w, workers)


def test_heterogeneous_mixture_components_threaded_are_bit_identical() -> None:
    comps = [
        RecordDistribution(
            {
                "x": GaussianDistribution(float(j), 1.0),
                "c": CategoricalDistribution({"a": 0.2 + 0.1 * j, "b": 0.8 - 0.1 * j}),
            }
        )
        for j in range(4)
    ]
    model = MixtureDistribution(comps, [0.1, 0.2, 0.3, 0.4])
    records = model.sampler(2).sample(3000)
    est = MixtureEstimator([RecordEstimator({"x": GaussianEstimator(), "c": CategoricalEstimator()})] * 4)
    est = est.with_scan(est.encoder().scan(records))
    enc = est.encoder().encode(records)
    root = frozenset({id(model)})
    _fold_both(est, model, enc, np.ones(len(records)), 2, parallel_ids=root)
    # threading each component's record fields instead (nodes below the root)
    _fold_both(est, model, enc, np.ones(len(records)), 2, parallel_ids={id(c) for c in comps})


def test_record_fields_and_a_nested_mixture_threaded_are_bit_identical() -> None:
    inner = _mvn_mixture(5, 3)
    model = RecordDistribution({"v": inner, "g": GaussianDistribution(1.0, 2.0)})
    records = [
        {"v": v, "g": g} for v, g in zip(inner.sampler(3).sample(9000), RNG.normal(1, 1.4, 9000), strict=True)
    ]
    est = RecordEstimator(
        {"v": MixtureEstimator([MultivariateGaussianEstimator(dim=3)] * 5), "g": GaussianEstimator()}
    )
    enc = est.encoder().encode(records)
    w = np.ones(len(records))
    _fold_both(est, model, enc, w, 2, parallel_ids={id(model)})
    _fold_both(est, model, enc, w, 2, parallel_ids={id(inner)})
    _fold_both(est, model, enc, w, 2)  # the nodes of greatest benefit


def test_optimize_with_the_wrapper_equals_the_plain_estimator() -> None:
    model = _mvn_mixture(4, 3)
    x = model.sampler(4).sample(12_000)
    est = MixtureEstimator([MultivariateGaussianEstimator(dim=3)] * 4)
    plain = optimize(x, est, max_its=5, delta=None, seed=7, print_iter=0)
    wrapped = optimize(
        x, ModelParallelEstimator(est, num_workers=2), max_its=5, delta=None, seed=7, print_iter=0
    )
    assert wrapped.to_dict() == plain.to_dict()
    via_backend = optimize(
        x, est, max_its=5, delta=None, seed=7, print_iter=0, backend="model_parallel", num_workers=2
    )
    assert via_backend.to_dict() == plain.to_dict()
    via_local_control = optimize(x, est, max_its=5, delta=None, seed=7, print_iter=0, num_workers=2)
    assert via_local_control.to_dict() == plain.to_dict()


@pytest.mark.parametrize("alias", ["model_parallel", "COMPONENT_PARALLEL", "mp_model"])
def test_backend_aliases_build_model_parallel_handles(alias: str) -> None:
    handle = encoded_data(np.arange(10.0), GaussianEstimator(), backend=alias, num_workers=2)
    assert isinstance(handle, ModelParallelEncodedData)
    assert handle.execution_kind == "component_parallel_threads"
    assert isinstance(handle.bind(GaussianEstimator()), ModelParallelEstimator)
    assert ComponentParallelEncodedData is ModelParallelEncodedData
    assert ComponentParallelEstimator is ModelParallelEstimator
    assert component_parallel_fold is model_parallel_fold


def test_the_wrapper_keeps_the_inner_contract_and_round_trips() -> None:
    inner = MixtureEstimator([GaussianEstimator()] * 2)
    est = ModelParallelEstimator(inner, num_workers=3)
    assert est.encoder() == inner.encoder()
    assert est.min_rows() == inner.min_rows()
    assert estimator_from_dict(est.to_dict()) == est
    assert est.to_dict() == {"type": "model_parallel", "estimator": inner.to_dict(), "num_workers": 3}
    acc = est.accumulator_factory().make()
    assert acc.combine(inner.accumulator_factory().make().value()) is acc
    assert acc.from_value(acc.value()) is acc


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "2"])
def test_bad_num_workers_is_refused(bad: Any) -> None:
    with pytest.raises(SpecError, match=f"num_workers.*{bad!r}".replace("(", r"\(")):
        ModelParallelEstimator(GaussianEstimator(), num_workers=bad)


@pytest.mark.parametrize(
    "weights", [np.array([1.0, -1.0, 1.0]), np.array([1.0, np.nan, 1.0]), np.ones((3, 1))]
)
def test_fold_weights_must_be_finite_non_negative_and_flat(weights: np.ndarray) -> None:
    est = GaussianEstimator()
    enc = est.encoder().encode([0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="fold weights must be a finite, non-negative one-dimensional array"):
        model_parallel_fold(est.accumulator_factory().make(), GaussianDistribution(0, 1), enc, weights, 2)


def test_auto_parallel_estimator_returns_the_estimator_when_data_parallel_suffices() -> None:
    model = _mvn_mixture(5, 2)
    est = MixtureEstimator([MultivariateGaussianEstimator(dim=2)] * 5)
    chosen, decomposition = auto_parallel_estimator(est, model, Resources.local(4), n_data=100_000)
    assert chosen is est
    assert not decomposition.is_model_parallel
    chosen, _ = auto_parallel_estimator(est, model, Resources.local(1))
    assert chosen is est


def test_auto_parallel_estimator_refuses_a_placement_it_cannot_realise() -> None:
    model = _mvn_mixture(12, 2)
    est = MixtureEstimator([MultivariateGaussianEstimator(dim=2)] * 12)
    with pytest.raises(UnrealizedModelPlacementError, match="keeps the whole model") as info:
        auto_parallel_estimator(est, model, Resources.local(4), n_data=8)
    assert info.value.plan.is_model_parallel
    assert len(info.value.plan.cuts) > 1


def test_the_model_parallel_handle_reads_tables_like_local() -> None:
    table = pa.table({"x": RNG.normal(size=50), "c": RNG.choice(["a", "b"], 50)})
    est = RecordEstimator({"x": GaussianEstimator(), "c": CategoricalEstimator()})
    local = LocalEncodedData(table, estimator=est)
    want = local.pysp_em_step(est, local.pysp_seq_initialize(est, 3, 1.0))
    with ModelParallelEncodedData(table, estimator=est, num_workers=2) as handle:
        got = handle.pysp_em_step(est, handle.pysp_seq_initialize(est, 3, 1.0))
    assert got[:2] == want[:2]
    assert got[2].to_dict() == want[2].to_dict()
