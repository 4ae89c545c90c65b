"""The contracts every family implements, and the family registry (all importable from here).

Every piece lives in a private module and is re-exported here (this module defines nothing, so no
piece imports it): :class:`Distribution` and :class:`Estimator` with their JSON round trip
(``_family``), the encoder contract (``_encoder``), the accumulator contract (``_accumulator``), the
parameter and option declarations (``_parameters``), the registry and spec readers (``_registry``)
and the generic :class:`Sampler` (``_sampler``).

Five roles:

* :class:`Distribution` scores records: ``log_density(x)`` for one record and the vectorized
  ``seq_log_density(enc)`` over an encoded batch.
* :class:`Encoder` turns a batch of records (Python objects, or Arrow columns) into the encoded form
  ``seq_*`` methods read. Encoders that need a vocabulary or a range learn it with a *scan*
  (``scan`` / ``scan_arrow`` / ``merge_scans``), whose result :meth:`Estimator.with_scan` folds into
  the estimator, so the accumulator statistics have a fixed shape known before any E-step.
* :class:`Accumulator` collects weighted sufficient statistics; its ``value()`` is plain data
  (floats, numpy arrays, tuples / lists / dicts of them) and ``combine`` is associative and
  commutative, so any split of the data merged in any order gives the same statistics.
* :class:`AccumulatorFactory` makes fresh, zeroed accumulators (what is shipped to workers).
* :class:`Estimator` describes what to fit and runs the closed-form M-step ``estimate(nobs, value)``.

A distribution also draws records: a leaf family implements ``draw(rng, size)``, a combinator
``draw_with(sampler, size)`` through the samplers of its ``sampling_parts()``; ``dist.sampler(seed)``
is the one :class:`Sampler` class holding the seeded generators.

Optional mixture fast path (exponential families whose log-density is linear in fixed features).
A Distribution may provide

* ``feature_key() -> hashable``: components whose keys are equal share one feature map;
* ``seq_features(enc) -> array of shape (n, m)``: the features of a batch (the family may cache them
  on its encoded object, and may centre them, e.g. at the batch mean, to avoid cancellation);
* ``feature_coefficients(enc) -> array of shape (m,)`` with
  ``seq_log_density(enc) == seq_features(enc) @ feature_coefficients(enc)`` up to rounding;

and its Accumulator ``add_feature_sums(sums, enc, estimate)`` with ``sums = Σ_i w_i φ(x_i)``, shape (m,).
:class:`~mixle_spark.stats.mixture.MixtureAccumulator` then scores all components with one matrix
product and accumulates all their statistics with another, instead of a Python loop over components.

Randomness at initialization comes from :class:`~mixle_spark.stats._random.RowRandom`, keyed by
stable row ids, so one seed gives the same initial model on every backend and partitioning.
"""

from mixle_spark.stats._accumulator import Accumulator, AccumulatorFactory, seq_update_with_ll
from mixle_spark.stats._encoder import Encoder
from mixle_spark.stats._family import (
    Distribution,
    Estimator,
    check_estimators,
    estimator_option,
    estimators_option,
    free_parameters,
    part,
    parts,
)
from mixle_spark.stats._parameters import Parameter, check_parameter, check_pseudo_count, option
from mixle_spark.stats._random import RowRandom
from mixle_spark.stats._registry import (
    check_spec_keys,
    distribution_from_dict,
    estimator_from_dict,
    register_distribution,
    register_estimator,
    registered_distributions,
    registered_estimators,
)
from mixle_spark.stats._sampler import Sampler

__all__ = [
    "Accumulator",
    "AccumulatorFactory",
    "Distribution",
    "Encoder",
    "Estimator",
    "Parameter",
    "RowRandom",
    "Sampler",
    "check_estimators",
    "check_parameter",
    "check_pseudo_count",
    "check_spec_keys",
    "distribution_from_dict",
    "estimator_from_dict",
    "estimator_option",
    "estimators_option",
    "free_parameters",
    "option",
    "part",
    "parts",
    "register_distribution",
    "register_estimator",
    "registered_distributions",
    "registered_estimators",
    "seq_update_with_ll",
]
