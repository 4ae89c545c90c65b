"""The family contract's two classes, :class:`Distribution` (scores and draws records) and
:class:`Estimator` (declares its options, makes accumulators, runs the M-step), with their JSON round
trip and the option helpers families declare their parts with. :mod:`mixle_spark.stats.base` re-exports
them with the other pieces of the contract; families import them from there."""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats._accumulator import Accumulator, AccumulatorFactory
from mixle_spark.stats._encoder import Encoded, Encoder
from mixle_spark.stats._parameters import Parameter, check_parameter, check_pseudo_count, option
from mixle_spark.stats._registry import (
    check_spec_keys,
    distribution_from_dict,
    estimator_from_dict,
)
from mixle_spark.stats._sampler import Sampler

__all__ = [
    "Distribution",
    "Estimator",
    "check_estimators",
    "estimator_option",
    "estimators_option",
    "free_parameters",
    "part",
    "parts",
]


class Estimator(ABC):
    """What to fit: makes accumulators and turns their statistics into a distribution.

    Subclasses take ``pseudo_count`` (prior strength), ``keys`` (parameter tying) and
    ``name`` where meaningful, plus family-specific floors.

    A family *declares* its options: its estimator is a ``@dataclass(eq=False, repr=False)`` whose
    fields are the constructor's arguments in order, each a plain default or an :func:`option` (its
    check, its conversion, its JSON form). Validation with messages that name the value
    (``__post_init__``, then the cross-option :meth:`check`), ``to_dict`` (an option is written when
    it differs from its default) and ``from_dict`` (unknown keys refused) follow;
    ``dataclasses.replace`` rebuilds one with other options (``with_scan``).
    """

    family: ClassVar[str] = ""
    pseudo_count: float | None = None
    keys: Any = None
    name: str | None = None

    accumulator_class: ClassVar[type[Accumulator] | None] = None
    encoder_class: ClassVar[type[Encoder] | None] = None

    def accumulator_factory(self) -> AccumulatorFactory:
        """The factory of this estimator's accumulators (default: an :attr:`accumulator_class` with
        this estimator's ``keys``; every accumulator is its own factory)."""
        if self.accumulator_class is None:
            raise NotImplementedError(f"{type(self).__name__} declares no accumulator_class")
        return self.accumulator_class(self.keys)  # type: ignore[call-arg]

    def accumulator(self) -> Accumulator:
        """A fresh accumulator (a combinator's part; drivers use :meth:`accumulator_factory`)."""
        return self.accumulator_factory().make()

    @abstractmethod
    def estimate(self, nobs: float | None, value: Any) -> Distribution:
        """The M-step: a distribution from merged statistics ``value`` (``nobs`` = total weight)."""

    def encoder(self) -> Encoder:
        """The encoder for this estimator's data (complete once any needed scan is applied; default:
        an :attr:`encoder_class`)."""
        if self.encoder_class is None:
            raise NotImplementedError(f"{type(self).__name__} declares no encoder_class")
        return self.encoder_class()

    def with_scan(self, scan: Any) -> Estimator:
        """This estimator with the vocabularies / ranges of ``scan`` fixed (default: unchanged)."""
        return self

    def min_rows(self) -> int:
        """Fewest rows the estimator can be fitted to (a k-component mixture needs k)."""
        return 1

    def init_sample_size(self) -> tuple[int, int] | None:
        """(fewest, most) rows the random initial model should be built from, or None to use the
        driver's ``init_p`` as given (see :func:`mixle_spark.estimation.init_fraction`)."""
        return None

    def n_free_parameters(self, model: Distribution, tied: set[Any] | None = None) -> int:
        """How many free parameters ``model`` has as this estimator fits it: the model's count, less
        the parameters this estimator holds fixed, with every site tied by one ``keys`` counted once
        (``tied`` collects the keys counted so far; give one set to a whole walk)."""
        tied = set() if tied is None else tied
        if self.keys is not None:
            if self.keys in tied:
                return 0
            tied.add(self.keys)
        return self._free_parameters(model, tied)

    def _free_parameters(self, model: Distribution, tied: set[Any]) -> int:
        """:meth:`n_free_parameters` once ``keys`` are accounted for: combinators add their parts
        (each through its estimator), estimators holding a parameter fixed subtract it."""
        return model.n_free_parameters()

    def __post_init__(self) -> None:
        fam = type(self).__name__
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.name == "pseudo_count":
                check_pseudo_count(fam, value)
            if value is None and f.default is None:
                continue
            ok, read = f.metadata.get("ok"), f.metadata.get("read")
            if ok is not None:
                try:
                    good = bool(ok(value))
                except (TypeError, ValueError):  # not the kind of value at all
                    good = False
                check_parameter(good, fam, f.name, value, f.metadata["expected"])
            if read is not None:
                setattr(self, f.name, read(value))
        self.check()

    def check(self) -> None:  # noqa: B027 (optional hook)
        """Checks across options (after each option's own); raise SpecError naming the values."""

    def to_dict(self) -> dict[str, Any]:
        """The estimator as a JSON-able spec dict with a ``"type"`` key."""
        return _spec(self, _options(type(self)))

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> Estimator:
        """Build from a spec dict (validating its keys)."""
        return cls(**_arguments(cls, spec, _options(cls)))

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.to_dict() == other.to_dict()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(type(self).__name__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}.from_dict({self.to_dict()!r})"


