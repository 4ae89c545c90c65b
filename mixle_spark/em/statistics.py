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
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mixle_spark.errors import ModelFormatError, SpecError
from mixle_spark.parallel.backends.contract import Accumulate
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
        """Read :meth:`to_dict` output (refused with a ModelFormatError naming what is wrong)."""
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
            last = data.get("last_batch")
            ll, scored = (
                value_from_json(data.get("log_likelihood")),
                value_from_json(data.get("scored_weight")),
            )
            return cls(
                estimator=estimator,
                value=value_from_json(data["value"]),
                weight=float(value_from_json(data["weight"])),
                rows=int(data["rows"]),
                updates=int(data.get("updates", 0)),
                last_batch=None if last is None else int(last),
                log_likelihood=None if ll is None else float(ll),
                scored_weight=None if scored is None else float(scored),
                template=None if data.get("template") is None else estimator_from_dict(data["template"]),
                stream=None if data.get("stream") is None else StreamIdentity.from_dict(data["stream"]),
            )
        except (KeyError, TypeError, ValueError, SpecError) as err:
            if isinstance(err, ModelFormatError):
                raise
            raise ModelFormatError(f"statistics: {type(err).__name__}: {err}") from None


def collect_statistics(handle: Any, estimator: Estimator, model: Distribution) -> Statistics:
    """The statistics of ``model``'s E-step over ``handle`` (one pass over the data): what
    ``keep_statistics=True`` attaches to a fitted model."""
    if not isinstance(handle, Accumulate):
        raise TypeError(f"{type(handle).__name__} cannot keep statistics (it has no pysp_accumulate pass)")
    nobs, ll, value = handle.pysp_accumulate(estimator, model)
    return statistics_of_pass(handle, estimator, nobs, ll, value)


def statistics_of_pass(handle: Any, estimator: Estimator, nobs: float, ll: float, value: Any) -> Statistics:
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
