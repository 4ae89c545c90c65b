"""JSON read with limits: nesting depth, integer digits, float64's range (spec files and model files).

A document too deep, an integer too long or a number beyond float64 is refused when it is read, as
the caller's error class, naming the file and the place; :mod:`mixle_spark.spec.estimators` and
:mod:`mixle_spark.jobspec` read specs, :mod:`mixle_spark.model_file` model files, through it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from mixle_spark.errors import TooLargeError

__all__ = [
    "MAX_INTEGER_DIGITS",
    "MAX_NESTING",
    "MAX_SPEC_BYTES",
    "check_nesting",
    "loads_checked",
    "parse_json",
]

MAX_NESTING = 100
"""Deepest nesting of JSON objects and arrays in a spec or a saved model (real ones are rarely 20
deep); deeper is refused before it is built, rather than running out of Python's recursion limit."""
MAX_INTEGER_DIGITS = 308
"""Most digits an integer in a spec or a model file may have: any such integer is a finite float64
(the largest is about 1.8e308), and the labels, counts and seeds mixle_spark writes are far shorter.
A longer one is refused when the file is read, naming the file and the place (Python alone refuses
integers of more than 4,300 digits, naming neither; one of 309 to 4,300 digits would overflow a
float parameter)."""
MAX_SPEC_BYTES = 16 * 2**20
"""Largest spec file read (16 MiB); larger is refused before it is read whole."""


def check_nesting(value: Any, where: str, error: type[Exception]) -> None:
    """Refuse ``value`` when its objects / arrays nest deeper than :data:`MAX_NESTING` (walked
    without recursion, so the check itself cannot overflow the stack)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > MAX_NESTING:
            raise error(
                f"{where} nests objects and arrays more than {MAX_NESTING} deep; the limit is {MAX_NESTING}"
            )
        stack.extend((child, depth + 1) for child in children if isinstance(child, Mapping | list | tuple))


class _NumberOutOfRange(ValueError):
    """A number literal :func:`_parse_json` refuses: the literal as written and what was expected."""

    def __init__(self, literal: str, expected: str, got: str) -> None:
        super().__init__(literal)
        self.literal, self.expected, self.got = literal, expected, got


def _parse_int(literal: str) -> int:
    digits = len(literal) - literal.startswith("-")
    if digits > MAX_INTEGER_DIGITS:
        raise _NumberOutOfRange(
            literal,
            f"a number of at most {MAX_INTEGER_DIGITS} digits (float64's range)",
            f"an integer of {digits:,} digits ({_clipped(literal)})",
        )
    return int(literal)


def _parse_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):  # never written (json writes a float's repr); an option or parameter is finite
        raise _NumberOutOfRange(
            literal, "a number within float64's range (about ±1.8e308)", _clipped(literal)
        )
    return value


def _clipped(literal: str) -> str:
    return literal if len(literal) <= 24 else f"{literal[:10]}...{literal[-10:]}"


def _place(text: str | bytes, literal: str) -> str:
    """`` at line L, column C`` of ``literal`` as a JSON number in ``text`` (empty if not found)."""
    if isinstance(text, bytes):
        text = text.decode(json.detect_encoding(text), errors="replace")
    found = re.search(r"(?<![^\s:\[,])" + re.escape(literal) + r"(?![^\s,\]}])", text)
    if found is None:
        return ""
    start = found.start()
    line, column = text.count("\n", 0, start) + 1, start - text.rfind("\n", 0, start)
    return f" at line {line}, column {column}"


def loads_checked(text: str | bytes, where: str, error: type[Exception]) -> Any:
    """``json.loads`` whose numbers are checked: an integer of more than :data:`MAX_INTEGER_DIGITS`
    digits or a number beyond float64's range is refused as ``error`` naming ``where``, its line and
    column (Python's own refusal names neither); any other error is json's, for the caller to word."""
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float)
    except _NumberOutOfRange as err:
        raise error(f"{where}{_place(text, err.literal)}: expected {err.expected}, got {err.got}") from None


def parse_json(text: str | bytes, where: str, error: type[Exception]) -> Any:
    """``json.loads`` with its errors named after ``where``; a document too deep for the parser is
    refused as too large, an integer of more than :data:`MAX_INTEGER_DIGITS` digits or a number beyond
    float64's range as ``error``, naming its line and column."""
    try:
        return loads_checked(text, where, error)
    except json.JSONDecodeError as err:
        raise error(f"{where} is not valid JSON: {err}") from None
    except UnicodeDecodeError as err:
        raise error(f"{where} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    except RecursionError:
        raise TooLargeError(
            f"{where} nests objects and arrays more than {MAX_NESTING} deep; the limit is {MAX_NESTING}"
        ) from None
