"""Params shared by :class:`~mixle_spark.ml.MixleEstimator` and :class:`~mixle_spark.ml.MixleModel`.

The names and defaults of ``pyspark.ml.clustering.GaussianMixture`` (``featuresCol``,
``predictionCol``, ``probabilityCol``, ``k=2``, ``maxIter=100``, ``tol=0.01``, ``seed``,
``aggregationDepth=2``, ``weightCol``), pyspark.ml ``KMeans``'s ``initMode`` and ``initSteps``, plus
ours (``inputCols``, ``modelSpec``, ``initFraction``, ``numPartitions``, ``logLikelihoodCol``). Every
Param's type converter also validates, so a bad value is refused when it is set, with a message naming
the Param and the value.

:func:`fit_plan` turns the Params and a DataFrame schema into the estimator to fit and the columns
it reads, checking the combinations a single Param cannot (``inputCols`` with ``featuresCol``,
``k`` against a mixture ``modelSpec``, missing columns).
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.ml.param import Param, Params
from pyspark.ml.param.shared import (
    HasAggregationDepth,
    HasFeaturesCol,
    HasMaxIter,
    HasPredictionCol,
    HasProbabilityCol,
    HasSeed,
    HasTol,
    HasWeightCol,
)

from mixle_spark.errors import SchemaError, SpecError, describe_value
from mixle_spark.spec import estimator_from_spec
from mixle_spark.stats.base import Estimator

__all__ = ["DEFAULT_SEED", "FitPlan", "MixleParams", "fit_plan"]

DEFAULT_SEED = zlib.crc32(b"mixle_spark.ml.MixleEstimator")
"""The default ``seed``: fixed, unlike pyspark's ``hash(class name)``, which changes per process."""


def _int_param(name: str, minimum: int) -> Callable[[Any], int]:
    expected = f"an integer >= {minimum}"

    def convert(value: Any) -> int:
        integral = hasattr(value, "__index__") or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not integral:
            raise TypeError(f"param {name!r}: expected {expected}, got {describe_value(value)}")
        if int(value) < minimum:
            raise SpecError(f"param {name!r}: expected {expected}, got {int(value)}")
        return int(value)

    return convert


def _float_param(name: str, check: Callable[[float], bool], expected: str) -> Callable[[Any], float]:
    def convert(value: Any) -> float:
        if isinstance(value, str | bool) or not hasattr(value, "__float__"):
            raise TypeError(f"param {name!r}: expected {expected}, got {describe_value(value)}")
        number = float(value)
        if not (math.isfinite(number) and check(number)):
            raise SpecError(f"param {name!r}: expected {expected}, got {number!r}")
        return number

    return convert


def _k_param(value: Any) -> int | list[int]:
    """``k``: a number of components (>= 1), or a list of candidates for :func:`select_k`."""
    if isinstance(value, list | tuple):
        if not value:
            raise SpecError("param 'k': expected an integer >= 1 or a non-empty list of them, got []")
        convert = _int_param("k", 1)
        return sorted({convert(v) for v in value})
    return _int_param("k", 1)(value)


SELECTION_CRITERIA = ("bic", "aic")
"""``selectionCriterion`` values: how a list of ``k`` is decided."""


def _criterion(value: Any) -> str:
    if not isinstance(value, str) or value not in SELECTION_CRITERIA:
        valid = ", ".join(map(repr, SELECTION_CRITERIA))
        raise SpecError(f"param 'selectionCriterion': expected one of {valid}, got {describe_value(value)}")
    return value


INIT_MODES = ("k-means||", "random")
"""``initMode`` values, spelled as pyspark.ml ``KMeans`` spells them (``"kmeans||"`` is accepted too)."""


def _init_mode(value: Any) -> str:
    if value == "kmeans||":
        value = "k-means||"
    if not isinstance(value, str) or value not in INIT_MODES:
        valid = ", ".join(map(repr, INIT_MODES))
        raise SpecError(f"param 'initMode': expected one of {valid}, got {describe_value(value)}")
    return value


def _column_param(name: str, allow_empty: bool) -> Callable[[Any], str]:
    expected = "a column name" + (" (or '' to leave the column out)" if allow_empty else "")

    def convert(value: Any) -> str:
        if not isinstance(value, str):
            raise TypeError(f"param {name!r}: expected {expected}, got {describe_value(value)}")
        if not value and not allow_empty:
            raise SpecError(f"param {name!r}: expected {expected}, got ''")
        return value

    return convert


def _input_cols(value: Any) -> list[str]:
    expected = "a non-empty list of distinct column names"
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(f"param 'inputCols': expected {expected}, got {describe_value(value)}")
    names = list(value)
    if not names or not all(isinstance(v, str) and v for v in names) or len(set(names)) != len(names):
        raise SpecError(f"param 'inputCols': expected {expected}, got {names!r}")
    return names


