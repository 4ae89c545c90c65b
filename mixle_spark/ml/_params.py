"""Params shared by :class:`~mixle_spark.ml.MixleEstimator` and :class:`~mixle_spark.ml.MixleModel`.

The names and defaults of ``pyspark.ml.clustering.GaussianMixture`` (``featuresCol``, ``predictionCol``,
``probabilityCol``, ``k=2``, ``maxIter=100``, ``seed``, ``aggregationDepth=2``, ``weightCol``; ``tol``
is per row here, default 1e-6), pyspark.ml ``KMeans``'s ``initMode`` and ``initSteps``, plus ours
(``inputCols``, ``modelSpec``, ``initFraction``, ``numPartitions``, ``logLikelihoodCol``, ``engine``,
``precision``: :mod:`mixle_spark.ml._compute_params`). Every Param's
type converter also validates, so a bad value is refused when it is set, with a message naming the Param
and the value. A Param that stands for a fit option (:data:`FIT_OPTION_PARAMS`) or a backend control
(``numPartitions``, ``aggregationDepth``) runs that option's declared check, the one the Python API, a
spec's fit section and the fit job's flags run.

``modelSpec`` accepts a spec file path, a full spec (``{"estimator": ..., "fit": ...}``), an
estimator spec or a mixle Estimator, and stores canonical JSON; its errors are one line, with any
value they echo cut to :data:`ECHO_LIMIT` characters.

:func:`~mixle_spark.ml._fit_plan.fit_plan` turns the Params and a DataFrame schema into what to fit.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
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

from mixle_spark._checks import integer
from mixle_spark._files import read_bytes_bounded
from mixle_spark.em.options import TOL, option_check
from mixle_spark.errors import (
    SpecError,
    TooLargeError,
    UnknownNameError,
    describe_value,
)
from mixle_spark.ml._compute_params import HasCompute
from mixle_spark.parallel.backends.registry import CONTROL_CHECKS
from mixle_spark.spec import MAX_SPEC_BYTES, estimator_from_spec, is_job_spec, load_spec, loads_checked
from mixle_spark.stats.base import Estimator

__all__ = [
    "DEFAULT_SEED",
    "ECHO_LIMIT",
    "FIT_OPTION_PARAMS",
    "MixleParams",
    "fit_value",
]

DEFAULT_SEED = zlib.crc32(b"mixle_spark.ml.MixleEstimator")
"""The default ``seed``: fixed, unlike pyspark's ``hash(class name)``, which changes per process."""


def _option(option: str, param: str) -> Callable[[Any], Any]:
    """The type converter of the Param that stands for fit option ``option``: the option's declared
    check (:func:`~mixle_spark.em.options.option_check`), worded for the Param."""
    return option_check(option).param(param)


_K = integer(1).param("k")


def _k_param(value: Any) -> int | list[int]:
    """``k``: a number of components (>= 1), or a list of candidates for :func:`select_k`."""
    if isinstance(value, list | tuple):
        if not value:
            raise SpecError("param 'k': expected an integer >= 1 or a non-empty list of them, got []")
        return sorted({_K(v) for v in value})
    return _K(value)  # type: ignore[no-any-return]


SELECTION_CRITERIA = ("bic", "aic")
"""``selectionCriterion`` values: how a list of ``k`` is decided."""


def _criterion(value: Any) -> str:
    if not isinstance(value, str) or value not in SELECTION_CRITERIA:
        valid = ", ".join(map(repr, SELECTION_CRITERIA))
        raise SpecError(f"param 'selectionCriterion': expected one of {valid}, got {describe_value(value)}")
    return value


