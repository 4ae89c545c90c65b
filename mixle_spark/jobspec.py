"""Spec files: an estimator spec, or ``{"estimator": ..., "fit": {...}, "description": "..."}`` (the
estimator with the fit options the fit job and ``MixleEstimator(modelSpec=...)`` run it with).

The estimator is built by :func:`~mixle_spark.spec.estimator_from_spec`; the fit section is checked
as ``optimize`` checks its options (:class:`~mixle_spark.em.options.FitOptions`) when the file is read,
its ``engine`` / ``precision`` as ``encoded_data`` checks them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mixle_spark._files import read_bytes_bounded
from mixle_spark.em.options import FitOptions, check_trials
from mixle_spark.engines import available_engines, resolve_compute
from mixle_spark.errors import SpecError, TooLargeError, did_you_mean
from mixle_spark.spec.estimators import estimator_from_spec
from mixle_spark.spec.json_text import MAX_SPEC_BYTES, parse_json
from mixle_spark.stats.base import Estimator

__all__ = ["COMPUTE_OPTIONS", "FIT_OPTIONS", "ModelSpec", "is_job_spec", "load_spec"]

FIT_OPTIONS = (
    "max_its",
    "tol",
    "delta",
    "init",
    "init_steps",
    "init_p",
    "seed",
    "trials",
    "print_iter",
    "engine",
    "precision",
)
"""The options a spec's fit section may give: fields of :class:`~mixle_spark.em.options.FitOptions`,
which declares their checks, ``trials`` (``best_of``'s restarts), and ``engine`` / ``precision`` (the
compute engine and the precision the data is stored and the E-step computed in, ``encoded_data``'s
controls: :mod:`mixle_spark.engines`). The fit job's flags of the same names override them; the ML
Params that stand for them are ``mixle_spark.ml``'s ``FIT_OPTION_PARAMS`` (and ``engine`` /
``precision``)."""

COMPUTE_OPTIONS = ("engine", "precision")
"""The fit section's keys that go to ``encoded_data`` rather than to the EM driver."""


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
        raw = parse_json(text, f"model spec {path}", SpecError)
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


def _check_fit_section(fit: dict[str, Any], where: str) -> None:
    """A spec's fit options checked as ``optimize`` checks them (:class:`~mixle_spark.em.options.
    FitOptions` declares each option's check; ``trials`` is ``best_of``'s), when the spec is read."""
    if fit.get("tol") is not None and fit.get("delta") is not None:
        raise SpecError(
            f"{where}: fit section: give one stopping rule, 'tol' (a gain per row) or 'delta' (a gain "
            f"of the total log-likelihood), not both (got tol={fit['tol']!r}, delta={fit['delta']!r})"
        )
    try:
        FitOptions(**{name: value for name, value in fit.items() if name not in ("trials", *COMPUTE_OPTIONS)})
        if "trials" in fit:
            check_trials(fit["trials"])
        _check_compute(fit)
    except (TypeError, ValueError, ImportError) as err:
        raise SpecError(f"{where}: fit section: {err}") from None


def _check_compute(fit: dict[str, Any]) -> None:
    """The fit section's ``engine`` / ``precision`` checked as ``encoded_data`` checks them (an unknown
    engine, one not installed, naming its extra, a precision it cannot compute in) and given their
    canonical names (``"bf16"`` is ``"bfloat16"``)."""
    given = [key for key in COMPUTE_OPTIONS if fit.get(key) is not None]
    if not given:
        return
    engine = fit.get("engine")
    if engine is not None and not isinstance(engine, str):
        raise TypeError(f"engine must be an engine's name ({', '.join(available_engines())}), got {engine!r}")
    compute = resolve_compute(engine, fit.get("precision"))
    for key in given:
        fit[key] = getattr(compute, key)
