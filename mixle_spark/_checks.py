"""One declared check per option, run by every entry point that takes the option.

A :class:`Check` says what an option expects (``"an integer >= 0"``) and tests a value's kind (a
wrong kind is an :class:`~mixle_spark.errors.OptionTypeError`, a TypeError) and range (an
out-of-range value is a :class:`~mixle_spark.errors.SpecError`, a :class:`ValueError`). The fit
options declare theirs on :class:`~mixle_spark.em.options.FitOptions`, the backend controls theirs
in the backend registry (:data:`~mixle_spark.parallel.backends.registry.CONTROL_CHECKS`); the Python
API, a spec's fit section, the fit job's flags and the ML Params all run that one check, each naming
itself in the refusal::

    max_its must be an integer >= 0, got -1                  (optimize, FitOptions, a spec)
    em_fit: error: argument --max-its: expected an integer >= 0, got -1
    param 'maxIter': expected an integer >= 0, got -1        (MixleEstimator)
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mixle_spark.errors import OptionTypeError, SpecError, describe_value

__all__ = ["Check", "check_fields", "checked", "field_check", "integer", "number", "one_of"]


def _anything(value: Any) -> bool:
    return True


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Check:
    """What an option expects and how a value is tested.

    Attributes
    ----------
    expected : str
        What a valid value is, in words (``"an integer >= 1"``); every refusal says it.
    kind : callable
        True when the value is of a kind the option takes (else
        :class:`~mixle_spark.errors.OptionTypeError`).
    valid : callable
        True when a value of the right kind is in range (else :class:`~mixle_spark.errors.SpecError`).
    normal : callable
        The value the option keeps (``2.0`` -> ``2`` for an integer option).
    parse : callable
        A command-line word -> a value to test (``int``, ``float``; a :class:`ValueError` is a refusal).
    """

    expected: str
    kind: Callable[[Any], bool]
    valid: Callable[[Any], bool] = _anything
    normal: Callable[[Any], Any] = _same
    parse: Callable[[str], Any] = str

    @property
    def _given(self) -> str:
        """What a value given on a command line or to a Param is expected to be (neither can give
        None: a flag left out, a Param left unset is the default)."""
        return self.expected.removeprefix("None or ")

    def fault(self, value: Any) -> type[Exception] | None:
        """The error ``value`` is refused with (OptionTypeError or SpecError), or None when it is valid."""
        if not self.kind(value):
            return OptionTypeError
        return None if self.valid(value) else SpecError

    def __call__(self, value: Any, name: str) -> Any:
        """``value`` as the option keeps it, or the refusal ``NAME must be EXPECTED, got VALUE``."""
        fault = self.fault(value)
        if fault is not None:
            raise fault(f"{name} must be {self.expected}, got {value!r}")
        return self.normal(value)

    def argument(self, metavar: str = "value", expected: str | None = None) -> Callable[[str], Any]:
        """An argparse ``type``: the word parsed and checked, refused as ``argument --FLAG:
        expected EXPECTED, got WORD`` (``expected`` rewords it for the command line)."""

        def convert(text: str) -> Any:
            refusal = argparse.ArgumentTypeError(f"expected {expected or self._given}, got {text}")
            try:
                value = self.parse(text)
            except ValueError:
                raise refusal from None
            if self.fault(value) is not None:
                raise refusal
            return self.normal(value)

        convert.__name__ = metavar  # argparse names the type in its own messages
        return convert

    def param(self, name: str, expected: str | None = None) -> Callable[[Any], Any]:
        """An ML Param's type converter: refused as ``param 'NAME': expected EXPECTED, got VALUE``
        (``expected`` rewords the values in the Param's own spelling)."""
        wording = expected or self._given

        def convert(value: Any) -> Any:
            fault = self.fault(value)
            if fault is not None:
                raise fault(f"param {name!r}: expected {wording}, got {describe_value(value)}")
            return self.normal(value)

        return convert


def _integral(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return hasattr(value, "__index__") or (isinstance(value, float) and value.is_integer())


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _optional(kind: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or kind(value)


def _valid_or_none(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or test(value)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def integer(minimum: int, *, optional: bool = False) -> Check:
    """A whole number ``>= minimum`` (``2.0`` is 2; a boolean is not a number); ``optional``: or None."""
    words = f"an integer >= {minimum}"
    return Check(
        f"None or {words}" if optional else words,
        _optional(_integral) if optional else _integral,
        _valid_or_none(lambda v: int(v) >= minimum),
        _int_or_none,
        int,
    )


def number(low: float, high: float | None = None, *, low_open: bool = False, optional: bool = False) -> Check:
    """A finite real number ``>= low`` (``> low`` when ``low_open``) and ``<= high``; ``optional``:
    or None."""
    if high is None:
        words = f"a finite number {'>' if low_open else '>='} {low:g}"
    else:
        words = f"a number in {'(' if low_open else '['}{low:g}, {high:g}]"

    def valid(value: Any) -> bool:
        x = float(value)
        above = x > low if low_open else x >= low
        return math.isfinite(x) and above and (high is None or x <= high)

    return Check(
        f"None or {words}" if optional else words,
        _optional(_real) if optional else _real,
        _valid_or_none(valid),
        _float_or_none,
        float,
    )


def one_of(
    values: Iterable[str], *, also: Callable[[Any], bool] | None = None, also_words: str = ""
) -> Check:
    """One of ``values`` (strings); ``also``: another kind of value taken as it is (``also_words``
    names it in the refusal)."""
    names = tuple(values)
    words = "one of " + ", ".join(map(repr, names)) + (f" or {also_words}" if also_words else "")
    extra = also or (lambda value: False)
    return Check(
        words,
        lambda value: isinstance(value, str) or extra(value),
        lambda value: extra(value) or value in names,
    )


def checked(check: Check, default: Any) -> Any:
    """A dataclass field with its default and its declared check (run by :func:`check_fields`)."""
    return dataclasses.field(default=default, metadata={"check": check})


def check_fields(instance: Any, prefix: str = "") -> None:
    """Run the declared check of each of a (frozen) dataclass instance's :func:`checked` fields and
    keep the value as the check normalizes it; ``prefix`` starts the refusal (``"SDCAudit: "``)."""
    for declared in dataclasses.fields(instance):
        check = declared.metadata.get("check")
        if check is not None:
            value = check(getattr(instance, declared.name), prefix + declared.name)
            object.__setattr__(instance, declared.name, value)


def field_check(cls: type, name: str) -> Check:
    """The check a dataclass ``cls`` declares for its field ``name`` (KeyError when none)."""
    check = cls.__dataclass_fields__[name].metadata.get("check")  # type: ignore[attr-defined]
    if check is None:
        raise KeyError(f"{cls.__name__}.{name} declares no check")
    return check  # type: ignore[no-any-return]
