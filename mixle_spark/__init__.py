"""mixle_spark: mixture and composite probability models fitted by EM, locally or at Spark scale."""

from mixle_spark._version import __version__

__all__ = ["__version__"]
