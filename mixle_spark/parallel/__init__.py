"""The reference API's parallel namespace: backends, planning and training contracts.

Every name below is importable from here (the documented API); the code lives by role:

- :mod:`mixle_spark.parallel.backends`: where a fit runs (the encoded-data contract, the registry,
  the local, spark, mp, mpi, torchrun and model-parallel backends);
- :mod:`mixle_spark.parallel.planning`: advisory resources, placements, model decomposition, balance;
- :mod:`mixle_spark.parallel.training`: contracts and launchers for distributed gradient training.

The EM driver and its services (trace, checkpoints, audit) are :mod:`mixle_spark.em`. Importing this
namespace registers the built-in encoded-data backends.
"""

from mixle_spark.parallel.backends.local import (
    ComponentParallelEncodedData,
    LocalEncodedData,
    ModelParallelEncodedData,
)
from mixle_spark.parallel.backends.model_parallel import (
    ComponentParallelEstimator,
    ModelParallelEstimator,
    auto_parallel_estimator,
    component_parallel_fold,
    model_parallel_fold,
)
from mixle_spark.parallel.backends.multiprocessing import MPEncodedData
from mixle_spark.parallel.backends.registry import (
    EncodedDataControlConflictError,
    UnsupportedControlError,
    available_encoded_data_backends,
    encoded_data,
    is_encoded_data_handle,
    register_encoded_data_backend,
)
from mixle_spark.parallel.planning.balance import (
    BalancePlan,
    UnrealizedModelPlacementError,
    auto_balanced_estimator,
    balance_plan,
)
from mixle_spark.parallel.planning.model_decomposition import ModelDecomposition, decompose_model
from mixle_spark.parallel.planning.planner import (
    DeviceSpec,
    ModelShard,
    Placement,
    PlacementShard,
    Resources,
    model_sharding_plan,
    plan,
)
from mixle_spark.parallel.training.contracts import (
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
from mixle_spark.parallel.training.launchers import (
    LightningFabricLauncher,
    RayTrainLauncher,
    WorkerTopologyAttestation,
    attest_worker_coordinate,
)

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
