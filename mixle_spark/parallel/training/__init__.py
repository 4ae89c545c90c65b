"""Distributed gradient training: contracts, launchers, and the torch modules that train.

Pure data and validation (no optional import):

- :mod:`~mixle_spark.parallel.training.contracts`: process mesh, parallel plans, capabilities, step
  receipts, the training-backend registry (``_records`` holds their value types);
- :mod:`~mixle_spark.parallel.training.training_health`: per-step health receipts (numpy only);
- :mod:`~mixle_spark.parallel.training.launchers`: Lightning Fabric and Ray Train launchers,
  worker-topology attestation (their libraries imported on use).

Modules that need torch (the ``torch`` extra), imported only when a caller imports them:

- :mod:`~mixle_spark.parallel.training.torch_training`: DDP / FSDP2 / TP sessions (``torch_native``);
- :mod:`~mixle_spark.parallel.training.dcp_checkpoint`: sharded checkpoints as immutable generations;
- :mod:`~mixle_spark.parallel.training.fault_tolerant_training`: snapshots and elastic resume;
- :mod:`~mixle_spark.parallel.training.torch_neural`: rank-shard streaming training;
- :mod:`~mixle_spark.parallel.training.neural_mixture`: a mixture of experts fitted by generalized EM;
- :mod:`~mixle_spark.parallel.training.lightning_data`: a Lightning DataModule and mini-batch EM
  (the ``lightning`` extra);
- :mod:`~mixle_spark.parallel.training.megatron_training`: the plan mapped onto Megatron (CUDA only).

EM fits never import this package. Importing it registers the ``torch_native`` and ``megatron``
training backends as lazy factories: torch is imported when one is first resolved.
"""

from __future__ import annotations

import importlib
from typing import Any

from mixle_spark.parallel.training.contracts import register_training_backend


def _factory(module: str, name: str) -> Any:
    def build() -> Any:
        return getattr(importlib.import_module(f"mixle_spark.parallel.training.{module}"), name)()

    build.__qualname__ = f"{module}.{name}"
    return build


register_training_backend("torch_native", _factory("torch_training", "TorchDistributedBackend"))
register_training_backend("megatron", _factory("megatron_training", "MegatronBackend"))
