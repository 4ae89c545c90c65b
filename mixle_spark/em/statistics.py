"""The sufficient statistics a model was estimated from, kept with it so that new rows can be folded in
without reading the old ones (:func:`mixle_spark.em.incremental.update`).

A :class:`Statistics` holds the estimator with its vocabularies fixed, the statistics' value (the
accumulator tree's ``value()`` after the tying passes, so the M-step reads it as it is), their total
weight, and how many rows and updates went into them. It is saved inside the model file as strict
JSON (arrays as base64 of their little-endian bytes: exact, and NaN / inf survive), never pickled, with
a format name and version of its own; a model file without it loads as before.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mixle_spark.errors import ModelFormatError, SpecError, describe_value
from mixle_spark.parallel.backends.contract import Accumulate, EncodedData
from mixle_spark.stats.base import Distribution, Estimator, estimator_from_dict

__all__ = [
    "STATISTICS_FORMAT",
    "STATISTICS_FORMAT_VERSION",
    "Statistics",
    "StreamIdentity",
    "collect_statistics",
    "value_from_json",
    "value_to_json",
]

STATISTICS_FORMAT = "mixle_spark.statistics"
STATISTICS_FORMAT_VERSION = 1

_NUMERIC_KINDS = "biuf"  # bool, signed / unsigned integer, float arrays (never object arrays)


def value_to_json(value: Any) -> Any:
    """A statistics value tree as strict-JSON data: floats stay floats (``{"$f": "inf"}`` when not
    finite), arrays are ``{"$a": base64, "dtype": "<f8", "shape": [...]}``, tuples ``{"$t": [...]}``,
    dicts ``{"$d": [[key, value], ...]}`` (keys may be any label)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _NUMERIC_KINDS:
            raise TypeError(f"cannot save a statistics array of dtype {value.dtype} (numeric arrays only)")
        data = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<"), copy=False)
        return {
            "$a": base64.b64encode(data.tobytes()).decode("ascii"),
            "dtype": data.dtype.str,
            "shape": list(value.shape),
        }
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        number = float(value)
        return number if math.isfinite(number) else {"$f": repr(number)}
    if isinstance(value, tuple):
        return {"$t": [value_to_json(v) for v in value]}
    if isinstance(value, list):
        return [value_to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {"$d": [[value_to_json(k), value_to_json(v)] for k, v in value.items()]}
    raise TypeError(f"cannot save a statistics value of type {type(value).__name__}")


def value_from_json(data: Any) -> Any:
    """The value tree :func:`value_to_json` wrote (arrays, tuples, dicts and non-finite floats back)."""
    if isinstance(data, list):
        return [value_from_json(v) for v in data]
    if not isinstance(data, Mapping):
        return data
    if "$a" in data:
        dtype = np.dtype(str(data["dtype"]))
        if dtype.kind not in _NUMERIC_KINDS:
            raise ModelFormatError(f"statistics: array dtype {dtype} is not numeric")
        raw = base64.b64decode(str(data["$a"]), validate=True)
        shape = tuple(int(s) for s in data["shape"])
        if len(raw) != dtype.itemsize * math.prod(shape):
            raise ModelFormatError(f"statistics: an array of shape {shape} holds {len(raw)} bytes")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))
    if "$f" in data:
        return float(data["$f"])
    if "$t" in data:
        return tuple(value_from_json(v) for v in data["$t"])
    if "$d" in data:
        return {_hashable(value_from_json(k)): value_from_json(v) for k, v in data["$d"]}
    raise ModelFormatError(f"statistics: unknown entry with keys {sorted(data)[:5]}")


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


