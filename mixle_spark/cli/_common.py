"""What the command-line jobs (``jobs/em_fit.py``, ``jobs/em_score.py``) share.

Exit codes: 0 success; 2 bad arguments or bad input (an unknown option, a missing input, an output
that exists without ``--overwrite``, an output the job did not write or a path through a symbolic
link, a spec or data error from :mod:`mixle_spark.errors`); 3 new rows that drifted past
``--max-drop`` with ``--on-drift fail`` (em_fit ``--update-from``); 1 any other failure. A failure
prints one line on stderr, ``PROG: error: MESSAGE``.

The atomic output directory and the rule of what an overwrite may replace live in
:mod:`mixle_spark._files` (the library's table writer uses them too); the fit job's layout is
:data:`FIT_OUTPUT`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, NoReturn

from mixle_spark._files import (
    Folder,
    OutputLayout,
    atomic_directory,
    check_output_free,
    folder_entries,
    folder_json,
    holds,
    sweep_stale,
)
from mixle_spark._frames import frame_engine
from mixle_spark._locations import scheme_of
from mixle_spark.cli._fixes import fix_for
from mixle_spark.cli._summary import SUMMARY_FORMAT
from mixle_spark.errors import (
    DataError,
    ExecutorError,
    MixleError,
    NonFiniteLikelihoodError,
    SilentCorruptionError,
    did_you_mean,
)
from mixle_spark.io import DELTA_CONFLICT

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_DRIFT",
    "EXIT_FAILURE",
    "EXIT_OK",
    "FIT_OUTPUT",
    "JobArgumentParser",
    "UpdateDriftError",
    "atomic_directory",
    "check_output_free",
    "error_line",
    "exit_code",
    "fit_output",
    "in_table_rows",
    "job_spark_session",
    "malformed_row_message",
    "run_job",
    "sweep_stale",
    "translate_spark_error",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_DRIFT = 3


class UpdateDriftError(MixleError, ValueError):
    """New rows drifted past ``--max-drop`` with ``--on-drift fail``: exit code :data:`EXIT_DRIFT`,
    nothing written. The job's form of :class:`~mixle_spark.em.incremental.DriftError`: a message
    naming the flags, and nothing else, so that SPMD processes can pass it on (pickled)."""


# Bad input that reached the driver from a Spark task shows up as text inside another exception.
_REMOTE_INPUT_ERROR = re.compile(
    r"\b(?:mixle_spark\.errors\.)?((?:DataType|DataValue|Data|UnseenLabel|Schema|EmptyData|TooFewRows|Spec)"
    r"Error): ([^\n]+)"
)


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


class JobArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (and exit code 2); an unknown option or
    choice names the closest one (``unrecognized arguments: --max-iter 5 (did you mean '--max-its'?)``,
    ``invalid choice: 'sprak' (did you mean 'spark'?) (choose from ...)``)."""

    def error(self, message: str) -> NoReturn:
        bad = _INVALID_CHOICE.search(message)
        if bad is not None:  # argparse: "argument --backend: invalid choice: 'sprak' (choose from ...)"
            choices = re.findall(r"'([^']*)'", bad.group(2))
            hint = did_you_mean(bad.group(1), choices)
            if hint:
                message = f"{message[: bad.end(1) + 1]}{hint}{message[bad.end(1) + 1 :]}"
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see --help)\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            options = [o for action in self._actions for o in action.option_strings]
            unknown = [a.split("=", 1)[0] for a in extras if a.startswith("--")]
            hint = next((h for h in (did_you_mean(a, options) for a in unknown) if h), "")
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed


