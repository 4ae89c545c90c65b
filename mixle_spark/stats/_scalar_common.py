"""Pieces shared by the scalar leaf families (exponential, poisson, bernoulli, binomial, geometric, ...).

* :class:`ScalarEncoder` - reads Python scalars or a numeric Arrow column into float64, runs the
  family's support check (errors name the value and row), then packs the encoded form.
* :class:`SumAccumulator` - the statistics ``(sw, sx) = (Σw, Σw x)`` that every family here with a
  one-parameter exponential-family likelihood in ``x`` needs; merging is addition.
* :class:`FeatureSumAccumulator` - ``(Σw, Σw f_1(x), ..., Σw f_m(x))`` over the feature arrays an
  encoder packs (gamma: x, log x; beta: log x, log(1 - x); von Mises: cos x, sin x).
* :func:`prior`, :func:`prior_tuple`, :func:`floor`, :func:`bound` - the estimator options these
  families declare (see :func:`~mixle_spark.stats.base.option`).
* :class:`OneParameterEstimator` - options, floor, estimate and spec of those families' estimators.
* :class:`ScalarFamily` - a distribution declared by its :class:`Parameter` s: validation (the
  message names the value), ``to_dict`` / ``from_dict``, ``encoder``, ``draw`` and ``estimator``
  follow from the declaration and the family's numpy generator call (``variates``); a family may
  also give its ``moments`` (mean, variance), ``log_cdf``, ``log_survival`` and ``quantile``
  (:func:`describes` tells which it has).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from mixle_spark.errors import SchemaError
from mixle_spark.stats._embed import scales
from mixle_spark.stats._encoder import narrow_floats
from mixle_spark.stats._special import log_factorial
from mixle_spark.stats._validate import arrow_float_values, check_integer, check_range, float_values
from mixle_spark.stats.base import (
    Accumulator,
    Distribution,
    Encoder,
    Estimator,
    Parameter,
    check_parameter,
    option,
    registered_estimators,
)

__all__ = [
    "EXACT_FLOAT32_INTEGER",
    "FLOAT32_OFFSET_RATIO",
    "CountEncoder",
    "FeatureSumAccumulator",
    "OneParameterEstimator",
    "ScalarEncoder",
    "ScalarFamily",
    "SumAccumulator",
    "bound",
    "check_bounds",
    "check_counts",
    "describes",
    "floor",
    "prior",
    "prior_tuple",
    "safe_log",
]

EXACT_FLOAT32_INTEGER = 2**24
"""Integers up to this magnitude are exact in float32; a count column with a larger one stays float64."""

FLOAT32_OFFSET_RATIO = 100.0
"""A float column whose mean is more than this many standard deviations from 0 stays float64 at
``precision="float32"``: float32 keeps ~7 significant digits of each value, so such a column would lose
more than ~1e-5 of its spread (1e6 + N(0, 1) would be rounded to steps of 0.06)."""

_LOG = logging.getLogger("mixle_spark.engines")
_OFFSET_NOTED: set[str] = set()

IMPOSSIBLE_LOG = -1e300
"""Stand-in for log(0) in fast-path coefficients: 0 * -inf would be NaN in a matrix product."""


def safe_log(p: float) -> float:
    """log(p), or :data:`IMPOSSIBLE_LOG` for p == 0 (used only by the mixture fast path)."""
    return math.log(p) if p > 0 else IMPOSSIBLE_LOG


def check_counts(x: np.ndarray, expected: str, low: float, high: float | None = None) -> None:
    """Raise DataValueError naming the first value of ``x`` that is not an integer in [low, high]."""
    check_range(x, expected, low=low, high=high)
    check_integer(x, expected)


def positive(name: str) -> Parameter:
    return Parameter(name, lambda v: math.isfinite(v) and v > 0, "a positive finite number")


def finite(name: str) -> Parameter:
    return Parameter(name, math.isfinite, "a finite number")


def _keeps_digits(value: Any, stored: Any) -> bool:
    """Whether ``stored`` (``value`` narrowed) keeps the value's digits relative to its spread: it is
    ``value`` itself (not a float64 array), exact (integers, 0 / 1), or within
    :data:`FLOAT32_OFFSET_RATIO` spreads of 0."""
    if stored is value or not len(value):
        return True
    if np.array_equal(stored, value):
        return True
    mean, spread = float(np.mean(value)), float(np.std(value))
    return abs(mean) <= FLOAT32_OFFSET_RATIO * spread


class ScalarFamily(Distribution):
    """A scalar leaf family declared by its :attr:`parameters` (constructor order), its
    :attr:`encoder_class`, its :attr:`record_type` and its numpy generator call (:meth:`variates`);
    its estimator is the one registered under its family name, with the current parameters as the
    prior (``suff_stat``) when given a pseudo-count.

    Subclasses call :meth:`_set_parameters` from their constructor (then derive what they cache) and
    keep their own ``log_density`` / ``seq_log_density``.
    """

    parameters: ClassVar[tuple[Parameter, ...]]
    encoder_class: ClassVar[type[Encoder]]
    record_type: ClassVar[type] = float
    """What one drawn record is (``int`` for counts); a batch is the numpy array :meth:`variates` gives."""

    def variates(self, rng: np.random.Generator, size: int | None) -> Any:
        """The family's numpy generator call: a number (``size`` None) or an array of ``size``."""
        raise NotImplementedError(f"{type(self).__name__} has no sampler")

    def draw(self, rng: np.random.Generator, size: int | None = None) -> Any:
        values = self.variates(rng, size)
        return self.record_type(values) if size is None else values

    def _set_parameters(self, *values: Any) -> None:
        fam = type(self).__name__
        for parameter, value in zip(self.parameters, values, strict=True):
            try:
                ok = parameter.ok is None or bool(parameter.ok(value))
            except (TypeError, ValueError):  # not a number at all
                ok = False
            check_parameter(ok, fam, parameter.name, value, parameter.expected)
            setattr(self, parameter.name, float(value))

    def _values(self) -> list[float]:
        return [getattr(self, p.name) for p in self.parameters]

    def estimator(self, pseudo_count: float | None = None) -> Estimator:
        estimator: Any = registered_estimators()[self.family]  # takes pseudo_count and suff_stat
        if pseudo_count is None:
            return estimator()
        values = self._values()
        return estimator(
            pseudo_count=pseudo_count, suff_stat=values[0] if len(values) == 1 else tuple(values)
        )

    def encoder(self) -> Encoder:
        return self.encoder_class()

    # What a family may say about itself beyond its density. Each is optional: a family defines the
    # ones it has in closed form (or to float precision); :func:`describes` tells which it has. The
    # segment profile (mean, sd, quartiles), the report's separation and projection, and the
    # truncated / censored / hurdle combinators read them. ``x`` and ``p`` are float64 arrays of raw
    # values (a count family's integers as floats); results have their shape.
    def moments(self) -> tuple[float, float]:
        """The mean and the variance, ``math.inf`` where one does not exist (a Pareto's mean at
        ``alpha <= 1``)."""
        raise NotImplementedError(f"{self.family} has no closed-form moments")

    def log_cdf(self, x: np.ndarray) -> np.ndarray:
        """``ln P(X <= x)`` elementwise (``-inf`` below the support, 0 above it)."""
        raise NotImplementedError(f"{self.family} has no cdf")

    def log_survival(self, x: np.ndarray) -> np.ndarray:
        """``ln P(X > x)`` elementwise, accurate where the cdf rounds to 1 (far in the upper tail)."""
        raise NotImplementedError(f"{self.family} has no survival function")

    def quantile(self, p: np.ndarray) -> np.ndarray:
        """The least ``x`` with ``P(X <= x) >= p`` elementwise, for ``p`` in [0, 1] (a count family's an
        integer; the support's ends at 0 and 1, which may be infinite)."""
        raise NotImplementedError(f"{self.family} has no quantile function")


