"""jobs/em_fit.py and jobs/em_score.py on Spark.

End to end in subprocesses (each starts a JVM, so there are few): em_fit with explicit arguments on
the sample, em_score (through spark-submit) on its model, and the no-argument default (slow). The
no-resident fit and the failure paths run in-process through the jobs' ``main`` on the shared
session: the same code, without a JVM start each.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.spark

pyspark = pytest.importorskip("pyspark")
chispa = pytest.importorskip("chispa")

from mixle_spark.io import read_table, write_table  # noqa: E402
from mixle_spark.spec import load_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "customers_sample.parquet"
SPEC = ROOT / "conf" / "models" / "sample.json"
SAMPLE_COLUMNS = ["amount", "channel", "n_items", "tags"]
SPARK_ARGS = ("--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=2")


def _job(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_job_{name}", ROOT / "jobs" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(Path(pyspark.__file__).parent),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        **extra,
    )
    return env


def _python(job: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / f"{job}.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(**env),
        timeout=1200,
    )


def _spark_submit(job: str, *args: str) -> subprocess.CompletedProcess[str]:
    from mixle_spark.io import delta_package

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    return subprocess.run(
        [
            str(submit),
            "--master",
            "local[2]",
            "--packages",
            delta_package(),
            str(ROOT / "jobs" / f"{job}.py"),
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(),
        timeout=1200,
    )


def _error_lines(stderr: str, prog: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(f"{prog}: error:")]


def _assert_recovers_truth(model: Any) -> None:
    truth = load_model(SAMPLE.with_suffix(".truth.json"))
    got = sorted((c.fields["amount"].mu, w) for c, w in zip(model.components, model.w, strict=True))
    want = sorted((c.fields["amount"].mu, w) for c, w in zip(truth.components, truth.w, strict=True))
    np.testing.assert_allclose([g[0] for g in got], [t[0] for t in want], atol=0.1)
    np.testing.assert_allclose([g[1] for g in got], [t[1] for t in want], atol=0.03)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """em_fit (python, Spark backend) on the sample with explicit arguments."""
    out = tmp_path_factory.mktemp("em_fit") / "fit"
    proc = _python(
        "em_fit",
        *("--input", str(SAMPLE), "--model", str(SPEC), "--output", str(out)),
        *(
            "--trials",
            "1",
            "--seed",
            "7",
            "--print-iter",
            "1",
            "--partitions",
            "2",
            "--depth",
            "1",
            *SPARK_ARGS,
        ),
    )
    return proc, out


def test_em_fit_on_spark_writes_model_and_summary(fitted: tuple[Any, Path]) -> None:
    proc, out = fitted
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["model.json", "summary.json", "trace.jsonl"]
    assert [p.name for p in out.parent.iterdir()] == ["fit"]  # no staging directory left
    progress = [line for line in proc.stderr.splitlines() if line.startswith("iteration")]
    assert len(progress) >= 10 and all("rows 5000" in p and p.count(" rows/s  skew ") == 1 for p in progress)
    _assert_recovers_truth(load_model(out / "model.json"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"] == "spark" and summary["spark"]["master"] == "local[2]"
    assert summary["rows"] == 5000 and summary["converged"] is True and summary["seed"] == 7
    assert summary["iterations"] == len(summary["history"]) - 1
    # the Spark backend starts from the same model as the local one for one seed: same path
    assert summary["iterations"] == 9
    assert summary["log_likelihood"] == pytest.approx(-56519.613213, abs=1e-4)
    assert summary["free_parameters"] == 35 and summary["bic"] > summary["aic"]


def test_em_fit_no_resident_runs_one_job_per_step_to_the_same_model(
    spark: Any, fitted: tuple[Any, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc, out = fitted
    assert proc.returncode == 0
    resident_events = [e for line in (out / "trace.jsonl").read_text().splitlines()[1:]
                       for e in json.loads(line).get("events", [])]  # fmt: skip
    assert resident_events[0].startswith("kmeans|| seeding: 3 centres in ")
    assert resident_events[1].startswith("resident E-steps started: 2 tasks hold 5,000 rows")
    plain = tmp_path / "fit"
    args = ("--input", str(SAMPLE), "--model", str(SPEC), "--output", str(plain), "--seed", "7")
    # in-process on the shared session (the same main, without a second JVM start)
    code, err = _fit_in_process(
        capsys, *args, "--trials", "1", "--no-resident", "--partitions", "2", "--depth", "1"
    )
    assert code == 0, err[-3000:]
    lines = (plain / "trace.jsonl").read_text().splitlines()[1:]
    assert not [e for line in lines for e in json.loads(line).get("events", []) if "resident" in e]
    want, got = (json.loads((d / "summary.json").read_text()) for d in (out, plain))
    assert got["iterations"] == want["iterations"]
    assert got["log_likelihood"] == pytest.approx(want["log_likelihood"], rel=1e-12)


def test_em_score_writes_delta_scores_and_refuses_to_overwrite(
    spark: Any, fitted: tuple[Any, Path], tmp_path: Path
) -> None:
    proc, out = fitted
    assert proc.returncode == 0
    scores = tmp_path / "scores"
    args = ("--input", str(SAMPLE), "--model", str(out / "model.json"), "--output", str(scores))
    done = _spark_submit("em_score", *args, "--conf", "spark.sql.execution.arrow.maxRecordsPerBatch=1000")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wrote 5000 rows to the Delta table" in done.stdout
    written = read_table(spark, str(scores))
    assert (scores / "_delta_log").is_dir()
    assert written.columns == [*SAMPLE_COLUMNS, "log_likelihood", "prediction", "probability"]
    assert written.dtypes[-3:] == [
        ("log_likelihood", "double"),
        ("prediction", "int"),
        ("probability", "array<double>"),
    ]

    from mixle_spark.scoring import score

    model = load_model(out / "model.json")
    expected = score(model, read_table(spark, str(SAMPLE)))
    chispa.assert_df_equality(written, expected, ignore_row_order=True, ignore_nullable=True)
    total = written.agg({"log_likelihood": "sum"}).first()[0]
    assert total == pytest.approx(json.loads((out / "summary.json").read_text())["log_likelihood"], rel=1e-9)

    commits = sorted(p.name for p in (scores / "_delta_log").glob("*.json"))
    again = _python("em_score", *args)  # refused before Spark starts
    assert again.returncode == 2
    assert _error_lines(again.stderr, "em_score") == [
        f"em_score: error: output {scores} exists; pass --mode overwrite to replace it"
    ]
    assert sorted(p.name for p in (scores / "_delta_log").glob("*.json")) == commits


# -- in-process: the jobs' main() on the shared session ------------------------------------------
# (a failing job's whole stderr being its one error line is checked on a real process by
# tests/spark/test_lost_worker.py)


def _fit_in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = _job("em_fit").main([*args, "--quiet"])
    return code, capsys.readouterr().err


def test_em_fit_bad_csv_exits_2_naming_the_column(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "orders.csv"
    data.write_text("amount,channel,n_items\n12.5,web,1\n12.5x,app,2\n30.0,store,3\n")
    spec = tmp_path / "spec.json"
    fields = {"amount": "gaussian", "channel": "categorical", "n_items": "poisson"}
    spec.write_text(json.dumps({"type": "record", "fields": fields}))
    code, err = _fit_in_process(
        capsys, "--input", str(data), "--model", str(spec), "--output", str(tmp_path / "fit")
    )
    assert code == 2, err[-3000:]
    [line] = _error_lines(err, "em_fit")
    assert "column 'amount'" in line and "string" in line
    assert err.strip().splitlines()[-1] == line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["orders.csv", "spec.json"]


RECORD = {"amount": "gaussian", "channel": "categorical", "n_items": "poisson"}


@pytest.mark.parametrize(
    ("csv", "fields", "message"),
    [
        (
            "amount,channel,n_items\n12.5,web,1\n,app,2\n",
            RECORD,
            "column 'amount': expected a finite number for GaussianEstimator (a missing value needs "
            "OptionalEstimator), got null (row 2 of 2)",
        ),
        (
            "amount,channel,n_items\n12.5,web,1\n",
            {**RECORD, "loyalty": "gaussian"},
            "column 'loyalty' not found; the DataFrame has columns ['amount', 'channel', 'n_items']",
        ),
    ],
    ids=["null-without-optional", "unknown-column"],
)
def test_em_fit_bad_input_exits_2_and_writes_nothing(
    spark: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    csv: str,
    fields: dict[str, str],
    message: str,
) -> None:
    data, spec = tmp_path / "orders.csv", tmp_path / "spec.json"
    data.write_text(csv)
    spec.write_text(json.dumps({"type": "record", "fields": fields}))
    code, err = _fit_in_process(
        capsys, "--input", str(data), "--model", str(spec), "--output", str(tmp_path / "o")
    )
    assert code == 2
    assert _error_lines(err, "em_fit") == [f"em_fit: error: {message}"]
    assert not (tmp_path / "o").exists()


def test_em_fit_empty_delta_table_exits_2(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    write_table(read_table(spark, str(SAMPLE)).limit(0), empty)
    code, err = _fit_in_process(
        capsys, "--input", str(empty), "--model", str(SPEC), "--output", str(tmp_path / "o")
    )
    assert code == 2
    assert _error_lines(err, "em_fit") == ["em_fit: error: no rows to encode: the DataFrame is empty"]
    assert not (tmp_path / "o").exists()


def test_em_fit_keeps_an_existing_output(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "model.json").write_text("keep me")
    for overwrite in ((), ("--overwrite",)):
        code, err = _fit_in_process(
            capsys, "--input", str(SAMPLE), "--model", str(SPEC), "--output", str(out), *overwrite
        )
        assert code == 2
        assert _error_lines(err, "em_fit") == [
            f"em_fit: error: output {out} exists and was not written by em_fit (it has no summary.json); "
            "choose another --output or remove it yourself"
        ]
        assert [p.name for p in out.iterdir()] == ["model.json"]
        assert (out / "model.json").read_text() == "keep me"


def test_em_fit_update_from_on_spark_equals_the_local_update(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow.parquet as pq

    from mixle_spark.em.incremental import update

    table = pq.read_table(SAMPLE)
    old, new = tmp_path / "old.parquet", tmp_path / "new.parquet"
    pq.write_table(table.slice(0, 2500), old)
    pq.write_table(table.slice(2500), new)
    fit, day = tmp_path / "fit", tmp_path / "day1"
    code, err = _fit_in_process(
        capsys, "--input", str(old), "--model", str(SPEC), "--output", str(fit), "--seed", "3"
    )
    assert code == 0, err
    code, err = _fit_in_process(capsys, "--update-from", str(fit), "--input", str(new), "--output", str(day))
    assert code == 0, err
    want = update(load_model(fit / "model.json"), new_rows := pq.read_table(new), backend="local")
    got = load_model(day / "model.json")
    np.testing.assert_allclose(got.w, want.w, rtol=1e-9)
    for a, b in zip(got.components, want.components, strict=True):
        assert a.fields["amount"].mu == pytest.approx(b.fields["amount"].mu, rel=1e-9)
        assert a.fields["amount"].sigma2 == pytest.approx(b.fields["amount"].sigma2, rel=1e-9)
    summary = json.loads((day / "summary.json").read_text())
    assert summary["backend"] == "spark" and summary["rows"] == new_rows.num_rows == 2500
    assert summary["update"]["passes"] == want.update_result.passes
    assert summary["statistics"] == {"rows": 5000, "updates": 1, "weight": 5000, "last_batch": None}


def _score_in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = _job("em_score").main(list(args))
    return code, capsys.readouterr().err.strip().splitlines()


def test_em_score_overwrite_replaces_a_delta_table_and_nothing_else(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--mode overwrite on Spark: a Delta table is replaced; a folder of someone's files, ``dir/..``
    reaching it, a link to a Delta table (another table) and a ``..`` after a link are refused in one
    line each, and every file stays as it was."""
    from mixle_spark.spec import save_model
    from mixle_spark.stats import GaussianDistribution, RecordDistribution
    from tests._paths import snapshot, users_folder

    model = save_model(RecordDistribution({"amount": GaussianDistribution(50.0, 400.0)}), tmp_path / "m.json")
    score = ("--input", str(SAMPLE), "--model", str(model), "--mode", "overwrite", "--output")
    scores = tmp_path / "scores"
    write_table(read_table(spark, str(SAMPLE)).limit(3), scores)
    code, lines = _score_in_process(capsys, *score, str(scores))
    assert code == 0, lines
    assert read_table(spark, str(scores)).count() == 5000
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".scores")] == []

    thesis = users_folder(tmp_path / "thesis")
    link = tmp_path / "latest"
    link.symlink_to(scores)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "link").symlink_to(thesis / "sub")
    escape = tmp_path / "work" / "link" / ".." / "scores"
    advice = "choose another --output or remove it yourself"
    refused = {
        thesis: f"exists and is not a Delta table (it holds notes.txt and sub/); {advice}",
        thesis / "sub" / "..": f"exists and is not a Delta table (it holds notes.txt and sub/); {advice}",
        link: f"is a symbolic link (to {scores}); mixle_spark never writes or deletes through a link: "
        "name the real path",
        escape: f"leads to {thesis / 'scores'}, not to {tmp_path / 'work' / 'scores'}: a '..' after a "
        "symbolic link leaves the named path; name the real path",
    }
    before = snapshot(tmp_path)
    for out, why in refused.items():
        code, lines = _score_in_process(capsys, *score, str(out))
        assert code == 2
        assert lines == [f"em_score: error: output {out} {why}"]
        assert snapshot(tmp_path) == before, out