def _first_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def _java_chain(err: BaseException) -> list[str]:
    """The messages of a Spark / Java error and its causes, outermost first ("Type: message")."""
    text = str(err)
    java = getattr(err, "java_exception", None)
    if java is not None:
        try:
            text = str(java.toString())
            cause = java.getCause()
            while cause is not None:
                text += f"\nCaused by: {cause.toString()}"
                cause = cause.getCause()
        except Exception:  # a gateway already gone: the Python-side text is all there is
            text = str(err)
    chain = [_first_line(text)]
    chain += [
        line.strip()[len("Caused by: ") :]
        for line in text.splitlines()
        if line.strip().startswith("Caused by: ")
    ]
    return [c for c in chain if c]


_UNREADABLE_FILE = re.compile(
    r"(?:FAILED_READ_FILE|is not a Parquet file|Could not read footer|CANNOT_READ_FILE)"
)
_FILE_IN_MESSAGE = re.compile(r"(?:reading file|Encountered error while reading file) (\S+?)\.?(?:\s|$)")
_LOST_WORKER = (  # what was lost, in the order a message is searched (the first found names it)
    (
        re.compile(r"Python worker exited|PYTHON_WORKER_EXITED|Python worker .*crashed", re.I),
        "a Python worker exited",
    ),
    (re.compile(r"ExecutorLostFailure|Lost executor|executor \S+ exited", re.I), "an executor was lost"),
    (re.compile(r"Connection reset|EOFException", re.I), "the connection to a Python worker broke"),
)


_MALFORMED_CSV = re.compile(r"\[MALFORMED_CSV_RECORD\] Malformed CSV record: (.*?)(?: SQLSTATE: \w+)?$", re.M)


def malformed_row_message(where: str | None, line: int | None, row: str) -> str:
    """The one line for a CSV row whose fields do not match the header."""
    place = f" in {where}" if where else ""
    at = f" (line {line})" if line is not None else ""
    return f"malformed CSV row{place}{at}: {row!r} has not the header's number of fields"


def _malformed_csv_line(uri: str | None, row: str) -> str:
    """Spark names the malformed record, not its line: for a local file, find the line."""
    line = None
    if uri is not None:
        path = Path(re.sub(r"^file:(//)?", "", uri))
        if path.is_file() and path.stat().st_size < 1 << 30:
            with open(path, encoding="utf-8", errors="replace") as fh:
                line = next((i for i, text in enumerate(fh, 1) if text.rstrip("\r\n") == row), None)
    return malformed_row_message(uri, line, row)


def translate_spark_error(err: BaseException) -> tuple[str, int] | None:
    """``(one line, exit code)`` for a Spark / Java failure whose cause we can name: an unreadable
    input file, a lost executor or Python worker, another writer committing to the same Delta table.
    None for anything else. This is the one place the jobs translate such errors."""
    if not (hasattr(err, "java_exception") or type(err).__module__.startswith(("py4j", "pyspark"))):
        return None
    chain = _java_chain(err)
    text = "\n".join(chain)
    deepest = chain[-1] if chain else type(err).__name__
    malformed = _MALFORMED_CSV.search(text)
    if malformed is not None:
        found = _FILE_IN_MESSAGE.search(text)
        return _malformed_csv_line(found.group(1) if found else None, malformed.group(1)), EXIT_BAD_INPUT
    if _UNREADABLE_FILE.search(text):
        found = _FILE_IN_MESSAGE.search(text)
        where = f" {found.group(1)}" if found else ""
        reason = deepest.split(": ", 1)[-1]
        if found and reason.startswith(found.group(1)):
            reason = reason[len(found.group(1)) :].strip()
        return f"cannot read input file{where}: {reason}", EXIT_BAD_INPUT
    if DELTA_CONFLICT.search(text):
        found = re.search(r"DELTA_[A-Z_]+", text) or DELTA_CONFLICT.search(text)
        assert found is not None
        return (
            f"another job committed to the same Delta table at the same time ({found.group(0)}); "
            "nothing of this run was committed: run it again",
            EXIT_FAILURE,
        )
    for pattern, lost in _LOST_WORKER:
        if pattern.search(text):
            return (
                f"a Spark task failed because {lost}, and it could not be retried; run again "
                "(with --checkpoint-dir a fit resumes where it stopped)",
                EXIT_FAILURE,
            )
    return None


