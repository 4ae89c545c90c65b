"""Free-parameter counts and information criteria of fitted models."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mixle_spark.estimation import optimize
from mixle_spark.stats import (
    BinomialDistribution,
    CategoricalDistribution,
    CompositeDistribution,
    DiagonalGaussianDistribution,
    GammaDistribution,
    GaussianDistribution,
    GaussianEstimator,
    HiddenMarkovDistribution,
    IgnoredDistribution,
    IntegerCategoricalDistribution,
    MarkovChainDistribution,
    MixtureDistribution,
    MixtureEstimator,
    MultinomialDistribution,
    MultivariateGaussianDistribution,
    OptionalDistribution,
    PoissonDistribution,
    RecordDistribution,
    RecordEstimator,
    SequenceDistribution,
    StudentTDistribution,
    StudentTEstimator,
)
from mixle_spark.stats.base import Distribution
from mixle_spark.summary import count_free_parameters, information_criteria


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (GaussianDistribution(0.0, 1.0), 2),
        (GammaDistribution(2.0, 1.0), 2),
        (PoissonDistribution(3.0), 1),
        (BinomialDistribution(0.3, 10), 1),  # n is given
        (CategoricalDistribution({"a": 0.2, "b": 0.3, "c": 0.5}), 2),  # sums to one
        (IntegerCategoricalDistribution(5, [0.1, 0.2, 0.7]), 2),  # min_val is the support
        (DiagonalGaussianDistribution([0.0, 1.0, 2.0], [1.0, 1.0, 1.0]), 6),
        (MultivariateGaussianDistribution([0.0, 1.0, 2.0], [[1, 0, 0], [0, 1, 0], [0, 0, 1]]), 3 + 6),
        (OptionalDistribution(PoissonDistribution(2.0), 0.1), 2),
        (SequenceDistribution(CategoricalDistribution({"x": 0.5, "y": 0.5}), PoissonDistribution(2.0)), 2),
        (CompositeDistribution((GaussianDistribution(0.0, 1.0), IgnoredDistribution())), 2),
        (
            RecordDistribution({"a": GaussianDistribution(0.0, 1.0), "b": PoissonDistribution(1.0)}),
            3,
        ),
        (
            MixtureDistribution(
                [
                    GaussianDistribution(0.0, 1.0),
                    GaussianDistribution(5.0, 2.0),
                    GaussianDistribution(9.0, 1.0),
                ],
                [0.2, 0.3, 0.5],
            ),
            3 * 2 + 2,
        ),
        # token probabilities sum to one, plus the length model
        (MultinomialDistribution({"a": 0.2, "b": 0.3, "c": 0.5}, len_dist=PoissonDistribution(4.0)), 2 + 1),
        (
            MarkovChainDistribution(
                {"a": 0.5, "b": 0.3, "c": 0.2},
                {"a": {"a": 0.5, "b": 0.5}, "b": {"c": 1.0}, "c": {"a": 0.1, "b": 0.1, "c": 0.8}},
                len_dist=PoissonDistribution(4.0),
            ),
            2 + 3 * 2 + 1,  # initial, transition rows, length
        ),
        (
            HiddenMarkovDistribution(
                [
                    GaussianDistribution(0.0, 1.0),
                    GaussianDistribution(3.0, 1.0),
                    GaussianDistribution(6.0, 1.0),
                ],
                [0.2, 0.3, 0.5],
                [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]],
                len_dist=PoissonDistribution(5.0),
            ),
            2 + 3 * 2 + 3 * 2 + 1,  # initial, transition rows, emissions, length
        ),
    ],
)
def test_count_free_parameters(model: Distribution, expected: int) -> None:
    assert count_free_parameters(model) == expected


def test_information_criteria() -> None:
    got = information_criteria(-1234.5, 7, 1000)
    assert got["bic"] == pytest.approx(7 * math.log(1000) + 2469.0)
    assert got["aic"] == pytest.approx(14 + 2469.0)
    with pytest.raises(ValueError, match="n_rows must be positive, got 0"):
        information_criteria(-1.0, 1, 0)


# -- counted as the estimator fits the model: fixed parameters and tied sites -------------------


def _t_mixture() -> MixtureDistribution:
    return MixtureDistribution(
        [StudentTDistribution(-3.0, 1.0, 4.0), StudentTDistribution(3.0, 1.5, 4.0)], [0.4, 0.6]
    )


def test_a_fixed_student_t_dof_is_not_counted_and_the_fit_carries_its_count() -> None:
    x = np.asarray(_t_mixture().sampler(3).sample(2000))
    fixed = MixtureEstimator([StudentTEstimator(dof=4.0)] * 2)
    free = MixtureEstimator([StudentTEstimator()] * 2)
    assert count_free_parameters(_t_mixture(), fixed) == 2 * 2 + 1  # mu, sigma per component; a weight
    assert count_free_parameters(_t_mixture(), free) == count_free_parameters(_t_mixture()) == 2 * 3 + 1

    model = optimize(x, fixed, max_its=5, delta=None, prev_estimate=_t_mixture())
    assert model.fit_result.free_parameters == 5
    assert count_free_parameters(model) == 5  # the fitted model answers with its fit's count
    ll = float(model.seq_log_density(model.encoder().encode(list(x))).sum())
    assert model.bic(x) == pytest.approx(5 * math.log(len(x)) - 2 * ll, rel=1e-12)
    refit = optimize(x, free, max_its=5, delta=None, prev_estimate=_t_mixture())
    assert refit.fit_result.free_parameters == count_free_parameters(refit) == 7


def test_sites_tied_by_keys_count_once() -> None:
    gaussians = MixtureDistribution(
        [GaussianDistribution(0.0, 1.0), GaussianDistribution(5.0, 1.0), GaussianDistribution(9.0, 1.0)],
        [0.2, 0.3, 0.5],
    )
    shared = MixtureEstimator([GaussianEstimator(keys="g")] * 3)  # one Gaussian for every component
    assert count_free_parameters(gaussians, shared) == 2 + 2
    own = MixtureEstimator([GaussianEstimator()] * 3)
    assert count_free_parameters(gaussians, own) == 2 + 3 * 2

    # two mixtures tying their weights and their components: the second adds nothing
    record = RecordDistribution({"a": gaussians, "b": gaussians})
    tied = MixtureEstimator([GaussianEstimator()] * 3, keys=("w", "c"))
    assert count_free_parameters(record, RecordEstimator({"a": tied, "b": tied})) == 2 + 3 * 2
    weights_only = MixtureEstimator([GaussianEstimator()] * 3, keys=("w", None))
    assert (
        count_free_parameters(record, RecordEstimator({"a": weights_only, "b": weights_only}))
        == 2 + 2 * 3 * 2
    )
