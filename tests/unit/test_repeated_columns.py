"""A column name given twice (issue 51): a column the fit or the scores read by that name is ambiguous,
refused as a SchemaError naming it before anything is encoded; a repeated name nothing reads is left
alone. Local data (pyarrow, pandas), the frame backends' column choice, and the jobs' inputs (the
Spark side: tests/spark/test_bad_input_matrix.py, section 20)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mixle_spark.errors import SchemaError
from mixle_spark.estimation import optimize
from mixle_spark.parallel.backends._scoring import BatchScorer, data_columns
from mixle_spark.stats import (
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    RecordDistribution,
    RecordEstimator,
)

ROOT = Path(__file__).resolve().parents[2]
X = np.random.default_rng(5).normal(size=40)
TABLE = pa.Table.from_arrays([pa.array(X), pa.array(X + 1.0), pa.array(X)], ["x", "y", "x"])
READ_BY_NAME = "the columns read are found by name, so each must appear once: rename or drop the copies"
X_TWICE = f"column 'x' appears 2 times in the data (its columns: ['x', 'y', 'x']); {READ_BY_NAME}"
QUIET = {"max_its": 3, "print_iter": 0}


@pytest.mark.parametrize("data", [TABLE, TABLE.to_pandas()], ids=["pyarrow", "pandas"])
@pytest.mark.parametrize(
    ("estimator", "options"),
    [
        (RecordEstimator({"x": GaussianEstimator()}), {}),
        (GaussianEstimator(), {"column": "x"}),
        (RecordEstimator({"y": GaussianEstimator()}), {"weights": "x"}),
    ],
    ids=["record-field", "column", "weights"],
)
def test_a_repeated_column_that_is_read_is_refused(data: object, estimator: object, options: dict) -> None:
    with pytest.raises(SchemaError, match=f"^{re.escape(X_TWICE)}$"):
        optimize(data, estimator, **options, **QUIET)


def test_the_mp_backend_refuses_it_as_the_local_one() -> None:
    with pytest.raises(SchemaError, match=f"^{re.escape(X_TWICE)}$"):
        optimize(TABLE, RecordEstimator({"x": GaussianEstimator()}), backend="mp", **QUIET)


def test_several_repeated_names_are_named_with_their_counts() -> None:
    table = pa.Table.from_arrays([pa.array(X)] * 5, ["a", "b", "a", "b", "b"])
    estimator = RecordEstimator({"a": GaussianEstimator(), "b": GaussianEstimator()})
    with pytest.raises(
        SchemaError, match=r"^columns 'a' \(2 times\), 'b' \(3 times\) appear more than once in"
    ):
        optimize(table, estimator, **QUIET)


@pytest.mark.parametrize("data", [TABLE, TABLE.to_pandas()], ids=["pyarrow", "pandas"])
def test_a_repeated_column_nothing_reads_is_harmless(data: object) -> None:
    """pandas cannot convert such a frame to Arrow itself (ValueError: Duplicate column names): it is
    converted column by column, so it fits as the pyarrow table does."""
    estimator = RecordEstimator({"y": GaussianEstimator()})
    got = optimize(data, estimator, **QUIET)
    want = optimize(pa.table({"y": X + 1.0}), estimator, **QUIET)
    assert got.fields["y"].mu == pytest.approx(float(np.mean(X + 1.0)), rel=1e-12)
    assert got.to_dict() == want.to_dict()
    assert optimize(data, GaussianEstimator(), column="y", **QUIET).to_dict() == want.fields["y"].to_dict()


def test_a_models_own_methods_and_encoder_refuse_it() -> None:
    parts = [RecordDistribution({"x": GaussianDistribution(mu, 1.0)}) for mu in (-1.0, 1.0)]
    model = MixtureDistribution(parts, [0.5, 0.5])
    with pytest.raises(SchemaError, match=f"^{re.escape(X_TWICE)}$"):
        model.predict(TABLE.to_pandas())
    with pytest.raises(SchemaError, match=f"^{re.escape(X_TWICE)}$"):
        model.encoder().from_arrow(TABLE)
    assert model.predict(TABLE.select([0, 1])).tolist() == (X > 0).astype(int).tolist()


def test_the_frame_backends_choose_columns_and_refuse_a_repeated_one() -> None:
    """What Spark, Dask and Ray run before anything else (``data_columns``; ``score``'s
    ``read_columns``): the columns read, or the repeated one named."""
    record = RecordEstimator({"x": GaussianEstimator()}).encoder()
    one = GaussianEstimator().encoder()
    assert data_columns(["x", "y", "y"], record, None) == ["x"]
    assert data_columns(["x", "y", "x", "w"], one, "y", weights="w") == ["y"]
    with pytest.raises(SchemaError, match=f"^{re.escape(X_TWICE)}$"):
        data_columns(["x", "y", "x"], record, None)
    with pytest.raises(
        SchemaError, match=r"^column 'w' appears 2 times in the data \(its columns: \['x', 'w', 'w'\]\)"
    ):
        data_columns(["x", "w", "w"], one, "x", weights="w")
    scorer = BatchScorer(MixtureDistribution([GaussianDistribution(0.0, 1.0)] * 2, [0.5, 0.5]))
    with pytest.raises(
        SchemaError,
        match=r"^column 'id' appears 2 times in the data \(its columns: \['x', 'id', 'id'\]\); the scores "
        r"are added to every input column, so each name must appear once: rename or drop the copies$",
    ):
        scorer.read_columns(["x", "id", "id"], "x")


def test_a_name_spark_renamed_in_a_csv_header_says_so() -> None:
    """Spark's CSV reader renames a repeated header name to the name and its position."""
    record = RecordEstimator({"x": GaussianEstimator()}).encoder()
    with pytest.raises(
        SchemaError,
        match=r"^column 'x' not found; the DataFrame has 'x0', 'x2' instead: the CSV header names 'x' 2 "
        r"times \(Spark's CSV reader adds each copy's position to it\); rename the copies in the header$",
    ):
        data_columns(["x0", "y", "x2"], record, None)
    with pytest.raises(
        SchemaError, match=r"^column 'x' not found \(did you mean 'x0'\?\); the DataFrame has"
    ):
        data_columns(["x0", "y"], record, None)  # one such name is an ordinary column


