"""Model families: each module holds one family's Distribution, Estimator, Accumulator(+Factory),
Encoder and Sampler."""

from mixle_spark.stats.base import (
    Accumulator,
    AccumulatorFactory,
    Distribution,
    Encoder,
    Estimator,
    RowRandom,
    Sampler,
    distribution_from_dict,
    estimator_from_dict,
    registered_distributions,
    registered_estimators,
)
from mixle_spark.stats.gaussian import (
    GaussianAccumulator,
    GaussianAccumulatorFactory,
    GaussianDistribution,
    GaussianEncoder,
    GaussianEstimator,
    GaussianSampler,
)

__all__ = [
    "Accumulator",
    "AccumulatorFactory",
    "Distribution",
    "Encoder",
    "Estimator",
    "GaussianAccumulator",
    "GaussianAccumulatorFactory",
    "GaussianDistribution",
    "GaussianEncoder",
    "GaussianEstimator",
    "GaussianSampler",
    "RowRandom",
    "Sampler",
    "distribution_from_dict",
    "estimator_from_dict",
    "registered_distributions",
    "registered_estimators",
]
