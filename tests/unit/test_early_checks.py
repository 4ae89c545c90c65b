"""The jobs' schema check before Spark starts (mixle_spark.cli._early) and the fixes the error lines
add (mixle_spark.cli._fixes): a Parquet footer, a Delta log and a CSV header checked against the spec,
exit code 2 with one line naming the column, the type and the fix, and no Spark session."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mixle_spark.cli import _common
from mixle_spark.cli._early import check_fit_input, check_score_input, input_schema
from mixle_spark.cli._fixes import fix_for
from mixle_spark.errors import DataValueError, SchemaError
from mixle_spark.parallel.backends._scoring import BatchScorer
from mixle_spark.spec import load_spec, save_model
from mixle_spark.stats import (
    CategoricalDistribution,
    GaussianDistribution,
    MixtureDistribution,
    RecordDistribution,
)
from tests._paths import JOBS, job_module

TABLE = pa.table({"sex": [1.0, 2.0, 1.0, 2.0], "age": [30.0, 41.0, 52.0, 38.0], "member": [True, False] * 2})
CATEGORICAL_SEX = (
    "column 'sex': expected a string, large_string, integer, boolean or dictionary column for "
    "CategoricalEstimator, got Arrow type double"
)
SEX_FIX = (
    "; fix: CAST(sex AS STRING), or CAST(sex AS INT) for whole-number codes, or integer_categorical "
    "(reads whole numbers as labels), or a family that reads numbers (gaussian for any real number, "
    "poisson for counts, bernoulli for 0/1)"
)


def _spec(tmp_path: Path, **fields: Any) -> Path:
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps({"type": "mixture", "k": 2, "component": {"type": "record", "fields": fields}})
    )
    return spec


def _delta(tmp_path: Path, schema: list[tuple[str, str]]) -> Path:
    """A Delta table's log as the Delta writer starts it: protocol and metaData in commit 0, then a
    commit without metaData (only the newest metaData action counts)."""
    table = tmp_path / "table"
    (table / "_delta_log").mkdir(parents=True)
    fields = [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in schema]
    metadata = {
        "id": "0",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps({"type": "struct", "fields": fields}),
        "partitionColumns": [],
        "configuration": {},
    }
    commit = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, {"metaData": metadata}]
    (table / "_delta_log" / f"{0:020d}.json").write_text("\n".join(map(json.dumps, commit)) + "\n")
    (table / "_delta_log" / f"{1:020d}.json").write_text(json.dumps({"commitInfo": {"operation": "WRITE"}}))
    return table


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a job builds a Spark session."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(_common, "job_spark_session", refuse)
    import mixle_spark.cli._inputs as inputs

    monkeypatch.setattr(inputs, "job_spark_session", refuse)


def _fit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = job_module("em_fit", "_early").main(list(args))
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("layout", ["parquet-file", "parquet-directory", "delta"])
def test_em_fit_refuses_a_type_before_spark_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_spark: None, layout: str
) -> None:
    if layout == "parquet-file":
        source = tmp_path / "people.parquet"
        pq.write_table(TABLE, source)
    elif layout == "parquet-directory":
        source = tmp_path / "people"
        (source / "year=2026").mkdir(parents=True)
        pq.write_table(TABLE, source / "year=2026" / "part-0.parquet")
    else:
        source = _delta(tmp_path, [("sex", "double"), ("age", "double"), ("member", "boolean")])
    spec = _spec(tmp_path, sex="categorical", age="gaussian")
    code, lines = _fit(capsys, "--input", str(source), "--model", str(spec), "--output", str(tmp_path / "o"))
    assert code == 2
    assert lines == [f"em_fit: error: {CATEGORICAL_SEX}{SEX_FIX}"]
    assert not (tmp_path / "o").exists()


def test_em_fit_names_a_missing_column_and_the_near_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_spark: None
) -> None:
    pq.write_table(TABLE, tmp_path / "people.parquet")
    spec = _spec(tmp_path, sexe="categorical")
    code, lines = _fit(capsys, "--input", str(tmp_path / "people.parquet"), "--model", str(spec),
                       "--output", str(tmp_path / "o"))  # fmt: skip
    assert code == 2
    assert lines == [
        "em_fit: error: column 'sexe' not found (did you mean 'sex'?); the DataFrame has columns "
        "['sex', 'age', 'member']"
    ]


def test_em_score_refuses_a_type_before_spark_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_spark: None
) -> None:
    component = RecordDistribution({"sex": CategoricalDistribution({"f": 0.5, "m": 0.5})})
    save_model(MixtureDistribution([component, component], [0.5, 0.5]), tmp_path / "model.json")
    table = _delta(tmp_path, [("sex", "double")])
    capsys.readouterr()
    code = job_module("em_score", "_early").main(
        ["--input", str(table), "--model", str(tmp_path / "model.json"), "--output", str(tmp_path / "s")]
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert lines == [f"em_score: error: {CATEGORICAL_SEX}{SEX_FIX}"]


def test_the_job_answers_in_seconds_in_its_own_process(tmp_path: Path) -> None:
    """Loosely timed (a loaded machine): the target is 2 s on a quiet one; Spark's start alone is more."""
    pq.write_table(TABLE, tmp_path / "people.parquet")
    spec = _spec(tmp_path, sex="categorical")
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(JOBS / "em_fit.py"), "--input", str(tmp_path / "people.parquet"),
         "--model", str(spec), "--output", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"em_fit: error: {CATEGORICAL_SEX}{SEX_FIX}"]
    assert seconds < 10, seconds


