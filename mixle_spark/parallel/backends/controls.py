"""The controls every encoded-data backend takes from the registry's ``encoded_data``: their defaults,
their checks and what a backend factory does with them first (:func:`take_controls`).

Backends import these from here, not from the registry: the registry names every backend (it imports
them on first use), so a backend importing the registry back would close an import cycle.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mixle_spark._checks import Check, integer
from mixle_spark.engines import Compute, resolve_compute
from mixle_spark.errors import MixleError

__all__ = [
    "CONTROL_CHECKS",
    "CONTROL_DEFAULTS",
    "UnsupportedControlError",
    "check_control",
    "check_engine_and_precision",
    "refuse_controls",
    "take_controls",
]


class UnsupportedControlError(MixleError, ValueError):
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


def check_engine_and_precision(
    backend: str,
    engine: Any,
    precision: Any,
    computes: bool = False,
    resources: Any = None,
    placement: Any = None,
) -> Compute:
    """``engine`` / ``precision`` checked (:func:`mixle_spark.engines.resolve_compute`: an unknown
    engine, one not installed, a precision it cannot compute in raise one line) and returned as a
    :class:`~mixle_spark.engines.Compute`; what is not asked for comes from the devices of
    ``resources`` / ``placement`` (their precision, their engine; a precision asked for that differs
    from theirs is an error naming both: :mod:`mixle_spark.parallel.planning._compute`). A backend
    that does not store its data at other precisions or run other engines (``computes=False``)
    refuses anything but numpy in float64."""
    if resources is None and placement is None:
        compute, why = resolve_compute(engine, precision), ""
    else:
        from mixle_spark.parallel.planning._compute import placement_compute

        compute, why = placement_compute(engine, precision, resources, placement)
        why = f"; {why}"
    if not computes and not compute.default:
        raise UnsupportedControlError(
            f"the {backend!r} backend computes with numpy in float64; {compute.describe()} cannot be "
            f"honoured here (results must agree across backends to 1e-9){why}"
        )
    return compute


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


def take_controls(
    backend: str, options: dict[str, Any], honoured: Iterable[str], computes: bool = False
) -> dict[str, Any]:
    """What a backend factory does first: pop :func:`encoded_data`'s controls out of ``options``
    (what stays there is the backend's own), refuse those ``backend`` does not honour
    (:func:`refuse_controls`), check ``engine`` and ``precision`` and return the other controls asked
    for (what is not asked for is taken from the devices of ``resources`` / ``placement``). A
    backend that runs the compute engines and stores its data at their precision
    (``computes=True``) gets the checked :class:`~mixle_spark.engines.Compute` as ``compute`` (when
    not numpy in float64); the others refuse anything else."""
    controls = {k: options.pop(k) for k in list(options) if k in CONTROL_DEFAULTS}
    refuse_controls(backend, controls, honoured)
    compute = check_engine_and_precision(
        backend,
        controls.pop("engine", None),
        controls.pop("precision", None),
        computes,
        controls.get("resources"),
        controls.get("placement"),
    )
    if not compute.default:
        controls["compute"] = compute
    return controls
