"""Models and estimators as JSON: estimator specs -> estimators, fitted models <-> JSON, spec files.

An estimator spec is a dict with a ``"type"`` (a registered family name) and that family's keys, or
a bare family name (:func:`estimator_from_spec`, :mod:`mixle_spark.spec.estimators`);
``{"type": "mixture", "k": K, "component": C}`` is shorthand for ``K`` copies of ``C``. A spec *file*
may wrap the estimator with fit options: ``{"estimator": {...}, "fit": {"max_its": 100, ...}}``
(:func:`load_spec`, :mod:`mixle_spark.jobspec`).

Saved models carry a format name and version; they load through each family's constructor, so
parameters are validated on the way in, and float64 values round-trip exactly
(:func:`save_model`, :func:`load_model`, :mod:`mixle_spark.model_file`).

Every name below is importable from here. The estimator specs and the JSON limits are this package's
own and load no EM code; the spec files' names (whose fit section is checked by the EM driver's
options) and the model files' (which carry the statistics of an EM fit) are imported from
:mod:`mixle_spark.jobspec` and :mod:`mixle_spark.model_file` when first used (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixle_spark._lazy import lazy_exports
from mixle_spark.spec.estimators import MAX_COMPONENTS, MAX_SPEC_NODES, estimator_from_spec
from mixle_spark.spec.json_text import MAX_INTEGER_DIGITS, MAX_NESTING, MAX_SPEC_BYTES, loads_checked
from mixle_spark.stats.base import distribution_from_dict as distribution_from_dict  # as before
from mixle_spark.stats.base import estimator_from_dict as estimator_from_dict

if TYPE_CHECKING:
    from mixle_spark.jobspec import FIT_OPTIONS, ModelSpec, is_job_spec, load_spec
    from mixle_spark.model_file import (
        MAX_MODEL_BYTES,
        MODEL_FORMAT,
        MODEL_FORMAT_VERSION,
        is_model_file,
        load_model,
        model_from_dict,
        model_from_json,
        model_to_dict,
        model_to_json,
        save_model,
    )

_EXPORTS = {
    "FIT_OPTIONS": "mixle_spark.jobspec",
    "ModelSpec": "mixle_spark.jobspec",
    "is_job_spec": "mixle_spark.jobspec",
    "load_spec": "mixle_spark.jobspec",
    "MAX_MODEL_BYTES": "mixle_spark.model_file",
    "MODEL_FORMAT": "mixle_spark.model_file",
    "MODEL_FORMAT_VERSION": "mixle_spark.model_file",
    "is_model_file": "mixle_spark.model_file",
    "load_model": "mixle_spark.model_file",
    "model_from_dict": "mixle_spark.model_file",
    "model_from_json": "mixle_spark.model_file",
    "model_to_dict": "mixle_spark.model_file",
    "model_to_json": "mixle_spark.model_file",
    "save_model": "mixle_spark.model_file",
}
"""Each name imported on first use and the module that defines it."""


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)


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