def test_what_spark_would_accept_is_not_refused_early(tmp_path: Path) -> None:
    pq.write_table(TABLE.append_column("amount", pa.array(["12.5", "x", "3", "4"])), tmp_path / "t.parquet")
    source = str(tmp_path / "t.parquet")
    # the fit reads a boolean column as 0 / 1 under gaussian (in Spark too); scoring refuses its type
    fit = load_spec(str(_spec(tmp_path, member="gaussian"))).estimator
    check_fit_input(source, fit)
    gaussian = RecordDistribution({"member": GaussianDistribution(0.5, 0.25)})
    with pytest.raises(SchemaError, match=r"^column 'member': expected a numeric column for Gaussian"):
        check_score_input(source, BatchScorer(MixtureDistribution([gaussian, gaussian], [0.5, 0.5])))
    # a text column: Spark names the first cell that does not read as a number, and its row
    check_fit_input(source, load_spec(str(_spec(tmp_path, amount="gaussian"))).estimator)


def test_only_what_this_process_can_read_is_checked(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("sex,age\n1.0,30\n")
    assert input_schema(str(tmp_path / "t.csv")) == pa.schema([("sex", pa.null()), ("age", pa.null())])
    spec = load_spec(str(_spec(tmp_path, sex="categorical", income="gaussian"))).estimator
    with pytest.raises(
        SchemaError, match=r"^column 'income' not found; the DataFrame has columns \['sex', 'age'\]$"
    ):
        check_fit_input(str(tmp_path / "t.csv"), spec)
    check_fit_input(str(tmp_path / "t.csv"), load_spec(str(_spec(tmp_path, sex="categorical"))).estimator)
    (tmp_path / "repeated.csv").write_text("sex,sex\n1,2\n")  # Spark renames the copies: its check says so
    assert input_schema(str(tmp_path / "repeated.csv")) is None
    for remote in ("s3://bucket/t.parquet", "dbfs:/mnt/t", "/Volumes/main/absent/t", "sales.customers"):
        assert input_schema(remote) is None
    pq.write_table(TABLE, tmp_path / "t.parquet")
    assert input_schema(f"file://{tmp_path / 't.parquet'}") == TABLE.schema
    coded = pa.table(
        {
            "sex": pa.array(["f", "m"]).dictionary_encode(),
            "n": pa.array([[1], [2]], pa.large_list(pa.int64())),
        }
    )
    pq.write_table(coded, tmp_path / "coded.parquet")  # as Spark hands them to Python: plain types
    assert input_schema(str(tmp_path / "coded.parquet")) == pa.schema(
        [("sex", pa.string()), ("n", pa.list_(pa.int64()))]
    )
    (tmp_path / "empty.parquet").write_bytes(b"")  # Spark's read says what is wrong with it
    assert input_schema(str(tmp_path / "empty.parquet")) is None


def test_a_delta_schema_comes_from_the_newest_metadata_or_the_checkpoint(tmp_path: Path) -> None:
    table = _delta(tmp_path, [("sex", "double")])
    log = table / "_delta_log"
    changed = json.loads(
        json.loads((log / f"{0:020d}.json").read_text().splitlines()[1])["metaData"]["schemaString"]
    )
    changed["fields"][0]["type"] = "string"
    metadata = {"metaData": {"id": "0", "schemaString": json.dumps(changed)}}
    (log / f"{2:020d}.json").write_text(json.dumps(metadata) + "\n")
    assert input_schema(str(table)) == pa.schema([("sex", pa.string())])
    # a checkpoint at version 2, the commits before it gone: the checkpoint's metaData
    checkpoint = pa.table({"metaData": [None, {"id": "0", "schemaString": json.dumps(changed)}]})
    pq.write_table(checkpoint, log / f"{2:020d}.checkpoint.parquet")
    for name in (f"{0:020d}.json", f"{2:020d}.json"):
        (log / name).unlink()
    assert input_schema(str(table)) == pa.schema([("sex", pa.string())])


@pytest.mark.parametrize(
    ("line", "fix"),
    [
        (
            "column 'duration_s': expected a positive finite number for LogGaussianEstimator, got 0.0 "
            "(10024 bad rows, first at row 3 of 200000)",
            "; fix: filter the rows where duration_s <= 0 (WHERE duration_s > 0), or shift the column "
            "(duration_s + 1 for counts or durations), or use gaussian, which reads any real number",
        ),
        (
            "column 'n_items': expected a non-negative integer count for PoissonEstimator, got -3.0 "
            "(row 3 of 6)",
            "; fix: filter the rows where n_items < 0, or use gaussian, which reads any real number",
        ),
        (
            "column 'amount': expected a numeric column for GaussianEstimator, got Arrow type string",
            "; fix: CAST(amount AS DOUBLE), or categorical if it holds labels",
        ),
        (
            "column 'visit.when': expected a numeric column for GaussianEstimator, got Arrow type "
            "timestamp[us, tz=UTC]",
            "; fix: CAST(visit.when AS DOUBLE) (a timestamp's seconds), or unix_date(visit.when) "
            "(a date's days)",
        ),
        (
            "column 'n_items': expected a non-negative integer count for PoissonEstimator, got 2.5 "
            "(row 1 of 6)",
            "; fix: ROUND(n_items) if these are counts, or gaussian for real numbers",
        ),
        ("column 'amount': expected a finite number for GaussianEstimator, got nan (row 4 of 6)", ""),
        ("column 'x' not found; the DataFrame has columns ['y']", ""),
    ],
)
def test_error_lines_say_the_fix(line: str, fix: str) -> None:
    assert fix_for(line) == fix


def test_the_job_error_line_keeps_the_message_and_adds_the_fix() -> None:
    err = DataValueError(
        "expected a positive finite number for LogGaussianEstimator", value=0.0, row=2, n_rows=6, count=2
    ).at("duration_s")
    line = _common.error_line(err)
    assert line.startswith(str(err) + "; fix: filter the rows where duration_s <= 0")
