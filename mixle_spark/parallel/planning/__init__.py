"""Advisory planning: which devices exist, where rows and model parts could go, and at what cost.

:mod:`~mixle_spark.parallel.planning.planner` (``Resources``, ``plan``, ``model_sharding_plan``),
:mod:`~mixle_spark.parallel.planning.model_decomposition` (which axis of a model tree splits across
workers), :mod:`~mixle_spark.parallel.planning.balance` (balancing data replicas against model
shards); ``_devices``, ``_sizing``, ``_cuts`` and ``_compute`` (the engine and precision a placement
computes with) are their parts. Nothing here runs a fit: a backend
may read a plan (``encoded_data(..., placement=...)``), the EM driver never does.
"""
