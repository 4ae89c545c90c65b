"""How a family declares what it takes: a distribution's :class:`Parameter` s, an estimator's
:func:`option` s, and the checks whose messages name the bad value."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from mixle_spark.errors import SpecError

__all__ = ["Parameter", "check_parameter", "check_pseudo_count", "option"]


def option(
    default: Any = None,
    ok: Callable[[Any], bool] | None = None,
    expected: str = "",
    *,
    read: Callable[[Any], Any] | None = None,
    write: Callable[[Any], Any] | None = None,
    parse: Callable[[Any], Any] | None = None,
    key: str | None = None,
) -> Any:
    """An estimator option (a dataclass field): its ``default``; the test ``ok`` a value other than
    a None default must pass, and what it ``expected`` (for the message, which names the value);
    ``read`` converts the accepted value to the attribute; ``write`` gives its JSON form (default:
    arrays and tuples as lists, mappings as ``[key, value]`` pairs, estimators as their specs) and
    ``parse`` reads that form back (raising TypeError with what it expected); ``key`` is the JSON key
    when it is not the option's name. ``default=dataclasses.MISSING`` makes the option required."""
    metadata = {"ok": ok, "expected": expected, "read": read, "write": write, "parse": parse, "key": key}
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Parameter:
    """A family's parameter, declared once: its ``name`` (the constructor's keyword argument, the
    attribute and the JSON key); the test ``ok`` its value must pass and what that test ``expected``
    (for the message, which names the value; scalar families check with it); ``parse`` reads the
    JSON form back (raising TypeError with what it expected) and ``write`` gives it (default: arrays
    and tuples as lists, mappings as ``[key, value]`` pairs, parts as their specs); a ``default``
    makes it optional, written only when the value differs from it."""

    name: str
    ok: Callable[[Any], bool] | None = None
    expected: str = ""
    parse: Callable[[Any], Any] | None = None
    write: Callable[[Any], Any] | None = None
    default: Any = dataclasses.field(default_factory=lambda: dataclasses.MISSING)  # MISSING: required
    attribute: str | None = None
    """The constructor's argument and attribute when it is not ``name`` (the JSON key)."""

    @property
    def attr(self) -> str:
        return self.attribute or self.name


def check_parameter(ok: bool, family: str, name: str, value: Any, expected: str) -> None:
    """Raise SpecError ``"<family>: <name> must be <expected>, got <value>"`` unless ``ok``."""
    if not ok:
        raise SpecError(f"{family}: {name} must be {expected}, got {value!r}")


def check_pseudo_count(family: str, pseudo_count: Any) -> None:
    """Raise SpecError unless ``pseudo_count`` is None or a non-negative finite number (naming the
    value)."""
    try:
        ok = pseudo_count is None or (
            not isinstance(pseudo_count, bool) and math.isfinite(pseudo_count) and pseudo_count >= 0
        )
    except TypeError:
        ok = False
    check_parameter(ok, family, "pseudo_count", pseudo_count, "a non-negative number")