def _model_spec(value: Any) -> str:
    """A spec dict, JSON text, family name or mixle Estimator -> canonical JSON (validated)."""
    if isinstance(value, Estimator):
        spec: Any = value.to_dict()
    elif isinstance(value, Mapping):
        spec = dict(value)
    elif isinstance(value, str):
        try:
            spec = json.loads(value)
        except json.JSONDecodeError:
            spec = value.strip()  # a bare family name such as "gaussian"
    else:
        raise TypeError(
            "param 'modelSpec': expected a spec dict, JSON text, a family name or a mixle_spark "
            f"Estimator, got {describe_value(value)}"
        )
    try:
        estimator_from_spec(spec)
    except (SpecError, TypeError, ValueError) as err:
        raise SpecError(f"param 'modelSpec': invalid model spec {describe_value(value)}: {err}") from err
    return json.dumps(spec, sort_keys=True)


class MixleParams(
    HasFeaturesCol,
    HasPredictionCol,
    HasProbabilityCol,
    HasMaxIter,
    HasTol,
    HasSeed,
    HasAggregationDepth,
    HasWeightCol,
):
    """Params of :class:`MixleEstimator` and :class:`MixleModel` (validated when set)."""

    featuresCol: Param[str] = Param(
        Params._dummy(),
        "featuresCol",
        "features column: an ML Vector or array<double> column (or the one column modelSpec reads).",
        typeConverter=_column_param("featuresCol", allow_empty=False),
    )
    predictionCol: Param[str] = Param(
        Params._dummy(),
        "predictionCol",
        "output column of the most probable component (int); '' leaves it out.",
        typeConverter=_column_param("predictionCol", allow_empty=True),
    )
    probabilityCol: Param[str] = Param(
        Params._dummy(),
        "probabilityCol",
        "output column of the component probabilities (ML Vector); '' leaves it out.",
        typeConverter=_column_param("probabilityCol", allow_empty=True),
    )
    weightCol: Param[str] = Param(
        Params._dummy(),
        "weightCol",
        "non-negative row weight column; unset means every row weighs 1.",
        typeConverter=_column_param("weightCol", allow_empty=False),
    )
    k: Param[Any] = Param(
        Params._dummy(),
        "k",
        "number of mixture components (>= 1), or a list of candidates: the fit keeps the best by "
        "selectionCriterion (mixle_spark.model_selection.select_k).",
        typeConverter=_k_param,
    )
    selectionCriterion: Param[str] = Param(
        Params._dummy(),
        "selectionCriterion",
        "how a list of k is decided: 'bic' (default) or 'aic', lowest wins.",
        typeConverter=_criterion,
    )
    maxIter: Param[int] = Param(
        Params._dummy(),
        "maxIter",
        "most EM iterations (>= 0).",
        typeConverter=_int_param("maxIter", 0),
    )
    tol: Param[float] = Param(
        Params._dummy(),
        "tol",
        "stop when the gain of the total (weighted) log-likelihood is in [0, tol) (>= 0).",
        typeConverter=_float_param("tol", lambda v: v >= 0, "a finite number >= 0"),
    )
    seed: Param[int] = Param(
        Params._dummy(),
        "seed",
        "seed of the random initial model.",
        typeConverter=_int_param("seed", -(2**63)),
    )
    aggregationDepth: Param[int] = Param(
        Params._dummy(),
        "aggregationDepth",
        "depth of the tree merging partition statistics (>= 1).",
        typeConverter=_int_param("aggregationDepth", 1),
    )
    inputCols: Param[list[str]] = Param(
        Params._dummy(),
        "inputCols",
        "named input columns, one record field each, instead of a features vector.",
        typeConverter=_input_cols,
    )
    modelSpec: Param[str] = Param(
        Params._dummy(),
        "modelSpec",
        "mixle_spark model spec (JSON): a mixture, or the component model repeated k times.",
        typeConverter=_model_spec,
    )
    initFraction: Param[float] = Param(
        Params._dummy(),
        "initFraction",
        "fraction of rows the random initial model is drawn from, in (0, 1].",
        typeConverter=_float_param("initFraction", lambda v: 0 < v <= 1, "a number in (0, 1]"),
    )
    initMode: Param[str] = Param(
        Params._dummy(),
        "initMode",
        "how EM starts: 'k-means||' (k-means|| seeding, as pyspark.ml KMeans) or 'random' (random "
        "responsibilities over an initFraction sample of rows).",
        typeConverter=_init_mode,
    )
    initSteps: Param[int] = Param(
        Params._dummy(),
        "initSteps",
        "k-means|| rounds, one pass over the data each (>= 1).",
        typeConverter=_int_param("initSteps", 1),
    )
    numPartitions: Param[int] = Param(
        Params._dummy(),
        "numPartitions",
        "repartition the encoded training data into this many partitions (>= 1).",
        typeConverter=_int_param("numPartitions", 1),
    )
    logLikelihoodCol: Param[str] = Param(
        Params._dummy(),
        "logLikelihoodCol",
        "output column of the per-row log-likelihood (double); '' leaves it out.",
        typeConverter=_column_param("logLikelihoodCol", allow_empty=True),
    )

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._setDefault(
            featuresCol="features",
            predictionCol="prediction",
            probabilityCol="probability",
            k=2,
            maxIter=100,
            tol=0.01,
            seed=DEFAULT_SEED,
            aggregationDepth=2,
            initFraction=0.1,
            initMode="k-means||",
            selectionCriterion="bic",
            initSteps=2,
            logLikelihoodCol="logLikelihood",
        )

    def getK(self) -> Any:
        """Gets the value of ``k`` (an int, or the list of candidates before a fit) or its default."""
        return self.getOrDefault(self.k)

    def getSelectionCriterion(self) -> str:
        """Gets the value of ``selectionCriterion`` or its default value."""
        return self.getOrDefault(self.selectionCriterion)

    def getInputCols(self) -> list[str]:
        """Gets the value of ``inputCols`` (raises KeyError when unset)."""
        return self.getOrDefault(self.inputCols)

    def getModelSpec(self) -> str:
        """Gets the value of ``modelSpec`` as canonical JSON (raises KeyError when unset)."""
        return self.getOrDefault(self.modelSpec)

    def getInitMode(self) -> str:
        """Gets the value of ``initMode`` or its default value."""
        return self.getOrDefault(self.initMode)

    def getInitSteps(self) -> int:
        """Gets the value of ``initSteps`` or its default value."""
        return self.getOrDefault(self.initSteps)

    def getInitFraction(self) -> float:
        """Gets the value of ``initFraction`` or its default value."""
        return self.getOrDefault(self.initFraction)

    def getNumPartitions(self) -> int:
        """Gets the value of ``numPartitions`` (raises KeyError when unset)."""
        return self.getOrDefault(self.numPartitions)

    def getLogLikelihoodCol(self) -> str:
        """Gets the value of ``logLikelihoodCol`` or its default value."""
        return self.getOrDefault(self.logLikelihoodCol)

    def _optional(self, param: Param[Any]) -> Any:
        return self.getOrDefault(param) if self.isDefined(param) else None


