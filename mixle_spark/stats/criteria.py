"""What a model counts of itself for model selection: its free parameters and the information
criteria (BIC / AIC) they give with a log-likelihood. :mod:`mixle_spark.summary` re-exports both."""

from __future__ import annotations

import math

from mixle_spark.stats.base import Distribution, Estimator

__all__ = ["count_free_parameters", "information_criteria"]


def count_free_parameters(model: Distribution, estimator: Estimator | None = None) -> int:
    """The number of free parameters of ``model`` (what BIC and AIC count), asked of the model.

    Each family counts its own (:meth:`~mixle_spark.stats.base.Distribution.n_free_parameters`):
    probability vectors (categorical, integer-categorical, multinomial, mixture weights, a hidden
    Markov model's or Markov chain's initial and transition rows) sum to one, a full covariance is
    symmetric (``d (d + 1) / 2``), a binomial's ``n`` and an integer-categorical's ``min_val`` are
    given; combinators add their parts, an optional's missing-value probability counting as one.
    With the ``estimator`` that fitted it, parameters the estimator holds fixed (a Student-t's
    ``dof``) do not count and sites tied by ``keys`` count once
    (:meth:`~mixle_spark.stats.base.Estimator.n_free_parameters`); a model returned by a fit carries
    that count (``model.fit_result.free_parameters``), which is used when no estimator is given.

    >>> from mixle_spark.stats import CategoricalDistribution, GaussianDistribution, MixtureDistribution
    >>> count_free_parameters(GaussianDistribution(0.0, 1.0))
    2
    >>> count_free_parameters(MixtureDistribution(
    ...     [CategoricalDistribution({"a": 0.5, "b": 0.5}), CategoricalDistribution({"a": 0.1, "b": 0.9})],
    ...     [0.3, 0.7]))
    3
    """
    if estimator is not None:
        return estimator.n_free_parameters(model)
    counted = getattr(model.fit_result, "free_parameters", None)
    return model.n_free_parameters() if counted is None else int(counted)


def information_criteria(log_likelihood: float, n_parameters: int, n_rows: float) -> dict[str, float]:
    """``{"bic": k ln(n) - 2 ll, "aic": 2 k - 2 ll}`` (lower is better).

    >>> {k: round(v, 3) for k, v in information_criteria(-100.0, 2, 50).items()}
    {'bic': 207.824, 'aic': 204.0}
    """
    if n_rows <= 0:
        raise ValueError(f"n_rows must be positive, got {n_rows}")
    return {
        "bic": n_parameters * math.log(n_rows) - 2.0 * log_likelihood,
        "aic": 2.0 * n_parameters - 2.0 * log_likelihood,
    }
