"""Planning and backends: importing this namespace registers the built-in encoded-data backends.

The names follow the reference API page (``mixle.utils.parallel``): resources and advisory plans
(:mod:`~mixle_spark.parallel.planner`), the encoded-data registry, model-parallel E-steps
(:mod:`~mixle_spark.parallel.model_parallel`), model decomposition and balance plans.
"""

from typing import Any

from mixle_spark.parallel.balance import (
    BalancePlan,
    UnrealizedModelPlacementError,
    auto_balanced_estimator,
    balance_plan,
)
from mixle_spark.parallel.local import LocalEncodedData, make_local
from mixle_spark.parallel.model_decomposition import ModelDecomposition, decompose_model
from mixle_spark.parallel.model_parallel import (
    ComponentParallelEncodedData,
    ComponentParallelEstimator,
    ModelParallelEncodedData,
    ModelParallelEstimator,
    auto_parallel_estimator,
    component_parallel_fold,
    make_model_parallel,
    model_parallel_fold,
)
from mixle_spark.parallel.multiprocessing import MPEncodedData, make_mp
from mixle_spark.parallel.planner import (
    DeviceSpec,
    ModelShard,
    Placement,
    PlacementShard,
    Resources,
    model_sharding_plan,
    plan,
)
from mixle_spark.parallel.registry import (
    EncodedDataControlConflictError,
    UnsupportedControlError,
    available_encoded_data_backends,
    encoded_data,
    is_encoded_data_handle,
    register_encoded_data_backend,
)
from mixle_spark.parallel.training_contracts import (
    BackendCapabilities,
    CollectiveKind,
    DistributedUpdate,
    ParallelAxis,
    ParallelPlan,
    ParameterLayout,
    PayloadKind,
    StateLayout,
    StepReceipt,
    available_training_backends,
    get_training_backend,
    register_training_backend,
)
from mixle_spark.parallel.training_launchers import (
    LightningFabricLauncher,
    RayTrainLauncher,
    WorkerTopologyAttestation,
    attest_worker_coordinate,
)

register_encoded_data_backend("local", make_local, aliases=("serial", "numpy"))
register_encoded_data_backend("mp", make_mp, aliases=("multiprocessing",))
register_encoded_data_backend(
    "model_parallel", make_model_parallel, aliases=("component_parallel", "mp_model")
)


def _make_spark(data: Any, **options: Any) -> Any:
    # Imported on first use: pyspark is an optional extra and only parallel.spark imports it.
    from mixle_spark.parallel.spark import make_spark

    return make_spark(data, **options)


def _make_mpi(data: Any, **options: Any) -> Any:
    # Imported on first use: mpi4py is an optional extra (and ``python -m ...mpi`` must not find
    # the module already imported).
    from mixle_spark.parallel.mpi import make_mpi

    return make_mpi(data, **options)


def _make_torchrun(data: Any, **options: Any) -> Any:
    from mixle_spark.parallel.torchrun import make_torchrun  # torch is an optional extra

    return make_torchrun(data, **options)


def _is_spark_dataframe(data: Any) -> bool:
    cls = type(data)
    return cls.__name__ == "DataFrame" and cls.__module__.startswith("pyspark.sql")


register_encoded_data_backend("mpi", _make_mpi, aliases=("mpi4py",))
register_encoded_data_backend("torchrun", _make_torchrun, aliases=("torch",))
register_encoded_data_backend("spark", _make_spark, aliases=("pyspark",), default_for=_is_spark_dataframe)

__all__ = [
    "BackendCapabilities",
    "BalancePlan",
    "CollectiveKind",
    "ComponentParallelEncodedData",
    "ComponentParallelEstimator",
    "DeviceSpec",
    "DistributedUpdate",
    "EncodedDataControlConflictError",
    "LightningFabricLauncher",
    "LocalEncodedData",
    "MPEncodedData",
    "ModelDecomposition",
    "ModelParallelEncodedData",
    "ModelParallelEstimator",
    "ModelShard",
    "ParallelAxis",
    "ParallelPlan",
    "ParameterLayout",
    "PayloadKind",
    "Placement",
    "PlacementShard",
    "RayTrainLauncher",
    "Resources",
    "StateLayout",
    "StepReceipt",
    "UnrealizedModelPlacementError",
    "UnsupportedControlError",
    "WorkerTopologyAttestation",
    "attest_worker_coordinate",
    "auto_balanced_estimator",
    "auto_parallel_estimator",
    "available_encoded_data_backends",
    "available_training_backends",
    "balance_plan",
    "component_parallel_fold",
    "decompose_model",
    "encoded_data",
    "get_training_backend",
    "is_encoded_data_handle",
    "model_parallel_fold",
    "model_sharding_plan",
    "plan",
    "register_encoded_data_backend",
    "register_training_backend",
]
