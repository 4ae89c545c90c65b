"""The Spark examples of the README and of the pages under docs/ (```python blocks starting
``# spark``) run as written, on the shared test session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests._markdown import ROOT, page_id, pages, python_blocks

pytestmark = pytest.mark.spark

PAGES_WITH_SPARK = [page for page in pages() if any(block.spark for block in python_blocks(page))]


@pytest.mark.parametrize("page", PAGES_WITH_SPARK, ids=page_id)
def test_spark_blocks_run(page: Path, spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # examples read data/ and conf/ as a user in a clone does
    for block in python_blocks(page):
        if block.spark:
            block.run()  # spark_session(...) in the block returns the shared session
