"""The compute-engine registry, the check of what a fit asks for (:func:`resolve_compute`) and the
engine the E-steps of this process use (:func:`using_engine`, :func:`current_engine`).

Engines are registered by name, as encoded-data backends are: nothing branches on engine names. The
built-in ones (numpy, torch) are registered by module and imported when first used, so asking for
numpy never imports torch.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from importlib import import_module
from importlib.util import find_spec
from typing import Any

from mixle_spark.engines._base import Compute, ComputeEngine, EngineUnavailableError, precision_name

__all__ = [
    "available_engines",
    "current_engine",
    "engine_for",
    "fallback_note",
    "register_engine",
    "resolve_compute",
    "using_engine",
]

_LOG = logging.getLogger("mixle_spark.engines")

EngineFactory = Callable[[str], ComputeEngine]
"""``factory(precision)``: an engine computing at that precision."""


class _Builtin:
    """A built-in engine: its class, imported from ``module`` on first use; ``requires``: the library
    it needs and the extra that installs it."""

    def __init__(
        self, module: str, cls: str, requires: str | None, extra: str | None, precisions: str
    ) -> None:
        self.module, self.cls, self.requires, self.extra = module, cls, requires, extra
        self.precisions = frozenset(precisions.split(","))
        self.__qualname__ = f"{module}.{cls}"

    def __call__(self, precision: str) -> ComputeEngine:
        if self.requires is not None and find_spec(self.requires) is None:
            raise EngineUnavailableError(
                f"engine={self.cls.removesuffix('Engine').lower()!r} needs {self.requires}, which is not "
                f"installed: pip install 'mixle-spark[{self.extra}]'"
            )
        engine: ComputeEngine = getattr(import_module(self.module), self.cls)(precision)
        return engine


_FACTORIES: dict[str, Callable[[str], ComputeEngine]] = {
    "numpy": _Builtin("mixle_spark.engines.numpy_engine", "NumpyEngine", None, None, "float64,float32"),
    "torch": _Builtin(
        "mixle_spark.engines.torch_engine", "TorchEngine", "torch", "torch", "float64,float32,bfloat16"
    ),
}
_ENGINES: dict[Compute, ComputeEngine] = {}
_LOCK = threading.Lock()
_ACTIVE: list[ComputeEngine] = []
_NOTED: set[tuple[str, str]] = set()


def register_engine(name: str, factory: EngineFactory, *, override: bool = False) -> None:
    """Register ``factory(precision) -> ComputeEngine`` under ``name`` (case-insensitive).

    A name already taken by a different factory raises ValueError unless ``override=True``.
    """
    if not callable(factory):
        raise TypeError(f"engine factory must be callable, got {factory!r}")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"an engine needs a non-empty name, got {name!r}")
    key = name.strip().lower()
    owner = _FACTORIES.get(key)
    if owner is not None and owner is not factory and not override:
        raise ValueError(
            f"compute engine {key!r} is already registered to {getattr(owner, '__qualname__', owner)!r}; "
            "pass override=True to replace it"
        )
    with _LOCK:
        _FACTORIES[key] = factory
        for compute in [c for c in _ENGINES if c.engine == key]:
            del _ENGINES[compute]


def available_engines() -> list[str]:
    """The registered engine names, sorted (an engine whose library is missing is listed too; asking
    for it says which extra installs it)."""
    return sorted(_FACTORIES)


def _unknown(engine: Any) -> str:
    return f"engine={engine!r} is not a compute engine; registered: {', '.join(available_engines())}"


def resolve_compute(engine: Any = None, precision: Any = None) -> Compute:
    """What ``engine`` / ``precision`` ask for, checked: the canonical :class:`Compute`.

    Defaults: numpy, float64. An unknown engine, an engine whose library is not installed (naming the
    extra) or a precision the engine cannot compute in (bfloat16 with numpy) raises a one-line error.
    """
    name = "numpy" if engine is None else str(getattr(engine, "name", engine)).strip().lower()
    if name not in _FACTORIES:
        raise ValueError(
            f"engine={engine!r} is not a compute engine; registered: {', '.join(available_engines())}"
        )
    compute = Compute(name, precision_name(precision) or "float64")
    engine_for(compute)  # constructs it: a missing library or an unsupported precision fails here
    return compute


def engine_for(compute: Compute) -> ComputeEngine:
    """The engine (one per engine and precision in a process) computing what ``compute`` asks."""
    found = _ENGINES.get(compute)
    if found is None:
        factory = _FACTORIES.get(compute.engine)
        if factory is None:
            raise ValueError(_unknown(compute.engine))
        found = factory(compute.precision)
        with _LOCK:
            found = _ENGINES.setdefault(compute, found)
    return found


def current_engine() -> ComputeEngine:
    """The engine E-steps of this process use now: the innermost :func:`using_engine`, else numpy at
    the data's own precision."""
    if _ACTIVE:
        return _ACTIVE[-1]
    return engine_for(Compute())


@contextlib.contextmanager
def using_engine(compute: Compute | None) -> Iterator[ComputeEngine]:
    """Within this block the E-steps of this process (every thread of it: E-step thread pools too) use
    the engine ``compute`` names; None or the default leaves the current one."""
    engine = current_engine() if compute is None or compute.default else engine_for(compute)
    with _LOCK:
        _ACTIVE.append(engine)
    try:
        yield engine
    finally:
        with _LOCK:
            _ACTIVE.remove(engine)


def fallback_note(engine: ComputeEngine, family: str) -> None:
    """Say once per process (log level INFO) that ``family`` has no kernels on ``engine`` and runs its
    numpy kernels in float64."""
    key = (engine.name, family)
    if key in _NOTED:
        return
    _NOTED.add(key)
    _LOG.info(
        "%s has no %s kernels at %s: it runs its numpy kernels in float64 (data upcast)",
        family,
        engine.name,
        engine.precision,
    )
