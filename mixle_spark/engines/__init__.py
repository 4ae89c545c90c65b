"""Compute engines: the libraries the E-step's kernels run on, and the precision they run in.

``encoded_data(..., engine="torch", precision="float32")``, ``em_fit --engine --precision`` and the
estimators' Params ask for them. An engine computes a mixture's fused feature pass (log-densities,
responsibilities and the statistics' sums) for the families with the feature protocol; other families
run their numpy kernels whatever the engine (said once, :func:`fallback_note`). The data is stored in
the precision asked for (float32 halves its bytes in Spark's storage, resident workers and every
backend's shares); statistics are always accumulated in float64.

Engines are registered by name (:func:`register_engine`), as backends are: ``numpy`` (the default;
float64 and float32) and ``torch`` (CPU, or CUDA when available; float64, float32 and bfloat16, the
``torch`` extra).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mixle_spark.engines._base import (
    PRECISIONS,
    Compute,
    ComputeEngine,
    EngineUnavailableError,
    precision_name,
    storage_dtype,
)
from mixle_spark.engines._registry import (
    available_engines,
    current_engine,
    engine_for,
    fallback_note,
    register_engine,
    resolve_compute,
    using_engine,
)

__all__ = [
    "PRECISIONS",
    "Compute",
    "ComputeEngine",
    "EngineUnavailableError",
    "available_engines",
    "current_engine",
    "engine_for",
    "fallback_note",
    "narrow_encoded",
    "precision_name",
    "register_engine",
    "resolve_compute",
    "storage_dtype",
    "using_engine",
]


def narrow_encoded(encoder: Any, enc: Any, compute: Compute | None) -> Any:
    """``enc`` (encoded by ``encoder``) stored at ``compute``'s precision: ``encoder.narrow(enc, dtype)``
    for float32 / bfloat16 (families that compute in float64 only keep ``enc``), ``enc`` for float64."""
    if compute is None or compute.precision == "float64":
        return enc
    return encoder.narrow(enc, np.dtype(compute.dtype))
