"""What a fit of :class:`~mixle_spark.ml.MixleEstimator` runs, from its Params and a DataFrame schema.

:func:`fit_plan` turns the Params (:class:`~mixle_spark.ml._params.MixleParams`) and the DataFrame's
columns into the estimator to fit, the columns it reads and the fit options (a Param set explicitly,
else the spec's fit section, else the Param's default), checking the combinations a single Param
cannot (``inputCols`` with ``featuresCol``, ``k`` against a mixture ``modelSpec``, missing columns).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mixle_spark.engines import Compute
from mixle_spark.errors import SchemaError, SpecError, did_you_mean
from mixle_spark.ml._compute_params import checked_compute
from mixle_spark.ml._params import FIT_OPTION_PARAMS, MixleParams, fit_value
from mixle_spark.spec import estimator_from_spec, is_job_spec
from mixle_spark.stats.base import Estimator

__all__ = ["FitPlan", "fit_plan", "spec_parts"]


@dataclass(frozen=True)
class FitPlan:
    """What a fit reads and how it runs: the estimator, the single column a non-record model reads
    (else None), every column read, ``optimize``'s options (``max_its``, ``delta``, ``init``,
    ``init_steps``, ``init_p``, ``seed``), the restarts (``trials``), the Params whose value
    came from the spec's fit section (``from_spec``: Param name -> value) and the engine and
    precision the data is encoded for (``compute``)."""

    estimator: Estimator
    column: str | None
    columns: list[str]
    options: dict[str, Any] = field(default_factory=dict)
    trials: int = 1
    from_spec: dict[str, Any] = field(default_factory=dict)
    compute: Compute = field(default_factory=Compute)

    def backend_options(self, params: MixleParams) -> dict[str, Any]:
        """``encoded_data``'s keywords for a fit or an update with ``params``: the spark backend,
        ``numPartitions``, ``weightCol``, ``aggregationDepth``, the column a non-record model reads and
        the engine and precision (``engine`` / ``precision`` or the spec's, when not numpy in float64)."""
        options: dict[str, Any] = {
            "backend": "spark",
            "num_chunks": params._optional(params.numPartitions),
            "weights": params._optional(params.weightCol),
            "depth": params.getAggregationDepth(),
        }
        if self.column is not None:
            options["column"] = self.column
        if not self.compute.default:
            options.update(engine=self.compute.engine, precision=self.compute.precision)
        return options


def spec_parts(spec_text: str | None) -> tuple[Any, dict[str, Any]]:
    """The estimator part (None without a spec) and the fit section of a stored ``modelSpec``."""
    spec: Any = json.loads(spec_text) if spec_text is not None else None
    if is_job_spec(spec):
        return spec["estimator"], dict(spec.get("fit") or {})
    return spec, {}


def _fit_options(params: MixleParams, fit: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``optimize``'s options: a Param set explicitly wins, then the fit section, then the Param's
    default; and the Params whose value came from the fit section."""
    options, from_spec = {}, {}
    for option, name in FIT_OPTION_PARAMS.items():
        param = params.getParam(name)
        if option in fit and not params.isSet(param):
            options[option] = from_spec[name] = fit_value(option, fit[option])
        else:
            options[option] = params.getOrDefault(param)
    if fit.get("delta") is not None and "tol" not in fit and not params.isSet(params.tol):
        options["delta"] = fit_value("delta", fit["delta"])  # the spec's total-gain rule
        options.pop("tol")
    options["init"] = "random" if options["init"] == "random" else "kmeans||"  # optimize's spelling
    return options, from_spec


def _spec_dict(spec: Any) -> dict[str, Any]:
    return dict(spec) if isinstance(spec, Mapping) else {"type": str(spec)}


def _is(spec: Mapping[str, Any], family: str) -> bool:
    return str(spec.get("type", "")).lower() == family


def _mixture_spec(params: MixleParams, component: dict[str, Any]) -> dict[str, Any]:
    k = params.getK()
    candidates = isinstance(k, list)
    if not _is(component, "mixture"):
        return {"type": "mixture", "k": max(k) if candidates else k, "component": component}
    count = len(component["components"]) if "components" in component else component.get("k")
    if params.isSet(params.k) and not candidates and count != k:
        raise SpecError(
            f"param 'k' = {params.getK()} contradicts param 'modelSpec', a mixture of {count} "
            "components; leave k unset or make them agree"
        )
    return component


def fit_plan(params: MixleParams, columns: Sequence[str]) -> FitPlan:
    """The estimator to fit, the columns it reads and how the fit runs, from ``params`` and the
    DataFrame's columns.

    Without ``modelSpec`` the component is a full-covariance Gaussian over ``featuresCol`` (what
    MLlib's GaussianMixture fits), or with ``inputCols`` a record of one Gaussian per column. A
    ``modelSpec`` (its estimator part, for a full spec) that is not a mixture is the component,
    repeated ``k`` times; with ``inputCols`` a non-record component is used for every column. The
    spec's fit section gives a fit option whose Param is not set.
    """
    input_cols = params._optional(params.inputCols)
    spec, fit = spec_parts(params._optional(params.modelSpec))
    if input_cols is not None and params.isSet(params.featuresCol):
        raise SpecError(
            f"set either param 'featuresCol' ({params.getFeaturesCol()!r}) or param 'inputCols' "
            f"({input_cols!r}), not both"
        )
    default = "multivariate_gaussian" if input_cols is None else "gaussian"
    component = _spec_dict(spec if spec is not None else default)
    if input_cols is not None and not _is(component, "record") and not _is(component, "mixture"):
        component = {"type": "record", "fields": {name: component for name in input_cols}}
    mixture = _mixture_spec(params, component)
    form = params.getCovarianceType()
    if isinstance(form, str):  # one form; a list is chosen from with k (select_k)
        mixture = {**mixture, "covariance": form}
    label = params.getLabelCol()
    if label is not None:  # partly labelled: the components' column is featuresCol unless they name theirs
        plain = estimator_from_spec(mixture)
        unnamed = plain.encoder().column_names() is None
        mixture = {
            **mixture,
            "label_column": label,
            **({"data_column": params.getFeaturesCol()} if unnamed else {}),
        }
    estimator = estimator_from_spec(mixture)
    column, reads = _reads(params, estimator, columns)
    options, from_spec = _fit_options(params, fit)
    compute, compute_from_spec = checked_compute(params, fit)
    trials = fit_value("trials", fit.get("trials", 1))
    return FitPlan(estimator, column, reads, options, trials, {**from_spec, **compute_from_spec}, compute)


def _reads(params: MixleParams, estimator: Estimator, columns: Sequence[str]) -> tuple[str | None, list[str]]:
    """The single column a non-record model reads (else None) and every column read, checked
    against the Params and the DataFrame's columns."""
    input_cols = params._optional(params.inputCols)
    reads = estimator.encoder().column_names()
    if input_cols is not None and (reads is None or set(reads) != set(input_cols)):
        raise SpecError(
            f"param 'modelSpec' reads columns {reads if reads is not None else 'none by name'}, but "
            f"param 'inputCols' is {input_cols!r}; a record spec's fields must be the inputCols"
        )
    weight = params._optional(params.weightCol)
    if weight is not None and weight not in columns:
        raise SchemaError(
            f"param 'weightCol': column {weight!r} not found{did_you_mean(weight, columns)}; "
            f"the DataFrame has {list(columns)}"
        )
    if reads is None:
        feature = params.getFeaturesCol()
        if feature not in columns:
            raise SchemaError(
                f"param 'featuresCol': column {feature!r} not found{did_you_mean(feature, columns)}; "
                f"the DataFrame has {list(columns)}"
            )
        return feature, [feature]
    missing = [name for name in reads if name not in columns]
    if missing:
        which = "inputCols" if input_cols is not None else "modelSpec"
        raise SchemaError(
            f"param {which!r}: column(s) {missing} not found{did_you_mean(missing, columns)}; "
            f"the DataFrame has {list(columns)}"
        )
    return None, list(reads)