_DESCRIPTIONS = ("moments", "log_cdf", "log_survival", "quantile")


def describes(dist: Any, *names: str) -> bool:
    """Whether ``dist`` (a distribution or its class) defines every one of ``names`` (of ``moments``,
    ``log_cdf``, ``log_survival``, ``quantile``) rather than inheriting :class:`ScalarFamily`'s refusal.

    >>> from mixle_spark.stats import ExponentialDistribution
    >>> describes(ExponentialDistribution(1.0), "moments", "quantile")
    True
    """
    unknown = set(names) - set(_DESCRIPTIONS)
    if unknown:
        raise ValueError(f"describes: unknown name(s) {sorted(unknown)}; expected some of {_DESCRIPTIONS}")
    cls = dist if isinstance(dist, type) else type(dist)
    if not issubclass(cls, ScalarFamily):
        return False
    return all(getattr(cls, name) is not getattr(ScalarFamily, name) for name in names)


class ScalarEncoder(Encoder):
    """Base of the scalar leaf encoders: float64 values, a support check, a packing step.

    Subclasses set ``estimator_name`` and ``expectation`` (message fragment) and override
    :meth:`validate` and, when the encoded form is more than the values, :meth:`pack`.
    """

    embedding: ClassVar[str] = "number"
    """How seeding embeds the values: ``number`` (standardized), ``count`` (``log1p``, standardized) or
    ``binary`` (0 / 1, kept as it is)."""

    def seed_values(self, enc: Any) -> np.ndarray:
        """The record values of an encoded batch, shape (n,) (the packed form's source)."""
        return np.asarray(enc, dtype=np.float64)

    def embedding_scales(self) -> np.ndarray:
        return scales(self.embedding != "binary", 1)

    def embed(self, enc: Any) -> np.ndarray:
        x = self.seed_values(enc)
        return (np.log1p(x) if self.embedding == "count" else x)[:, None]

    computes_float32: ClassVar[bool] = False
    """Whether the family's kernels compute on float32 values (its mixture features and log-densities
    within 1e-5 relative of float64): then :meth:`narrow` stores the batch in float32. Families whose
    kernels need float64 (special functions of the values, iterative fits on them) keep it."""

    location_family: ClassVar[bool] = False
    """Whether the density depends on differences of the values (``x - mu``: Gaussian, log-Gaussian),
    so that a column far from 0 relative to its spread (:data:`FLOAT32_OFFSET_RATIO`) stays float64."""

    def narrow(self, enc: Any, dtype: Any) -> Any:
        """The batch with its float arrays stored in ``dtype`` when the family computes in it
        (:attr:`computes_float32`). A count column (``embedding == "count"``) is narrowed only when every
        count is exact in float32 (at most :data:`EXACT_FLOAT32_INTEGER`), so no count, and no log-gamma of
        one computed later, changes."""
        if not self.computes_float32:
            return enc
        if self.embedding == "count":
            x = self.seed_values(enc)
            if len(x) and float(np.max(np.abs(x))) > EXACT_FLOAT32_INTEGER:
                return enc
        narrowed = narrow_floats(enc, dtype)
        if not self.location_family:
            return narrowed
        pairs = zip(enc, narrowed, strict=True) if type(enc) is tuple else [(enc, narrowed)]
        for value, stored in pairs:
            if not _keeps_digits(value, stored):
                self._note_offset(value)
                return enc
        return narrowed

    def _note_offset(self, x: np.ndarray) -> None:
        """Say once per family (log level WARNING) that a column stays float64 for its offset."""
        if self.estimator_name in _OFFSET_NOTED:
            return
        _OFFSET_NOTED.add(self.estimator_name)
        _LOG.warning(
            "%s: values around %.6g with spread %.3g lie more than %g spreads from 0; float32 would round "
            "them to %.1g of their spread, so this column stays float64 (subtract its mean before the fit "
            "to store it in float32)",
            self.estimator_name,
            float(np.mean(x)),
            float(np.std(x)),
            FLOAT32_OFFSET_RATIO,
            float(np.abs(np.mean(x)) * 2.0**-24 / max(float(np.std(x)), 1e-300)),
        )

    estimator_name: ClassVar[str] = ""
    expectation: ClassVar[str] = "a finite number"
    accepts_bool: ClassVar[bool] = False
    schema_expectation: ClassVar[str | None] = None
    """What a schema error says the column should be (default: :meth:`expected_arrow`)."""

    @property
    def expected(self) -> str:
        return f"expected {self.expectation} for {self.estimator_name}"

    def validate(self, x: np.ndarray) -> None:
        """Raise a DataValueError for the first value outside the support."""
        check_range(x, self.expected)

    def pack(self, x: np.ndarray) -> Any:
        """The encoded batch from validated float64 values (default: the values themselves)."""
        return x

    def encode(self, records: Sequence[Any]) -> Any:
        x = float_values(records, self.expected)
        self.validate(x)
        return self.pack(x)

    def from_arrow(self, data: Any) -> Any:
        x = arrow_float_values(data, self.expected)
        self.validate(x)
        return self.pack(x)

    def check_arrow_type(self, arrow_type: Any) -> None:
        import pyarrow as pa

        ok = (
            pa.types.is_integer(arrow_type)
            or pa.types.is_floating(arrow_type)
            or pa.types.is_decimal(arrow_type)
            or (self.accepts_bool and pa.types.is_boolean(arrow_type))
        )
        if not ok:
            expected = self.schema_expectation or self.expected_arrow()
            raise SchemaError(f"expected {expected} for {self.estimator_name}, got Arrow type {arrow_type}")

    def expected_arrow(self) -> str:
        kinds = "integer, floating or decimal" + (" or boolean" if self.accepts_bool else "")
        return f"a numeric column ({kinds})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class CountEncoder(ScalarEncoder):
    """Reads counts into ``(x, log x!)``, two float64 arrays of shape (n,) (Poisson, negative binomial)."""

    embedding = "count"
    expectation = "a non-negative integer count"

    def seed_values(self, enc: Any) -> np.ndarray:
        return np.asarray(enc[0], dtype=np.float64)

    def validate(self, x: np.ndarray) -> None:
        check_counts(x, self.expected, low=0.0)

    def pack(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x, log_factorial(x)


class SumAccumulator(Accumulator):
    """Sums ``sw = Σw`` and ``sx = Σw x``; value ``(sw, sx)``; its own factory.

    Subclasses say where ``x`` lives in their encoded batch (:meth:`values`) and which encoder
    matches (:attr:`encoder_class`).
    """

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.sw = 0.0
        self.sx = 0.0

    def values(self, enc: Any) -> np.ndarray:
        """The record values of an encoded batch, shape (n,)."""
        return enc

    def seq_update(self, enc: Any, weights: np.ndarray, estimate: Any) -> None:
        self.sw += float(weights.sum())
        self.sx += float(np.dot(weights, self.values(enc)))
        return None

    def add_feature_sums(self, sums: np.ndarray, enc: Any, estimate: Any) -> None:
        """Add ``sums = Σ w φ(x)`` from the mixture fast path; φ starts with ``[1, x]``."""
        self.sw += float(sums[0])
        self.sx += float(sums[1])

    def combine(self, value: Any) -> SumAccumulator:
        sw, sx = value
        self.sw += float(sw)
        self.sx += float(sx)
        return self

    def value(self) -> tuple[float, float]:
        return (self.sw, self.sx)

    def _scale(self, factor: float) -> None:
        self.sw *= factor
        self.sx *= factor

    def from_value(self, value: Any) -> SumAccumulator:
        self.sw, self.sx = (float(v) for v in value)
        return self


class FeatureSumAccumulator(Accumulator):
    """Sums ``Σw`` and ``Σw f`` for each of the :attr:`features` arrays ``f`` of an encoded batch (a
    tuple of float64 arrays of shape (n,)); value ``(Σw, Σw f_1, ..., Σw f_m)``, merged by addition.

    Subclasses set :attr:`features` and :attr:`encoder_class`; the mixture fast path adds its feature
    sums ``Σ w [1, f_1, ..., f_m]`` through :meth:`add_feature_sums`.
    """

    features: ClassVar[int] = 2

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.sums = [0.0] * (1 + self.features)

    def seq_update(self, enc: tuple[np.ndarray, ...], weights: np.ndarray, estimate: Any) -> None:
        self.sums[0] += float(weights.sum())
        for j, feature in enumerate(enc, start=1):
            self.sums[j] += float(np.dot(weights, feature))
        return None

    def add_feature_sums(self, sums: np.ndarray, enc: Any, estimate: Any) -> None:
        for j in range(len(self.sums)):
            self.sums[j] += float(sums[j])

    def combine(self, value: Any) -> FeatureSumAccumulator:
        for j, v in enumerate(value):
            self.sums[j] += float(v)
        return self

    def value(self) -> tuple[float, ...]:
        return tuple(self.sums)

    def _scale(self, factor: float) -> None:
        self.sums = [factor * s for s in self.sums]

    def from_value(self, value: Any) -> FeatureSumAccumulator:
        self.sums = [float(v) for v in value]
        return self


def prior(ok: Callable[[Any], bool] | None = None, expected: str = "a positive finite number") -> Any:
    """The ``suff_stat`` option of a one-parameter family: a scalar prior (default: positive)."""
    return option(None, ok or (lambda v: math.isfinite(v) and v > 0), expected, read=float)


def prior_tuple(ok: Callable[..., bool], expected: str) -> Any:
    """The ``suff_stat`` option of a family with a tuple prior: finite numbers passing ``ok``."""

    def tuple_ok(value: Any) -> bool:
        numbers = [float(v) for v in value]
        return all(math.isfinite(v) for v in numbers) and bool(ok(*numbers))

    return option(None, tuple_ok, expected, read=lambda value: tuple(float(v) for v in value))


def bound(default: float) -> Any:
    """One end of a bracket option pair (``min_k`` / ``max_k``); :func:`check_bounds` orders them."""
    return option(default, lambda v: v > 0, "positive", read=float)


def check_bounds(estimator: Any, low: str, high: str) -> None:
    """Raise SpecError unless ``0 < low < high < inf`` (naming both values)."""
    lo, hi = getattr(estimator, low), getattr(estimator, high)
    fam = type(estimator).__name__
    expected = f"positive with {low} < {high}"
    check_parameter(0 < lo < hi < math.inf, fam, f"({low}, {high})", (lo, hi), expected)


def floor(default: float, ok: Callable[[Any], bool] | None = None, expected: str = "positive") -> Any:
    """A family's floor option (``min_lam``, ``min_beta``, ``min_p``; default test: positive)."""
    return option(default, ok or (lambda v: v > 0), expected, read=float)


class OneParameterEstimator(Estimator):
    """Base of the estimators of one scalar parameter from ``(Σw, Σw x)`` with a scalar prior.

    Subclasses declare their options (``pseudo_count``, ``suff_stat`` = :func:`prior`, the floor
    named for the parameter (:attr:`floor_name`: ``min_lam``, ``min_beta``, ``min_p``) = :func:`floor`,
    ``name``, ``keys``) and define the point estimate; the floor, the factory, the encoder, the
    estimate and the spec round trip are shared.
    """

    distribution_class: ClassVar[Any]
    floor_name: ClassVar[str]
    prior_default: ClassVar[float]
    suff_stat: float | None

    @property
    def floor(self) -> float:
        return float(getattr(self, self.floor_name))

    def point_estimate(self, sw: float, sx: float, pc: float, prior: float) -> float:
        """The parameter from the sums and the prior (before the floor); NaN / inf -> the prior."""
        total = sw + pc
        return (sx + pc * prior) / total if total > 0 else prior

    def apply_floor(self, value: float) -> float:
        return max(value, self.floor)

    def estimate(self, nobs: float | None, value: Any) -> Distribution:
        sw, sx = value
        prior = self.prior_default if self.suff_stat is None else self.suff_stat
        point = self.point_estimate(sw, sx, self.pseudo_count or 0.0, prior)
        if not math.isfinite(point):
            point = prior
        return self.distribution_class(self.apply_floor(point))  # type: ignore[no-any-return]
