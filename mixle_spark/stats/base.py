"""The contracts every family implements, and the family registry.

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

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np

from mixle_spark.errors import (
    EmbeddingUnavailableError,
    SpecError,
    UnknownNameError,
    describe_value,
    did_you_mean,
)
from mixle_spark.stats._random import RowRandom

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
    "option",
    "part",
    "parts",
    "register_distribution",
    "register_estimator",
    "registered_distributions",
    "registered_estimators",
    "seq_update_with_ll",
]

Encoded = Any
"""An encoded batch: whatever a family's encoder produces and its ``seq_*`` methods read."""

D = TypeVar("D", bound="type[Distribution]")
E = TypeVar("E", bound="type[Estimator]")


class Sampler:
    """Draws records from a distribution with a numpy ``Generator``.

    ``sample()`` returns one record; ``sample(size)`` returns a list of ``size`` records (families may
    return a numpy array where records are scalars). Combinators seed their children with
    :meth:`new_seed` so a seed fixes the whole tree's draws.
    """

    def __init__(self, dist: Distribution, seed: int | None = None) -> None:
        self.dist = dist
        self.rng = np.random.default_rng(seed)

    def new_seed(self) -> int:
        """An integer seed for a child sampler, drawn from this sampler's stream."""
        return int(self.rng.integers(0, 2**31 - 1))

    def sample(self, size: int | None = None) -> Any:
        raise NotImplementedError


def any_unseen(masks: Iterable[np.ndarray | None]) -> np.ndarray | None:
    """The rows unseen in any of ``masks`` (None entries skipped; None when all are None)."""
    out: np.ndarray | None = None
    for mask in masks:
        if mask is not None:
            out = mask if out is None else out | mask
    return out


def unseen_owners(element_mask: np.ndarray | None, owner: np.ndarray, n: int) -> np.ndarray | None:
    """Rows (of ``n``) owning an unseen element: ``owner[j]`` is the row of element ``j``."""
    if element_mask is None:
        return None
    return np.bincount(owner[element_mask], minlength=n) > 0


