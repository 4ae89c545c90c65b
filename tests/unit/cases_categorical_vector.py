import numpy as np
import pyarrow as pa

from mixle_spark.stats.categorical import CategoricalDistribution, CategoricalEstimator
from mixle_spark.stats.diagonal_gaussian import DiagonalGaussianDistribution, DiagonalGaussianEstimator
from mixle_spark.stats.dirichlet import DirichletDistribution, DirichletEstimator
from mixle_spark.stats.dirichlet_multinomial import (
    DirichletMultinomialDistribution,
    DirichletMultinomialEstimator,
)
from mixle_spark.stats.integer_categorical import IntegerCategoricalDistribution, IntegerCategoricalEstimator
from mixle_spark.stats.multivariate_gaussian import (
    MultivariateGaussianDistribution,
    MultivariateGaussianEstimator,
)
from mixle_spark.stats.poisson import PoissonDistribution, PoissonEstimator
from tests.unit._cases import FamilyCase

_COV = np.array([[2.0, 0.6, -0.3], [0.6, 1.0, 0.2], [-0.3, 0.2, 0.5]])


def _fixed_size(records):
    return pa.array([list(map(float, r)) for r in records], type=pa.list_(pa.float64(), len(records[0])))


CASES = [
    FamilyCase(
        "categorical", CategoricalDistribution({"a": 0.5, "b": 0.3, "c": 0.2}), CategoricalEstimator()
    ),
    FamilyCase(
        "categorical-int-prior",
        CategoricalDistribution({1: 0.1, 2: 0.6, 5: 0.3}),
        CategoricalEstimator(pseudo_count=1.0, suff_stat={1: 0.2, 2: 0.4, 5: 0.4}),
    ),
    FamilyCase(
        "integer-categorical",
        IntegerCategoricalDistribution(-2, [0.1, 0.2, 0.3, 0.4]),
        IntegerCategoricalEstimator(),
    ),
    FamilyCase(
        "integer-categorical-prior",
        IntegerCategoricalDistribution(3, [0.5, 0.25, 0.25]),
        IntegerCategoricalEstimator(pseudo_count=2.0),
    ),
    FamilyCase(
        "diagonal-gaussian",
        DiagonalGaussianDistribution([1.0, -2.0, 1e4], [0.5, 2.0, 1.0]),
        DiagonalGaussianEstimator(),
    ),
    FamilyCase(
        "multivariate-gaussian",
        MultivariateGaussianDistribution([0.5, -1.0, 3.0], _COV),
        MultivariateGaussianEstimator(),
    ),
    FamilyCase(
        "multivariate-gaussian-fixed-size",
        MultivariateGaussianDistribution([1e3, 0.0, -5.0], _COV),
        MultivariateGaussianEstimator(pseudo_count=1.0, suff_stat=([1e3, 0.0, -5.0], np.eye(3))),
        to_arrow=_fixed_size,
        recovery_tol=0.03,
    ),
    FamilyCase("dirichlet", DirichletDistribution([2.0, 5.0, 0.7, 1.3]), DirichletEstimator()),
    FamilyCase(
        "dirichlet-prior",
        DirichletDistribution([30.0, 0.5, 4.0]),
        DirichletEstimator(pseudo_count=2.0, suff_stat=[20.0, 1.0, 5.0]),
        to_arrow=_fixed_size,
    ),
    FamilyCase(
        "dirichlet-multinomial",
        DirichletMultinomialDistribution([2.0, 0.5, 4.0], PoissonDistribution(20.0)),
        DirichletMultinomialEstimator(len_estimator=PoissonEstimator()),
        em_its=200,
    ),
    FamilyCase(
        "dirichlet-multinomial-prior",
        DirichletMultinomialDistribution([30.0, 0.8, 5.0, 1.0], PoissonDistribution(6.0)),
        DirichletMultinomialEstimator(
            pseudo_count=2.0, suff_stat=[20.0, 1.0, 5.0, 1.0], len_estimator=PoissonEstimator()
        ),
        to_arrow=_fixed_size,
        em_its=200,
    ),
]