def exit_code(err: BaseException) -> int:
    """2 for bad arguments or input, 3 for drift that stops an update, 1 for any other failure."""
    if isinstance(err, UpdateDriftError):
        return EXIT_DRIFT
    if isinstance(err, ExecutorError):
        return EXIT_BAD_INPUT if _REMOTE_INPUT_ERROR.search(f"{err.remote_type}: x") else EXIT_FAILURE
    translated = translate_spark_error(err)
    if translated is not None:
        return translated[1]
    if isinstance(err, NonFiniteLikelihoodError | SilentCorruptionError):
        return EXIT_FAILURE
    if isinstance(err, MixleError | FileNotFoundError | FileExistsError | NotADirectoryError):
        return EXIT_BAD_INPUT
    if _REMOTE_INPUT_ERROR.search(str(err)):
        return EXIT_BAD_INPUT
    return EXIT_FAILURE


def error_line(err: BaseException) -> str:
    """One line describing ``err``: our own messages as they are (with the fix where one is known:
    :func:`~mixle_spark.cli._fixes.fix_for`), others prefixed by their type."""
    if isinstance(err, MixleError | OSError):
        line = _first_line(str(err))
        return line + fix_for(line) if line else type(err).__name__
    remote = _REMOTE_INPUT_ERROR.search(str(err))
    if remote is not None:
        return remote.group(2).strip()
    translated = translate_spark_error(err)
    if translated is not None:
        return translated[0]
    java = getattr(err, "java_exception", None)
    text = _first_line(str(java.getMessage()) if java is not None else str(err))
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


_jvm_logs: list[Path] = []  # where this process's Spark JVM writes its console (job_spark_session)


def job_spark_session(
    prog: str, master: str | None, conf: Any, verbose: bool = False, *, delta: bool = True
) -> Any:
    """The job's Spark session (with Delta unless ``delta`` is False: the bundled sample's Parquet
    needs no Delta jar resolved at start-up). Unless ``verbose``, a JVM the job launches writes its
    console (the jar resolution report, Spark's log) to ``$TMPDIR/mixle_spark-PROG-PID.log`` instead
    of stderr, so that stderr holds the job's own lines; a failure's line names that file."""
    import tempfile

    from mixle_spark.io import spark_session

    log = None if verbose else Path(tempfile.gettempdir()) / f"mixle_spark-{prog}-{os.getpid()}.log"
    spark = spark_session(f"mixle_spark {prog}", master=master, conf=conf, delta=delta, jvm_log=log)
    spark.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    if log is not None and log.exists():
        _jvm_logs.append(log)
    return spark


def run_job(prog: str, body: Callable[[], Any], stderr: IO[str] | None = None, verbose: bool = False) -> int:
    """Run ``body``; map its exception (if any) to an exit code and one line on stderr (with
    ``verbose`` or ``MIXLE_SPARK_TRACEBACK=1``, the traceback too)."""
    stream = stderr or sys.stderr
    try:
        body()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=stream)
        return 130
    except Exception as err:
        code = exit_code(err)
        kept = code == EXIT_FAILURE and bool(_jvm_logs)  # bad input: the line says it all
        where = f" (Spark's log: {_jvm_logs[-1]})" if kept else ""
        print(f"{prog}: error: {error_line(err)}{where}", file=stream)
        if verbose or os.environ.get("MIXLE_SPARK_TRACEBACK"):
            import traceback

            traceback.print_exc(file=stream)
        _remove_jvm_logs(keep_last=kept)
        return code
    _remove_jvm_logs(keep_last=False)  # a run that succeeded leaves no log behind
    return EXIT_OK


