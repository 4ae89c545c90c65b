"""mixle_spark.io without Spark: spark-defaults files, --conf pairs, session settings, format detection."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mixle_spark import io
from mixle_spark.errors import UnknownNameError
from mixle_spark.io._tables import _local_format

ROOT = Path(__file__).resolve().parents[2]


def test_bundled_spark_defaults_match_the_code_fallback() -> None:
    bundled = io.read_spark_defaults(ROOT / "conf" / "spark-defaults.conf")
    assert bundled == io.LOCAL_DEFAULTS
    assert bundled["spark.ui.enabled"] == "false"
    assert bundled["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert bundled["spark.sql.execution.arrow.maxRecordsPerBatch"] == "65536"
    assert bundled["spark.driver.host"] == "127.0.0.1"
    assert bundled["spark.python.worker.reuse"] == "true"


def test_read_spark_defaults_syntax(tmp_path: Path) -> None:
    path = tmp_path / "spark-defaults.conf"
    path.write_text("# comment\n\nspark.a   1\n  spark.b=two words \nspark.c =x=y\nspark.flag\n")
    assert io.read_spark_defaults(path) == {
        "spark.a": "1",
        "spark.b": "two words",
        "spark.c": "x=y",
        "spark.flag": "",
    }


def test_defaults_file_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(io.DEFAULTS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert io.spark_defaults_file() == ROOT / "conf" / "spark-defaults.conf"  # the checkout's
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text("spark.sql.shuffle.partitions 3\n")
    assert io.spark_defaults_file() == tmp_path / "conf" / "spark-defaults.conf"  # the project's
    named = tmp_path / "mine.conf"
    named.write_text("spark.sql.shuffle.partitions 5\n")
    monkeypatch.setenv(io.DEFAULTS_ENV, str(named))
    assert io.spark_defaults_file() == named
    monkeypatch.setenv(io.DEFAULTS_ENV, str(tmp_path / "missing.conf"))
    with pytest.raises(FileNotFoundError, match=r"MIXLE_SPARK_DEFAULTS=.*missing\.conf: no such file"):
        io.spark_defaults_file()


def test_session_settings_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    named = tmp_path / "spark-defaults.conf"
    named.write_text("spark.sql.shuffle.partitions 3\nspark.ui.enabled true\nspark.extra x\n")
    monkeypatch.setenv(io.DEFAULTS_ENV, str(named))
    settings = io.session_settings(
        "local[*]",
        {"spark.ui.enabled": "false"},
        submitted={"spark.extra": "from spark-submit"},
        delta=False,
    )
    assert settings["spark.sql.shuffle.partitions"] == "3"  # the file beats the code's default
    assert settings["spark.ui.enabled"] == "false"  # --conf beats the file
    assert "spark.extra" not in settings  # spark-submit's own setting is left alone
    assert settings["spark.python.worker.reuse"] == "true"  # code fallback for what the file omits
    assert io.session_settings("yarn", {"a": "b"}, delta=False) == {"a": "b"}  # clusters keep theirs


def test_session_settings_add_delta_once() -> None:
    pytest.importorskip("delta")
    settings = io.session_settings("local[2]", {"spark.jars.packages": "org.x:y:1"})
    assert settings["spark.jars.packages"] == f"org.x:y:1,{io.delta_package()}"
    assert settings["spark.sql.extensions"] == io.DELTA_EXTENSION
    again = io.session_settings("local[2]", {"spark.jars.packages": io.delta_package()})
    assert again["spark.jars.packages"] == io.delta_package()


@pytest.mark.parametrize("pair", ["no-equals", "=value"])
def test_parse_conf_rejects_bad_pairs(pair: str) -> None:
    with pytest.raises(ValueError, match=f"--conf expects KEY=VALUE, got '{pair}'"):
        io.parse_conf([pair])


def test_parse_conf_later_pairs_win() -> None:
    assert io.parse_conf(["a=1", "b=", "a=2"]) == {"a": "2", "b": ""}


def test_local_format_detection(tmp_path: Path) -> None:
    (tmp_path / "delta" / "_delta_log").mkdir(parents=True)
    (tmp_path / "pq" / "year=2024").mkdir(parents=True)
    (tmp_path / "pq" / "year=2024" / "part-0.snappy.parquet").write_bytes(b"")
    (tmp_path / "pq" / "_SUCCESS").write_bytes(b"")
    (tmp_path / "csvs").mkdir()
    (tmp_path / "csvs" / "part-0.csv.gz").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("")
    assert _local_format(tmp_path / "delta") == "delta"
    assert _local_format(tmp_path / "pq") == "parquet"
    assert _local_format(tmp_path / "csvs") == "csv"
    assert _local_format(Path("x.jsonl")) == "json"
    with pytest.raises(FileNotFoundError, match=r"empty: no data files in this directory"):
        _local_format(tmp_path / "empty")
    with pytest.raises(
        UnknownNameError, match=r"unknown table file suffix .*'\.txt'; expected one of: .*\.csv"
    ):
        _local_format(tmp_path / "notes.txt")


def test_unknown_format_and_mode_are_named() -> None:
    with pytest.raises(UnknownNameError, match="unknown table format 'avro'; expected one of: auto, csv"):
        io.read_table(None, "x", format="avro")  # type: ignore[arg-type]
    with pytest.raises(UnknownNameError, match="unknown write mode 'append'; expected one of: error"):
        io.write_table(None, "x", mode="append")  # type: ignore[arg-type]
    with pytest.raises(UnknownNameError, match="unknown table write format 'orc'; expected one of: csv"):
        io.write_table(None, "x", format="orc")  # type: ignore[arg-type]
    with pytest.raises(
        UnknownNameError,
        match=r"^unknown table format 'parquett' \(did you mean 'parquet'\?\); expected one of: auto, csv",
    ):
        io.read_table(None, "x", format="parquett")  # type: ignore[arg-type]


def test_check_input_exists_refuses_only_a_missing_local_path(tmp_path: Path) -> None:
    """What read_table would refuse as a missing file, refused before any Spark starts."""
    (tmp_path / "x.parquet").write_bytes(b"")
    for present in (tmp_path / "x.parquet", str(tmp_path), f"file://{tmp_path}/x.parquet"):
        io.check_input_exists(present)
    for remote in ("s3://bucket/nope.parquet", "abfss://c@a.dfs.core.windows.net/nope", "dbfs:/nope/t"):
        io.check_input_exists(remote)  # only Spark can tell
    for table in ("customers", "sales.customers", "main.sales.customers", "`my db`.`t`"):
        io.check_input_exists(table)  # metastore names
    io.check_input_exists(str(tmp_path / "nope.parquet"), format="table")
    for missing in (str(tmp_path / "nope.parquet"), "nope.csv", "nope/", f"file:{tmp_path}/nope"):
        with pytest.raises(FileNotFoundError, match=rf"^no such file or directory: '{re.escape(missing)}'$"):
            io.check_input_exists(missing)
    with pytest.raises(FileNotFoundError, match=r"^no such file or directory: 'customers'$"):
        io.check_input_exists("customers", format="parquet")  # a path, when the format says so
