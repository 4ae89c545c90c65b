"""The fit job's lines while encoding and seeding run long (mixle_spark.cli._watch): none for a short
step, then one every period naming the step and its seconds; none once the fit's own progress starts."""

from __future__ import annotations

import io
import re
import sys
import time
import types

import pytest

from mixle_spark.cli import _watch
from mixle_spark.cli._watch import StepWatch, spark_tasks


def test_a_short_step_prints_nothing() -> None:
    out = io.StringIO()
    with StepWatch(out, "em_fit", every=0.4) as watch:
        watch.step("encoding")
        time.sleep(0.15)
        watch.step("seeding")
        time.sleep(0.15)
    assert out.getvalue() == ""


def test_a_long_step_prints_a_line_every_period_until_stopped() -> None:
    out = io.StringIO()
    with StepWatch(out, "em_fit", every=0.2) as watch:
        watch.step("encoding")
        time.sleep(0.75)
        watch.step("seeding")
        time.sleep(0.5)
        watch.stop()
        printed = out.getvalue()
        time.sleep(0.3)
    lines = printed.splitlines()
    assert out.getvalue() == printed  # nothing after stop
    encoding = [line for line in lines if "encoding" in line]
    seeding = [line for line in lines if "seeding" in line]
    assert 2 <= len(encoding) <= 4 and 1 <= len(seeding) <= 3, lines
    assert lines == encoding + seeding
    assert all(re.fullmatch(r"em_fit: (encoding|seeding) for \d+s", line) for line in lines), lines


def test_without_a_spark_context_there_are_no_task_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pyspark imported, or with it imported and no context running (the whole suite's Spark
    tests may have left a session active in this process: both cases are simulated)."""
    monkeypatch.delitem(sys.modules, "pyspark", raising=False)
    assert _watch._tracker() is None and spark_tasks({}) is None and _watch.last_job() == -1
    no_context = types.SimpleNamespace(SparkContext=types.SimpleNamespace(_active_spark_context=None))
    monkeypatch.setitem(sys.modules, "pyspark", no_context)
    assert _watch._tracker() is None and spark_tasks({}) is None