@dataclass(frozen=True)
class StreamIdentity:
    """The streaming query that folded a model's ``last_batch`` in (a stream's batch ids count from 0
    in each query: a batch id means something only together with its query).

    Attributes
    ----------
    query_id : str
        The query's ``StreamingQuery.id``: the same across restarts from one checkpoint, a new one
        for a new checkpoint.
    checkpoint : str
        The query's checkpoint location, as the stream was given it.
    source : str
        What the query reads, as Spark describes its source(s) (``FileSource[/data/in]``, ...).
    """

    query_id: str
    checkpoint: str
    source: str

    def to_dict(self) -> dict[str, str]:
        return {"query_id": self.query_id, "checkpoint": self.checkpoint, "source": self.source}

    @classmethod
    def from_dict(cls, data: Any) -> StreamIdentity:
        """Read :meth:`to_dict` output (a ModelFormatError names what is wrong)."""
        fields = ("query_id", "checkpoint", "source")
        if not isinstance(data, Mapping) or not all(isinstance(data.get(f), str) for f in fields):
            raise ModelFormatError(
                f"statistics: 'stream' must be an object of strings {', '.join(fields)}, got {data!r:.200}"
            )
        return cls(data["query_id"], data["checkpoint"], data["source"])


@dataclass(frozen=True)
class Statistics:
    """Sufficient statistics a model was estimated from.

    Attributes
    ----------
    estimator : Estimator
        The estimator with its vocabularies fixed (what the statistics are laid out over).
    value : object
        The statistics (an accumulator's ``value()`` after the tying passes).
    weight : float
        Their total weight (rows times weights, decayed by updates).
    rows : int
        Rows folded into them, not decayed (a half-life in points counts these).
    updates : int
        Updates folded in since the fit (0: the fit's own statistics).
    last_batch : int, optional
        The last micro-batch id folded in by a stream (a replayed batch id is skipped).
    stream : StreamIdentity, optional
        The streaming query ``last_batch`` belongs to (None: not written by
        :func:`~mixle_spark.streaming.fit_stream`, or by one older than this field; such a model is
        another query's to every stream, which folds its batches into it and never skips one).
    log_likelihood : float, optional
        The folded rows' total log-likelihood under the model each was folded by (decayed like
        ``weight``): the reference an update's drift is measured against.
    scored_weight : float, optional
        The weight of the rows ``log_likelihood`` sums (rows with a finite log-density).
    template : Estimator, optional
        The estimator as the fit was given it (vocabularies open): what new rows are read with, so
        that labels the fit did not see extend the vocabularies.
    """

    estimator: Estimator
    value: Any
    weight: float
    rows: int
    updates: int = 0
    last_batch: int | None = None
    log_likelihood: float | None = None
    scored_weight: float | None = None
    template: Estimator | None = None
    stream: StreamIdentity | None = None

    @property
    def mean_log_likelihood(self) -> float | None:
        """The folded rows' mean log-likelihood (None when unknown)."""
        if self.log_likelihood is None or not self.scored_weight:
            return None
        return self.log_likelihood / self.scored_weight

    def estimate(self) -> Distribution:
        """The M-step of these statistics."""
        return self.estimator.estimate(self.weight, self.value)

    def with_value(self, value: Any, weight: float, rows: int, **changes: Any) -> Statistics:
        return replace(self, value=value, weight=float(weight), rows=int(rows), **changes)

    def to_dict(self) -> dict[str, Any]:
        """Strict-JSON data with a format header (see the module docstring); ``stream`` only when
        set (a reader older than it ignores the key)."""
        data: dict[str, Any] = {
            "format": STATISTICS_FORMAT,
            "format_version": STATISTICS_FORMAT_VERSION,
            "estimator": self.estimator.to_dict(),
            "weight": value_to_json(self.weight),
            "rows": self.rows,
            "updates": self.updates,
            "last_batch": self.last_batch,
            "log_likelihood": value_to_json(self.log_likelihood),
            "scored_weight": value_to_json(self.scored_weight),
            "template": None if self.template is None else self.template.to_dict(),
            "value": value_to_json(self.value),
        }
        if self.stream is not None:
            data["stream"] = self.stream.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Statistics:
        """Read :meth:`to_dict` output, refused with a ModelFormatError naming what is wrong: each
        number is checked (a count an integer >= 0, a weight finite and >= 0, ...), and the value
        against a fresh accumulator of the estimator (its layout, then its ``from_value``)."""
        if not isinstance(data, Mapping) or data.get("format") != STATISTICS_FORMAT:
            found = data.get("format") if isinstance(data, Mapping) else type(data).__name__
            raise ModelFormatError(f"statistics: expected format {STATISTICS_FORMAT!r}, got {found!r}")
        version = data.get("format_version")
        if not isinstance(version, int) or not 1 <= version <= STATISTICS_FORMAT_VERSION:
            raise ModelFormatError(
                f"statistics: format_version {version!r}; this mixle_spark reads versions up to "
                f"{STATISTICS_FORMAT_VERSION}: upgrade mixle_spark to load them"
            )
        try:
            estimator = estimator_from_dict(data["estimator"])
            template = None if data.get("template") is None else estimator_from_dict(data["template"])
            value = value_from_json(data["value"])
            entries = {name: value_from_json(data.get(name, default)) for name, default, *_ in _ENTRIES}
            stream = None if data.get("stream") is None else StreamIdentity.from_dict(data["stream"])
        except (KeyError, TypeError, ValueError, SpecError) as err:
            if isinstance(err, ModelFormatError):
                raise
            raise ModelFormatError(f"statistics: {type(err).__name__}: {err}") from None
        for name, default, ok, expected in _ENTRIES:
            found = entries[name]
            if name not in data and default is _REQUIRED:
                raise ModelFormatError(f"statistics: no {name!r} entry; expected {expected}")
            if not (ok(found) or (found is None and default is None)):
                raise ModelFormatError(f"statistics: {name} must be {expected}, got {describe_value(found)}")
        _check_value(estimator, value)
        ll, scored = entries["log_likelihood"], entries["scored_weight"]
        return cls(
            estimator=estimator,
            value=value,
            weight=float(entries["weight"]),
            rows=entries["rows"],
            updates=entries["updates"],
            last_batch=entries["last_batch"],
            log_likelihood=None if ll is None else float(ll),
            scored_weight=None if scored is None else float(scored),
            template=template,
            stream=stream,
        )

    def check_fits(self, model: Distribution) -> None:
        """Refuse statistics laid out for another model than ``model`` (a mixture of another number
        of components, a record of other fields): the shape of a fresh accumulator of their estimator
        against that of ``model``'s own estimator (vocabulary sizes and array shapes aside)."""
        theirs = _skeleton(self.estimator.accumulator_factory().make().value())
        ours = _skeleton(model.estimator().accumulator_factory().make().value())
        if theirs != ours:
            raise ModelFormatError(
                f"statistics: their estimator, {type(self.estimator).__name__} "
                f"{_clip(self.estimator.to_dict())}, does not fit the model, a {type(model).__name__} "
                f"estimated by {_clip(model.estimator().to_dict())}: a model file keeps the statistics "
                "the model was estimated from"
            )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


