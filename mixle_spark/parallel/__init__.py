"""Planning and backends: importing this namespace registers the built-in encoded-data backends."""

from mixle_spark.parallel.local import LocalEncodedData, make_local
from mixle_spark.parallel.registry import (
    EncodedDataControlConflictError,
    available_encoded_data_backends,
    encoded_data,
    is_encoded_data_handle,
    register_encoded_data_backend,
)

register_encoded_data_backend("local", make_local, aliases=("serial", "numpy"))

__all__ = [
    "EncodedDataControlConflictError",
    "LocalEncodedData",
    "available_encoded_data_backends",
    "encoded_data",
    "is_encoded_data_handle",
    "register_encoded_data_backend",
]
