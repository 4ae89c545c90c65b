"""The README's Spark example runs as written (on the shared test session)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_spark_blocks_run(spark: Any) -> None:
    blocks = [
        b
        for b in re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
        if b.startswith("# spark")
    ]
    assert blocks, "README has no Spark example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {"__name__": "readme"})