def estimator_option(required: bool = False) -> Any:
    """An option holding a part's estimator (``estimator``, ``len_estimator``): an Estimator (or
    None when not ``required``), written as its spec."""
    ok = lambda v: isinstance(v, Estimator)  # noqa: E731
    if required:
        return option(dataclasses.MISSING, ok, "an Estimator", parse=estimator_from_dict)
    return option(None, ok, "an Estimator or None", parse=estimator_from_dict)


def estimators_option(key: str | None = None) -> Any:
    """A required list of parts' estimators (checked by the family's ``check``, which names the
    one that is not an estimator), written as a list of specs."""
    return option(dataclasses.MISSING, parse=_specs(estimator_from_dict, "estimator"), key=key)


def _specs(build: Callable[[Any], Any], what: str) -> Callable[[Any], list[Any]]:
    """The parser of a list of parts' specs (``build`` reads one)."""

    def parse(value: Any) -> list[Any]:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"a list of {what} specs")
        return [build(spec) for spec in value]

    return parse


def check_estimators(family: str, name: str, value: Any) -> list[Estimator]:
    """``value`` as a list, after checking it is a non-empty list of estimators (naming the first
    element that is not one)."""
    parts = list(value) if isinstance(value, (list, tuple)) else []
    check_parameter(len(parts) > 0, family, name, value, "a non-empty list of estimators")
    for k, e in enumerate(parts):
        check_parameter(isinstance(e, Estimator), family, f"{name}[{k}]", e, "an Estimator")
    return parts


def _same(value: Any, default: Any) -> bool:
    try:
        return bool(value == default)
    except (TypeError, ValueError):  # arrays
        return False


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):  # a pmap: [label, value] pairs (labels need not be strings)
        return [[k, _jsonable(v)] for k, v in value.items()]
    if isinstance(value, (Estimator, Distribution)):
        return value.to_dict()
    return value


def _options(cls: Any) -> tuple[Parameter, ...]:
    """An estimator's options (its dataclass fields) as the parameters its spec holds."""
    return tuple(
        Parameter(
            f.metadata.get("key") or f.name,
            parse=f.metadata.get("parse"),
            write=f.metadata.get("write"),
            default=f.default,
            attribute=f.name,
        )
        for f in dataclasses.fields(cls)
    )


def _spec(obj: Any, parameters: Iterable[Parameter]) -> dict[str, Any]:
    """``obj``'s spec: its family, then each parameter (an optional one when not its default)."""
    spec: dict[str, Any] = {"type": obj.family}
    for parameter in parameters:
        value = getattr(obj, parameter.attr)
        if parameter.default is dataclasses.MISSING or not _same(value, parameter.default):
            write = parameter.write
            spec[parameter.name] = write(value) if write is not None else _jsonable(value)
    return spec


def _arguments(cls: Any, spec: Mapping[str, Any], parameters: tuple[Parameter, ...]) -> dict[str, Any]:
    """The constructor's arguments from ``spec`` (unknown or missing keys refused, parts parsed)."""
    required = [p.name for p in parameters if p.default is dataclasses.MISSING]
    check_spec_keys(spec, cls.family, required=required, optional=[p.name for p in parameters])
    arguments = {}
    for parameter in parameters:
        if parameter.name in spec:
            value, parse = spec[parameter.name], parameter.parse
            try:
                arguments[parameter.attr] = value if parse is None or value is None else parse(value)
            except TypeError as err:  # the parser names what it expected
                raise SpecError(f"{cls.__name__}: {parameter.name} must be {err}, got {value!r}") from None
    return arguments


def part(name: str, optional: bool = False) -> Parameter:
    """A parameter holding a part's distribution (None when ``optional`` and absent)."""
    return Parameter(name, parse=distribution_from_dict, default=None if optional else dataclasses.MISSING)


def parts(name: str) -> Parameter:
    """A parameter holding a list of parts' distributions."""
    return Parameter(name, parse=_specs(distribution_from_dict, "distribution"))