def test_em_score_model_mismatch_exits_2(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mixle_spark.spec import save_model
    from mixle_spark.stats import GaussianDistribution, RecordDistribution

    model = tmp_path / "model.json"
    save_model(RecordDistribution({"loyalty": GaussianDistribution(0.0, 1.0)}), model)
    out = tmp_path / "scores"
    code = _job("em_score").main(["--input", str(SAMPLE), "--model", str(model), "--output", str(out)])
    assert code == 2
    assert _error_lines(capsys.readouterr().err, "em_score") == [
        "em_score: error: column 'loyalty' not found; the DataFrame has columns "
        "['amount', 'channel', 'n_items', 'tags']"
    ]
    assert not out.exists()


def test_sample_table_is_written_once(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job("em_fit")
    monkeypatch.setattr(job, "SAMPLE_TABLE", tmp_path / "sample_delta")
    assert job.sample_table(spark) == str(tmp_path / "sample_delta")
    assert job.sample_table(spark) == str(tmp_path / "sample_delta")
    assert [p.name for p in (tmp_path / "sample_delta" / "_delta_log").glob("*.json")] == [
        "00000000000000000000.json"
    ]
    chispa.assert_df_equality(
        read_table(spark, str(tmp_path / "sample_delta")),
        read_table(spark, str(SAMPLE)),
        ignore_row_order=True,
    )


@pytest.mark.slow
def test_em_fit_without_arguments_fits_the_bundled_sample(tmp_path: Path) -> None:
    proc = _python("em_fit", MIXLE_SPARK_OUTPUT=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "customers_sample_delta").exists()  # the Parquet sample, read as it is
    assert sorted(p.name for p in (tmp_path / "sample_fit").iterdir()) == [
        "model.json",
        "summary.json",
        "trace.jsonl",
    ]
    _assert_recovers_truth(load_model(tmp_path / "sample_fit" / "model.json"))
    summary = json.loads((tmp_path / "sample_fit" / "summary.json").read_text())
    assert summary["input"] == str(SAMPLE)
    assert summary["spark"]["master"] == "local[*]" and summary["fit_options"]["trials"] == 2


def test_em_fit_sample_delta_fits_the_bundled_sample_through_a_delta_table(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _job("em_fit")
    monkeypatch.setattr(job, "SAMPLE_TABLE", tmp_path / "sample_delta")
    out = tmp_path / "fit"
    args = ["--sample-delta", "--output", str(out), "--max-its", "3", "--quiet", "--no-statistics"]
    assert job.main(args) == 0, capsys.readouterr().err
    assert (tmp_path / "sample_delta" / "_delta_log").is_dir()
    assert json.loads((out / "summary.json").read_text())["input"] == str(tmp_path / "sample_delta")
    with pytest.raises(SystemExit):
        job.main(["--sample-delta", "--input", str(SAMPLE), "--model", str(SPEC), "--output", str(out)])
    assert "--sample-delta applies to the bundled sample" in capsys.readouterr().err


@pytest.mark.parametrize("prog", ["em_fit", "em_score"])
def test_a_delta_table_of_the_wrong_type_is_refused_before_spark_starts(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], prog: str
) -> None:
    """The Delta writer's own log, read without Spark: the job exits 2 before it asks for a session."""
    import mixle_spark.cli._inputs as inputs

    table = tmp_path / "people"
    write_table(spark.createDataFrame([(1.0, 30.0), (2.0, 41.0)], "sex double, age double"), table)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"type": "record", "fields": {"sex": "categorical", "age": "gaussian"}}))
    job = _job(prog)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a Spark session was asked for")

    monkeypatch.setattr(inputs, "job_spark_session", refuse)
    monkeypatch.setattr(job, "job_spark_session", refuse, raising=False)
    if prog == "em_fit":
        args = ["--model", str(spec), "--quiet"]
    else:
        from mixle_spark.spec import save_model
        from mixle_spark.stats import CategoricalDistribution, GaussianDistribution, RecordDistribution

        fields = {
            "sex": CategoricalDistribution({"f": 0.5, "m": 0.5}),
            "age": GaussianDistribution(35.0, 9.0),
        }
        save_model(RecordDistribution(fields), tmp_path / "model.json")
        args = ["--model", str(tmp_path / "model.json")]
    capsys.readouterr()
    code = job.main(["--input", str(table), "--output", str(tmp_path / "out"), *args])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{prog}: error: column 'sex': expected a string, large_string, integer, boolean or dictionary "
        "column for CategoricalEstimator, got Arrow type double; fix: CAST(sex AS STRING), or CAST(sex AS "
        "INT) for whole-number codes, or integer_categorical (reads whole numbers as labels), or a family "
        "that reads numbers (gaussian for any real number, poisson for counts, bernoulli for 0/1)"
    ]
    assert not (tmp_path / "out").exists()


