"""The family registry: family name -> Distribution / Estimator class, filled by the class decorators,
and the spec readers that dispatch on a spec's ``"type"``."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from mixle_spark._providers import declared_families
from mixle_spark.errors import SpecError, UnknownNameError, describe_value, did_you_mean

if TYPE_CHECKING:
    from mixle_spark.stats._family import Distribution, Estimator

__all__ = [
    "check_spec_keys",
    "distribution_from_dict",
    "estimator_from_dict",
    "register_distribution",
    "register_estimator",
    "registered_distributions",
    "registered_estimators",
]

D = TypeVar("D", bound="type[Distribution]")
E = TypeVar("E", bound="type[Estimator]")

_DISTRIBUTIONS: dict[str, type[Distribution]] = {}
_ESTIMATORS: dict[str, type[Estimator]] = {}


def _load_providers() -> None:
    """Import the modules that register the families declared outside ``stats``
    (:func:`mixle_spark._providers.declare_family`), so a spec reads, and an error lists, the same
    families whatever the caller imported."""
    for name, module in declared_families().items():
        if name not in _ESTIMATORS:
            importlib.import_module(module)


def _register(table: dict[str, Any], kind: str, name: str) -> Callable[[Any], Any]:
    key = name.lower()

    def decorate(cls: Any) -> Any:
        owner = table.get(key)
        if owner is not None and owner.__qualname__ != cls.__qualname__:
            raise ValueError(f"{kind} family {key!r} is already registered to {owner.__qualname__}")
        table[key] = cls
        cls.family = key
        return cls

    return decorate


def register_distribution(name: str) -> Callable[[D], D]:
    """Class decorator: register a Distribution under a family name (used by JSON loading)."""
    return _register(_DISTRIBUTIONS, "distribution", name)


def register_estimator(name: str) -> Callable[[E], E]:
    """Class decorator: register an Estimator under a family name (used by model specs)."""
    return _register(_ESTIMATORS, "estimator", name)


def registered_distributions() -> dict[str, type[Distribution]]:
    """Family name -> Distribution class, for every registered family."""
    return dict(_DISTRIBUTIONS)


def registered_estimators() -> dict[str, type[Estimator]]:
    """Family name -> Estimator class, for every registered family."""
    _load_providers()
    return dict(_ESTIMATORS)


def _spec_type(spec: Any, what: str) -> tuple[str, Mapping[str, Any]]:
    if isinstance(spec, str):
        return spec.lower(), {"type": spec}
    if not isinstance(spec, Mapping):
        raise SpecError(
            f"{what} spec must be a dict with a 'type' key or a family name, got {describe_value(spec)}"
        )
    if "type" not in spec:
        raise SpecError(f"{what} spec {describe_value(dict(spec))} has no 'type' key")
    return str(spec["type"]).lower(), spec


def _from_dict(table: dict[str, Any], what: str, spec: Any) -> Any:
    """The ``from_dict`` of the class ``table`` registers under the spec's ``"type"``."""
    name, spec = _spec_type(spec, what)
    if table is _ESTIMATORS and name not in table:
        _load_providers()
    cls = table.get(name)
    if cls is None:
        raise UnknownNameError(f"{what} family", name, table)
    return cls.from_dict(spec)


def distribution_from_dict(spec: Mapping[str, Any] | str) -> Distribution:
    """Rebuild a distribution from ``Distribution.to_dict()`` output, dispatching on ``"type"``."""
    return _from_dict(_DISTRIBUTIONS, "model", spec)  # type: ignore[no-any-return]


def estimator_from_dict(spec: Mapping[str, Any] | str) -> Estimator:
    """Build an estimator from a spec dict (or a bare family name), dispatching on ``"type"``."""
    return _from_dict(_ESTIMATORS, "estimator", spec)  # type: ignore[no-any-return]


def check_spec_keys(
    spec: Mapping[str, Any], family: str, required: Iterable[str] = (), optional: Iterable[str] = ()
) -> None:
    """Raise SpecError for a missing required key or any key the family does not know."""
    required = list(required)
    allowed = {"type", *required, *optional}
    for key in spec:
        if key not in allowed:
            raise SpecError(
                f"unknown key {key!r} in {family} spec{did_you_mean(key, allowed)}; "
                f"expected one of: {', '.join(sorted(allowed))}"
            )
    for key in required:
        if key not in spec:
            raise SpecError(f"{family} spec is missing required key {key!r}")
