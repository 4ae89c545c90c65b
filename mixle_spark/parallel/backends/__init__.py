"""Where a fit runs: the encoded-data backends, their contract and their registry.

- :mod:`~mixle_spark.parallel.backends.contract`: the handle contract (:class:`EncodedData`) and the
  optional capabilities the EM driver uses, as protocols.
- :mod:`~mixle_spark.parallel.backends.registry`: ``encoded_data(data, estimator, backend=NAME)``.
- ``_handle``: the fold every backend shares (:class:`PayloadHandle`: each partition folds its
  chunks into one payload, payloads are merged, the M-step runs once); ``model_parallel``: the
  threaded E-step any backend can use (``num_workers``).
- One module per backend: ``local`` (also ``model_parallel``), ``spark`` (with ``_spark_common``,
  ``_spark_resident``, ``_resident_policy``, ``_resident_listener``, ``_resident_wire``),
  ``multiprocessing`` (``mp``), ``mpi`` (with ``_mpi_io``), ``torchrun`` (the mpi handle over
  ``torch.distributed``), ``dask`` (partitions held by the workers of a ``dask.distributed`` cluster)
  and ``ray`` (row ranges held by actors of a Ray cluster).

Importing this package registers the built-in backends; the optional ones (spark, mpi, torchrun, dask, ray)
import their libraries on first use. A backend never imports another backend or the EM driver.
"""

from typing import Any

from mixle_spark._frames import frame_engine
from mixle_spark.parallel.backends.local import make_local, make_model_parallel
from mixle_spark.parallel.backends.multiprocessing import make_mp
from mixle_spark.parallel.backends.registry import register_encoded_data_backend

__all__: list[str] = []


def _make_spark(data: Any, **options: Any) -> Any:
    from mixle_spark.parallel.backends.spark import make_spark  # pyspark is an optional extra

    return make_spark(data, **options)


def _make_mpi(data: Any, **options: Any) -> Any:
    from mixle_spark.parallel.backends.mpi import make_mpi  # mpi4py is an optional extra

    return make_mpi(data, **options)


def _make_torchrun(data: Any, **options: Any) -> Any:
    from mixle_spark.parallel.backends.torchrun import make_torchrun  # torch is an optional extra

    return make_torchrun(data, **options)


def _make_dask(data: Any, **options: Any) -> Any:
    from mixle_spark.parallel.backends.dask import make_dask  # dask[distributed] is an optional extra

    return make_dask(data, **options)


def _make_ray(data: Any, **options: Any) -> Any:
    from mixle_spark.parallel.backends.ray import make_ray  # ray[data] is an optional extra

    return make_ray(data, **options)


def _of(engine: str) -> Any:
    return lambda data: frame_engine(data) == engine


register_encoded_data_backend("local", make_local, aliases=("serial", "numpy"))
register_encoded_data_backend("mp", make_mp, aliases=("multiprocessing",))
register_encoded_data_backend(
    "model_parallel", make_model_parallel, aliases=("component_parallel", "mp_model")
)
register_encoded_data_backend("mpi", _make_mpi, aliases=("mpi4py",))
register_encoded_data_backend("torchrun", _make_torchrun, aliases=("torch",))
register_encoded_data_backend("spark", _make_spark, aliases=("pyspark",), default_for=_of("spark"))
register_encoded_data_backend("dask", _make_dask, aliases=("distributed",), default_for=_of("dask"))
register_encoded_data_backend("ray", _make_ray, default_for=_of("ray"))
