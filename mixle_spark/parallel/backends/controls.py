"""The controls every encoded-data backend takes from the registry's ``encoded_data``: their defaults,
their checks and what a backend factory does with them first (:func:`take_controls`).

Backends import these from here, not from the registry: the registry names every backend (it imports
them on first use), so a backend importing the registry back would close an import cycle.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from mixle_spark._checks import Check, integer

__all__ = [
    "CONTROL_CHECKS",
    "CONTROL_DEFAULTS",
    "UnsupportedControlError",
    "check_control",
    "check_engine_and_precision",
    "refuse_controls",
    "take_controls",
]


class UnsupportedControlError(ValueError):
    """A backend was asked for a control it cannot honour (it is refused, never silently ignored)."""


def refuse_controls(backend: str, controls: dict[str, Any], honoured: Iterable[str]) -> None:
    """Raise :class:`UnsupportedControlError` for any control in ``controls`` not in ``honoured``."""
    honoured = set(honoured)
    refused = [k for k in controls if k not in honoured]
    if refused:
        asked = ", ".join(f"{k}={controls[k]!r}" for k in refused)
        raise UnsupportedControlError(
            f"the {backend!r} backend cannot honour {asked}; it honours: {', '.join(sorted(honoured))}"
        )


def check_engine_and_precision(backend: str, engine: Any, precision: Any) -> None:
    """Our backends compute with numpy in float64: any other engine or precision is refused."""
    if engine is not None and str(engine).lower() != "numpy":
        raise ValueError(f"the {backend!r} backend computes with numpy; engine={engine!r} is not available")
    if precision is not None and precision not in ("auto", "float64", "fp64", np.float64):
        raise ValueError(
            f"the {backend!r} backend computes in float64; precision={precision!r} cannot be honoured "
            "(results must agree across backends to 1e-9)"
        )


CONTROL_DEFAULTS: dict[str, Any] = {
    "encoder": None,
    "placement": None,
    "resources": None,
    "engine": None,
    "precision": None,
    "num_chunks": None,
    "sub_chunks": 1,
    "backend": None,
    "num_workers": None,
    "client": None,
    "comm": None,
    "root": 0,
    "root_only": False,
    "parallel_chunks": False,
    "chunk_workers": None,
    "batch_size": None,
    "shuffle": None,
    "seed": None,
    "defer_encoding": False,
}
"""The controls of :func:`~mixle_spark.parallel.backends.registry.encoded_data` and the value that
means "not asked for": its keyword defaults (a test holds the two equal, so they cannot drift apart)."""


CONTROL_CHECKS: dict[str, Check] = {
    "num_chunks": integer(1, optional=True),
    "sub_chunks": integer(1),
    "num_workers": integer(1, optional=True),
    "depth": integer(1),
}
"""The declared checks of the controls that the fit job's flags (``--partitions``, ``--num-workers``,
``--depth``) and the ML Params (``numPartitions``, ``aggregationDepth``) stand for, run by the backends
that take them (``depth``: the tree-merge depth of the Spark backend's statistics)."""


def check_control(name: str, value: Any) -> Any:
    """``value`` of control ``name`` checked by :data:`CONTROL_CHECKS` (and normalized)."""
    return CONTROL_CHECKS[name](value, name)


def take_controls(backend: str, options: dict[str, Any], honoured: Iterable[str]) -> dict[str, Any]:
    """What a backend factory does first: pop :func:`encoded_data`'s controls out of ``options``
    (what stays there is the backend's own), refuse those ``backend`` does not honour
    (:func:`refuse_controls`), check ``engine`` and ``precision`` (numpy, float64) and return the
    other controls asked for."""
    controls = {k: options.pop(k) for k in list(options) if k in CONTROL_DEFAULTS}
    refuse_controls(backend, controls, honoured)
    check_engine_and_precision(backend, controls.pop("engine", None), controls.pop("precision", None))
    return controls
