"""Names a package imports from their modules on first use (PEP 562), so that importing the package
loads none of those modules: ``__getattr__, __dir__ = lazy_exports(globals(), EXPORTS)``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of the package whose globals are ``namespace``:
    ``exports`` maps each public name to the module defining it, imported when the name is first
    looked up; the value is then kept in ``namespace``, so later lookups do not come here."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