class Distribution(ABC):
    """A probability model of one record type.

    ``to_dict()`` gives the JSON-able parameters with a ``"type"`` key; ``from_dict`` rebuilds the
    distribution *through its constructor*, so parameter validation always runs.
    """

    family: ClassVar[str] = ""
    parameters: ClassVar[tuple[Parameter, ...]] = ()
    """The constructor's keyword arguments, which are also the attributes and the JSON keys."""
    fit_result: Any = None
    """Set by :func:`mixle_spark.estimation.optimize` on the model it returns (not part of equality)."""
    statistics: Any = None
    """The sufficient statistics the model was estimated from, when kept
    (:class:`~mixle_spark.em.statistics.Statistics`: ``keep_statistics=True``, :func:`update`)."""
    update_result: Any = None
    """Set by :func:`mixle_spark.em.incremental.update` on the model it returns."""

    @abstractmethod
    def log_density(self, x: Any) -> float:
        """Log-density (log-mass) of one record; ``-inf`` outside the support, never NaN."""

    def density(self, x: Any) -> float:
        return math.exp(self.log_density(x))

    @abstractmethod
    def seq_log_density(self, enc: Encoded) -> np.ndarray:
        """Log-density of every row of an encoded batch, shape (n,)."""

    def sampler(self, seed: int | None = None) -> Sampler:
        """A :class:`Sampler` of this distribution seeded with ``seed``."""
        cls = type(self)
        if cls.draw is Distribution.draw and cls.draw_with is Distribution.draw_with:
            raise NotImplementedError(f"{cls.__name__} has no sampler")
        return Sampler(self, seed)

    def sampling_parts(self) -> list[Distribution]:
        """The parts a sampler of this distribution draws through (a mixture's components, a
        sequence's length model and element model, ...): each gets a sampler of its own, seeded in
        this order; none for a leaf. A distribution that cannot be sampled (a missing length model)
        raises here, when the sampler is built."""
        return []

    def draw(self, rng: np.random.Generator, size: int | None = None) -> Any:
        """One record drawn with ``rng`` (``size`` None), or a batch of ``size`` records: what a leaf
        family implements."""
        raise NotImplementedError(f"{type(self).__name__} has no sampler")

    def draw_with(self, sampler: Sampler, size: int | None = None) -> Any:
        """As :meth:`draw`, with a sampler's generator and the samplers of its parts (``sampler.parts``,
        in :meth:`sampling_parts` order): what a combinator implements. A leaf draws with
        ``sampler.rng``."""
        return self.draw(sampler.rng, size)

    @abstractmethod
    def estimator(self, pseudo_count: float | None = None) -> Estimator:
        """An estimator of the same shape; with ``pseudo_count`` the current parameters act as a prior."""

    @abstractmethod
    def encoder(self) -> Encoder:
        """An encoder able to encode any record this distribution gives a finite density."""

    def to_dict(self) -> dict[str, Any]:
        """Parameters as a JSON-able dict with a ``"type"`` key (float64 round-trips exactly): the
        declared :attr:`parameters` in order, an optional one only when it differs from its default."""
        return _spec(self, self.parameters)

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> Distribution:
        """Rebuild through the constructor (its keyword arguments are the :attr:`parameters`)."""
        return cls(**_arguments(cls, spec, cls.parameters))

    def nonfinite_parameters(self) -> list[str]:
        """Paths of parameters that are NaN or infinite (used to name a broken component)."""
        return _nonfinite_paths(self.to_dict(), ())

    def n_free_parameters(self) -> int:
        """How many numbers a fit of this model chooses freely, every parameter being estimated (what
        BIC and AIC count; :meth:`Estimator.n_free_parameters` discounts fixed and tied ones).

        This default, for a family whose parameters are all free numbers, counts every number of
        :meth:`to_dict`. Families with constraints override it (probabilities summing to one, a
        symmetric covariance, a given number of trials), and combinators count their parts through
        their estimator: ``self.estimator().n_free_parameters(self)``.
        """
        spec = self.to_dict()
        if any(isinstance(v, Mapping) or _holds_mapping(v) for v in spec.values()):
            raise NotImplementedError(f"{type(self).__name__} has parts: it must count them itself")
        return sum(_number_count(v) for k, v in spec.items() if k != "type")

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.to_dict() == other.to_dict()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(type(self).__name__)

    def __repr__(self) -> str:
        params = {k: v for k, v in self.to_dict().items() if k != "type"}
        inner = ", ".join(f"{k}={v!r}" for k, v in params.items())
        return f"{type(self).__name__}({inner})"


def _number_count(value: Any) -> int:
    """How many numbers ``value`` (a number or nested lists of numbers) holds."""
    if isinstance(value, list | tuple):
        return sum(_number_count(v) for v in value)
    return 1 if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _holds_mapping(value: Any) -> bool:
    return isinstance(value, list | tuple) and any(isinstance(v, Mapping) or _holds_mapping(v) for v in value)


def free_parameters(estimator: Estimator | None, model: Distribution | None, tied: set[Any]) -> int:
    """The free parameters of an optional part (a length model, ...): none without ``model``, the
    model's own count without ``estimator``."""
    if model is None:
        return 0
    return model.n_free_parameters() if estimator is None else estimator.n_free_parameters(model, tied)


def _nonfinite_paths(value: Any, path: tuple[str, ...]) -> list[str]:
    if isinstance(value, Mapping):
        out: list[str] = []
        for k, v in value.items():
            if k != "type":
                out += _nonfinite_paths(v, (*path, str(k)))
        return out
    if isinstance(value, (list, tuple)):
        out = []
        for i, v in enumerate(value):
            out += _nonfinite_paths(v, (*path, str(i)))
        return out
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        return [".".join(path) or "<root>"]
    return []