class Encoder(ABC):
    """Turns records into an encoded batch; declares the Arrow types it reads.

    Encoders compare equal when they produce the same encoding (drivers use this to decide whether
    encoded data can be reused). A scan (for vocabularies / ranges) is a plain, picklable,
    mergeable value; encoders that need none keep the defaults.
    """

    @abstractmethod
    def encode(self, records: Sequence[Any]) -> Encoded:
        """Encode a sequence of Python records (validated; errors name the bad value and row)."""

    @abstractmethod
    def from_arrow(self, data: Any) -> Encoded:
        """Encode an Arrow column (Array / ChunkedArray), or a RecordBatch / Table for records.

        Zero-copy where Arrow allows it (primitive float64 buffers without nulls, list offsets).
        """

    def column_names(self) -> list[str] | None:
        """The top-level columns a table-reading encoder (Record) reads; None for one-column models."""
        return None

    def check_arrow_type(self, arrow_type: Any) -> None:  # noqa: B027 (optional hook)
        """Raise :class:`~mixle_spark.errors.SchemaError` when a column of ``arrow_type`` cannot be
        read; the enclosing Record prefixes the column name. The default accepts anything."""

    def expected_arrow(self) -> str:
        """Human-readable description of the accepted Arrow type(s), for error messages."""
        return "any"

    # -- scans: learning vocabularies / ranges before the first E-step -------------------------
    @property
    def needs_scan(self) -> bool:
        """True when :meth:`encode` needs a vocabulary / range that a scan must provide first."""
        return False

    def scan(self, records: Sequence[Any]) -> Any:
        """What this batch of records tells about vocabularies / ranges (None when nothing)."""
        return None

    def scan_arrow(self, data: Any) -> Any:
        """As :meth:`scan`, from Arrow data."""
        return None

    def merge_scans(self, a: Any, b: Any) -> Any:
        """Merge two scan results (associative and commutative)."""
        return None

    # -- rebasing: a batch encoded under the scan of part of the data, as the whole data's encoder
    #    encodes it (a Spark partition encodes its rows in the pass that scans them) -------------
    @property
    def rebases(self) -> bool:
        """True when :meth:`rebase` can take any batch this family's encoder made under the scan of
        part of the data (for example one partition's vocabulary) to what the encoder made from the
        scan of all of it makes of the same rows. A property of the family, whatever this encoder's
        scan: true for families without a scan; families with one that implement :meth:`rebase`
        (and composites of such) say so."""
        return type(self).scan_arrow is Encoder.scan_arrow

    def rebase(self, enc: Encoded) -> Encoded:
        """``enc`` (a batch of this family, encoded under another scan of the same column) as this
        encoder encodes the same rows: equal, array for array, to ``self.from_arrow`` of them. The
        batch says which vocabulary or range it was made with; only called when :attr:`rebases`. The
        default, for families without a scan, returns it unchanged."""
        return enc

    # -- compact Arrow form: data encoded once and read every iteration (e.g. a Spark cache) ------
    @property
    def compacts(self) -> bool:
        """True when :meth:`compact_arrow` gives a cheaper column than its input (labels -> codes)."""
        return False

    def compact_arrow(self, data: Any) -> Any:
        """``data`` (already accepted by :meth:`from_arrow`) in a compact Arrow form that
        :meth:`from_arrow` reads back to the same encoding; the default returns it unchanged."""
        return data

    # -- unseen labels at scoring: a label outside a fitted vocabulary ------------------------------
    def with_unseen(self, unseen: str) -> Encoder:
        """This encoder with every vocabulary under it treating a label outside it by ``unseen``:
        "error" raises :class:`~mixle_spark.errors.UnseenLabelError` naming the row, "zero" gives it
        code -1 (see :meth:`unseen_rows`). Encoders without a vocabulary return themselves."""
        return self

    def unseen_rows(self, enc: Encoded) -> np.ndarray | None:
        """For a batch encoded by ``with_unseen("zero")``: a bool mask of the rows holding a label
        outside a vocabulary, or None when this encoder has no vocabulary (no row can)."""
        return None

    # -- seeding: a numeric embedding for init="kmeans||" (see stats._embed) ---------------------
    def embedding_scales(self) -> np.ndarray:
        """One flag per column of :meth:`embed`: True for a number the seeding standardizes, False
        for a column already on a comparable scale (one-hot, frequencies). Raises
        :class:`~mixle_spark.errors.EmbeddingUnavailableError` when the family has no embedding."""
        raise EmbeddingUnavailableError(f"{type(self).__name__} has no numeric embedding for seeding")

    def embed(self, enc: Encoded) -> np.ndarray:
        """The batch as a float64 array of shape (n, m), m = ``len(embedding_scales())``; NaN = missing."""
        raise EmbeddingUnavailableError(f"{type(self).__name__} has no numeric embedding for seeding")

    def union(self, other: Encoder) -> Encoder:
        """An encoder that can encode whatever ``self`` and ``other`` can (used by mixtures of models
        whose vocabularies differ). The default requires the two to be equal."""
        if self == other:
            return self
        raise TypeError(f"cannot combine encoders {self!r} and {other!r}")

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash(type(self).__name__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class AccumulatorFactory(ABC):
    """Makes fresh, zeroed accumulators; small and picklable (shipped to workers).

    Every accumulator is its own factory (:meth:`Accumulator.make`); a separate factory class is
    for wrappers that make another class's accumulators."""

    @abstractmethod
    def make(self) -> Accumulator:
        """A new accumulator with zero statistics."""


class Accumulator(AccumulatorFactory):
    """Weighted sufficient statistics of one family.

    ``keys`` (optional) ties parameters: every accumulator site with the same key is estimated
    from the pooled statistics after :meth:`key_merge` / :meth:`key_replace` run once over the
    fully merged tree (never per shard: pooling twice double-counts).
    """

    keys: Any = None

    def update(self, x: Any, weight: float, estimate: Distribution | None) -> None:
        """Add one record with weight ``weight`` (the slow path; equals ``seq_update`` on one row)."""
        enc = self.make_encoder().encode([x])
        self.seq_update(enc, np.array([float(weight)]), estimate)

    @abstractmethod
    def seq_update(
        self, enc: Encoded, weights: np.ndarray, estimate: Distribution | None
    ) -> np.ndarray | None:
        """Add a weighted encoded batch; ``weights`` has shape (n,).

        Returns the per-row log-density of ``estimate`` (shape (n,)) when computing it was a by-product
        of the update (mixtures compute it for the posteriors), else None. See :func:`seq_update_with_ll`.
        """

    def initialize(self, x: Any, weight: float, rng: RowRandom) -> None:
        """Randomised initial statistics for one record; ``rng`` has one row."""
        enc = self.make_encoder().encode([x])
        self.seq_initialize(enc, np.array([float(weight)]), rng)

    def seq_initialize(self, enc: Encoded, weights: np.ndarray, rng: RowRandom) -> None:
        """Randomised initial statistics for a batch; the default is a plain update."""
        self.seq_update(enc, weights, None)

    @abstractmethod
    def combine(self, value: Any) -> Accumulator:
        """Add another accumulator's ``value()`` into this one (never aliasing it); returns self."""

    @abstractmethod
    def value(self) -> Any:
        """The statistics as plain data (picklable, JSON-able after array -> list)."""

    @abstractmethod
    def from_value(self, value: Any) -> Accumulator:
        """Replace this accumulator's statistics by ``value`` (copied); returns self."""

    encoder_class: ClassVar[type[Encoder] | None] = None

    def make_encoder(self) -> Encoder:
        """The encoder matching this accumulator (for ``update`` / ``initialize`` on raw records);
        default: a fresh :attr:`encoder_class`."""
        if self.encoder_class is None:
            raise NotImplementedError(f"{type(self).__name__} has no encoder")
        return self.encoder_class()

    def fresh_args(self) -> tuple[Any, ...]:
        """The constructor arguments of a fresh, zeroed accumulator like this one (default
        ``(keys,)``; composites make fresh parts)."""
        return (self.keys,)

    def make(self) -> Accumulator:
        """A fresh, zeroed accumulator like this one: every accumulator is its own factory."""
        cls: Any = type(self)
        return cls(*self.fresh_args())  # type: ignore[no-any-return]

    def parts(self) -> list[Accumulator]:
        """The accumulators of this one's parts (the tying passes walk them); default none."""
        return []

    def key_merge(self, stats: dict[Any, Any]) -> None:
        """Tying pass 1: pool this site's statistics into ``stats[self.keys]``, then its parts'."""
        # The first site becomes the pool and later sites add into it; key_replace then copies the
        # pooled value back into every site (the pool itself included, harmlessly).
        if self.keys is not None:
            if self.keys in stats:
                stats[self.keys].combine(self.value())
            else:
                stats[self.keys] = self
        for part in self.parts():
            part.key_merge(stats)

    def key_replace(self, stats: dict[Any, Any]) -> None:
        """Tying pass 2: copy the pooled statistics back into this site, then into its parts."""
        if self.keys is not None and self.keys in stats:
            self.from_value(stats[self.keys].value())
        for part in self.parts():
            part.key_replace(stats)


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


def option(
    default: Any = None,
    ok: Callable[[Any], bool] | None = None,
    expected: str = "",
    *,
    read: Callable[[Any], Any] | None = None,
    write: Callable[[Any], Any] | None = None,
    parse: Callable[[Any], Any] | None = None,
    key: str | None = None,
) -> Any:
    """An estimator option (a dataclass field): its ``default``; the test ``ok`` a value other than
    a None default must pass, and what it ``expected`` (for the message, which names the value);
    ``read`` converts the accepted value to the attribute; ``write`` gives its JSON form (default:
    arrays and tuples as lists, mappings as ``[key, value]`` pairs, estimators as their specs) and
    ``parse`` reads that form back (raising TypeError with what it expected); ``key`` is the JSON key
    when it is not the option's name. ``default=dataclasses.MISSING`` makes the option required."""
    metadata = {"ok": ok, "expected": expected, "read": read, "write": write, "parse": parse, "key": key}
    return dataclasses.field(default=default, metadata=metadata)


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


@dataclasses.dataclass(frozen=True)
class Parameter:
    """A family's parameter, declared once: its ``name`` (the constructor's keyword argument, the
    attribute and the JSON key); the test ``ok`` its value must pass and what that test ``expected``
    (for the message, which names the value; scalar families check with it); ``parse`` reads the
    JSON form back (raising TypeError with what it expected) and ``write`` gives it (default: arrays
    and tuples as lists, mappings as ``[key, value]`` pairs, parts as their specs); a ``default``
    makes it optional, written only when the value differs from it."""

    name: str
    ok: Callable[[Any], bool] | None = None
    expected: str = ""
    parse: Callable[[Any], Any] | None = None
    write: Callable[[Any], Any] | None = None
    default: Any = dataclasses.field(default_factory=lambda: dataclasses.MISSING)  # MISSING: required
    attribute: str | None = None
    """The constructor's argument and attribute when it is not ``name`` (the JSON key)."""

    @property
    def attr(self) -> str:
        return self.attribute or self.name


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
    sampler_class: ClassVar[type[Sampler] | None] = None
    fit_result: Any = None
    """Set by :func:`mixle_spark.estimation.optimize` on the model it returns (not part of equality)."""

    @abstractmethod
    def log_density(self, x: Any) -> float:
        """Log-density (log-mass) of one record; ``-inf`` outside the support, never NaN."""

    def density(self, x: Any) -> float:
        return math.exp(self.log_density(x))

    @abstractmethod
    def seq_log_density(self, enc: Encoded) -> np.ndarray:
        """Log-density of every row of an encoded batch, shape (n,)."""

    def sampler(self, seed: int | None = None) -> Sampler:
        """A seeded sampler (a :attr:`sampler_class`)."""
        if self.sampler_class is None:
            raise NotImplementedError(f"{type(self).__name__} has no sampler")
        return self.sampler_class(self, seed)

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


def check_parameter(ok: bool, family: str, name: str, value: Any, expected: str) -> None:
    """Raise SpecError ``"<family>: <name> must be <expected>, got <value>"`` unless ``ok``."""
    if not ok:
        raise SpecError(f"{family}: {name} must be {expected}, got {value!r}")


def check_pseudo_count(family: str, pseudo_count: Any) -> None:
    """Raise SpecError unless ``pseudo_count`` is None or a non-negative finite number (naming the
    value)."""
    try:
        ok = pseudo_count is None or (
            not isinstance(pseudo_count, bool) and math.isfinite(pseudo_count) and pseudo_count >= 0
        )
    except TypeError:
        ok = False
    check_parameter(ok, family, "pseudo_count", pseudo_count, "a non-negative number")


def seq_update_with_ll(
    acc: Accumulator, enc: Encoded, weights: np.ndarray, estimate: Distribution
) -> np.ndarray:
    """Run ``acc.seq_update`` and return the per-row log-density of ``estimate`` on ``enc``.

    Uses the log-density the update computed as a by-product when there is one, else scores the
    batch; combinators use this so one pass yields statistics and log-likelihood together.
    """
    ll = acc.seq_update(enc, weights, estimate)
    return estimate.seq_log_density(enc) if ll is None else ll


# -- registry ---------------------------------------------------------------------------------

_DISTRIBUTIONS: dict[str, type[Distribution]] = {}
_ESTIMATORS: dict[str, type[Estimator]] = {}


def _register(table: dict[str, Any], kind: str, name: str) -> Callable[[Any], Any]:
    key = name.lower()

    def decorate(cls: Any) -> Any:
        owner = table.get(key)
        if owner is not None and owner.__qualname__ != cls.__qualname__:
            raise ValueError(f"{kind} family {key!r} is already registered to {owner.__qualname__}")
        table[key] = cls
        cls.family = key
        return cls

    return decorate


def register_distribution(name: str) -> Callable[[D], D]:
    """Class decorator: register a Distribution under a family name (used by JSON loading)."""
    return _register(_DISTRIBUTIONS, "distribution", name)


def register_estimator(name: str) -> Callable[[E], E]:
    """Class decorator: register an Estimator under a family name (used by model specs)."""
    return _register(_ESTIMATORS, "estimator", name)


def registered_distributions() -> dict[str, type[Distribution]]:
    """Family name -> Distribution class, for every registered family."""
    return dict(_DISTRIBUTIONS)


def registered_estimators() -> dict[str, type[Estimator]]:
    """Family name -> Estimator class, for every registered family."""
    return dict(_ESTIMATORS)


def _spec_type(spec: Any, what: str) -> tuple[str, Mapping[str, Any]]:
    if isinstance(spec, str):
        return spec.lower(), {"type": spec}
    if not isinstance(spec, Mapping):
        raise SpecError(
            f"{what} spec must be a dict with a 'type' key or a family name, got {describe_value(spec)}"
        )
    if "type" not in spec:
        raise SpecError(f"{what} spec {describe_value(dict(spec))} has no 'type' key")
    return str(spec["type"]).lower(), spec


def distribution_from_dict(spec: Mapping[str, Any] | str) -> Distribution:
    """Rebuild a distribution from ``Distribution.to_dict()`` output, dispatching on ``"type"``."""
    name, spec = _spec_type(spec, "model")
    cls = _DISTRIBUTIONS.get(name)
    if cls is None:
        raise UnknownNameError("model family", name, _DISTRIBUTIONS)
    return cls.from_dict(spec)


def estimator_from_dict(spec: Mapping[str, Any] | str) -> Estimator:
    """Build an estimator from a spec dict (or a bare family name), dispatching on ``"type"``."""
    name, spec = _spec_type(spec, "estimator")
    cls = _ESTIMATORS.get(name)
    if cls is None:
        raise UnknownNameError("estimator family", name, _ESTIMATORS)
    return cls.from_dict(spec)


def check_spec_keys(
    spec: Mapping[str, Any], family: str, required: Iterable[str] = (), optional: Iterable[str] = ()
) -> None:
    """Raise SpecError for a missing required key or any key the family does not know."""
    required = list(required)
    allowed = {"type", *required, *optional}
    for key in spec:
        if key not in allowed:
            raise SpecError(
                f"unknown key {key!r} in {family} spec{did_you_mean(key, allowed)}; "
                f"expected one of: {', '.join(sorted(allowed))}"
            )
    for key in required:
        if key not in spec:
            raise SpecError(f"{family} spec is missing required key {key!r}")
