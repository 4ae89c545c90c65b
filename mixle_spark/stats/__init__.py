"""Model families: each module holds one family's Distribution, Estimator, Accumulator (its own
factory, or a factory class), Encoder and Sampler, and lists them in its ``__all__``; importing this
package registers them all and re-exports every family's names."""

from mixle_spark.stats import (
    bernoulli,
    beta,
    binomial,
    categorical,
    composite,
    diagonal_gaussian,
    exponential,
    gamma,
    gaussian,
    geometric,
    hidden_markov,
    ignored,
    integer_categorical,
    log_gaussian,
    markov_chain,
    mixture,
    multinomial,
    multivariate_gaussian,
    negative_binomial,
    optional,
    poisson,
    record,
    sequence,
    student_t,
    von_mises,
)
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
from mixle_spark.stats.bernoulli import *  # noqa: F403
from mixle_spark.stats.beta import *  # noqa: F403
from mixle_spark.stats.binomial import *  # noqa: F403
from mixle_spark.stats.categorical import *  # noqa: F403
from mixle_spark.stats.composite import *  # noqa: F403
from mixle_spark.stats.diagonal_gaussian import *  # noqa: F403
from mixle_spark.stats.exponential import *  # noqa: F403
from mixle_spark.stats.gamma import *  # noqa: F403
from mixle_spark.stats.gaussian import *  # noqa: F403
from mixle_spark.stats.geometric import *  # noqa: F403
from mixle_spark.stats.hidden_markov import *  # noqa: F403
from mixle_spark.stats.ignored import *  # noqa: F403
from mixle_spark.stats.integer_categorical import *  # noqa: F403
from mixle_spark.stats.log_gaussian import *  # noqa: F403
from mixle_spark.stats.markov_chain import *  # noqa: F403
from mixle_spark.stats.mixture import *  # noqa: F403
from mixle_spark.stats.multinomial import *  # noqa: F403
from mixle_spark.stats.multivariate_gaussian import *  # noqa: F403
from mixle_spark.stats.negative_binomial import *  # noqa: F403
from mixle_spark.stats.optional import *  # noqa: F403
from mixle_spark.stats.poisson import *  # noqa: F403
from mixle_spark.stats.record import *  # noqa: F403
from mixle_spark.stats.sequence import *  # noqa: F403
from mixle_spark.stats.student_t import *  # noqa: F403
from mixle_spark.stats.von_mises import *  # noqa: F403

__all__ = [
    "Accumulator",
    "AccumulatorFactory",
    "Distribution",
    "Encoder",
    "Estimator",
    "RowRandom",
    "Sampler",
    "distribution_from_dict",
    "estimator_from_dict",
    "registered_distributions",
    "registered_estimators",
]
for _family in (
    bernoulli,
    beta,
    binomial,
    categorical,
    composite,
    diagonal_gaussian,
    exponential,
    gamma,
    gaussian,
    geometric,
    hidden_markov,
    ignored,
    integer_categorical,
    log_gaussian,
    markov_chain,
    mixture,
    multinomial,
    multivariate_gaussian,
    negative_binomial,
    optional,
    poisson,
    record,
    sequence,
    student_t,
    von_mises,
):
    __all__ += _family.__all__
