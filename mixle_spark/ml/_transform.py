"""A fitted mixture's ``transform`` as a Spark ML stage (:meth:`MixleModel.transform
<mixle_spark.ml.MixleModel.transform>`): the output columns checked against the input's, ML Vector
columns carried through the Arrow scoring pass as arrays (and back), the probabilities as a vector."""

from __future__ import annotations

from pyspark.sql import DataFrame

from mixle_spark.errors import SchemaError, did_you_mean
from mixle_spark.stats import MixtureDistribution

__all__ = ["score_frame"]

_PRIVATE_LL = "__mixle_log_likelihood"


def score_frame(
    model: MixtureDistribution,
    dataset: DataFrame,
    *,
    features_col: str,
    prediction_col: str,
    probability_col: str,
    log_likelihood_col: str,
) -> DataFrame:
    """``dataset`` with the prediction, probability and log-likelihood columns (each left out when its
    name is empty) added lazily through ``mapInArrow``, keeping every input column; ``features_col``
    is read when the model reads one column (a vector)."""
    from pyspark.ml.functions import array_to_vector, vector_to_array
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql import functions as F

    from mixle_spark.scoring import score

    column = None
    if model.encoder().column_names() is None:
        column = features_col
        if column not in dataset.columns:
            hint = did_you_mean(column, dataset.columns)
            raise SchemaError(
                f"param 'featuresCol': column {column!r} not found{hint}; the DataFrame has {dataset.columns}"
            )
    prediction, probability, log_likelihood = prediction_col, probability_col, log_likelihood_col
    for param, name in (
        ("predictionCol", prediction),
        ("probabilityCol", probability),
        ("logLikelihoodCol", log_likelihood),
    ):
        if name and name in dataset.columns:
            raise SchemaError(f"param {param!r}: column {name!r} already exists in the DataFrame")
    vectors = [f.name for f in dataset.schema.fields if isinstance(f.dataType, VectorUDT)]
    frame = dataset
    for name in vectors:  # the Arrow pass carries arrays cheaply, ML Vectors slowly
        frame = frame.withColumn(name, vector_to_array(F.col(name)))
    scored = score(
        model,
        frame,
        column=column,
        log_likelihood_col=log_likelihood or _PRIVATE_LL,
        prediction_col=prediction or None,
        probability_col=probability or None,
    )
    for name in vectors:
        scored = scored.withColumn(name, array_to_vector(F.col(name)))
    if probability:
        scored = scored.withColumn(probability, array_to_vector(F.col(probability)))
    return scored if log_likelihood else scored.drop(_PRIVATE_LL)
