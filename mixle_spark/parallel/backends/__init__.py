"""Where a fit runs: the encoded-data backends, their contract and their registry.

- :mod:`~mixle_spark.parallel.backends.contract`: the handle contract (:class:`EncodedData`) and the
  optional capabilities the EM driver uses, as protocols.
- :mod:`~mixle_spark.parallel.backends.registry`: ``encoded_data(data, estimator, backend=NAME)``.
- :mod:`mixle_spark.parallel.fold` (outside this package: the EM driver uses it too): the fold every
  backend shares (:class:`PayloadHandle`: each partition folds its chunks into one payload, payloads
  are merged, the M-step runs once); ``_handle``: what backends share beyond it; ``model_parallel``:
  the threaded E-step any backend can use (``num_workers``).
- One module per backend, a package where a backend needs several: ``local`` (also
  ``model_parallel``, and ``minibatch``: the ``lightning`` backend, a local handle fitted by mini-batch
  EM), ``spark`` (a package: the handle in ``spark._handle``, its passes run by
  ``spark._executors``: a job per pass or resident tasks; with ``_encoding``, ``_chunks``, ``_copies``,
  ``_common``, ``_fused``, ``_resident``, ``_resident_listener``, ``_resident_wire`` and the others there),
  ``multiprocessing`` (``mp``; its resilient and audited handles in ``mp_resilient``), ``mpi`` (with
  ``_mpi_io``), ``torchrun`` (the mpi handle over ``torch.distributed``), ``dask`` (partitions held by
  the workers of a ``dask.distributed`` cluster) and ``ray`` (row ranges held by actors of a Ray
  cluster).

The registry knows the built-in backends by name and imports each one when it is first used (the
optional ones, spark, mpi, torchrun, dask and ray, import their libraries only then). A backend never
imports another backend or the EM driver.
"""

__all__: list[str] = []
