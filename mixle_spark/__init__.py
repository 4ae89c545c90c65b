"""mixle_spark: mixture and composite probability models fitted by EM, locally or at Spark scale."""

from typing import TYPE_CHECKING

from mixle_spark._lazy import lazy_exports
from mixle_spark._providers import declare_family
from mixle_spark._version import __version__

if TYPE_CHECKING:
    from mixle_spark.infer import InferredSpec, infer_spec

# an estimator family registered outside stats (a threaded E-step's wrapper): read from a spec
# without importing the parallel package first
declare_family("model_parallel", "mixle_spark.parallel.backends.model_parallel")

# a spec inferred from a table, imported on first use (PEP 562): importing the package loads no EM code
__getattr__, __dir__ = lazy_exports(
    globals(), {"InferredSpec": "mixle_spark.infer", "infer_spec": "mixle_spark.infer"}
)

__all__ = ["InferredSpec", "__version__", "infer_spec"]