def _is_weight(value: Any) -> bool:
    return _is_finite(value) and value >= 0


_REQUIRED: Any = object()
_ENTRIES: tuple[tuple[str, Any, Callable[[Any], bool], str], ...] = (
    # name, the value when absent (None: may also be null), the check, what is expected
    ("weight", _REQUIRED, _is_weight, "a finite number >= 0"),
    ("rows", _REQUIRED, _is_count, "an integer >= 0"),
    ("updates", 0, _is_count, "an integer >= 0"),
    ("last_batch", None, _is_count, "null or an integer >= 0"),
    ("log_likelihood", None, _is_finite, "null or a finite number"),
    ("scored_weight", None, _is_weight, "null or a finite number >= 0"),
)
"""The statistics' numbers, checked when a model file is read (a negative count or weight, a NaN,
would corrupt every later update)."""


def _clip(spec: Any) -> str:
    text = str(spec)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_value(estimator: Estimator, value: Any) -> None:
    """Refuse a statistics value that ``estimator``'s accumulator cannot hold: laid out otherwise than
    a fresh one's value (:func:`_layout_problem`), or refused by its ``from_value``."""
    fresh = estimator.accumulator_factory().make()
    problem = _layout_problem(value, fresh.value(), "value")
    if problem is None:
        try:
            fresh.from_value(value)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError) as err:
            problem = f"value: {type(err).__name__}: {err}"
    if problem is not None:
        raise ModelFormatError(
            f"statistics: {problem}: the value does not fit their estimator, {type(estimator).__name__} "
            f"{_clip(estimator.to_dict())}"
        )


