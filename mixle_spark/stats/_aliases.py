"""Names of earlier releases, in one place for code that still imports them; ``mixle_spark.stats``
re-exports them as before.

* ``...AccumulatorFactory``: a family's accumulator is its own factory (``Accumulator.make`` gives a
  fresh one; see :mod:`mixle_spark.stats.base`), so each name is that accumulator class, with the same
  constructor arguments. New code names the accumulator.
* ``...Sampler``: sampling is a method of the distribution (``draw``, or ``draw_with`` for a
  combinator), and one :class:`~mixle_spark.stats.base.Sampler` holds a distribution of any family
  with its generator, so each name is that generic class: ``XSampler(dist, seed)`` is
  ``Sampler(dist, seed)``, which is what ``dist.sampler(seed)`` returns. New code calls
  ``dist.sampler(seed)``.
"""

from mixle_spark.stats.base import Sampler
from mixle_spark.stats.bernoulli import BernoulliAccumulator as BernoulliAccumulatorFactory
from mixle_spark.stats.beta import BetaAccumulator as BetaAccumulatorFactory
from mixle_spark.stats.binomial import BinomialAccumulator as BinomialAccumulatorFactory
from mixle_spark.stats.categorical import CategoricalAccumulator as CategoricalAccumulatorFactory
from mixle_spark.stats.composite import CompositeAccumulator as CompositeAccumulatorFactory
from mixle_spark.stats.diagonal_gaussian import (
    DiagonalGaussianAccumulator as DiagonalGaussianAccumulatorFactory,
)
from mixle_spark.stats.exponential import ExponentialAccumulator as ExponentialAccumulatorFactory
from mixle_spark.stats.gamma import GammaAccumulator as GammaAccumulatorFactory
from mixle_spark.stats.gaussian import GaussianAccumulator as GaussianAccumulatorFactory
from mixle_spark.stats.geometric import GeometricAccumulator as GeometricAccumulatorFactory
from mixle_spark.stats.hidden_markov import HiddenMarkovAccumulator as HiddenMarkovAccumulatorFactory
from mixle_spark.stats.ignored import IgnoredAccumulator as IgnoredAccumulatorFactory
from mixle_spark.stats.integer_categorical import (
    IntegerCategoricalAccumulator as IntegerCategoricalAccumulatorFactory,
)
from mixle_spark.stats.log_gaussian import LogGaussianAccumulator as LogGaussianAccumulatorFactory
from mixle_spark.stats.markov_chain import MarkovChainAccumulator as MarkovChainAccumulatorFactory
from mixle_spark.stats.mixture import MixtureAccumulator as MixtureAccumulatorFactory
from mixle_spark.stats.multinomial import MultinomialAccumulator as MultinomialAccumulatorFactory
from mixle_spark.stats.multivariate_gaussian import (
    MultivariateGaussianAccumulator as MultivariateGaussianAccumulatorFactory,
)
from mixle_spark.stats.negative_binomial import (
    NegativeBinomialAccumulator as NegativeBinomialAccumulatorFactory,
)
from mixle_spark.stats.optional import OptionalAccumulator as OptionalAccumulatorFactory
from mixle_spark.stats.poisson import PoissonAccumulator as PoissonAccumulatorFactory
from mixle_spark.stats.record import RecordAccumulator as RecordAccumulatorFactory
from mixle_spark.stats.sequence import SequenceAccumulator as SequenceAccumulatorFactory
from mixle_spark.stats.student_t import StudentTAccumulator as StudentTAccumulatorFactory
from mixle_spark.stats.von_mises import VonMisesAccumulator as VonMisesAccumulatorFactory

# Each ...Sampler name is the generic Sampler itself (an alias, not a subclass): XSampler(dist, seed)
# draws exactly what dist.sampler(seed) draws.
BernoulliSampler = Sampler
BetaSampler = Sampler
BinomialSampler = Sampler
CategoricalSampler = Sampler
CompositeSampler = Sampler
DiagonalGaussianSampler = Sampler
ExponentialSampler = Sampler
GammaSampler = Sampler
GaussianSampler = Sampler
GeometricSampler = Sampler
HiddenMarkovSampler = Sampler
IgnoredSampler = Sampler
IntegerCategoricalSampler = Sampler
LogGaussianSampler = Sampler
MarkovChainSampler = Sampler
MixtureSampler = Sampler
MultinomialSampler = Sampler
MultivariateGaussianSampler = Sampler
NegativeBinomialSampler = Sampler
OptionalSampler = Sampler
PoissonSampler = Sampler
RecordSampler = Sampler
SequenceSampler = Sampler
StudentTSampler = Sampler
VonMisesSampler = Sampler

__all__ = [
    "BernoulliAccumulatorFactory",
    "BernoulliSampler",
    "BetaAccumulatorFactory",
    "BetaSampler",
    "BinomialAccumulatorFactory",
    "BinomialSampler",
    "CategoricalAccumulatorFactory",
    "CategoricalSampler",
    "CompositeAccumulatorFactory",
    "CompositeSampler",
    "DiagonalGaussianAccumulatorFactory",
    "DiagonalGaussianSampler",
    "ExponentialAccumulatorFactory",
    "ExponentialSampler",
    "GammaAccumulatorFactory",
    "GammaSampler",
    "GaussianAccumulatorFactory",
    "GaussianSampler",
    "GeometricAccumulatorFactory",
    "GeometricSampler",
    "HiddenMarkovAccumulatorFactory",
    "HiddenMarkovSampler",
    "IgnoredAccumulatorFactory",
    "IgnoredSampler",
    "IntegerCategoricalAccumulatorFactory",
    "IntegerCategoricalSampler",
    "LogGaussianAccumulatorFactory",
    "LogGaussianSampler",
    "MarkovChainAccumulatorFactory",
    "MarkovChainSampler",
    "MixtureAccumulatorFactory",
    "MixtureSampler",
    "MultinomialAccumulatorFactory",
    "MultinomialSampler",
    "MultivariateGaussianAccumulatorFactory",
    "MultivariateGaussianSampler",
    "NegativeBinomialAccumulatorFactory",
    "NegativeBinomialSampler",
    "OptionalAccumulatorFactory",
    "OptionalSampler",
    "PoissonAccumulatorFactory",
    "PoissonSampler",
    "RecordAccumulatorFactory",
    "RecordSampler",
    "SequenceAccumulatorFactory",
    "SequenceSampler",
    "StudentTAccumulatorFactory",
    "StudentTSampler",
    "VonMisesAccumulatorFactory",
    "VonMisesSampler",
]
