"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_blocks_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    for block in blocks:
        if block.startswith("# spark"):
            continue  # run by tests/spark/test_readme_spark.py
        exec(compile(block, str(README), "exec"), {"__name__": "readme"})


def test_readme_first_screen_shows_the_two_commands() -> None:
    first_screen = "\n".join(README.read_text().splitlines()[:20])
    assert "make demo" in first_screen and "make test" in first_screen
