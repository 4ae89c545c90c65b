"""Model specs (JSON) -> estimators, and fitted models <-> JSON. Never pickle on disk.

An estimator spec is a dict with a ``"type"`` (a registered family name) and that family's keys, or
a bare family name:

>>> estimator = estimator_from_spec(
...     {"type": "mixture", "k": 5,
...      "component": {"type": "record", "fields": {
...          "amount": "log_gaussian",
...          "channel": "categorical",
...          "n_items": "poisson",
...          "tags": {"type": "sequence", "estimator": "categorical", "len_estimator": "poisson"}}}})
>>> len(estimator.estimators), sorted(estimator.estimators[0].fields)
(5, ['amount', 'channel', 'n_items', 'tags'])

``{"type": "mixture", "k": K, "component": C}`` is shorthand for ``K`` copies of ``C``. A spec *file*
may wrap the estimator with fit options: ``{"estimator": {...}, "fit": {"max_its": 100, ...}}``.

Saved models carry a format name and version; they load through each family's constructor, so
parameters are validated on the way in, and float64 values round-trip exactly.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import mixle_spark.stats  # noqa: F401  (registers every family)
from mixle_spark._files import read_bytes_bounded
from mixle_spark._locations import scheme_of
from mixle_spark._outputs import read_location, write_file
from mixle_spark._version import __version__
from mixle_spark.errors import ModelFormatError, SpecError, TooLargeError, did_you_mean
from mixle_spark.stats.base import Distribution, Estimator, distribution_from_dict, estimator_from_dict

__all__ = [
    "FIT_OPTIONS",
    "MAX_COMPONENTS",
    "MAX_INTEGER_DIGITS",
    "MAX_MODEL_BYTES",
    "MAX_NESTING",
    "MAX_SPEC_BYTES",
    "MAX_SPEC_NODES",
    "MODEL_FORMAT",
    "MODEL_FORMAT_VERSION",
    "ModelSpec",
    "estimator_from_spec",
    "is_job_spec",
    "is_model_file",
    "load_model",
    "load_spec",
    "loads_checked",
    "model_from_dict",
    "model_from_json",
    "model_to_dict",
    "model_to_json",
    "save_model",
]

MODEL_FORMAT = "mixle_spark.model"
MODEL_FORMAT_VERSION = 1
FIT_OPTIONS = ("max_its", "tol", "delta", "init", "init_steps", "init_p", "seed", "trials", "print_iter")
"""The options a spec's fit section may give: fields of :class:`~mixle_spark.em.options.FitOptions`,
which declares their checks, and ``trials`` (``best_of``'s restarts). The fit job's flags of the same
names override them; the ML Params that stand for them are ``mixle_spark.ml``'s ``FIT_OPTION_PARAMS``."""

MAX_COMPONENTS = 100_000
"""Most components (or hidden states) a spec's ``k`` may ask for; more is refused before anything is
built (the memory a fit needs for its components is checked against the data when it starts)."""
MAX_SPEC_NODES = 1_000_000
"""Most components a spec may expand to, nested ones counted in every copy (k=1000 of k=1000 is
10^6); more is refused before any is built."""
MAX_NESTING = 100
"""Deepest nesting of JSON objects and arrays in a spec or a saved model (real ones are rarely 20
deep); deeper is refused before it is built, rather than running out of Python's recursion limit."""
MAX_INTEGER_DIGITS = 308
"""Most digits an integer in a spec or a model file may have: any such integer is a finite float64
(the largest is about 1.8e308), and the labels, counts and seeds mixle_spark writes are far shorter.
A longer one is refused when the file is read, naming the file and the place (Python alone refuses
integers of more than 4,300 digits, naming neither; one of 309 to 4,300 digits would overflow a
float parameter)."""
MAX_SPEC_BYTES = 16 * 2**20
"""Largest spec file read (16 MiB); larger is refused before it is read whole."""
MAX_MODEL_BYTES = 256 * 2**20
"""Largest model file :func:`load_model` reads by default (256 MiB); larger is refused before it is
read whole (pass ``max_bytes`` to read a larger one)."""


def _check_nesting(value: Any, where: str, error: type[Exception]) -> None:
    """Refuse ``value`` when its objects / arrays nest deeper than :data:`MAX_NESTING` (walked
    without recursion, so the check itself cannot overflow the stack)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > MAX_NESTING:
            raise error(
                f"{where} nests objects and arrays more than {MAX_NESTING} deep; the limit is {MAX_NESTING}"
            )
        stack.extend((child, depth + 1) for child in children if isinstance(child, Mapping | list | tuple))


class _NumberOutOfRange(ValueError):
    """A number literal :func:`_parse_json` refuses: the literal as written and what was expected."""

    def __init__(self, literal: str, expected: str, got: str) -> None:
        super().__init__(literal)
        self.literal, self.expected, self.got = literal, expected, got


def _parse_int(literal: str) -> int:
    digits = len(literal) - literal.startswith("-")
    if digits > MAX_INTEGER_DIGITS:
        raise _NumberOutOfRange(
            literal,
            f"a number of at most {MAX_INTEGER_DIGITS} digits (float64's range)",
            f"an integer of {digits:,} digits ({_clipped(literal)})",
        )
    return int(literal)


def _parse_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):  # never written (json writes a float's repr); an option or parameter is finite
        raise _NumberOutOfRange(
            literal, "a number within float64's range (about ±1.8e308)", _clipped(literal)
        )
    return value


def _clipped(literal: str) -> str:
    return literal if len(literal) <= 24 else f"{literal[:10]}...{literal[-10:]}"


def _place(text: str | bytes, literal: str) -> str:
    """`` at line L, column C`` of ``literal`` as a JSON number in ``text`` (empty if not found)."""
    if isinstance(text, bytes):
        text = text.decode(json.detect_encoding(text), errors="replace")
    found = re.search(r"(?<![^\s:\[,])" + re.escape(literal) + r"(?![^\s,\]}])", text)
    if found is None:
        return ""
    start = found.start()
    line, column = text.count("\n", 0, start) + 1, start - text.rfind("\n", 0, start)
    return f" at line {line}, column {column}"


def loads_checked(text: str | bytes, where: str, error: type[Exception]) -> Any:
    """``json.loads`` whose numbers are checked: an integer of more than :data:`MAX_INTEGER_DIGITS`
    digits or a number beyond float64's range is refused as ``error`` naming ``where``, its line and
    column (Python's own refusal names neither); any other error is json's, for the caller to word."""
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float)
    except _NumberOutOfRange as err:
        raise error(f"{where}{_place(text, err.literal)}: expected {err.expected}, got {err.got}") from None


def _parse_json(text: str | bytes, where: str, error: type[Exception]) -> Any:
    """``json.loads`` with its errors named after ``where``; a document too deep for the parser is
    refused as too large, an integer of more than :data:`MAX_INTEGER_DIGITS` digits or a number beyond
    float64's range as ``error``, naming its line and column."""
    try:
        return loads_checked(text, where, error)
    except json.JSONDecodeError as err:
        raise error(f"{where} is not valid JSON: {err}") from None
    except UnicodeDecodeError as err:
        raise error(f"{where} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    except RecursionError:
        raise TooLargeError(
            f"{where} nests objects and arrays more than {MAX_NESTING} deep; the limit is {MAX_NESTING}"
        ) from None


# Families with a "K copies of one spec" shorthand: type -> (list key, copy key).
_SHORTHANDS = {"mixture": ("components", "component"), "hidden_markov": ("estimators", "emission")}


def _expand_shorthand(spec: Any) -> Any:
    """Expand ``{"type": "mixture", "k": K, "component": C}`` into K copies of C (and
    ``{"type": "hidden_markov", "k": K, "emission": E}`` into K emission estimators), recursively."""
    if isinstance(spec, list):
        return [_expand_shorthand(s) for s in spec]
    if not isinstance(spec, Mapping):
        return spec
    out = {k: _expand_shorthand(v) for k, v in spec.items()}
    family = str(out.get("type", "")).lower()
    if family in _SHORTHANDS and ("k" in out or _SHORTHANDS[family][1] in out):
        many, one = _SHORTHANDS[family]
        if "k" not in out or one not in out:
            raise SpecError(f"{family} shorthand needs both 'k' and '{one}'")
        if many in out:
            raise SpecError(f"{family} spec: give either '{many}' or 'k' with '{one}', not both")
        k = out.pop("k")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise SpecError(f"{family} spec: k must be a positive integer, got {k!r}")
        if k > MAX_COMPONENTS:
            raise TooLargeError(
                f"{family} spec: k = {k:,} is more than the {MAX_COMPONENTS:,} components allowed"
            )
        out[many] = [out.pop(one)] * k
    return out


def estimator_from_spec(spec: Mapping[str, Any] | str) -> Estimator:
    """Build an estimator from a spec dict or family name (see module docstring)."""
    _check_nesting(spec, "the spec", TooLargeError)
    expanded = _expand_shorthand(spec)
    nodes = _spec_nodes(expanded, {})
    if nodes > MAX_SPEC_NODES:  # shorthands inside shorthands multiply: k=1000 of k=1000 is 10^6
        raise TooLargeError(
            f"the spec expands to {nodes:,} components (its k shorthands multiply); the limit is "
            f"{MAX_SPEC_NODES:,}"
        )
    return estimator_from_dict(expanded)


def _spec_nodes(spec: Any, seen: dict[int, int]) -> int:
    """Entries of lists (components, states: what a shorthand copies) in an expanded spec, every copy
    counted with what it holds; the copies share one object, measured once (``seen``), so this is
    fast whatever k is."""
    known = seen.get(id(spec))
    if known is not None:
        return known
    if isinstance(spec, Mapping):
        count = sum(_spec_nodes(v, seen) for v in spec.values())
    elif isinstance(spec, list | tuple):
        count = sum(1 + _spec_nodes(v, seen) for v in spec)
    else:
        count = 0
    seen[id(spec)] = count
    return count


def is_job_spec(spec: Any) -> bool:
    """Whether ``spec`` is a spec file's whole content (``{"estimator": ..., "fit": ...}``) rather
    than an estimator spec: an estimator spec has a ``"type"`` (a sequence's also has an
    ``"estimator"``).

    >>> is_job_spec({"estimator": "gaussian", "fit": {"max_its": 5}})
    True
    >>> is_job_spec({"type": "sequence", "estimator": "categorical"})
    False
    """
    return isinstance(spec, Mapping) and "estimator" in spec and "type" not in spec


@dataclass
class ModelSpec:
    """A spec file: the estimator plus fit options (``max_its``, ``delta``, ``init_p``, ``seed``, ...)."""

    estimator: Estimator
    fit: dict[str, Any] = field(default_factory=dict)
    description: str = ""


def load_spec(source: str | os.PathLike[str] | Mapping[str, Any]) -> ModelSpec:
    """Read a spec file (path) or dict: either a bare estimator spec or
    ``{"estimator": ..., "fit": {...}, "description": "..."}``."""
    if isinstance(source, Mapping):
        raw: Any = dict(source)
        where = "spec"
    else:
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(f"model spec file not found: {path}")
        text = read_bytes_bounded(path, MAX_SPEC_BYTES, f"model spec {path}", TooLargeError)
        raw = _parse_json(text, f"model spec {path}", SpecError)
        where = str(path)
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    if not is_job_spec(raw):
        return ModelSpec(estimator_from_spec(raw))
    keys = ("estimator", "fit", "description")
    unknown = set(raw) - set(keys)
    if unknown:
        hint = did_you_mean(unknown, keys)
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}{hint}; expected {', '.join(keys)}")
    fit = dict(raw.get("fit") or {})
    bad = set(fit) - set(FIT_OPTIONS)
    if bad:
        raise SpecError(
            f"{where}: unknown fit option(s) {sorted(bad)}{did_you_mean(bad, FIT_OPTIONS)}; "
            f"expected one of {', '.join(FIT_OPTIONS)}"
        )
    _check_fit_section(fit, where)
    return ModelSpec(estimator_from_spec(raw["estimator"]), fit, str(raw.get("description", "")))


def _check_fit_section(fit: Mapping[str, Any], where: str) -> None:
    """A spec's fit options checked as ``optimize`` checks them (:class:`~mixle_spark.em.options.
    FitOptions` declares each option's check; ``trials`` is ``best_of``'s), when the spec is read."""
    from mixle_spark.em.options import FitOptions, check_trials

    if fit.get("tol") is not None and fit.get("delta") is not None:
        raise SpecError(
            f"{where}: fit section: give one stopping rule, 'tol' (a gain per row) or 'delta' (a gain "
            f"of the total log-likelihood), not both (got tol={fit['tol']!r}, delta={fit['delta']!r})"
        )
    try:
        FitOptions(**{name: value for name, value in fit.items() if name != "trials"})
        if "trials" in fit:
            check_trials(fit["trials"])
    except (TypeError, ValueError) as err:
        raise SpecError(f"{where}: fit section: {err}") from None


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as JSON")


def model_to_dict(model: Distribution) -> dict[str, Any]:
    """The model with its format header, as JSON-able data; with the sufficient statistics it was
    estimated from when it keeps them (``statistics``: :class:`~mixle_spark.em.statistics.Statistics`)
    and what the update that made it did (``update``: an ``UpdateResult``); a reader that predates
    them ignores those entries."""
    out = {
        "format": MODEL_FORMAT,
        "format_version": MODEL_FORMAT_VERSION,
        "mixle_spark_version": __version__,
        "model": model.to_dict(),
    }
    if model.statistics is not None:
        out["statistics"] = model.statistics.to_dict()
    if model.update_result is not None:
        out["update"] = model.update_result.to_dict()
    return out


def model_to_json(model: Distribution, indent: int | None = None) -> str:
    """The model as strict JSON (no NaN / inf; float64 values round-trip exactly)."""
    try:
        return json.dumps(model_to_dict(model), indent=indent, allow_nan=False, default=_json_default)
    except ValueError as err:
        bad = model.nonfinite_parameters()
        raise ModelFormatError(f"cannot save a model with non-finite parameters {bad}: {err}") from None


def model_from_dict(payload: Mapping[str, Any]) -> Distribution:
    """Rebuild a model from :func:`model_to_dict` output (validating format and version)."""
    if not isinstance(payload, Mapping) or payload.get("format") != MODEL_FORMAT:
        found = payload.get("format") if isinstance(payload, Mapping) else type(payload).__name__
        raise ModelFormatError(f"not a mixle_spark model: expected format {MODEL_FORMAT!r}, got {found!r}")
    version = payload.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise ModelFormatError(f"bad model format_version {version!r}")
    if version > MODEL_FORMAT_VERSION:
        raise ModelFormatError(
            f"model was written with format version {version} (mixle_spark "
            f"{payload.get('mixle_spark_version', '?')}); this mixle_spark {__version__} reads versions "
            f"up to {MODEL_FORMAT_VERSION}: upgrade mixle_spark to load it"
        )
    if "model" not in payload:
        raise ModelFormatError("model file has no 'model' entry")
    _check_nesting(payload["model"], "the model", TooLargeError)
    try:
        model = distribution_from_dict(payload["model"])
    except SpecError as err:
        raise ModelFormatError(f"invalid model: {err}") from err
    if payload.get("statistics") is not None:
        from mixle_spark.em.statistics import Statistics

        _check_nesting(payload["statistics"], "the model's statistics", TooLargeError)
        statistics = Statistics.from_dict(payload["statistics"])
        statistics.check_fits(model)
        model.statistics = statistics
    if isinstance(payload.get("update"), Mapping):
        from mixle_spark.em.incremental import UpdateResult

        try:
            model.update_result = UpdateResult.from_dict(payload["update"])
        except (TypeError, ValueError) as err:
            raise ModelFormatError(f"the model's update record: {err}") from None
    return model


def model_from_json(text: str | bytes, source: str = "model") -> Distribution:
    """Rebuild a model from :func:`model_to_json` output (``source`` names it in errors)."""
    return model_from_dict(_parse_json(text, source, ModelFormatError))


_MODEL_HEAD = re.compile(rb'\s*\{\s*"format"\s*:\s*"mixle_spark\.model"')


def is_model_file(head: bytes) -> bool:
    """Whether a file starting with ``head`` is a model :func:`save_model` wrote."""
    return _MODEL_HEAD.match(head) is not None


def save_model(model: Distribution, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path | str:
    """Write the model as JSON to ``path`` (a local path, or a URI such as ``dbfs:/...``, ``s3://...``:
    :func:`mixle_spark._locations.resolve`), whole or not at all.

    An existing file is replaced only with ``overwrite`` and only when it is a model file; anything
    else there (another file, a directory, a symbolic link) is refused and kept. Returns the path
    (a :class:`~pathlib.Path` for a local one, else the URI).
    """
    shown = write_file(
        path,
        model_to_json(model, indent=2) + "\n",
        what="model file",
        ours=is_model_file,
        claim="is not a mixle_spark model file",
        overwrite=overwrite,
    )
    location_is_local = scheme_of(shown) in (None, "file")
    return Path(path) if location_is_local else shown


def load_model(path: str | os.PathLike[str], *, max_bytes: int = MAX_MODEL_BYTES) -> Distribution:
    """Read a model written by :func:`save_model` from a local path or a URI (a file larger than
    ``max_bytes`` is refused)."""
    source = f"model {os.fspath(path)}"
    return model_from_json(read_location(path, max_bytes, "model file", TooLargeError, "model"), source)
