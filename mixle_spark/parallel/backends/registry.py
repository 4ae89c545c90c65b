"""The encoded-data backend registry: ``encoded_data(data, backend=NAME)`` dispatches here.

Registering is the only way to add a backend; nothing branches on backend names. Names and aliases
are case-insensitive; ``None`` means the default for the data (``spark`` for a Spark DataFrame, a
Dask or Ray frame its engine's backend, otherwise ``local``). The built-in backends are registered
here by name and module (:data:`BUILTIN_BACKENDS`) and imported when first used, so a fit imports its
own backend only (and never the planning or training code).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterable
from importlib import import_module
from typing import Any

from mixle_spark._frames import frame_engine
from mixle_spark._identity import content_digest, path_digest
from mixle_spark.errors import did_you_mean
from mixle_spark.parallel.backends.contract import EncodedData
from mixle_spark.parallel.backends.controls import (
    CONTROL_CHECKS,
    CONTROL_DEFAULTS,
    UnsupportedControlError,
    check_control,
    check_engine_and_precision,
    refuse_controls,
    take_controls,
)

__all__ = [
    "BUILTIN_BACKENDS",
    "BUILTIN_HINTS",
    "CONTROL_CHECKS",
    "CONTROL_DEFAULTS",
    "HINTS",
    "EncodedDataControlConflictError",
    "UnsupportedControlError",
    "available_encoded_data_backends",
    "check_control",
    "check_engine_and_precision",
    "data_identity",
    "encoded_data",
    "is_encoded_data_handle",
    "refuse_controls",
    "register_encoded_data_backend",
    "take_controls",
]

HINTS = frozenset({"defer_encoding"})
"""Controls a backend may ignore: :func:`encoded_data` hands them only to the backends registered as
taking them (``hints=``), and drops them for the others (any other control not honoured is refused)."""

_FACTORIES: dict[str, Callable[..., Any]] = {}
_CANONICAL: dict[str, str] = {}
_HINTED: dict[str, frozenset[str]] = {}  # backend -> the hints its factory takes
# Data types that pick a backend when backend=None: (predicate, backend name), first match wins.
_DEFAULT_FOR_DATA: list[tuple[Callable[[Any], bool], str]] = []


class EncodedDataControlConflictError(ValueError):
    """Controls asked to change an existing encoded-data handle (it would be silently ignored)."""


def is_encoded_data_handle(obj: Any) -> bool:
    """True when ``obj`` is an encoded-data handle
    (:class:`~mixle_spark.parallel.backends.contract.EncodedData`)."""
    return isinstance(obj, EncodedData)


def register_encoded_data_backend(
    name: str,
    factory: Callable[..., Any],
    aliases: Iterable[str] = (),
    *,
    override: bool = False,
    default_for: Callable[[Any], bool] | None = None,
    hints: Iterable[str] = (),
) -> None:
    """Register ``factory(data, **options)`` under ``name`` and ``aliases``.

    Re-registering the same factory is a no-op; a different factory under a taken name raises
    ValueError naming the owner unless ``override=True``. ``default_for(data)`` (optional) makes this
    backend the default for data it accepts when ``backend=None``. ``hints``: the :data:`HINTS` the
    factory takes (the others never reach it).
    """
    hints = frozenset(hints)
    if not hints <= HINTS:
        raise ValueError(f"unknown hint(s) {sorted(hints - HINTS)}; hints are: {', '.join(sorted(HINTS))}")
    if not callable(factory):
        raise TypeError(f"backend factory must be callable, got {factory!r}")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a backend needs a non-empty name, got {name!r}")
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
    _HINTED[canonical] = hints
    if default_for is not None:
        _DEFAULT_FOR_DATA[:] = [(p, n) for p, n in _DEFAULT_FOR_DATA if n != canonical]
        _DEFAULT_FOR_DATA.append((default_for, canonical))


class _Lazy:
    """A built-in backend's factory, imported from its module on first use (the optional ones import
    their libraries only then: pyspark, mpi4py, torch, dask, ray)."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name
        self.__qualname__ = f"{module}.{name}"

    def __call__(self, data: Any, **options: Any) -> Any:
        return getattr(import_module(self.module), self.name)(data, **options)

    def __repr__(self) -> str:
        return f"<backend factory {self.__qualname__}>"