def _remove_jvm_logs(keep_last: bool) -> None:
    """Remove the JVM console files of this process but (``keep_last``) the one a failure names."""
    for log in _jvm_logs[:-1] if keep_last else _jvm_logs:
        log.unlink(missing_ok=True)
    _jvm_logs[:] = _jvm_logs[-1:] if keep_last else []


FIT_FILES = frozenset({"model.json", "summary.json", "trace.jsonl", "report.html", "spec.json"})
"""What the fit job writes in its output directory (report.html with ``--report``, spec.json with
``--infer-spec``)."""


def _not_a_fit(directory: Folder, keep: frozenset[str] = frozenset()) -> str | None:
    """Why ``directory`` is not an output of the fit job: a file it does not write (or a link or a
    directory) besides the run's other outputs nested in it (``keep``), no model.json / summary.json,
    or a summary.json without the job's ``format``."""
    entries = [e for e in folder_entries(directory) if e.name not in keep]
    odd = [e for e in entries if e.name not in FIT_FILES or not e.is_file(follow_symlinks=False)]
    if odd:
        return holds(odd)
    missing = sorted({"model.json", "summary.json"} - {e.name for e in entries})
    if missing:
        return f"it has no {' or '.join(missing)}"
    if folder_json(directory, "summary.json").get("format") != SUMMARY_FORMAT:
        return "its summary.json is not an em_fit summary"
    return None


FIT_OUTPUT = OutputLayout("was not written by em_fit", _not_a_fit)
"""The fit job's output directory: what ``--overwrite`` may replace (:func:`atomic_directory`)."""


def fit_output(output: str, *nested: str | None) -> OutputLayout:
    """:data:`FIT_OUTPUT` with the run's other outputs (``nested``: ``--checkpoint-dir``, ``--trace``)
    that lie inside ``output`` kept: allowed there, and handed on when the output is replaced."""
    keep = frozenset(name for path in nested if path is not None and (name := _child_of(output, path)))
    if not keep:
        return FIT_OUTPUT
    return dataclasses.replace(FIT_OUTPUT, foreign=functools.partial(_not_a_fit, keep=keep), keep=keep)


def _child_of(output: str, path: str) -> str | None:
    """The entry of ``output`` that ``path`` lies in (``OUT/_checkpoints/x`` -> ``_checkpoints``)."""
    if scheme_of(output) not in (None, "file") or scheme_of(path) not in (None, "file"):
        inside = path.rstrip("/").removeprefix(output.rstrip("/") + "/")
        return inside.split("/")[0] if inside != path.rstrip("/") and inside else None
    relative = os.path.relpath(os.path.abspath(path), os.path.abspath(output))
    first = relative.split(os.sep)[0]
    return None if first in (os.curdir, os.pardir) or os.path.isabs(relative) else first


_PARTITION_ROW = re.compile(r"\(row (\d+) of partition (\d+)\)")


def in_table_rows(err: BaseException, df: Any) -> MixleError | None:
    """A bad-input failure of a lazy pass that names a row of a partition ("row 5 of partition 2":
    ``score`` does not know the partitions' offsets), as the same error naming the row of the whole
    table ("row 105 of 300"); None for any other error or frame. ``df`` is the Spark or Dask DataFrame
    that pass read; it costs one count per partition, on failure only."""
    text = error_line(err)
    found = _PARTITION_ROW.search(text)
    engine = frame_engine(df)
    if found is None or exit_code(err) != EXIT_BAD_INPUT or engine not in ("spark", "dask"):
        return None  # a Ray block's row cannot be placed: Ray does not say which block it was
    if engine == "dask":
        counts = dict(enumerate(int(c) for c in df.map_partitions(len).compute()))
    else:
        from pyspark.sql import functions as F

        counts = {int(p): int(c) for p, c in df.groupBy(F.spark_partition_id().alias("p")).count().collect()}
    row = sum(c for p, c in counts.items() if p < int(found.group(2))) + int(found.group(1))
    return DataError(f"{text[: found.start()]}(row {row} of {sum(counts.values())}){text[found.end() :]}")
