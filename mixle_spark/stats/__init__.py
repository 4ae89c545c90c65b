"""Model families: each module holds one family's Distribution (which also draws samples, through
the one generic :class:`~mixle_spark.stats.base.Sampler`), Estimator, Accumulator (its own factory, or
a factory class) and Encoder, and lists them in its ``__all__``; importing this package registers them
all and re-exports every family's names (``__all__`` is what the star imports bring, with the base
contracts and the ``...AccumulatorFactory`` and ``...Sampler`` names of earlier releases, kept in
:mod:`mixle_spark.stats._aliases`)."""

from inspect import ismodule as _ismodule

from mixle_spark.stats._aliases import *  # noqa: F403
from mixle_spark.stats.base import (
    Accumulator as Accumulator,
)
from mixle_spark.stats.base import (
    AccumulatorFactory as AccumulatorFactory,
)
from mixle_spark.stats.base import (
    Distribution as Distribution,
)
from mixle_spark.stats.base import (
    Encoder as Encoder,
)
from mixle_spark.stats.base import (
    Estimator as Estimator,
)
from mixle_spark.stats.base import (
    RowRandom as RowRandom,
)
from mixle_spark.stats.base import (
    Sampler as Sampler,
)
from mixle_spark.stats.base import (
    distribution_from_dict as distribution_from_dict,
)
from mixle_spark.stats.base import (
    estimator_from_dict as estimator_from_dict,
)
from mixle_spark.stats.base import (
    registered_distributions as registered_distributions,
)
from mixle_spark.stats.base import (
    registered_estimators as registered_estimators,
)
from mixle_spark.stats.bernoulli import *  # noqa: F403
from mixle_spark.stats.beta import *  # noqa: F403
from mixle_spark.stats.beta_binomial import *  # noqa: F403
from mixle_spark.stats.binomial import *  # noqa: F403
from mixle_spark.stats.categorical import *  # noqa: F403
from mixle_spark.stats.censored import *  # noqa: F403
from mixle_spark.stats.composite import *  # noqa: F403
from mixle_spark.stats.diagonal_gaussian import *  # noqa: F403
from mixle_spark.stats.dirichlet import *  # noqa: F403
from mixle_spark.stats.dirichlet_multinomial import *  # noqa: F403
from mixle_spark.stats.ex_gaussian import *  # noqa: F403
from mixle_spark.stats.exponential import *  # noqa: F403
from mixle_spark.stats.gamma import *  # noqa: F403
from mixle_spark.stats.gaussian import *  # noqa: F403
from mixle_spark.stats.generalized_extreme_value import *  # noqa: F403
from mixle_spark.stats.generalized_pareto import *  # noqa: F403
from mixle_spark.stats.geometric import *  # noqa: F403
from mixle_spark.stats.gumbel import *  # noqa: F403
from mixle_spark.stats.half_normal import *  # noqa: F403
from mixle_spark.stats.hidden_markov import *  # noqa: F403
from mixle_spark.stats.hurdle import *  # noqa: F403
from mixle_spark.stats.ignored import *  # noqa: F403
from mixle_spark.stats.integer_categorical import *  # noqa: F403
from mixle_spark.stats.inverse_gamma import *  # noqa: F403
from mixle_spark.stats.inverse_gaussian import *  # noqa: F403
from mixle_spark.stats.laplace import *  # noqa: F403
from mixle_spark.stats.log_gaussian import *  # noqa: F403
from mixle_spark.stats.log_series import *  # noqa: F403
from mixle_spark.stats.logistic import *  # noqa: F403
from mixle_spark.stats.markov_chain import *  # noqa: F403
from mixle_spark.stats.mixture import *  # noqa: F403
from mixle_spark.stats.multinomial import *  # noqa: F403
from mixle_spark.stats.multivariate_gaussian import *  # noqa: F403
from mixle_spark.stats.multivariate_student_t import *  # noqa: F403
from mixle_spark.stats.nakagami import *  # noqa: F403
from mixle_spark.stats.negative_binomial import *  # noqa: F403
from mixle_spark.stats.optional import *  # noqa: F403
from mixle_spark.stats.pareto import *  # noqa: F403
from mixle_spark.stats.point_mass import *  # noqa: F403
from mixle_spark.stats.poisson import *  # noqa: F403
from mixle_spark.stats.rayleigh import *  # noqa: F403
from mixle_spark.stats.record import *  # noqa: F403
from mixle_spark.stats.sequence import *  # noqa: F403
from mixle_spark.stats.skellam import *  # noqa: F403
from mixle_spark.stats.skew_normal import *  # noqa: F403
from mixle_spark.stats.student_t import *  # noqa: F403
from mixle_spark.stats.truncated import *  # noqa: F403
from mixle_spark.stats.uniform import *  # noqa: F403
from mixle_spark.stats.von_mises import *  # noqa: F403
from mixle_spark.stats.von_mises_fisher import *  # noqa: F403
from mixle_spark.stats.weibull import *  # noqa: F403
from mixle_spark.stats.zero_inflated import *  # noqa: F403

__all__ = sorted(name for name, value in globals().items() if not (name.startswith("_") or _ismodule(value)))