_BACKENDS = "mixle_spark.parallel.backends"
BUILTIN_BACKENDS: tuple[tuple[str, str, tuple[str, ...], str | None], ...] = (
    ("local", f"{_BACKENDS}.local:make_local", ("serial", "numpy"), None),
    ("mp", f"{_BACKENDS}.multiprocessing:make_mp", ("multiprocessing",), None),
    ("model_parallel", f"{_BACKENDS}.local:make_model_parallel", ("component_parallel", "mp_model"), None),
    ("mpi", f"{_BACKENDS}.mpi:make_mpi", ("mpi4py",), None),
    ("torchrun", f"{_BACKENDS}.torchrun:make_torchrun", ("torch",), None),
    ("spark", f"{_BACKENDS}.spark:make_spark", ("pyspark",), "spark"),
    ("dask", f"{_BACKENDS}.dask:make_dask", ("distributed",), "dask"),
    ("ray", f"{_BACKENDS}.ray:make_ray", (), "ray"),
    ("lightning", f"{_BACKENDS}.minibatch:make_lightning", ("pl", "minibatch"), None),
)
"""The built-in backends: ``(name, "module:factory", aliases, the frame engine it is the default for)``."""

BUILTIN_HINTS: dict[str, tuple[str, ...]] = {"spark": ("defer_encoding",)}
"""The :data:`HINTS` each built-in backend takes (the others take none)."""


def _engine_is(engine: str) -> Callable[[Any], bool]:
    return lambda data: frame_engine(data) == engine


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
    key = backend.strip().lower()
    if not key:
        raise ValueError(
            "backend must be a non-empty name (or None for the default); registered backends: "
            f"{', '.join(sorted(_FACTORIES))}"
        )
    if key not in _FACTORIES:
        raise ValueError(
            f"unknown encoded-data backend {backend!r}{did_you_mean(key, _FACTORIES)}; "
            f"registered backends: {', '.join(sorted(_FACTORIES))}"
        )
    return key


def encoded_data(
    data: Any,
    estimator: Any = None,
    model: Any = None,
    encoder: Any = None,
    placement: Any = None,
    resources: Any = None,
    engine: Any = None,
    precision: Any = None,
    num_chunks: int | None = None,
    sub_chunks: int = 1,
    backend: str | None = None,
    num_workers: int | None = None,
    client: Any = None,
    comm: Any = None,
    root: int = 0,
    root_only: bool = False,
    parallel_chunks: bool = False,
    chunk_workers: int | None = None,
    batch_size: int | None = None,
    shuffle: bool | None = None,
    seed: int | None = None,
    defer_encoding: bool = False,
    **options: Any,
) -> Any:
    """Encode ``data`` for ``estimator`` (or for scoring with ``model``) with the chosen backend.

    Parameters
    ----------
    data : records, numpy array, pandas / pyarrow table, Spark DataFrame, or an encoded handle
    estimator, model, encoder : what the data is encoded for (the encoder is resolved from them)
    placement, resources, engine, precision, num_chunks, sub_chunks : placement controls (see
        :func:`mixle_spark.parallel.planning.planner.plan`)
    backend : str, optional
        A registered backend name or alias (case-insensitive); None picks the default for the
        data (``spark`` for a Spark DataFrame, else ``local``).
    num_workers, client, comm, root, root_only, parallel_chunks, chunk_workers, batch_size,
    shuffle, seed : backend controls, as in the reference API.
    defer_encoding : bool
        A hint that the handle serves a few passes right away (an update, a micro-batch): a backend
        may then encode the data in its first pass instead of now (Spark: inside the first resident
        session of a fit, one Spark job fewer; a bad value then raises at that pass). It reaches
        only the backends registered as taking it (:data:`HINTS`); the others encode at once.
    **options : backend-specific options (e.g. ``column``, ``weights``, ``depth`` for Spark).

    Only the controls that differ from their defaults reach the backend's factory, which honours
    them or raises :class:`UnsupportedControlError` naming them. An existing handle is returned
    unchanged when no control is given; otherwise :class:`EncodedDataControlConflictError`.
    """
    controls = _controls(locals())
    if is_encoded_data_handle(data):
        asked = [k for k, v in (("estimator", estimator), ("model", model)) if v is not None]
        asked += [*controls, *sorted(options)]
        if asked:
            raise EncodedDataControlConflictError(
                f"existing encoded handle ({type(data).__name__}) cannot apply control(s): "
                f"{', '.join(asked)}; omit controls to reuse it unchanged"
            )
        return data
    name = _resolve(backend, data)
    controls.pop("backend", None)
    for hint in HINTS - _HINTED.get(_CANONICAL.get(name, name), frozenset()):
        controls.pop(hint, None)  # a hint this backend does not take
    handle = _FACTORIES[name](data, estimator=estimator, model=model, **controls, **options)
    try:
        _SOURCES[handle] = (data, options.get("weights"))
    except TypeError:  # a handle that cannot be weakly referenced: its data stays unknown
        pass
    return handle