def test_em_score_prints_its_timings_as_em_fit_does(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = SAMPLE.with_suffix(".truth.json")
    code, lines = _score_in_process(
        capsys, "--input", str(SAMPLE), "--model", str(truth), "--output", str(tmp_path / "scores")
    )
    assert code == 0, lines
    assert len(lines) == 1
    assert re.fullmatch(
        r"em_score: timings: start-up \d+\.\ds, read \d+\.\ds, scoring \d+\.\ds, total \d+\.\ds", lines[0]
    )


def test_the_fit_progress_counts_the_spark_tasks_of_a_step(spark: Any) -> None:
    """The status tracker's counts of a running job's tasks, kept once its stage has finished."""
    import threading
    import time

    from mixle_spark.cli._watch import StepWatch, last_job, spark_tasks

    def slow(x: int) -> int:
        import time

        time.sleep(0.5)
        return x

    job = threading.Thread(target=lambda: spark.sparkContext.parallelize(range(4), 4).map(slow).count())
    spark.range(3).count()  # a job before the step: not counted
    watch = StepWatch(sys.stderr, "em_fit")
    watch.step("encoding")
    after = last_job()
    seen: dict[int, tuple[int, int]] = {}
    job.start()
    counts = []
    while job.is_alive():
        counts.append(spark_tasks(seen, after))
        time.sleep(0.05)
    job.join()
    assert spark_tasks({}, after) == (4, 4)
    assert any(c is not None and c[1] == 4 and c[0] < 4 for c in counts), counts
    line = watch.line(watch._started + 2.0)
    assert line is not None and line.startswith("em_fit: encoding for 2s; Spark tasks 4 of 4 done (")
