"""An adapter from a :class:`ParallelPlan` to Megatron's parallel configuration (capability-gated).

Megatron (``megatron-core``, or Megatron Bridge's model providers) runs tensor, pipeline, context and
expert parallelism on CUDA devices over NCCL. This module maps a plan onto Megatron's names,
validates it against the process group, and hands a model provider its configuration; it does not
train on CPU, and says so: :meth:`MegatronBackend.prepare` refuses, in one line, where megatron,
CUDA or NCCL is absent.

What maps to what (:func:`megatron_parallel_config`):

=====================  ===================================================================
plan                   Megatron
=====================  ===================================================================
``tp``                 ``tensor_model_parallel_size`` (and ``sequence_parallel = tp > 1``)
``pp``                 ``pipeline_model_parallel_size``
``cp``                 ``context_parallel_size``
``ep`` / ``etp``       ``expert_model_parallel_size`` / ``expert_tensor_parallel_size``
``dp_replicate`` x     the data-parallel size Megatron derives (world / (tp * pp * cp));
``dp_shard``           ``dp_shard > 1`` turns on ``use_distributed_optimizer`` (optimizer state
                       sharded over the data-parallel ranks; parameters stay replicated)
``microbatches`` x     ``num_microbatches`` of one optimizer step
``gradient_accumulation_steps``
precision              ``bf16`` / ``fp16`` flags, ``fp8="hybrid"`` for fp8
=====================  ===================================================================

Megatron builds its own process groups in its own rank order (tensor-parallel ranks adjacent), so a
rank's plan coordinate (:meth:`ParallelPlan.coordinate`, context-parallel ranks adjacent) is not the
coordinate Megatron gives it; only the sizes carry over.

>>> from mixle_spark.parallel.training.contracts import ParallelPlan
>>> megatron_parallel_config(ParallelPlan(dp_shard=2, tp=2, pp=2))["use_distributed_optimizer"]
True
"""

from __future__ import annotations

import importlib.util
from typing import Any

from mixle_spark.errors import describe_value
from mixle_spark.parallel.training.contracts import (
    BackendCapabilities,
    ParallelAxis,
    ParallelPlan,
)

__all__ = [
    "MEGATRON",
    "MegatronBackend",
    "configure_provider",
    "megatron_parallel_config",
    "megatron_unavailable",
]

MEGATRON = BackendCapabilities(
    "megatron",
    axes=set(ParallelAxis),
    precisions={"fp32", "fp16", "bf16", "fp8"},
    distributed_optimizer=True,
    reshardable_checkpoint=True,
    requirements=("megatron-core", "CUDA", "NCCL"),
)


def megatron_parallel_config(plan: ParallelPlan, *, precision: str = "fp32") -> dict[str, Any]:
    """Megatron's parallel and precision settings for ``plan`` (validated against :data:`MEGATRON`)."""
    if not isinstance(plan, ParallelPlan):
        raise TypeError(f"plan must be a ParallelPlan, got {describe_value(plan)}")
    MEGATRON.validate(plan, precision=precision)
    return {
        "tensor_model_parallel_size": plan.tp,
        "pipeline_model_parallel_size": plan.pp,
        "context_parallel_size": plan.cp,
        "expert_model_parallel_size": plan.ep,
        "expert_tensor_parallel_size": plan.etp,
        "sequence_parallel": plan.tp > 1,
        "use_distributed_optimizer": plan.dp_shard > 1,
        "data_parallel_size": plan.data_parallel_size,
        "num_microbatches": plan.microbatches * plan.gradient_accumulation_steps,
        "bf16": precision == "bf16",
        "fp16": precision == "fp16",
        "fp8": "hybrid" if precision == "fp8" else None,
    }


def configure_provider(provider: Any, plan: ParallelPlan, *, precision: str = "fp32") -> Any:
    """Set :func:`megatron_parallel_config`'s model settings on a Megatron Bridge model provider.

    Every attribute written must already exist on the provider (a misspelt or missing field is an
    error, not a silently added attribute). ``data_parallel_size`` and ``num_microbatches`` are
    the training loop's, not the provider's, and are not written.
    """
    config = megatron_parallel_config(plan, precision=precision)
    for key in ("data_parallel_size", "num_microbatches"):
        config.pop(key)
    missing = [k for k in config if not hasattr(provider, k)]
    if missing:
        raise AttributeError(
            f"the model provider {type(provider).__name__} has no attribute(s) {missing}: "
            "not a Megatron provider?"
        )
    for key, value in config.items():
        setattr(provider, key, value)
    return provider


def megatron_unavailable() -> str | None:
    """Why Megatron cannot run here (one line), or None when megatron-core, CUDA and NCCL are present."""
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
        return "Megatron training needs megatron-core: pip install megatron-core (and CUDA devices with NCCL)"
    try:
        import torch
    except ImportError:
        return "Megatron training needs torch: pip install 'mixle-spark[torch]'"
    if not torch.cuda.is_available():
        return (
            "Megatron training needs CUDA devices; this machine has none "
            "(the plan mapping is checked, nothing is run)"
        )
    import torch.distributed as dist

    if not dist.is_nccl_available():
        return "Megatron training needs NCCL, which this torch build lacks"
    return None


class MegatronBackend:
    """The ``megatron`` training backend: capability-gated to machines with megatron-core, CUDA and NCCL."""

    capabilities = MEGATRON

    def prepare(self, module: Any, *, plan: ParallelPlan, precision: str = "fp32", **kwargs: Any) -> Any:
        """Configure ``module`` (a Megatron Bridge model provider) for ``plan`` and build the model.

        Refuses with :class:`RuntimeError` (one line) where Megatron cannot run; checks the plan
        against the process group's world size first.
        """
        if kwargs:
            raise TypeError(f"unexpected keyword argument(s) {sorted(kwargs)} for MegatronBackend.prepare")
        megatron_parallel_config(plan, precision=precision)
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            plan.validate_world_size(dist.get_world_size())
        reason = megatron_unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        configure_provider(module, plan, precision=precision)
        if not hasattr(module, "provide_distributed_model"):
            raise TypeError(
                f"{type(module).__name__} is not a Megatron Bridge model provider "
                "(no provide_distributed_model)"
            )
        return module.provide_distributed_model(wrap_with_ddp=False)
