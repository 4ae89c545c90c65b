"""A checkpoint of a Spark fit knows its data: a table of the same size with other rows (another
day's Parquet file, a Delta table overwritten) is refitted, never resumed (issue 51)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from mixle_spark.em._checkpoint_store import CheckpointStore
from mixle_spark.errors import CheckpointMismatchError
from mixle_spark.estimation import optimize
from mixle_spark.parallel.backends.registry import data_identity
from mixle_spark.stats import GaussianEstimator, MixtureEstimator, RecordEstimator

pytestmark = pytest.mark.spark

EST = MixtureEstimator([RecordEstimator({"x": GaussianEstimator()})] * 2)
FIT: dict[str, Any] = {"max_its": 20, "seed": 1, "print_iter": 0}


def _rows(centres: tuple[float, float], seed: int, n: int = 2000) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"x": np.r_[rng.normal(centres[0], 1, n // 2), rng.normal(centres[1], 1, n - n // 2)]})


def _means(model: Any) -> list[int]:
    return sorted(round(c.fields["x"].mu) for c in model.components)


def test_the_digest_is_the_rows_not_their_order_nor_their_partitions(spark: Any) -> None:
    df = spark.createDataFrame(_rows((8.0, 0.0), 0)).repartition(2)
    digest = data_identity(df)
    assert data_identity(df.repartition(5).orderBy("x")) == digest
    assert (
        data_identity(df.withColumn("x", F.when(F.col("x") > 7.5, F.col("x") + 1e-9).otherwise(F.col("x"))))
        != digest
    )
    assert data_identity(df.limit(1999).union(df.limit(1))) != digest  # one row swapped for a copy
    odd = spark.createDataFrame(
        [(1.0, 1.0, {"a": 1}), (2.0, 3.0, {"b": 2})], "x double, x double, m map<string,int>"
    )  # duplicated names and a map column, which Spark's row hash alone refuses
    swapped = spark.createDataFrame(
        [(1.0, 1.0, {"a": 1}), (2.0, 3.0, {"b": 3})], "x double, x double, m map<string,int>"
    )
    assert data_identity(odd) != data_identity(swapped)


def test_a_parquet_file_of_another_day_with_as_many_rows_is_refitted(spark: Any, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    for name, centres, seed in (("day1", (8.0, 0.0), 0), ("day2", (100.0, 300.0), 1)):
        pq.write_table(_rows(centres, seed), tmp_path / f"{name}.parquet")
    ckpt = tmp_path / "ck"
    day1 = spark.read.parquet(str(tmp_path / "day1.parquet"))
    day2 = spark.read.parquet(str(tmp_path / "day2.parquet"))
    assert _means(optimize(day1, EST, checkpoint_dir=ckpt, **FIT)) == [0, 8]
    with pytest.raises(CheckpointMismatchError, match="the data differs"):
        optimize(day2, EST, checkpoint_dir=ckpt, **FIT)
    refit = optimize(day2, EST, checkpoint_dir=ckpt, on_other_data="refit", **FIT)
    assert _means(refit) == [100, 300] and refit.fit_result.checkpoint_refit is not None
    assert CheckpointStore(ckpt).latest()[1]["fingerprint"]["data"] == data_identity(day2)


def test_a_delta_table_overwritten_with_as_many_rows_is_refitted(spark: Any, tmp_path: Path) -> None:
    table = str(tmp_path / "delta")
    spark.createDataFrame(_rows((8.0, 0.0), 0)).write.format("delta").save(table)
    ckpt = tmp_path / "ck"
    first = optimize(spark.read.format("delta").load(table), EST, checkpoint_dir=ckpt, **FIT)
    again = optimize(spark.read.format("delta").load(table), EST, checkpoint_dir=ckpt, **FIT)
    assert again.fit_result.resumed_from is not None and again.to_dict() == first.to_dict()
    spark.createDataFrame(_rows((100.0, 300.0), 1)).write.format("delta").mode("overwrite").save(table)
    refit = optimize(
        spark.read.format("delta").load(table), EST, checkpoint_dir=ckpt, on_other_data="refit", **FIT
    )
    assert _means(refit) == [100, 300] and refit.fit_result.resumed_from is None
