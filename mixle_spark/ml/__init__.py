"""Spark ML stages: :class:`MixleEstimator` (a drop-in for ``pyspark.ml.clustering.GaussianMixture``
that fits any mixle_spark mixture) and its fitted :class:`MixleModel`."""

from mixle_spark.ml._summary import MixleSummary
from mixle_spark.ml.estimator import MixleEstimator, MixleModel

__all__ = ["MixleEstimator", "MixleModel", "MixleSummary"]