def _initial_model(value: Any) -> str:
    """``initialModel``: a fitted ``MixleModel`` (or its distribution), a model JSON file written by
    ``save_model`` / em_fit, or that JSON (text or dict) -> the model's JSON text, which is what the
    Param holds (so a saved estimator carries its starting model, not a path)."""
    from mixle_spark.errors import ModelFormatError
    from mixle_spark.spec import load_model, model_from_dict, model_to_dict
    from mixle_spark.stats.base import Distribution

    model = value if isinstance(value, Distribution) else getattr(value, "distribution", None)
    try:
        if isinstance(model, Distribution):
            return json.dumps(model_to_dict(model))
        if isinstance(value, Mapping):
            return json.dumps(model_to_dict(model_from_dict(dict(value))))
        if isinstance(value, str):
            if value.lstrip().startswith("{"):
                checked = loads_checked(value, "the model JSON", ModelFormatError)
                return json.dumps(model_to_dict(model_from_dict(checked)))
            return json.dumps(model_to_dict(load_model(value)))
    except (OSError, ValueError) as err:  # a missing file, a file that is not a model
        raise SpecError(f"param 'initialModel': {err}") from None
    raise TypeError(
        "param 'initialModel': expected a fitted MixleModel, a model JSON path or the model's JSON, got "
        f"{describe_value(value)}"
    )


def _covariance_type(value: Any) -> str | list[str]:
    """``covarianceType``: a covariance form (:mod:`mixle_spark.stats._covariance`: ``"full"``,
    ``"tied"``, ``"diag"``, ``"spherical"`` or an mclust name), or a list of them to choose from with
    ``k`` by ``selectionCriterion``."""
    from mixle_spark.model_selection import parse_forms
    from mixle_spark.stats._covariance import covariance_form

    if isinstance(value, list | tuple):
        try:
            return parse_forms(list(value))
        except SpecError as err:
            raise SpecError(f"param 'covarianceType': {err}") from None
    return covariance_form(value, "param 'covarianceType'")


INIT_MODES = ("k-means||", "random")
"""``initMode`` values, spelled as pyspark.ml ``KMeans`` spells them (``"kmeans||"`` is accepted too)."""

_INIT = option_check("init").param("initMode", "one of " + ", ".join(map(repr, INIT_MODES)))


def _init_mode(value: Any) -> str:
    """``initMode``: ``optimize``'s ``init`` check, in pyspark's spelling (a string: a Param holds no
    Seeding object)."""
    if not isinstance(value, str):
        valid = ", ".join(map(repr, INIT_MODES))
        raise TypeError(f"param 'initMode': expected one of {valid}, got {describe_value(value)}")
    mode = _INIT("kmeans||" if value == "k-means||" else value)
    return "k-means||" if mode == "kmeans||" else str(mode)


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


ECHO_LIMIT = 80
"""Most characters of a value (a path, a name, a dict) echoed in a ``modelSpec`` error message."""

FIT_OPTION_PARAMS = {
    "max_its": "maxIter",
    "tol": "tol",
    "init": "initMode",
    "init_steps": "initSteps",
    "init_p": "initFraction",
    "seed": "seed",
}
"""A spec's fit option -> the Param that overrides it when set (``trials`` has no Param and is
applied as is; ``print_iter`` is ignored: the estimator prints nothing). A spec's ``delta`` (a gain of
the total log-likelihood) has no Param either: it is the stopping rule unless ``tol`` is set."""


