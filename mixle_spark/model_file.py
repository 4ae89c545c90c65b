"""Fitted models <-> JSON: the model file (:func:`save_model`, :func:`load_model`). Never pickle on disk.

A model file carries a format name and version; it loads through each family's constructor, so
parameters are validated on the way in, and float64 values round-trip exactly. Beside the model it
may hold the sufficient statistics it was estimated from (:class:`~mixle_spark.em.statistics.
Statistics`) and what the update that made it did (:class:`~mixle_spark.em.update_record.UpdateResult`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mixle_spark._locations import scheme_of
from mixle_spark._outputs import read_location, write_file
from mixle_spark._version import __version__
from mixle_spark.em.statistics import Statistics
from mixle_spark.em.update_record import UpdateResult
from mixle_spark.errors import ModelFormatError, SpecError, TooLargeError
from mixle_spark.spec.json_text import check_nesting, parse_json
from mixle_spark.stats.base import Distribution, distribution_from_dict

__all__ = [
    "MAX_MODEL_BYTES",
    "MODEL_FORMAT",
    "MODEL_FORMAT_VERSION",
    "is_model_file",
    "load_model",
    "model_from_dict",
    "model_from_json",
    "model_to_dict",
    "model_to_json",
    "save_model",
]

MODEL_FORMAT = "mixle_spark.model"
MODEL_FORMAT_VERSION = 1
MAX_MODEL_BYTES = 256 * 2**20
"""Largest model file :func:`load_model` reads by default (256 MiB); larger is refused before it is
read whole (pass ``max_bytes`` to read a larger one)."""


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
    check_nesting(payload["model"], "the model", TooLargeError)
    try:
        model = distribution_from_dict(payload["model"])
    except SpecError as err:
        raise ModelFormatError(f"invalid model: {err}") from err
    if payload.get("statistics") is not None:
        check_nesting(payload["statistics"], "the model's statistics", TooLargeError)
        statistics = Statistics.from_dict(payload["statistics"])
        statistics.check_fits(model)
        model.statistics = statistics
    if isinstance(payload.get("update"), Mapping):
        try:
            model.update_result = UpdateResult.from_dict(payload["update"])
        except (TypeError, ValueError) as err:
            raise ModelFormatError(f"the model's update record: {err}") from None
    return model


def model_from_json(text: str | bytes, source: str = "model") -> Distribution:
    """Rebuild a model from :func:`model_to_json` output (``source`` names it in errors)."""
    return model_from_dict(parse_json(text, source, ModelFormatError))


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
