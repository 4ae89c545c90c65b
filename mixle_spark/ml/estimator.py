"""``MixleEstimator`` / ``MixleModel``: mixle_spark models as Spark ML stages.

A drop-in for ``pyspark.ml.clustering.GaussianMixture``: the same Param names and defaults, so
``MixleEstimator(k=3, featuresCol="features")`` fits the full-covariance Gaussian mixture MLlib fits,
and the model has ``weights``, ``gaussians``, ``gaussiansDF``, ``predict``, ``predictProbability``
and a ``summary``. Beyond MLlib: any mixle_spark model through ``modelSpec``, named input columns
(``inputCols``) instead of a vector, a per-row log-likelihood column, and Spark Connect (no RDD or
SparkContext on the fit, transform or persistence paths).

``modelSpec`` takes the path of the spec file the fit job reads (``conf/models/sample.json``), that
file's content as a dict, the estimator part alone (a dict, JSON text or a family name) or a
mixle_spark Estimator; it is stored as JSON (a file is read when the Param is set).
A spec's ``fit`` section gives the fit options whose Param is not set explicitly: ``max_its`` ->
``maxIter``, ``tol`` -> ``tol`` (a spec's ``delta`` when ``tol`` is not set), ``init`` -> ``initMode``,
``init_steps`` -> ``initSteps``,
``init_p`` -> ``initFraction``, ``seed`` -> ``seed``; ``trials`` (no Param) runs that many restarts
and keeps the best, and ``print_iter`` is ignored (the estimator prints nothing).

Convergence (``tol``) is mapped to ``optimize(tol=tol)``: EM stops when the log-likelihood gain per unit
of row weight (per row, for unweighted data) is in ``[0, tol)``, as scikit-learn's ``tol``, default
1e-6, so one value means the same on a thousand rows and on a billion. MLlib's ``tol`` (default 0.01) is
on the *total* log-likelihood (``|change| <= tol``), which on a large table never stops before
``maxIter``; its value does not carry over (MLlib's 0.01 over n rows is ``0.01 / n`` here). A spec's
``delta`` keeps the total-gain rule. The other differences: a decrease beyond rounding stops the fit and
returns the best model seen (MLlib stops too, keeping the last); not converging within ``maxIter``
iterations emits a :class:`~mixle_spark.errors.ConvergenceWarning` (MLlib is silent); and
``summary.logLikelihood`` is that of the returned model (MLlib reports the one before its last M-step).
Densities are computed in log space (MLlib adds machine epsilon to each weighted component density in
linear space), and covariances get a small ridge (see :mod:`mixle_spark.stats.multivariate_gaussian`),
so fits agree with MLlib's to rounding on well-conditioned data, not bit for bit.

Performance: on classic Spark the EM iterations are cheapest when the training data has at most
one partition per task slot (set ``numPartitions``): the backend then keeps decoded partitions in
long-lived tasks instead of running one Spark job per iteration.

In a Pipeline (``pipeline.fit(df).transform(df)`` adds prediction, probability and
logLikelihood; ``write().save(path)`` / ``PipelineModel.load(path)`` round-trip it)::

    Pipeline(stages=[VectorAssembler(inputCols=["x", "y"], outputCol="features"),
                     MixleEstimator(k=3, seed=1)])

Examples
--------
>>> estimator = MixleEstimator(k=3, seed=1)
>>> estimator.getK(), estimator.getMaxIter(), estimator.getTol(), estimator.getFeaturesCol()
(3, 100, 1e-06, 'features')
>>> estimator.setK(0)
Traceback (most recent call last):
...
mixle_spark.errors.SpecError: param 'k': expected an integer >= 1, got 0
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
from pyspark import keyword_only
from pyspark.ml.base import Estimator, Model
from pyspark.ml.linalg import DenseMatrix, DenseVector
from pyspark.ml.stat import MultivariateGaussian
from pyspark.ml.util import MLReadable, MLWritable
from pyspark.sql import DataFrame, SparkSession

from mixle_spark.em.options import TOL
from mixle_spark.errors import (
    ConvergenceWarning,
    DataValueError,
    FitQualityWarning,
    ModelSizeWarning,
    SchemaError,
    SpecError,
)
from mixle_spark.estimation import FitResult, best_of, optimize
from mixle_spark.ml._fit_plan import fit_plan
from mixle_spark.ml._mllib_face import component_moments, record_of
from mixle_spark.ml._params import MixleParams
from mixle_spark.ml._persistence import MixleReader, MixleWriter
from mixle_spark.ml._summary import MixleSummary
from mixle_spark.ml._transform import score_frame
from mixle_spark.parallel import encoded_data
from mixle_spark.spec import model_from_json, model_to_json
from mixle_spark.stats import (
    MixtureDistribution,
)
from mixle_spark.stats.base import Distribution

__all__ = ["MixleEstimator", "MixleModel"]


class MixleEstimator(Estimator["MixleModel"], MixleParams, MLReadable["MixleEstimator"], MLWritable):
    """Fits a mixture model by EM on a Spark DataFrame; ``fit`` returns a :class:`MixleModel`.

    Parameters
    ----------
    featuresCol : str
        Features column, an ML Vector or ``array<double>`` (default ``"features"``); with a
        ``modelSpec`` that reads one column, that column (any type the spec reads).
    predictionCol, probabilityCol, logLikelihoodCol : str
        Output columns of the model (``""`` leaves one out).
    k : int or list of int
        Number of components (default 2; ``k = 1`` is allowed, unlike MLlib), or candidates (e.g.
        ``[2, 3, 4, 5]``): every one is fitted on the data encoded once (advancing together) and the
        best by ``selectionCriterion`` is kept; the model's ``k`` is the chosen one and
        ``model.summary.modelSelection`` holds the table.
    selectionCriterion : {"bic", "aic"}
        How a list of ``k`` (or of covariance types) is decided (default ``"bic"``).
    initialModel : MixleModel, str or dict
        A fitted model EM starts from instead of its initialization (MLlib never merged
        ``initialModel`` for spark.ml GaussianMixture): a ``MixleModel``, a model JSON path, or the
        JSON itself. The Param holds the model's JSON, so a saved estimator carries it. One fit of
        the model's shape: its components must be as many as ``k`` (a list of ``k`` or of
        ``covarianceType`` is refused), and the spec's ``trials`` do not apply.
    labelCol : str
        A column of known components (integers 0..k-1, null where unknown): those rows keep their
        component in every EM step (partly labelled data, as mclust's ``MclustSSC``); the model
        reads no label column when it transforms.
    covarianceType : str or list of str
        The covariance form of the Gaussian components (:mod:`mixle_spark.stats._covariance`):
        ``"full"`` (unset: each component its own covariance), ``"tied"`` (one shared), ``"diag"``,
        ``"spherical"``, or an mclust form (``"EII"``, ``"VII"``, ``"EEI"``, ``"VEI"``, ``"EVI"``,
        ``"VVI"``, ``"EEE"``, ``"VVV"``). A list of them is chosen with ``k`` by
        ``selectionCriterion``, every (k, form) candidate advancing in the same data passes, as
        mclust chooses; the model's ``covarianceType`` is then the chosen one.
    tol : float
        Convergence tolerance on the log-likelihood gain per row (default 1e-6; see the module
        docstring for how it relates to MLlib's, which is on the total).
    maxIter : int
        Most EM iterations (default 100).
    seed : int
        Seed of the random initial model (default: a fixed value, so unseeded fits repeat).
    aggregationDepth : int
        Depth of the tree merging partition statistics (default 2).
    weightCol : str, optional
        Non-negative row weights.
    inputCols : list of str, optional
        Read these columns as the fields of a record (one Gaussian each, or the ``modelSpec``)
        instead of ``featuresCol``.
    modelSpec : str, path, dict or mixle_spark Estimator, optional
        The model, in any of four forms: the path (``str`` or ``os.PathLike``) of a spec file as
        the fit job reads (``{"estimator": ..., "fit": ..., "description": ...}``, see
        :func:`mixle_spark.spec.load_spec`); that full spec as a dict (or JSON text); the estimator
        part alone, as a dict, JSON text or a family name; or a mixle_spark Estimator. A string is
        a path when it is not JSON text and it names an existing file, contains a path separator
        or ends in ``.json``. The estimator is a mixture spec (its component count must agree with
        ``k`` when both are set), or a component spec repeated ``k`` times (see
        :mod:`mixle_spark.spec`). Stored as canonical JSON, which :meth:`getModelSpec` returns: a
        file is read once, when the Param is set, and its content is stored (and saved with the
        estimator), not its path. The spec's ``fit`` section is applied unless a Param overrides
        it: a Param set explicitly wins, otherwise the option replaces the Param's default
        (``max_its`` -> ``maxIter``, ``tol`` -> ``tol``, ``init`` -> ``initMode``,
        ``init_steps`` -> ``initSteps``, ``init_p`` -> ``initFraction``, ``seed`` -> ``seed``;
        the fitted model's Params show the values used). ``trials`` > 1 (no Param) runs that many
        EM restarts with :func:`~mixle_spark.estimation.best_of` and keeps the best (with a list
        of ``k``: restarts per candidate); ``print_iter`` is ignored, as the estimator prints
        nothing. Default: a full-covariance Gaussian over ``featuresCol``.
    initFraction : float
        Fraction of rows a random initial model is drawn from (``initMode="random"``; default 0.1;
        mixtures cap it at about 20 rows per component).
    initMode : {"k-means||", "random"}
        How EM starts (default ``"k-means||"``: distributed k-means|| seeding, then each component
        built from the rows nearest its centre; see :mod:`mixle_spark.em.seeding`).
    initSteps : int
        k-means|| rounds (default 2).
    numPartitions : int, optional
        Repartition the encoded training data (cached for the fit) into this many partitions.
    engine : {"numpy", "torch"}
        Compute engine of the E-step (default ``"numpy"``; torch: CPU, or CUDA when available).
    precision : {"float64", "float32", "bfloat16"}
        Precision the training data is stored (cached) and the E-step computed in (default
        ``"float64"``; ``"float32"`` halves the cached bytes; ``"bf16"`` needs torch); statistics are
        summed in float64. A spec's fit section may give either; the two are checked together, and an
        engine that is not installed named with its extra, when the fit starts.

    Raises
    ------
    SpecError or TypeError
        For a bad Param value (when set), naming the Param and the value.
    FileNotFoundError
        For a ``modelSpec`` path that names no file.
    """

    _input_kwargs: dict[str, Any]

    @keyword_only
    def __init__(
        self,
        *,
        featuresCol: str = "features",
        predictionCol: str = "prediction",
        k: Any = 2,
        probabilityCol: str = "probability",
        tol: float = TOL,
        maxIter: int = 100,
        seed: int | None = None,
        aggregationDepth: int = 2,
        weightCol: str | None = None,
        inputCols: list[str] | None = None,
        modelSpec: Any = None,
        initFraction: float = 0.1,
        initMode: str = "k-means||",
        initSteps: int = 2,
        selectionCriterion: str = "bic",
        covarianceType: Any = None,
        labelCol: str | None = None,
        initialModel: Any = None,
        numPartitions: int | None = None,
        logLikelihoodCol: str = "logLikelihood",
        keepStatistics: bool = True,
        engine: str = "numpy",
        precision: str = "float64",
    ) -> None:
        super().__init__()
        self.setParams(**self._input_kwargs)

    @keyword_only
    def setParams(
        self,
        *,
        featuresCol: str = "features",
        predictionCol: str = "prediction",
        k: Any = 2,
        probabilityCol: str = "probability",
        tol: float = TOL,
        maxIter: int = 100,
        seed: int | None = None,
        aggregationDepth: int = 2,
        weightCol: str | None = None,
        inputCols: list[str] | None = None,
        modelSpec: Any = None,
        initFraction: float = 0.1,
        initMode: str = "k-means||",
        initSteps: int = 2,
        selectionCriterion: str = "bic",
        covarianceType: Any = None,
        labelCol: str | None = None,
        initialModel: Any = None,
        numPartitions: int | None = None,
        logLikelihoodCol: str = "logLikelihood",
        keepStatistics: bool = True,
        engine: str = "numpy",
        precision: str = "float64",
    ) -> MixleEstimator:
        """Set the given Params (None values are left unset)."""
        return self._set(**{k: v for k, v in self._input_kwargs.items() if v is not None})

    def setFeaturesCol(self, value: str) -> MixleEstimator:
        return self._set(featuresCol=value)

    def setPredictionCol(self, value: str) -> MixleEstimator:
        return self._set(predictionCol=value)

    def setProbabilityCol(self, value: str) -> MixleEstimator:
        return self._set(probabilityCol=value)

    def setLogLikelihoodCol(self, value: str) -> MixleEstimator:
        return self._set(logLikelihoodCol=value)

    def setK(self, value: Any) -> MixleEstimator:
        return self._set(k=value)

    def setTol(self, value: float) -> MixleEstimator:
        return self._set(tol=value)

    def setMaxIter(self, value: int) -> MixleEstimator:
        return self._set(maxIter=value)

    def setSeed(self, value: int) -> MixleEstimator:
        return self._set(seed=value)

    def setAggregationDepth(self, value: int) -> MixleEstimator:
        return self._set(aggregationDepth=value)

    def setWeightCol(self, value: str) -> MixleEstimator:
        return self._set(weightCol=value)

    def setInputCols(self, value: list[str]) -> MixleEstimator:
        return self._set(inputCols=value)

    def setModelSpec(self, value: Any) -> MixleEstimator:
        return self._set(modelSpec=value)

    def setInitFraction(self, value: float) -> MixleEstimator:
        return self._set(initFraction=value)

    def setInitMode(self, value: str) -> MixleEstimator:
        return self._set(initMode=value)

    def setInitSteps(self, value: int) -> MixleEstimator:
        return self._set(initSteps=value)

    def setSelectionCriterion(self, value: str) -> MixleEstimator:
        return self._set(selectionCriterion=value)

    def setCovarianceType(self, value: Any) -> MixleEstimator:
        return self._set(covarianceType=value)

    def setLabelCol(self, value: str) -> MixleEstimator:
        return self._set(labelCol=value)

    def setInitialModel(self, value: Any) -> MixleEstimator:
        return self._set(initialModel=value)

    def setKeepStatistics(self, value: bool) -> MixleEstimator:
        return self._set(keepStatistics=value)

    def _checked_start(self, start: Any, estimator: Any, forms: Any) -> Any:
        """``initialModel``'s model, refused (SpecError naming both) when it cannot start this fit:
        candidates to choose from, or another number of components."""
        if isinstance(self.getK(), list) or isinstance(forms, list):
            raise SpecError(
                "param 'initialModel' starts one fit; a list of k or of covarianceType would start several"
            )
        comps = getattr(start, "components", None)
        want = getattr(estimator, "estimators", None)
        if comps is not None and want is not None and len(comps) != len(want):
            raise SpecError(
                f"param 'initialModel' is a mixture of {len(comps)} components, but the fit's has "
                f"{len(want)} (param 'k' or 'modelSpec')"
            )
        return start

    def setNumPartitions(self, value: int) -> MixleEstimator:
        return self._set(numPartitions=value)

    def _fit(self, dataset: DataFrame) -> MixleModel:
        plan = fit_plan(self, dataset.columns)
        started = time.perf_counter()
        options = plan.backend_options(self)
        start = self.getInitialModel()
        if start is not None:  # refused before the data is encoded
            start = self._checked_start(start, plan.estimator, self.getCovarianceType())
        try:
            handle = encoded_data(dataset, plan.estimator, **options)
        except SchemaError as err:
            if plan.column is None:
                raise
            raise SchemaError(f"param 'featuresCol' ({plan.column!r}): {err}") from err
        encoded = time.perf_counter()
        selection = None
        plan.options["keep_statistics"] = self.getKeepStatistics()
        with warnings.catch_warnings(record=True) as said:
            for category in (FitQualityWarning, ModelSizeWarning, ConvergenceWarning):
                warnings.simplefilter("always", category)
            try:
                forms = self.getCovarianceType()
                if start is not None:
                    plan.options["prev_estimate"] = start
                    fitted = optimize(handle, plan.estimator, print_iter=0, **plan.options)
                elif isinstance(self.getK(), list) or isinstance(forms, list):
                    from mixle_spark.model_selection import select_k

                    mixture: Any = plan.estimator
                    ks = self.getK() if isinstance(self.getK(), list) else [len(mixture.estimators)]
                    found = select_k(
                        handle,
                        plan.estimator,
                        ks=ks,
                        criterion=self.getSelectionCriterion(),
                        forms=forms if isinstance(forms, list) else None,
                        trials=plan.trials,
                        **plan.options,
                    )
                    fitted, selection = found.model, found.to_dict()
                elif plan.trials > 1:
                    _, fitted = best_of(
                        handle, plan.estimator, trials=plan.trials, print_iter=0, **plan.options
                    )
                else:
                    fitted = optimize(handle, plan.estimator, print_iter=0, **plan.options)
                num_rows = len(handle)
            finally:
                handle.close()
        for w in said:  # said again where the caller sees them, and kept on the summary
            warnings.warn(w.message, w.category, stacklevel=3)
        model = self._copyValues(MixleModel(fitted))
        model._resetUid(self.uid)  # as MLlib: the model carries its estimator's uid
        model._set(**plan.from_spec)  # the model's Params say what the fit used
        if len(model.weights) != model.getK():  # a mixture modelSpec with k left unset, or chosen
            model._set(k=len(model.weights))
        if isinstance(model.getCovarianceType(), list):  # chosen with k
            model._set(covarianceType=getattr(fitted, "covariance", None))
        model._summary = MixleSummary(
            model,
            dataset,
            fitted.fit_result,
            num_rows,
            encoded - started,
            time.perf_counter() - started,
        )
        model._summary.modelSelection = selection
        ours = (FitQualityWarning, ModelSizeWarning, ConvergenceWarning)
        model._summary.warnings = [str(w.message) for w in said if issubclass(w.category, ours)]
        return model

    def write(self) -> MixleWriter:
        """An MLWriter saving the Params as Spark ML metadata (DataFrame API only)."""
        return MixleWriter(self)

    @classmethod
    def read(cls) -> MixleReader[MixleEstimator]:
        """An MLReader for saved estimators."""
        return MixleReader(cls)


class MixleModel(Model, MixleParams, MLReadable["MixleModel"], MLWritable):
    """A fitted mixture (``distribution``) as a Spark ML Model.

    ``transform`` adds ``predictionCol`` (int, the most probable component), ``probabilityCol``
    (ML DenseVector of the component probabilities) and ``logLikelihoodCol`` (double), lazily
    through ``mapInArrow``, keeping every input column. ML Vector input columns are carried
    through the Arrow pass as arrays and come back as dense vectors (sparse ones included).
    """

    def __init__(self, distribution: Distribution | None = None) -> None:
        super().__init__()
        self._distribution: MixtureDistribution | None = None
        self._summary: MixleSummary | None = None
        if distribution is not None:
            self._set_distribution(distribution)

    def _set_distribution(self, distribution: Distribution) -> None:
        if not isinstance(distribution, MixtureDistribution):
            raise TypeError(f"MixleModel wraps a MixtureDistribution, got {type(distribution).__name__}")
        self._distribution = distribution

    def _load_model_json(self, text: str) -> None:
        self._set_distribution(model_from_json(text))

    @property
    def distribution(self) -> MixtureDistribution:
        """The fitted mixle_spark model."""
        if self._distribution is None:
            raise ValueError("this MixleModel holds no fitted model")
        return self._distribution

    def update(
        self,
        dataset: DataFrame,
        *,
        method: str = "incremental",
        decay: float = 1.0,
        half_life: float | None = None,
        time_unit: str = "batches",
        max_its: int = 5,
        max_drop: float | None = None,
        on_drift: str = "warn",
    ) -> MixleModel:
        """A new MixleModel with the rows of ``dataset`` folded into this one without the training
        rows (:func:`mixle_spark.em.incremental.update`: incremental or stepwise EM, with decay and
        drift); ``model.updateResult`` says what it did. Needs a model fitted with
        ``keepStatistics`` (the default) or loaded from one."""
        from mixle_spark.em.incremental import update

        options = fit_plan(self, dataset.columns).backend_options(self)
        updated = update(
            self.distribution,
            dataset,
            method=method,
            decay=decay,
            half_life=half_life,
            time_unit=time_unit,
            max_its=max_its,
            max_drop=max_drop,
            on_drift=on_drift,
            **options,
        )
        model = self._copyValues(MixleModel(updated))
        model._resetUid(self.uid)
        return model

    @property
    def updateResult(self) -> Any:
        """What the :meth:`update` that made this model did (an ``UpdateResult``), else None."""
        return getattr(self._distribution, "update_result", None)

    @property
    def fitResult(self) -> FitResult | None:
        """The EM record of the fit (None for a loaded model)."""
        return getattr(self._distribution, "fit_result", None)

    def setFeaturesCol(self, value: str) -> MixleModel:
        return self._set(featuresCol=value)

    def setPredictionCol(self, value: str) -> MixleModel:
        return self._set(predictionCol=value)

    def setProbabilityCol(self, value: str) -> MixleModel:
        return self._set(probabilityCol=value)

    def setLogLikelihoodCol(self, value: str) -> MixleModel:
        return self._set(logLikelihoodCol=value)

    # -- MLlib GaussianMixtureModel's API --------------------------------------------------------
    @property
    def weights(self) -> list[float]:
        """Mixture weights, summing to 1."""
        return [float(w) for w in self.distribution.w]

    @property
    def gaussians(self) -> list[MultivariateGaussian]:
        """Each component as a ``pyspark.ml.stat.MultivariateGaussian`` (mean, cov).

        Defined for multivariate / diagonal Gaussian components and for records of Gaussian
        fields (a diagonal covariance in ``inputCols`` order); raises TypeError otherwise.
        """
        out = []
        for mean, cov in (self._moments(i, c) for i, c in enumerate(self.distribution.components)):
            d = len(mean)
            out.append(MultivariateGaussian(DenseVector(mean), DenseMatrix(d, d, cov.ravel(order="F"))))
        return out

    @property
    def gaussiansDF(self) -> DataFrame:
        """:attr:`gaussians` as a DataFrame with columns ``mean`` (Vector) and ``cov`` (Matrix)."""
        rows = [(g.mean, g.cov) for g in self.gaussians]
        return SparkSession.active().createDataFrame(rows, ["mean", "cov"])

    def _moments(self, index: int, component: Distribution) -> tuple[np.ndarray, np.ndarray]:
        return component_moments(index, component, self._optional(self.inputCols))

    def _record(self, value: Any) -> Any:
        return record_of(self.distribution.encoder().column_names(), value, self._optional(self.inputCols))

    def predictProbability(self, value: Any) -> DenseVector:
        """Component probabilities of one record: an ML Vector (or a sequence / dict / Row for
        ``inputCols`` models, in ``inputCols`` order)."""
        record = self._record(value)
        if not np.isfinite(self.distribution.log_density(record)):
            raise DataValueError(
                "has zero density under every component (wrong length or type for this model?)",
                value=value,
            )
        return DenseVector(self.distribution.posterior(record))

    def predict(self, value: Any) -> int:
        """The most probable component of one record (see :meth:`predictProbability`)."""
        return int(np.argmax(self.predictProbability(value).toArray()))

    @property
    def hasSummary(self) -> bool:
        """Whether a training summary exists (False for a loaded model, as in MLlib)."""
        return self._summary is not None

    @property
    def summary(self) -> MixleSummary:
        """The training summary; raises RuntimeError when there is none."""
        if self._summary is None:
            raise RuntimeError(f"No training summary available for this {type(self).__name__}")
        return self._summary

    # -- transform --------------------------------------------------------------------------------
    def _transform(self, dataset: DataFrame) -> DataFrame:
        return score_frame(
            self.distribution,
            dataset,
            features_col=self.getFeaturesCol(),
            prediction_col=self.getPredictionCol(),
            probability_col=self.getProbabilityCol(),
            log_likelihood_col=self.getLogLikelihoodCol(),
        )

    # -- persistence ------------------------------------------------------------------------------
    def write(self) -> MixleWriter:
        """An MLWriter saving the Params as Spark ML metadata and the model as JSON."""
        return MixleWriter(self, model_to_json(self.distribution))

    @classmethod
    def read(cls) -> MixleReader[MixleModel]:
        """An MLReader for saved models (no training summary, as in MLlib)."""
        return MixleReader(cls)
