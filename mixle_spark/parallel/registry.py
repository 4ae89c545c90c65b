"""The encoded-data backend registry: ``encoded_data(data, backend=NAME)`` dispatches here.

Registering is the only way to add a backend; nothing branches on backend names. Names and aliases
are case-insensitive; ``None`` means the default for the data (``spark`` for a Spark DataFrame once
that backend is registered, otherwise ``local``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "EncodedDataControlConflictError",
    "available_encoded_data_backends",
    "encoded_data",
    "is_encoded_data_handle",
    "register_encoded_data_backend",
]

_HANDLE_METHODS = (
    "pysp_seq_log_density_sum",
    "pysp_seq_estimate",
    "pysp_seq_initialize",
    "pysp_stream_accumulate",
)

_FACTORIES: dict[str, Callable[..., Any]] = {}
_CANONICAL: dict[str, str] = {}
# Data types that pick a backend when backend=None: (predicate, backend name), first match wins.
_DEFAULT_FOR_DATA: list[tuple[Callable[[Any], bool], str]] = []


class EncodedDataControlConflictError(ValueError):
    """Controls asked to change an existing encoded-data handle (it would be silently ignored)."""


def is_encoded_data_handle(obj: Any) -> bool:
    """True when ``obj`` exposes the sequence-orchestrator (encoded-data handle) contract."""
    return all(callable(getattr(obj, name, None)) for name in _HANDLE_METHODS)


def register_encoded_data_backend(
    name: str,
    factory: Callable[..., Any],
    aliases: Iterable[str] = (),
    *,
    override: bool = False,
    default_for: Callable[[Any], bool] | None = None,
) -> None:
    """Register ``factory(data, **options)`` under ``name`` and ``aliases``.

    Re-registering the same factory is a no-op; a different factory under a taken name raises
    ValueError naming the owner unless ``override=True``. ``default_for(data)`` (optional) makes this
    backend the default for data it accepts when ``backend=None``.
    """
    canonical = name.lower()
    names = [canonical, *(a.lower() for a in aliases)]
    for key in names:
        owner = _FACTORIES.get(key)
        if owner is not None and owner is not factory and not override:
            raise ValueError(
                f"encoded-data backend name {key!r} is already registered to "
                f"{getattr(owner, '__qualname__', owner)!r} (backend {_CANONICAL[key]!r}); "
                "pass override=True to replace it"
            )
    for key in names:
        _FACTORIES[key] = factory
        _CANONICAL[key] = canonical
    if default_for is not None:
        _DEFAULT_FOR_DATA[:] = [(p, n) for p, n in _DEFAULT_FOR_DATA if n != canonical]
        _DEFAULT_FOR_DATA.append((default_for, canonical))


def available_encoded_data_backends() -> list[str]:
    """Canonical names of the registered backends."""
    return sorted(set(_CANONICAL.values()))


def _resolve(backend: str | None, data: Any) -> str:
    if backend is None:
        for accepts, name in _DEFAULT_FOR_DATA:
            if accepts(data):
                return name
        return "local"
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a name (str) or None, got {backend!r}")
    key = backend.lower()
    if key not in _FACTORIES:
        raise ValueError(
            f"unknown encoded-data backend {backend!r}; registered backends: {', '.join(sorted(_FACTORIES))}"
        )
    return key


def encoded_data(
    data: Any,
    estimator: Any = None,
    model: Any = None,
    *,
    backend: str | None = None,
    **options: Any,
) -> Any:
    """Encode ``data`` for ``estimator`` (or for scoring with ``model``) with the chosen backend.

    An existing handle is returned unchanged when no option asks for a change; any control passed
    with a handle raises :class:`EncodedDataControlConflictError` (it could not be honoured).
    Unknown options are rejected by the backend's factory, never silently dropped.
    """
    if is_encoded_data_handle(data):
        asked = {k: v for k, v in options.items() if v is not None}
        if backend is not None:
            asked["backend"] = backend
        if asked:
            raise EncodedDataControlConflictError(
                f"data is already an encoded-data handle ({type(data).__name__}); the controls "
                f"{sorted(asked)} would change its encoding: build a new handle from the raw data instead"
            )
        return data
    name = _resolve(backend, data)
    return _FACTORIES[name](data, estimator=estimator, model=model, **options)
