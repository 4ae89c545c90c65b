"""Free-parameter counts and information criteria of fitted models."""

from __future__ import annotations

import math

import pytest

from mixle_spark.stats import (
    BinomialDistribution,
    CategoricalDistribution,
    CompositeDistribution,
    DiagonalGaussianDistribution,
    GammaDistribution,
    GaussianDistribution,
    HiddenMarkovDistribution,
    IgnoredDistribution,
    IntegerCategoricalDistribution,
    MarkovChainDistribution,
    MixtureDistribution,
    MultinomialDistribution,
    MultivariateGaussianDistribution,
    OptionalDistribution,
    PoissonDistribution,
    RecordDistribution,
    SequenceDistribution,
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
