"""The notebooks (Databricks source format) run end to end as plain Python on local Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))


def test_there_are_the_four_notebooks() -> None:
    names = {p.stem for p in NOTEBOOKS}
    assert {"quickstart", "customer_segmentation", "anomaly_scoring", "distributed_fitting"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_databricks_source_and_runs(
    path: Path, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = path.read_text()
    assert text.startswith("# Databricks notebook source\n")
    assert text.count("# COMMAND ----------") >= 2
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("MIXLE_WIDGET_OUTPUT", str(tmp_path / "out"))
    monkeypatch.setenv("MIXLE_WIDGET_REPORT", str(tmp_path / "report.html"))
    monkeypatch.setenv("MIXLE_WIDGET_ROWS", "4000")
    namespace: dict[str, Any] = {"__name__": "__main__", "spark": spark}
    exec(compile(text, str(path), "exec"), namespace)
