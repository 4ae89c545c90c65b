"""Two ``em_score --mode overwrite`` runs on one Delta table at once: both succeed (the one that loses
the commit race overwrites again, whole), the table holds exactly the scored input rows, the commits
record the mode that was asked for, and every file not in the table is one a VACUUM removes."""

from __future__ import annotations

import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.spark

pytest.importorskip("pyspark")

from mixle_spark.spec import save_model  # noqa: E402
from mixle_spark.stats import GaussianDistribution, MixtureDistribution  # noqa: E402
from tests._paths import job_module  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _em_score() -> ModuleType:
    return job_module("em_score", "_concurrent")


def test_two_concurrent_overwrites_of_one_delta_table(spark: Any, tmp_path: Path) -> None:
    from delta.tables import DeltaTable

    x = np.random.default_rng(0).normal(size=2000)
    pq.write_table(pa.table({"value": x}), tmp_path / "input.parquet")
    save_model(MixtureDistribution([GaussianDistribution(-1, 1), GaussianDistribution(1, 1)], [0.5, 0.5]),
               tmp_path / "model.json")  # fmt: skip
    out = tmp_path / "scores"
    job = _em_score()
    args = ["--input", str(tmp_path / "input.parquet"), "--model", str(tmp_path / "model.json"),
            "--output", str(out), "--mode", "overwrite"]  # fmt: skip
    codes: list[int] = []
    runs = [threading.Thread(target=lambda: codes.append(job.main(list(args)))) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert codes == [0, 0]

    table = DeltaTable.forPath(spark, str(out))
    scored = table.toDF()
    assert scored.count() == 2000
    assert sorted(r.value for r in scored.select("value").collect()) == sorted(x.tolist())
    history = table.history().select("operation", "operationParameters").collect()
    assert len(history) == 2 and {(h.operation, h.operationParameters["mode"]) for h in history} == {
        ("WRITE", "Overwrite")
    }
    # every data file the table does not use is one VACUUM removes (nothing is left behind for good)
    # (VACUUM lists the table's files with Spark's partition-discovery parallelism, 10,000 tasks by
    # default: 38 s on local[2] for one directory; 2 tasks take 4 s)
    settings = {
        "spark.databricks.delta.retentionDurationCheck.enabled": "false",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
    }
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        table.vacuum(0.0)
    finally:
        for key in settings:
            spark.conf.unset(key)
    live = {Path(f).name for f in scored.inputFiles()}
    assert {p.name for p in out.glob("*.parquet")} == live
