"""init="kmeans||" for a mixture of records whose field is itself a mixture: the seeding finds the
K x k flat clusters, groups them into the outer components by the other fields, and starts each
nested mixture from its own clusters (random responsibilities started its components equal, and EM
then let the outer components split along the nested field's modes)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.em._nested_seeding import nested_plan
from mixle_spark.em.seeding import SeedingFallbackWarning, seed_target
from mixle_spark.estimation import initialize, optimize
from mixle_spark.parallel import ModelParallelEstimator, encoded_data
from mixle_spark.stats import (
    CategoricalEstimator,
    GaussianEstimator,
    MixtureEstimator,
    PoissonEstimator,
    RecordEstimator,
)
from tests.unit._cases import model_numbers

RATES = {0.0: (0.0, 12.0), 6.0: (2.0, 15.0)}
"""Each segment's mean of ``y`` and its two Poisson rates of ``x``."""

EST = MixtureEstimator(
    [RecordEstimator({"y": GaussianEstimator(), "x": MixtureEstimator([PoissonEstimator()] * 2)})] * 2
)


def nested_table(seed: int, n: int = 6000, shift: float = 6.0) -> pa.Table:
    """Two equal segments: ``y`` ~ N(0, 1) with ``x`` 40% zeros / 60% Poisson(12), and ``y`` ~
    N(shift, 1) with ``x`` half Poisson(2), half Poisson(15)."""
    r = np.random.default_rng(seed)
    second = r.random(n) < 0.5
    y = np.where(second, r.normal(shift, 1.0, n), r.normal(0.0, 1.0, n))
    first_x = np.where(r.random(n) < 0.6, r.poisson(12.0, n), 0)
    second_x = np.where(r.random(n) < 0.5, r.poisson(15.0, n), r.poisson(2.0, n))
    return pa.table({"y": y, "x": np.where(second, second_x, first_x).astype(np.int64)})


def _segments(model: Any) -> list[tuple[float, list[float], float]]:
    """(mean of y, sorted rates of x, weight) of each component, by the mean of y."""
    out = []
    for component, weight in zip(model.components, model.w, strict=True):
        rates = sorted(float(d.lam) for d in component.fields["x"].components)
        out.append((float(component.fields["y"].mu), rates, float(weight)))
    return sorted(out)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_poisson_mixture_nested_in_each_component_recovers_its_rates(seed: int) -> None:
    model = optimize(nested_table(seed, shift=3.0), EST, seed=seed, max_its=200)
    (mu0, rates0, w0), (mu1, rates1, _w1) = _segments(model)
    assert abs(mu0) < 0.1 and abs(mu1 - 3.0) < 0.1 and abs(w0 - 0.5) < 0.03
    assert rates0[0] < 0.05 and rates0[1] == pytest.approx(12.0, rel=0.05)
    assert rates1 == pytest.approx([2.0, 15.0], rel=0.05)


def test_the_initial_model_already_splits_the_outer_and_the_nested_mixtures() -> None:
    (mu0, rates0, w0), (mu1, rates1, _w1) = _segments(initialize(nested_table(3), EST, seed=3))
    assert abs(mu0) < 0.3 and abs(mu1 - 6.0) < 0.3 and abs(w0 - 0.5) < 0.05
    assert rates0[0] < 1.0 and rates0[1] > 8.0  # not two halves of the segment (both near 7)
    assert rates1[0] < 4.0 and rates1[1] > 10.0


def test_the_nested_start_is_the_same_for_any_chunks_threading_and_backend() -> None:
    table = nested_table(4, n=3000)
    whole = model_numbers(initialize(table, EST, seed=9))
    for options in ({"num_chunks": 5}, {"backend": "mp", "num_workers": 2}):
        got = model_numbers(initialize(table, EST, seed=9, **options))
        np.testing.assert_allclose(got, whole, rtol=1e-9, atol=1e-12, err_msg=str(options))
    threaded = model_numbers(initialize(table, ModelParallelEstimator(EST, 2), seed=9))
    np.testing.assert_allclose(threaded, whole, rtol=1e-9, atol=1e-12)
    assert not np.allclose(model_numbers(initialize(table, EST, seed=10)), whole)


def test_which_field_is_seeded_with_its_outer_mixture() -> None:
    est = MixtureEstimator(
        [
            RecordEstimator(
                {
                    "c": CategoricalEstimator(),
                    "x": MixtureEstimator([PoissonEstimator()] * 3),
                    "y": MixtureEstimator([GaussianEstimator()] * 2),
                }
            )
        ]
        * 2
    )
    table = pa.table({"c": ["a", "b", "c"] * 20, "x": list(range(60)), "y": np.linspace(0, 1, 60)})
    with encoded_data(table, estimator=est) as handle:  # bound to the data, as the seeding reads it
        bound = handle.bind(est)
        plan = nested_plan(bound, seed_target(bound))
    assert plan is not None and (plan.name, plan.k, plan.field) == ("x", 3, 1)
    assert plan.columns == (3, 4)  # after the three one-hot columns of "c"; a count is one column
    # components that disagree on the nested size: no plan (random responsibilities, as before)
    uneven = MixtureEstimator(
        [
            RecordEstimator({"x": MixtureEstimator([PoissonEstimator()] * k), "y": GaussianEstimator()})
            for k in (2, 3)
        ]
    )
    assert nested_plan(uneven, seed_target(uneven)) is None
    assert nested_plan(EST.estimators[0], seed_target(EST)) is None  # not a mixture


def test_too_few_distinct_points_for_the_flat_clusters_seeds_the_outer_ones_alone() -> None:
    # four distinct rows: enough for 2 outer centres, not for 2 x 3 flat ones
    table = pa.table({"y": [0.0, 0.0, 5.0, 5.0] * 50, "x": [0, 9, 1, 20] * 50})
    est = MixtureEstimator(
        [RecordEstimator({"y": GaussianEstimator(), "x": MixtureEstimator([PoissonEstimator()] * 3)})] * 2
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeedingFallbackWarning)
        (mu0, _r0, w0), (mu1, _r1, _w1) = _segments(initialize(table, est, seed=1))
    assert (mu0, mu1, w0) == pytest.approx((0.0, 5.0, 0.5), abs=1e-4)