_SOURCES: weakref.WeakKeyDictionary[Any, tuple[Any, Any]] = weakref.WeakKeyDictionary()
"""What each handle :func:`encoded_data` made was encoded from (data, weights), while it lives."""

BUILTIN_IDENTITIES: dict[str, str] = {
    "spark": f"{_BACKENDS}.spark._common:content_identity",
    "dask": f"{_BACKENDS}.dask:content_identity",
    "ray": f"{_BACKENDS}.ray:content_identity",
}
"""Where each frame engine's data digest is computed (``"module:function"``, imported on use): a
pass where the data lives, the rows hashed and combined as a multiset."""


def data_identity(data: Any, weights: Any = None) -> str | None:
    """A digest of ``data``'s content: what a checkpoint records of the data it came from, so that
    other data is never taken for the same.

    In-memory tables and arrays are hashed here (:func:`mixle_spark._identity.content_digest`); a
    local path (what MPI and torchrun processes read) by its files, sizes and modification times; a
    Spark, Dask or Ray frame by one pass where it lives (Spark: an aggregation of 64-bit row hashes,
    about the cost of a scan of the columns); an encoded-data handle by the data
    :func:`encoded_data` made it from (a handle made otherwise: None, unknown). ``weights``: the
    per-row weights passed beside the data.
    """
    if is_encoded_data_handle(data):
        source = _SOURCES.get(data)
        if source is None:
            return None
        data, weights = source
    if isinstance(data, (str, os.PathLike)):
        return path_digest(data)
    engine = frame_engine(data)
    if engine is not None:
        where = BUILTIN_IDENTITIES.get(engine)
        if where is None:
            return None
        return str(_Lazy(*where.split(":"))(data))
    return content_digest(data, weights)


def _controls(scope: dict[str, Any]) -> dict[str, Any]:
    """The controls in ``scope`` that differ from their defaults (ints and bools compared exactly)."""
    out = {}
    for name, default in CONTROL_DEFAULTS.items():
        value = scope[name]
        if value is default or (type(value) is type(default) and value == default):
            continue
        out[name] = value
    return out


for _name, _where, _aliases, _engine in BUILTIN_BACKENDS:
    register_encoded_data_backend(
        _name,
        _Lazy(*_where.split(":")),
        aliases=_aliases,
        default_for=None if _engine is None else _engine_is(_engine),
        hints=BUILTIN_HINTS.get(_name, ()),
    )