@dataclass(frozen=True)
class FitPlan:
    """What a fit reads: the estimator, the single column a non-record model reads (else None),
    and every column read."""

    estimator: Estimator
    column: str | None
    columns: list[str]


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
    """The estimator to fit and the columns it reads, from ``params`` and the DataFrame's columns.

    Without ``modelSpec`` the component is a full-covariance Gaussian over ``featuresCol`` (what
    MLlib's GaussianMixture fits), or with ``inputCols`` a record of one Gaussian per column. A
    ``modelSpec`` that is not a mixture is the component, repeated ``k`` times; with ``inputCols``
    a non-record component is used for every column.
    """
    input_cols = params._optional(params.inputCols)
    spec_text = params._optional(params.modelSpec)
    if input_cols is not None and params.isSet(params.featuresCol):
        raise SpecError(
            f"set either param 'featuresCol' ({params.getFeaturesCol()!r}) or param 'inputCols' "
            f"({input_cols!r}), not both"
        )
    default = "multivariate_gaussian" if input_cols is None else "gaussian"
    component = _spec_dict(json.loads(spec_text) if spec_text is not None else default)
    if input_cols is not None and not _is(component, "record") and not _is(component, "mixture"):
        component = {"type": "record", "fields": {name: component for name in input_cols}}
    estimator = estimator_from_spec(_mixture_spec(params, component))
    reads = estimator.encoder().column_names()
    if input_cols is not None and (reads is None or set(reads) != set(input_cols)):
        raise SpecError(
            f"param 'modelSpec' reads columns {reads if reads is not None else 'none by name'}, but "
            f"param 'inputCols' is {input_cols!r}; a record spec's fields must be the inputCols"
        )
    weight = params._optional(params.weightCol)
    if weight is not None and weight not in columns:
        raise SchemaError(
            f"param 'weightCol': column {weight!r} not found; the DataFrame has {list(columns)}"
        )
    if reads is None:
        feature = params.getFeaturesCol()
        if feature not in columns:
            raise SchemaError(
                f"param 'featuresCol': column {feature!r} not found; the DataFrame has {list(columns)}"
            )
        return FitPlan(estimator, feature, [feature])
    missing = [name for name in reads if name not in columns]
    if missing:
        which = "inputCols" if input_cols is not None else "modelSpec"
        raise SchemaError(
            f"param {which!r}: column(s) {missing} not found; the DataFrame has {list(columns)}"
        )
    return FitPlan(estimator, None, list(reads))
