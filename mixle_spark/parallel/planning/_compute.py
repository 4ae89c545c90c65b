"""The engine and precision a placement computes with (:func:`placement_compute`): what was asked for,
else what the devices of its resources (or a placement planned for them) declare.

A :class:`~mixle_spark.parallel.planning.planner.DeviceSpec` names an engine (``"torch"`` for the GPUs
:meth:`~mixle_spark.parallel.planning.planner.Resources.discover` finds and for torchrun ranks) and may
name a precision (``Resources.local(precision="float32")``). :func:`~mixle_spark.parallel.planning.
planner.plan` and every backend's ``encoded_data`` resolve the two the same way here:

* precision: the one asked for; else the one the devices declare (all that declare one must agree); else
  float64. A precision asked for that differs from a device's is an error naming both: the device was
  declared for that precision, and byte estimates made for one precision do not hold at another.
* engine: the one asked for (an engine computes the same statistics as another, so asking for one
  overrides the devices'); else the devices' engine when they all name one; else that of the fastest
  device (a machine with a GPU: torch).

The result is checked as every engine / precision is (:func:`mixle_spark.engines.resolve_compute`): an
engine that is not installed names its extra, bfloat16 with numpy names the engine that computes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mixle_spark.engines import Compute, precision_name, resolve_compute

__all__ = ["placement_compute"]


def _devices_of(resources: Any, placement: Any) -> tuple[Sequence[Any], str]:
    """The devices whose declarations apply, and how to name them in a message."""
    if placement is not None:
        declared = getattr(placement, "resources", None)
        if declared is not None:
            return tuple(declared.devices), "the placement's devices"
        return tuple(dict.fromkeys(s.device for s in placement.shards)), "the placement's devices"
    if resources is not None:
        return tuple(getattr(resources, "devices", ())), "the resources' devices"
    return (), ""


def _listing(pairs: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{name} {value}" for name, value in pairs)


def _precision(asked: str | None, devices: Sequence[Any], whose: str, placement: Any) -> tuple[str, str]:
    """The precision and where it came from; a conflict raises ValueError naming both sides."""
    declared = [(d.name, d.precision) for d in devices if getattr(d, "precision", None) is not None]
    planned = getattr(placement, "precision", None)
    if asked is not None:
        clash = [(name, p) for name, p in declared if precision_name(p) != asked]
        if clash:
            raise ValueError(
                f"precision={asked!r} conflicts with the precision {whose} declare ({_listing(clash)}); "
                "ask for theirs or for none (they are used then)"
            )
        if planned is not None and precision_name(planned) != asked:
            raise ValueError(
                f"precision={asked!r} conflicts with the placement's precision {planned!r} (its byte "
                f"estimates are for {planned}); plan it with precision={asked!r} or ask for none"
            )
        return asked, "asked for"
    kinds = {p for _name, p in declared}
    if len(kinds) > 1:
        raise ValueError(
            f"{whose} declare different precisions ({_listing(declared)}); one fit computes in one "
            "precision: make them agree or ask for one"
        )
    if kinds:
        return next(iter(kinds)), f"declared by {whose}"
    if planned is not None:
        return str(planned), "the placement's"
    return "float64", "the default"


def _engine(asked: Any, devices: Sequence[Any], whose: str, placement: Any) -> tuple[str, str]:
    """The engine's name and where it came from."""
    if asked is not None:
        return str(getattr(asked, "name", asked)).strip().lower(), "asked for"
    planned = getattr(placement, "engine", None)
    if planned is not None:
        return str(planned), "the placement's"
    names = list(dict.fromkeys(str(d.engine).strip().lower() for d in devices))
    if len(names) == 1:
        return names[0], f"named by {whose}"
    if names:
        fastest = max(devices, key=lambda d: d.throughput)
        return str(fastest.engine).strip().lower(), f"that of the fastest of {whose}, {fastest.name}"
    return "numpy", "the default"


def placement_compute(
    engine: Any = None, precision: Any = None, resources: Any = None, placement: Any = None
) -> tuple[Compute, str]:
    """The checked :class:`~mixle_spark.engines.Compute` a fit on ``resources`` (or with
    ``placement``) runs, and a sentence saying where the engine and precision came from.

    ``engine`` / ``precision``: what was asked for (None: not asked). See the module docstring for the
    rules; the errors are one line (ValueError, or :class:`~mixle_spark.engines.EngineUnavailableError`
    for an engine that is not installed).

    >>> from mixle_spark.parallel.planning.planner import Resources
    >>> compute, why = placement_compute(resources=Resources.local(2, precision="fp32"))
    >>> compute.engine, compute.precision
    ('numpy', 'float32')
    >>> why
    "engine numpy (named by the resources' devices), precision float32 (declared by the resources' devices)"
    """
    devices, whose = _devices_of(resources, placement)
    asked = precision_name(precision)
    chosen_precision, precision_source = _precision(asked, devices, whose, placement)
    chosen_engine, engine_source = _engine(engine, devices, whose, placement)
    compute = resolve_compute(chosen_engine, chosen_precision)
    why = f"engine {compute.engine} ({engine_source}), precision {compute.precision} ({precision_source})"
    return compute, why
