"""Planning and backends: importing this namespace registers the built-in encoded-data backends."""

from typing import Any

from mixle_spark.parallel.local import LocalEncodedData, make_local
from mixle_spark.parallel.registry import (
    EncodedDataControlConflictError,
    available_encoded_data_backends,
    encoded_data,
    is_encoded_data_handle,
    register_encoded_data_backend,
)

register_encoded_data_backend("local", make_local, aliases=("serial", "numpy"))


def _make_spark(data: Any, **options: Any) -> Any:
    # Imported on first use: pyspark is an optional extra and only parallel.spark imports it.
    from mixle_spark.parallel.spark import make_spark

    return make_spark(data, **options)


def _is_spark_dataframe(data: Any) -> bool:
    cls = type(data)
    return cls.__name__ == "DataFrame" and cls.__module__.startswith("pyspark.sql")


register_encoded_data_backend("spark", _make_spark, aliases=("pyspark",), default_for=_is_spark_dataframe)

__all__ = [
    "EncodedDataControlConflictError",
    "LocalEncodedData",
    "available_encoded_data_backends",
    "encoded_data",
    "is_encoded_data_handle",
    "register_encoded_data_backend",
]