def _layout_problem(value: Any, fresh: Any, where: str) -> str | None:
    """Where ``value`` is not laid out as ``fresh`` (a fresh accumulator's value of the same
    estimator), or None. Arrays match in dimensions and in every length ``fresh`` does not leave at 0
    (a length the data decides); lists and dicts that ``fresh`` leaves empty may hold anything."""
    if fresh is None:
        return None
    if isinstance(fresh, np.ndarray):
        if not isinstance(value, np.ndarray):
            return f"{where}: expected an array of shape {fresh.shape}, got {describe_value(value)}"
        fixed = all(f in (0, v) for f, v in zip(fresh.shape, value.shape, strict=False))
        if value.ndim != fresh.ndim or not fixed:
            return f"{where}: expected an array of shape {fresh.shape}, got one of shape {value.shape}"
        return None
    if isinstance(fresh, tuple | list):
        kind = type(fresh).__name__
        if not isinstance(value, type(fresh)):
            return f"{where}: expected a {kind} of {len(fresh)} entries, got {describe_value(value)}"
        if fresh and len(value) != len(fresh):
            return f"{where}: expected a {kind} of {len(fresh)} entries, got {len(value)}"
        for i, (v, f) in enumerate(zip(value, fresh, strict=False)):
            problem = _layout_problem(v, f, f"{where}[{i}]")
            if problem is not None:
                return problem
        return None
    if isinstance(fresh, Mapping):
        return (
            None if isinstance(value, Mapping) else f"{where}: expected a dict, got {describe_value(value)}"
        )
    if _is_number(fresh) or isinstance(fresh, np.number):
        ok = (_is_number(value) or isinstance(value, np.number)) and not isinstance(value, np.bool_)
        return None if ok else f"{where}: expected a number, got {describe_value(value)}"
    return None


def _skeleton(value: Any) -> Any:
    """The nesting of tuples and lists in a statistics value (what is in an array or a dict aside)."""
    if isinstance(value, tuple | list):
        return (type(value).__name__, tuple(_skeleton(v) for v in value))
    return None


def collect_statistics(handle: EncodedData, estimator: Estimator, model: Distribution) -> Statistics:
    """The statistics of ``model``'s E-step over ``handle`` (one pass over the data): what
    ``keep_statistics=True`` attaches to a fitted model."""
    if not isinstance(handle, Accumulate):
        raise TypeError(f"{type(handle).__name__} cannot keep statistics (it has no pysp_accumulate pass)")
    nobs, ll, value = handle.pysp_accumulate(estimator, model)
    return statistics_of_pass(handle, estimator, nobs, ll, value)


def statistics_of_pass(
    handle: EncodedData, estimator: Estimator, nobs: float, ll: float, value: Any
) -> Statistics:
    """The :class:`Statistics` of one ``pysp_accumulate`` pass over ``handle`` (its weight,
    log-likelihood and value), e.g. the pass that scored a fit's last model."""
    bound = handle.bind(estimator) if hasattr(handle, "bind") else estimator
    finite = math.isfinite(ll)
    return Statistics(
        bound,
        value,
        float(nobs),
        len(handle),  # type: ignore[arg-type]
        log_likelihood=float(ll) if finite else None,
        scored_weight=float(nobs) if finite else None,
        template=estimator,
    )
