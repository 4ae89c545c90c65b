"""The training summary of a :class:`~mixle_spark.ml.MixleModel` (MLlib's GaussianMixtureSummary
names, plus the log-likelihood history, information criteria and timings)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import DataFrame

from mixle_spark.estimation import FitResult
from mixle_spark.summary import count_free_parameters, information_criteria

__all__ = ["MixleSummary"]


class MixleSummary:
    """What a fit did, and the training data scored by the fitted model.

    Attributes
    ----------
    predictions : DataFrame
        The training DataFrame transformed by the model (lazy).
    predictionCol, probabilityCol, logLikelihoodCol, featuresCol : str
        The model's column Params at fit time (``featuresCol`` is unused with ``inputCols``).
    inputCols : list of str or None
        The named input columns, when the model reads them instead of ``featuresCol``.
    k : int
        Number of mixture components.
    numIter : int
        EM iterations run (M-steps).
    logLikelihood : float
        Total (weighted) log-likelihood of the returned model on the training data.
    logLikelihoodHistory : list of float
        Log-likelihood of the model after each iteration, starting with the initial model.
    converged : bool
        Whether the gain fell below ``tol`` within ``maxIter`` iterations.
    numRows : int
        Rows of the training data.
    numParameters : int
        Free parameters of the model (see :func:`mixle_spark.summary.count_free_parameters`).
    bic, aic : float
        ``numParameters * ln(numRows) - 2 logLikelihood`` and ``2 numParameters - 2 logLikelihood``.
    trainingTime : float
        Seconds for the whole fit (encoding pass and EM).
    timings : dict of str to float
        Seconds in the vocabulary of every fit summary (:data:`mixle_spark.summary.TIMINGS`):
        ``encode`` (the validating / encoding pass), ``seeding`` (the starting model), ``em`` (the EM
        iterations and final scoring pass) and ``total``.
    segmentProfile : dict
        Each component's fields in the data's units, its rows by hard assignment over the training
        data and how sure those assignments are (:func:`mixle_spark.profile.segment_profile`; one
        aggregation job, run when first read).
    iterationTimes : list of float
        Seconds of each scoring pass recorded in ``logLikelihoodHistory``.
    """

    def __init__(
        self,
        model: Any,
        dataset: DataFrame,
        fit_result: FitResult,
        num_rows: int,
        encode_seconds: float,
        total_seconds: float,
    ) -> None:
        self._model = model
        self._dataset = dataset
        self._cluster_sizes: list[int] | None = None
        self._profile: dict[str, Any] | None = None
        self.predictions: DataFrame = model.transform(dataset)
        self.predictionCol: str = model.getPredictionCol()
        self.probabilityCol: str = model.getProbabilityCol()
        self.logLikelihoodCol: str = model.getLogLikelihoodCol()
        self.featuresCol: str = model.getFeaturesCol()
        self.inputCols: list[str] | None = model._optional(model.inputCols)
        self.k: int = len(model.weights)
        self.modelSelection: dict[str, Any] | None = None
        """With a list of ``k``: the criterion, the chosen k and every candidate's row (select_k)."""
        self.warnings: list[str] = []
        """What the fit warned of (a variance on its floor, an empty component, the best k at the
        edge of the range, no convergence, more parameters than rows), as the fit job's summary.json
        keeps them; each was also raised as a Python warning."""
        self.numIter: int = fit_result.n_iter
        self.logLikelihood: float = fit_result.log_likelihood
        self.logLikelihoodHistory: list[float] = [r.log_likelihood for r in fit_result.history]
        self.converged: bool = fit_result.converged
        self.numRows: int = num_rows
        self.numParameters: int = count_free_parameters(model.distribution)
        criteria = information_criteria(self.logLikelihood, self.numParameters, num_rows)
        self.bic: float = criteria["bic"]
        self.aic: float = criteria["aic"]
        self.trainingTime: float = total_seconds
        seeding = fit_result.seeding_seconds
        self.timings: dict[str, float] = {
            "encode": encode_seconds,
            "seeding": seeding,
            "em": total_seconds - encode_seconds - seeding,
            "total": total_seconds,
        }
        self.iterationTimes: list[float] = [r.seconds for r in fit_result.history]

    def report(
        self, path: str | os.PathLike[str], *, sample_rows: int = 2000, title: str | None = None
    ) -> Path | str:
        """Write the fit report (:func:`mixle_spark.report.write_report`) to ``path``: the segment
        profiles (:attr:`segmentProfile`), history, weights, parameters, and a 2-D projection of about
        ``sample_rows`` training rows drawn at random (each segment keeps its share)."""
        from pyspark.ml.functions import vector_to_array
        from pyspark.ml.linalg import VectorUDT

        from mixle_spark.report import write_report

        columns, column = self._columns()
        frame = self._dataset.select(*columns)
        if column is not None and isinstance(frame.schema[column].dataType, VectorUDT):
            frame = frame.select(vector_to_array(frame[column]).alias(column))
        sample = None
        if sample_rows > 0:
            fraction = min(1.0, sample_rows / self.numRows) if self.numRows > 0 else 1.0
            sample = frame.sample(fraction=fraction, seed=0).toPandas()
        if sample is not None and column is not None:  # the one column's values, not a table
            values = sample[column].tolist()
            is_array = dict(frame.dtypes)[column].startswith("array")
            sample = (np.stack(values) if is_array else values) if values else None
        info = {
            "rows": self.numRows,
            "backend": "spark (MixleEstimator)",
            "timings": self.timings,
            "segments": self.segmentProfile,
            "warnings": self.warnings,
            **({"model_selection": self.modelSelection} if self.modelSelection else {}),
        }
        return write_report(self._model.distribution, path, sample=sample, title=title, summary=info)

    def _columns(self) -> tuple[list[str], str | None]:
        """The training data's columns the model reads, and the one column it reads unnamed (else None):
        a record model (``inputCols``, or a ``modelSpec`` whose fields name columns) reads its fields'
        columns, any other model ``featuresCol``."""
        reads = self._model.distribution.encoder().column_names()
        if reads is not None:
            return list(self.inputCols or reads), None
        return [self.featuresCol], self.featuresCol

    @property
    def segmentProfile(self) -> dict[str, Any]:
        """The segment profile (:func:`mixle_spark.profile.segment_profile`) with the components'
        rows and certainty over the training data; computed once, by one aggregation job."""
        if self._profile is None:
            from mixle_spark.profile import segment_profile
            from mixle_spark.scoring import assignment_counts

            model = self._model.distribution
            columns, column = self._columns()
            frame = self._dataset.select(*columns)
            self._profile = segment_profile(model, assignment_counts(model, frame, column=column))
        return self._profile

    @property
    def cluster(self) -> DataFrame:
        """The prediction column of :attr:`predictions`."""
        return self.predictions.select(self.predictionCol)

    @property
    def probability(self) -> DataFrame:
        """The probability column of :attr:`predictions`."""
        return self.predictions.select(self.probabilityCol)

    @property
    def clusterSizes(self) -> list[int]:
        """Rows assigned to each component (most probable component), length ``k``.

        Computed once, by one aggregation job over the training data.
        """
        if self._cluster_sizes is None:
            frame, column = self.predictions, self.predictionCol
            if not column:  # the model leaves predictions out: score with a private column
                column = "__mixle_prediction"
                model = self._model.copy({self._model.predictionCol: column})
                frame = model.transform(self._dataset)
            sizes = [0] * self.k
            for row in frame.groupBy(column).count().collect():
                sizes[int(row[0])] = int(row[1])
            self._cluster_sizes = sizes
        return self._cluster_sizes