def _clip(text: str, limit: int = ECHO_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short_reason(err: Exception) -> str:
    """``err``'s message on one line, every dict or list it echoes cut to :data:`ECHO_LIMIT`
    characters (a family's error repeats the whole spec it refuses)."""
    text = " ".join(str(err).splitlines())
    if isinstance(err, UnknownNameError):  # the name is quoted: cut it here, the brackets below
        text = text.replace(repr(err.name), _clip(repr(err.name)), 1)
    pieces, start, depth = [], 0, 0
    for i, char in enumerate(text):
        if char in "{[":
            if depth == 0:
                pieces.append(text[start:i])
                start = i
            depth += 1
        elif char in "}]" and depth > 0:
            depth -= 1
            if depth == 0:
                pieces.append(_clip(text[start : i + 1]))
                start = i + 1
    pieces.append(_clip(text[start:]) if depth else text[start:])
    return "".join(pieces)


def _read_spec_file(path: str) -> Any:
    """A spec file's JSON content (read once, when the Param is set: the content is stored)."""
    shown = _clip(path)
    if not os.path.isfile(path):
        if os.path.exists(path):
            raise SpecError(f"param 'modelSpec': model spec path is not a file: {shown}")
        raise FileNotFoundError(f"param 'modelSpec': model spec file not found: {shown}")
    try:
        data = read_bytes_bounded(Path(path), MAX_SPEC_BYTES, "the file", TooLargeError)
        return loads_checked(data, "the file", TooLargeError)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError, TooLargeError
        reason = err if isinstance(err, TooLargeError) else f"not valid JSON ({_clip(str(err))})"
        raise SpecError(f"param 'modelSpec': model spec file {shown}: {reason}") from None


def fit_value(option: str, value: Any, where: str = "param 'modelSpec'") -> Any:
    """A fit option's value, checked and converted by the Param it stands for."""
    name = FIT_OPTION_PARAMS.get(option)
    convert = getattr(MixleParams, name).typeConverter if name else option_check(option).param(option)
    try:
        return convert(value)
    except (SpecError, TypeError) as err:
        which = f"fit option {option!r}" + (f" (param {name!r})" if name else "")
        reason = str(err).removeprefix(f"param {name or option!r}: ")
        raise SpecError(f"{where}: the spec's {which}: {reason}") from None


def _check_job_spec(spec: Mapping[str, Any], where: str) -> None:
    """A full spec's parts, checked one by one so that an error names the part (unknown keys and
    fit options are left to :func:`~mixle_spark.spec.load_spec`, whose messages the fit job shows)."""
    estimator = spec["estimator"]
    if isinstance(estimator, Mapping) and "type" not in estimator:
        raise SpecError(f"{where}: the spec's 'estimator' has no 'type' key")
    if not isinstance(estimator, Mapping | str):
        raise SpecError(
            f"{where}: the spec's 'estimator' must be a dict with a 'type' key or a family name, "
            f"got {describe_value(estimator)}"
        )
    fit = spec.get("fit") or {}
    if not isinstance(fit, Mapping):
        raise SpecError(f"{where}: the spec's 'fit' must be a dict of fit options, got {describe_value(fit)}")
    for option in (*FIT_OPTION_PARAMS, "delta", "trials"):
        if option in fit:
            fit_value(option, fit[option], where)


def _model_spec(value: Any) -> str:
    """A spec file path, a full spec dict, an estimator spec (dict, JSON text or family name) or a
    mixle Estimator -> canonical JSON, validated (see ``MixleEstimator``'s ``modelSpec``)."""
    where = "param 'modelSpec'"
    text = value.strip() if isinstance(value, str) else None
    if isinstance(value, Estimator):
        spec: Any = value.to_dict()
    elif isinstance(value, Mapping):
        spec = dict(value)
    elif text is not None and text[:1] in ("{", "[", '"'):  # JSON text
        try:
            spec = loads_checked(text, f"{where}: JSON text", SpecError)
        except SpecError:
            raise
        except (ValueError, RecursionError) as err:
            raise SpecError(f"{where}: JSON text is not valid JSON ({_clip(str(err))})") from None
    elif isinstance(value, os.PathLike) or (
        text is not None
        and (os.path.isfile(text) or "/" in text or os.sep in text or text.lower().endswith(".json"))
    ):
        path = text if text is not None else os.fsdecode(value)
        spec, where = _read_spec_file(path), f"{where}: spec file {_clip(path)}"
    elif text is not None:
        spec = text  # a bare family name such as "gaussian"
    else:
        raise TypeError(
            "param 'modelSpec': expected a spec file path, a spec dict, JSON text, a family name or "
            f"a mixle_spark Estimator, got {describe_value(value)}"
        )
    job = is_job_spec(spec)
    if job:
        _check_job_spec(spec, where)
    try:
        if job:
            load_spec(spec)  # what the fit job accepts in a spec file
        else:
            estimator_from_spec(spec)
    except (SpecError, TypeError, ValueError) as err:
        reason = _short_reason(err).removeprefix("spec: ")  # load_spec names a dict "spec"
        raise SpecError(f"{where}: {reason}") from None
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
    HasCompute,
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
    initialModel: Param[str] = Param(
        Params._dummy(),
        "initialModel",
        "a fitted model EM starts from instead of its initialization (a MixleModel, a model JSON path "
        "or the JSON itself; held as JSON, so it is saved with the estimator); one fit of its shape.",
        typeConverter=_initial_model,
    )
    labelCol: Param[str] = Param(
        Params._dummy(),
        "labelCol",
        "column of known components (0..k-1; null where unknown): those rows keep their component "
        "while the mixture is fitted (partly labelled data); unset: no labels.",
        typeConverter=_column_param("labelCol", allow_empty=False),
    )
    covarianceType: Param[Any] = Param(
        Params._dummy(),
        "covarianceType",
        "covariance form of the Gaussian components: 'full' (default), 'tied', 'diag', 'spherical' "
        "or an mclust form (EII, VII, EEI, VEI, EVI, VVI, EEE, VVV); or a list of forms, chosen with "
        "k by selectionCriterion.",
        typeConverter=_covariance_type,
    )
    maxIter: Param[int] = Param(
        Params._dummy(),
        "maxIter",
        "most EM iterations (>= 0).",
        typeConverter=_option("max_its", "maxIter"),
    )
    tol: Param[float] = Param(
        Params._dummy(),
        "tol",
        "stop when the log-likelihood gain per unit of row weight (per row) is in [0, tol) (>= 0; "
        "scikit-learn's meaning, not MLlib's total).",
        typeConverter=_option("tol", "tol"),
    )
    seed: Param[int] = Param(
        Params._dummy(),
        "seed",
        "seed of the random initial model.",
        typeConverter=_option("seed", "seed"),
    )
    aggregationDepth: Param[int] = Param(
        Params._dummy(),
        "aggregationDepth",
        "depth of the tree merging partition statistics (>= 1).",
        typeConverter=CONTROL_CHECKS["depth"].param("aggregationDepth"),
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
        "mixle_spark model spec (stored as JSON): a spec file path, a full spec {estimator, fit} "
        "whose fit section fills the Params left unset, or an estimator spec (dict, JSON text, "
        "family name or Estimator): a mixture, or the component model repeated k times.",
        typeConverter=_model_spec,
    )
    initFraction: Param[float] = Param(
        Params._dummy(),
        "initFraction",
        "fraction of rows the random initial model is drawn from, in (0, 1].",
        typeConverter=_option("init_p", "initFraction"),
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
        typeConverter=_option("init_steps", "initSteps"),
    )
    numPartitions: Param[int] = Param(
        Params._dummy(),
        "numPartitions",
        "repartition the encoded training data into this many partitions (>= 1).",
        typeConverter=CONTROL_CHECKS["num_chunks"].param("numPartitions"),
    )
    keepStatistics: Param[bool] = Param(
        Params._dummy(),
        "keepStatistics",
        "keep the sufficient statistics with the model (taken from the fit's last pass), so "
        "that MixleModel.update(df) can fold new rows in later (default true).",
        typeConverter=option_check("keep_statistics").param("keepStatistics"),
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
            tol=TOL,
            seed=DEFAULT_SEED,
            aggregationDepth=2,
            initFraction=0.1,
            initMode="k-means||",
            selectionCriterion="bic",
            initSteps=2,
            keepStatistics=True,
            logLikelihoodCol="logLikelihood",
        )

    def getK(self) -> Any:
        """Gets the value of ``k`` (an int, or the list of candidates before a fit) or its default."""
        return self.getOrDefault(self.k)

    def getInitialModel(self) -> Any:
        """The starting model (a Distribution) when ``initialModel`` is set, else None."""
        from mixle_spark.spec import model_from_dict

        text = self._optional(self.initialModel)
        return None if text is None else model_from_dict(json.loads(text))

    def getLabelCol(self) -> str | None:
        """Gets the value of ``labelCol``; None when unset (no labels)."""
        return self._optional(self.labelCol)  # type: ignore[no-any-return]

    def getCovarianceType(self) -> Any:
        """Gets the value of ``covarianceType`` (a form, or the list of candidates before a fit);
        None when unset (each component its own covariance: ``full``)."""
        return self._optional(self.covarianceType)

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

    def getKeepStatistics(self) -> bool:
        """Gets the value of ``keepStatistics`` or its default value."""
        return self.getOrDefault(self.keepStatistics)

    def getNumPartitions(self) -> int:
        """Gets the value of ``numPartitions`` (raises KeyError when unset)."""
        return self.getOrDefault(self.numPartitions)

    def getLogLikelihoodCol(self) -> str:
        """Gets the value of ``logLikelihoodCol`` or its default value."""
        return self.getOrDefault(self.logLikelihoodCol)

    def _optional(self, param: Param[Any]) -> Any:
        return self.getOrDefault(param) if self.isDefined(param) else None
