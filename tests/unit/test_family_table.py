"""README's table of every family: one row per registered family, its parameters as the family declares
them, so the table cannot fall behind the registry (a family added without a row fails here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mixle_spark.stats._scalar_common import ScalarFamily
from mixle_spark.stats.base import registered_distributions

README = Path(__file__).resolve().parents[2] / "README.md"
START = "<details><summary>Every family"


def table_rows(text: str | None = None) -> dict[str, list[str]]:
    """``type`` -> the parameter names of its row, from README's family table."""
    text = README.read_text(encoding="utf-8") if text is None else text
    block = text[text.index(START) : text.index("</details>", text.index(START))]
    rows: dict[str, list[str]] = {}
    for line in block.splitlines():
        found = re.match(r"^\| `([a-z_0-9]+)` \|([^|]*)\|([^|]*)\|", line)
        if found and found[1] != "type":  # not the header
            assert found[1] not in rows, f"README's family table lists {found[1]} twice"
            rows[found[1]] = re.findall(r"`([a-z_0-9]+)`", found[3])
    return rows


def test_every_registered_family_has_one_row() -> None:
    rows = table_rows()
    assert sorted(rows) == sorted(registered_distributions())


def test_a_scalar_family_row_names_its_declared_parameters() -> None:
    rows = table_rows()
    for name, cls in registered_distributions().items():
        if issubclass(cls, ScalarFamily):
            assert rows[name] == [p.name for p in cls.parameters], name


def test_the_table_reader_sees_a_missing_row_and_a_repeated_one() -> None:
    text = README.read_text(encoding="utf-8")
    assert "gumbel" not in table_rows(text.replace("| `gumbel` |", "| gumbel |"))
    row = next(line for line in text.splitlines() if line.startswith("| `gumbel` |"))
    with pytest.raises(AssertionError, match="lists gumbel twice"):
        table_rows(text.replace(row, row + "\n" + row))
