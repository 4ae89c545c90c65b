"""The reference API's parallel namespace: backends, planning and training contracts.

Every name below is importable from here (the documented API); the code lives by role:

- :mod:`mixle_spark.parallel.backends`: where a fit runs (the encoded-data contract, the registry,
  the local, spark, mp, mpi, torchrun and model-parallel backends);
- :mod:`mixle_spark.parallel.planning`: advisory resources, placements, model decomposition, balance;
- :mod:`mixle_spark.parallel.training`: contracts and launchers for distributed gradient training.

The EM driver and its services (trace, checkpoints, audit) are :mod:`mixle_spark.em`. Every name is
imported when first used (PEP 562), so importing this namespace, or any module under it, loads no
planning, training or backend code; the encoded-data registry knows the built-in backends by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixle_spark._lazy import lazy_exports

if TYPE_CHECKING:
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

_EXPORTS: dict[str, str] = {
    "BackendCapabilities": "mixle_spark.parallel.training.contracts",
    "BalancePlan": "mixle_spark.parallel.planning.balance",
    "CollectiveKind": "mixle_spark.parallel.training.contracts",
    "ComponentParallelEncodedData": "mixle_spark.parallel.backends.local",
    "ComponentParallelEstimator": "mixle_spark.parallel.backends.model_parallel",
    "DeviceSpec": "mixle_spark.parallel.planning.planner",
    "DistributedUpdate": "mixle_spark.parallel.training.contracts",
    "EncodedDataControlConflictError": "mixle_spark.parallel.backends.registry",
    "LightningFabricLauncher": "mixle_spark.parallel.training.launchers",
    "LocalEncodedData": "mixle_spark.parallel.backends.local",
    "MPEncodedData": "mixle_spark.parallel.backends.multiprocessing",
    "ModelDecomposition": "mixle_spark.parallel.planning.model_decomposition",
    "ModelParallelEncodedData": "mixle_spark.parallel.backends.local",
    "ModelParallelEstimator": "mixle_spark.parallel.backends.model_parallel",
    "ModelShard": "mixle_spark.parallel.planning.planner",
    "ParallelAxis": "mixle_spark.parallel.training.contracts",
    "ParallelPlan": "mixle_spark.parallel.training.contracts",
    "ParameterLayout": "mixle_spark.parallel.training.contracts",
    "PayloadKind": "mixle_spark.parallel.training.contracts",
    "Placement": "mixle_spark.parallel.planning.planner",
    "PlacementShard": "mixle_spark.parallel.planning.planner",
    "RayTrainLauncher": "mixle_spark.parallel.training.launchers",
    "Resources": "mixle_spark.parallel.planning.planner",
    "StateLayout": "mixle_spark.parallel.training.contracts",
    "StepReceipt": "mixle_spark.parallel.training.contracts",
    "UnrealizedModelPlacementError": "mixle_spark.parallel.planning.balance",
    "UnsupportedControlError": "mixle_spark.parallel.backends.registry",
    "WorkerTopologyAttestation": "mixle_spark.parallel.training.launchers",
    "attest_worker_coordinate": "mixle_spark.parallel.training.launchers",
    "auto_balanced_estimator": "mixle_spark.parallel.planning.balance",
    "auto_parallel_estimator": "mixle_spark.parallel.backends.model_parallel",
    "available_encoded_data_backends": "mixle_spark.parallel.backends.registry",
    "available_training_backends": "mixle_spark.parallel.training.contracts",
    "balance_plan": "mixle_spark.parallel.planning.balance",
    "component_parallel_fold": "mixle_spark.parallel.backends.model_parallel",
    "decompose_model": "mixle_spark.parallel.planning.model_decomposition",
    "encoded_data": "mixle_spark.parallel.backends.registry",
    "get_training_backend": "mixle_spark.parallel.training.contracts",
    "is_encoded_data_handle": "mixle_spark.parallel.backends.registry",
    "model_parallel_fold": "mixle_spark.parallel.backends.model_parallel",
    "model_sharding_plan": "mixle_spark.parallel.planning.planner",
    "plan": "mixle_spark.parallel.planning.planner",
    "register_encoded_data_backend": "mixle_spark.parallel.backends.registry",
    "register_training_backend": "mixle_spark.parallel.training.contracts",
}
"""Each public name and the module that defines it."""


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)


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