def _em_fit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "em_fit.py"), "--backend", "local", "--quiet", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_em_fit_refuses_a_repeated_column_in_its_input_with_one_line(tmp_path: Path) -> None:
    parquet, csv = tmp_path / "x.parquet", tmp_path / "x.csv"
    pq.write_table(TABLE, parquet)
    csv.write_text("x,y,x\n" + "".join(f"{v},{v + 1.0},{v}\n" for v in X.tolist()))
    reads_x, reads_y = tmp_path / "x.json", tmp_path / "y.json"
    reads_x.write_text(json.dumps({"type": "record", "fields": {"x": "gaussian"}}))
    reads_y.write_text(json.dumps({"type": "record", "fields": {"y": "gaussian"}}))
    out = str(tmp_path / "fit")
    in_parquet = (
        f"em_fit: error: column 'x' appears 2 times in input {parquet} (its columns: ['x', 'y', 'x']); its "
        "columns are read by name, so each must appear once: rename the copies"
    )
    for spec in (reads_x, reads_y):  # pyarrow's Parquet reader refuses any repeated name, as Spark's does
        proc = _em_fit("--input", str(parquet), "--model", str(spec), "--output", out)
        assert (proc.returncode, proc.stderr.splitlines()) == (2, [in_parquet])
    proc = _em_fit("--input", str(csv), "--model", str(reads_x), "--output", out)
    assert (proc.returncode, proc.stderr.splitlines()) == (2, [f"em_fit: error: {X_TWICE}"])
    assert not (tmp_path / "fit").exists()
    proc = _em_fit("--input", str(csv), "--model", str(reads_y), "--output", out, "--max-its", "3")
    assert proc.returncode == 0, proc.stderr
    fitted = json.loads((tmp_path / "fit" / "model.json").read_text())["model"]
    assert fitted["fields"]["y"]["mu"] == pytest.approx(float(np.mean(X + 1.0)), rel=1e-12)
