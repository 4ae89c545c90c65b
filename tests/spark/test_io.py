"""read_table / write_table on a local Spark session: Delta round trips, atomic writes, format detection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

pytest.importorskip("pyspark")
chispa = pytest.importorskip("chispa")

from pyspark.sql import functions as F  # noqa: E402

from mixle_spark.io import read_table, write_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "customers_sample.parquet"


def _customers(spark: Any) -> Any:
    return spark.createDataFrame(
        [(12.5, "web", 1, ["books"]), (80.0, "app", 7, ["music", "sports"]), (15.0, "store", 2, [])],
        "amount double, channel string, n_items long, tags array<string>",
    )


def _commits(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "_delta_log").glob("*.json"))


def test_delta_round_trip(spark: Any, tmp_path: Path) -> None:
    df = _customers(spark)
    target = tmp_path / "customers"
    assert write_table(df, target) == str(target)
    assert _commits(target) == ["00000000000000000000.json"]
    back = read_table(spark, str(target))
    chispa.assert_df_equality(back, df, ignore_row_order=True)
    # format="auto" chose Delta from the _delta_log, not the Parquet files inside the table
    chispa.assert_df_equality(back, read_table(spark, str(target), format="delta"), ignore_row_order=True)


def test_mode_error_refuses_and_leaves_the_table_unchanged(spark: Any, tmp_path: Path) -> None:
    df = _customers(spark)
    target = tmp_path / "customers"
    write_table(df, target)
    with pytest.raises(FileExistsError, match=r"customers exists; pass mode='overwrite' to replace it"):
        write_table(df.limit(1), target)
    assert _commits(target) == ["00000000000000000000.json"]
    chispa.assert_df_equality(read_table(spark, str(target)), df, ignore_row_order=True)


def test_overwrite_replaces_table_and_schema_in_one_commit(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "customers"
    write_table(_customers(spark), target)
    smaller = spark.createDataFrame([(1.0,), (2.0,)], "amount double")
    write_table(smaller, target, mode="overwrite")
    assert len(_commits(target)) == 2
    chispa.assert_df_equality(read_table(spark, str(target)), smaller, ignore_row_order=True)


def test_a_failed_write_leaves_nothing(spark: Any, tmp_path: Path) -> None:
    # Fails on one row only, after other rows (other tasks) may have written their files.
    failing = _customers(spark).withColumn(
        "amount",
        F.when(F.col("amount") > 50, F.raise_error(F.lit("injected failure"))).otherwise(F.col("amount")),
    )
    target = tmp_path / "never"
    with pytest.raises(Exception, match="injected failure"):
        write_table(failing, target)
    assert not target.exists()

    kept = tmp_path / "kept"
    write_table(_customers(spark), kept)
    with pytest.raises(Exception, match="injected failure"):
        write_table(failing, kept, mode="overwrite")
    assert _commits(kept) == ["00000000000000000000.json"]  # the old table is still the table
    chispa.assert_df_equality(read_table(spark, str(kept)), _customers(spark), ignore_row_order=True)


def test_write_table_never_overwrites_what_is_not_a_delta_table(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "plain"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(
        FileExistsError,
        match=r"^output \S+/plain exists and is not a Delta table \(it holds notes.txt\); choose another "
        r"path or remove it yourself$",
    ):
        write_table(_customers(spark), target, mode="overwrite")
    assert [p.name for p in target.iterdir()] == ["notes.txt"]


def test_write_table_never_writes_through_a_link(spark: Any, tmp_path: Path) -> None:
    """A link to a Delta table is not the table: overwriting through it would replace another table."""
    from mixle_spark.errors import UnsafePathError

    table = tmp_path / "customers"
    write_table(_customers(spark), table)
    link = tmp_path / "latest"
    link.symlink_to(table)
    for format in ("delta", "parquet"):
        with pytest.raises(UnsafePathError, match=rf"^output {link} is a symbolic link \(to {table}\)"):
            write_table(_customers(spark).limit(1), link, mode="overwrite", format=format)
    assert _commits(table) == ["00000000000000000000.json"]
    assert read_table(spark, str(table)).count() == 3


def test_parquet_write_is_staged_and_renamed(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "out.parquet"
    write_table(_customers(spark), target, format="parquet")
    write_table(_customers(spark).limit(1), target, mode="overwrite", format="parquet")
    assert read_table(spark, str(target)).count() == 1
    assert [p.name for p in tmp_path.iterdir()] == ["out.parquet"]  # no staging left behind
    listed = json.loads((target / "_mixle_spark_files.json").read_text())["files"]
    assert sorted([*listed, "_mixle_spark_files.json"]) == sorted(p.name for p in target.iterdir())


@pytest.mark.parametrize("format", ["parquet", "csv", "json"])
def test_a_files_overwrite_replaces_only_a_table(spark: Any, tmp_path: Path, format: str) -> None:
    """Someone's folder, or a regular file, stays byte for byte; a directory Spark alone wrote (part
    files, _SUCCESS, checksums) is a table and is replaced."""
    folder = tmp_path / "thesis"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    a_file = tmp_path / "scores.parquet"
    a_file.write_bytes(b"PAR1 mine")
    for target, why in ((folder, "it holds notes.txt"), (a_file, "it is a file, not a directory")):
        with pytest.raises(
            FileExistsError,
            match=rf"^output {target} exists and was not written by mixle_spark \({why}\); choose another "
            "path or remove it yourself$",
        ):
            write_table(_customers(spark), target, mode="overwrite", format=format)
    assert (folder / "notes.txt").read_text() == "mine" and [p.name for p in folder.iterdir()] == [
        "notes.txt"
    ]
    assert a_file.read_bytes() == b"PAR1 mine"

    by_spark = tmp_path / "by_spark"
    writer = _customers(spark).drop("tags").coalesce(1).write.format(format)
    writer.option("header", "true").save(str(by_spark))
    write_table(_customers(spark).drop("tags").limit(1), by_spark, mode="overwrite", format=format)
    assert read_table(spark, str(by_spark), format=format).count() == 1


def test_read_csv_infers_types_from_a_header(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "orders.csv"
    path.write_text("amount,channel,n_items\n12.5,web,1\n80.0,app,7\n")
    df = read_table(spark, str(path))
    assert df.dtypes == [("amount", "double"), ("channel", "string"), ("n_items", "int")]
    assert df.count() == 2


def test_read_parquet_file_and_directory(spark: Any, tmp_path: Path) -> None:
    from_file = read_table(spark, str(SAMPLE))
    assert from_file.columns == ["amount", "channel", "n_items", "tags"]
    assert from_file.count() == 5000
    directory = tmp_path / "parts"
    _customers(spark).repartition(2).write.parquet(str(directory))
    chispa.assert_df_equality(read_table(spark, str(directory)), _customers(spark), ignore_row_order=True)


def test_read_json_lines_and_json_array(spark: Any, tmp_path: Path) -> None:
    rows = [{"amount": 1.5, "channel": "web"}, {"amount": 2.5, "channel": "app"}]
    lines = tmp_path / "orders.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in rows))
    array = tmp_path / "orders.json"
    array.write_text(json.dumps(rows, indent=2))
    for path in (lines, array):
        df = read_table(spark, str(path))
        assert sorted(df.columns) == ["amount", "channel"]
        assert sorted(r.amount for r in df.collect()) == [1.5, 2.5]


def test_read_a_metastore_table(spark: Any) -> None:
    _customers(spark).createOrReplaceTempView("mixle_io_customers")
    try:
        assert read_table(spark, "mixle_io_customers").count() == 3
        assert read_table(spark, "mixle_io_customers", format="table").count() == 3
    finally:
        spark.catalog.dropTempView("mixle_io_customers")


def test_missing_inputs_are_named(spark: Any, tmp_path: Path) -> None:
    missing = tmp_path / "missing.parquet"
    with pytest.raises(FileNotFoundError, match=r"no such file or directory: '.*missing\.parquet'"):
        read_table(spark, str(missing))
    with pytest.raises(FileNotFoundError, match=r"no such file or directory: '.*nowhere'"):
        read_table(spark, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="no such path or table: 'no_such_table'"):
        read_table(spark, "no_such_table")
