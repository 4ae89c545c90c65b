"""mixle_spark: mixture and composite probability models fitted by EM, locally or at Spark scale."""

from mixle_spark._providers import declare_family
from mixle_spark._version import __version__

# an estimator family registered outside stats (a threaded E-step's wrapper): read from a spec
# without importing the parallel package first
declare_family("model_parallel", "mixle_spark.parallel.backends.model_parallel")

__all__ = ["__version__"]
