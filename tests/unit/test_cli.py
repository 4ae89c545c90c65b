"""The jobs' shared helpers: exit codes, one-line errors, atomic output directories, progress lines."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from mixle_spark.cli import _common as _cli
from mixle_spark.cli._common import FIT_OUTPUT as FIT
from mixle_spark.errors import (
    DataTypeError,
    EmptyDataError,
    NonFiniteLikelihoodError,
    SchemaError,
    SpecError,
)
from tests._paths import dead_pid


@pytest.mark.parametrize(
    ("err", "code"),
    [
        (DataTypeError("expected a number", value="x", row=0, n_rows=1).at("amount"), 2),
        (SchemaError("column 'x' not found"), 2),
        (EmptyDataError("no rows"), 2),
        (SpecError("unknown key"), 2),
        (FileNotFoundError("no such file"), 2),
        (FileExistsError("exists"), 2),
        (NonFiniteLikelihoodError("log-likelihood is nan"), 1),
        (RuntimeError("boom"), 1),
        (RuntimeError("Traceback ...\nmixle_spark.errors.DataValueError: column 'n': negative count\n"), 2),
    ],
)
def test_exit_codes(err: BaseException, code: int) -> None:
    assert _cli.exit_code(err) == code


def test_error_lines_are_one_line() -> None:
    err = DataTypeError("expected a number", value="x", row=0, n_rows=1).at("amount")
    assert _cli.error_line(err) == "column 'amount': expected a number, got string 'x' (row 1 of 1)"
    remote = RuntimeError("An error occurred\n  File x\nDataTypeError: column 'a': bad value\n  more")
    assert _cli.error_line(remote) == "column 'a': bad value"
    assert _cli.error_line(RuntimeError("first\nsecond")) == "RuntimeError: first"


def test_run_job_reports_one_line() -> None:
    stream = io.StringIO()

    def fail() -> None:
        raise SchemaError("column 'x' not found")

    assert _cli.run_job("prog", fail, stderr=stream) == 2
    assert stream.getvalue() == "prog: error: column 'x' not found\n"
    assert _cli.run_job("prog", lambda: None, stderr=stream) == 0


def test_the_jvm_log_is_kept_only_when_a_failure_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "mixle_spark-prog-1.log"

    def run(body: object) -> tuple[int, str]:
        log.write_text("spark's console\n")
        monkeypatch.setattr(_cli, "_jvm_logs", [log])
        stream = io.StringIO()
        return _cli.run_job("prog", body, stderr=stream), stream.getvalue()  # type: ignore[arg-type]

    def bad_input() -> None:
        raise SchemaError("column 'x' not found")

    def failure() -> None:
        raise RuntimeError("boom")

    assert run(bad_input) == (2, "prog: error: column 'x' not found\n")
    assert not log.exists()  # the line says it all: nothing left in $TMPDIR
    assert run(failure) == (1, f"prog: error: RuntimeError: boom (Spark's log: {log})\n")
    assert log.read_text() == "spark's console\n"  # kept: the line names it
    assert run(lambda: None) == (0, "")
    assert not log.exists()


def _fit_output(directory: Path, model: str) -> None:
    """What the fit job writes: model.json and a summary.json of its format."""
    (directory / "model.json").write_text(model)
    (directory / "summary.json").write_text('{"format": "mixle_spark.fit_summary"}')


def test_atomic_directory_commits_only_on_success(tmp_path: Path) -> None:
    target = tmp_path / "out"
    with pytest.raises(RuntimeError, match="half-way"), _cli.atomic_directory(target, False, FIT) as staging:
        (staging / "model.json").write_text("{}")
        raise RuntimeError("half-way")
    assert list(tmp_path.iterdir()) == []  # no target, no staging directory

    with _cli.atomic_directory(target, False, FIT) as staging:
        _fit_output(staging, "new")
    assert (target / "model.json").read_text() == "new"

    with pytest.raises(FileExistsError, match=r"output .*out exists; pass --overwrite to replace it"):
        with _cli.atomic_directory(target, False, FIT):
            pass
    with _cli.atomic_directory(target, True, FIT) as staging:
        _fit_output(staging, "newer")
        (staging / "trace.jsonl").write_text("")
    assert sorted(p.name for p in target.iterdir()) == ["model.json", "summary.json", "trace.jsonl"]
    assert (target / "model.json").read_text() == "newer"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_an_output_that_appears_during_the_run_is_not_replaced(tmp_path: Path) -> None:
    """Checked again just before the swap: a folder someone made meanwhile stays, whole."""
    target = tmp_path / "out"
    with pytest.raises(FileExistsError, match=r"out exists and was not written by em_fit \(it holds mine\)"):
        with _cli.atomic_directory(target, True, FIT) as staging:
            _fit_output(staging, "new")
            target.mkdir()
            (target / "mine").write_text("mine")
    assert [p.name for p in target.iterdir()] == ["mine"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging directory left


def test_an_empty_output_directory_is_free(tmp_path: Path) -> None:
    _cli.check_output_free(tmp_path, False, FIT)
    _fit_output(tmp_path, "{}")
    with pytest.raises(FileExistsError, match="pass --overwrite"):
        _cli.check_output_free(tmp_path, False, FIT)
    (tmp_path / "f").write_text("x")
    with pytest.raises(FileExistsError, match=r"was not written by em_fit \(it holds f\); choose another"):
        _cli.check_output_free(tmp_path, True, FIT)


def test_argument_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    parser = _cli.JobArgumentParser(prog="prog")
    parser.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--n", "x"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "prog: error: argument --n: invalid int value: 'x' (see --help)\n"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--max-iter", "5"], "unrecognized arguments: --max-iter 5 (did you mean '--max-its'?)"),
        (["--max-iter=5"], "unrecognized arguments: --max-iter=5 (did you mean '--max-its'?)"),
        (["--criteria", "aic"], "unrecognized arguments: --criteria aic (did you mean '--criterion'?)"),
        (["--reprot", "--sed", "1"], "unrecognized arguments: --reprot --sed 1 (did you mean '--report'?)"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["stray"], "unrecognized arguments: stray"),
    ],
)
def test_an_unknown_option_suggests_the_closest(
    capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    from mixle_spark.cli._arguments import build_parser

    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"em_fit: error: {line} (see --help)\n"


def test_a_missing_local_input_is_refused_while_resolving_the_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mixle_spark.cli._arguments import build_parser, resolve_args

    base = ["--model", "conf/models/sample.json", "--output", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as exit_info:
        resolve_args(build_parser(), ["--input", str(tmp_path / "nope.parquet"), *base])
    assert exit_info.value.code == 2
    assert (
        capsys.readouterr().err
        == f"em_fit: error: no such file or directory: '{tmp_path / 'nope.parquet'}'\n"
    )
    for remote in ("s3://bucket/x.parquet", "sales.customers"):  # only Spark can tell: left to it
        assert resolve_args(build_parser(), ["--input", remote, *base]).input == remote
    # under mpiexec every process resolves the arguments: their read reports it once instead
    missing = str(tmp_path / "nope.parquet")
    assert resolve_args(build_parser(), ["--input", missing, "--backend", "mpi", *base]).input == missing


def _leftover(target: Path, kind: str, pid: int) -> Path:
    import socket
    import uuid

    host = socket.gethostname().replace("-", "_") or "host"
    path = target.with_name(f".{target.name}.{kind}-{host}-{pid}-{uuid.uuid4().hex}")
    path.mkdir()
    (path / "model.json").write_text(kind)
    return path


def test_a_killed_runs_staging_directory_is_removed_by_the_next_run(tmp_path: Path) -> None:
    target = tmp_path / "out"
    dead = _leftover(target, "tmp", dead_pid())
    live = _leftover(target, "tmp", os.getpid())  # a run still going (this process): left alone
    other = tmp_path / ".other.tmp-host-1-0123456789abcdef0123456789abcdef"  # another output's
    other.mkdir()
    with _cli.atomic_directory(target, False, FIT) as staging:
        (staging / "model.json").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out", live.name, other.name])
    assert not dead.exists()


def test_an_old_output_a_killed_run_moved_aside_is_put_back(tmp_path: Path) -> None:
    """Killed between moving the old output aside and moving the new one in: nothing is lost."""
    target = tmp_path / "out"
    _leftover(target, "old", dead_pid())
    _leftover(target, "tmp", dead_pid())
    assert len(_cli.sweep_stale(target)) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert (target / "model.json").read_text() == "old"


def test_every_output_file_gets_the_mode_umask_allows(tmp_path: Path) -> None:
    from mixle_spark._files import file_mode
    from mixle_spark.em.observability import EMTrace
    from mixle_spark.spec import save_model
    from mixle_spark.stats import GaussianDistribution

    previous = os.umask(0o022)
    try:
        assert file_mode() == 0o644
        with _cli.atomic_directory(tmp_path / "out", False, FIT) as staging:
            save_model(GaussianDistribution(0.0, 1.0), staging / "model.json")
            EMTrace().to_jsonl(staging / "trace.jsonl")
            (staging / "summary.json").write_text("{}")
        modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "out").iterdir()}
    finally:
        os.umask(previous)
    assert modes == {"model.json": 0o644, "summary.json": 0o644, "trace.jsonl": 0o644}


class _JavaError:
    """A stand-in for a py4j Java exception: toString() and a cause chain."""

    def __init__(self, text: str, cause: _JavaError | None = None) -> None:
        self.text, self.cause = text, cause

    def toString(self) -> str:
        return self.text

    def getMessage(self) -> str:
        return self.text.split(": ", 1)[-1]

    def getCause(self) -> _JavaError | None:
        return self.cause


class Py4JJavaError(Exception):
    def __init__(self, java: _JavaError) -> None:
        super().__init__(
            "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe."
        )
        self.java_exception = java


@pytest.mark.parametrize(
    ("chain", "line", "code"),
    [
        (
            [
                "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 failed",
                "org.apache.spark.SparkException: [FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER] Encountered "
                "error while reading file file:/data/x.parquet. Could not read footer.",
                "java.lang.RuntimeException: file:/data/x.parquet is not a Parquet file "
                "(length is too low: 0)",
            ],
            "cannot read input file file:/data/x.parquet: is not a Parquet file (length is too low: 0)",
            2,
        ),
        (
            [
                "org.apache.spark.SparkException: Job aborted due to stage failure: Lost task 1.0",
                "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)",
                "java.io.EOFException",
            ],
            "a Spark task failed because a Python worker exited, and it could not be retried; run again "
            "(with --checkpoint-dir a fit resumes where it stopped)",
            1,
        ),
        (
            [
                "io.delta.exceptions.ConcurrentAppendException: [DELTA_CONCURRENT_APPEND] Files were "
                "added to the root of the table by a concurrent update. Please try the operation again."
            ],
            "another job committed to the same Delta table at the same time (DELTA_CONCURRENT_APPEND); "
            "nothing of this run was committed: run it again",
            1,
        ),
    ],
    ids=["unreadable-file", "lost-python-worker", "concurrent-delta-writer"],
)
def test_spark_failures_are_translated_in_one_place(chain: list[str], line: str, code: int) -> None:
    java = None
    for text in reversed(chain):
        java = _JavaError(text, java)
    assert java is not None
    err = Py4JJavaError(java)
    assert _cli.error_line(err) == line
    assert _cli.exit_code(err) == code
    stream = io.StringIO()
    assert _cli.run_job("prog", lambda: (_ for _ in ()).throw(err), stderr=stream) == code
    assert stream.getvalue() == f"prog: error: {line}\n"  # one line


def test_an_unknown_spark_error_keeps_its_first_line() -> None:
    err = Py4JJavaError(_JavaError("java.lang.IllegalStateException: something else\n\tat x.y(z)"))
    assert _cli.error_line(err) == "Py4JJavaError: something else"
    assert _cli.exit_code(err) == 1
