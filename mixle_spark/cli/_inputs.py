"""What the fit and the update share before and after the numbers: the input opened for the backend
(:func:`open_input`: a Spark DataFrame, a pyarrow Table, a Dask / Ray frame, or the path SPMD processes
read), and the warnings of a run reported once (:func:`report_warnings`)."""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path
from typing import Any

from mixle_spark.cli._arguments import PROG, Sample
from mixle_spark.cli._common import job_spark_session, malformed_row_message
from mixle_spark.cli._engines import ENGINE_BACKENDS, open_engine_input
from mixle_spark.cli._spmd import SPMD_BACKENDS, Coordination, solo
from mixle_spark.em.seeding import SeedingFallbackWarning
from mixle_spark.errors import (
    ConvergenceWarning,
    FitQualityWarning,
    MalformedRowError,
    ModelSizeWarning,
    SchemaError,
)
from mixle_spark.stats._tables import repeated_columns

__all__ = ["open_input", "read_local_input", "report_warnings"]


SAMPLE_JVM = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
"""The bundled sample's JVM (``--conf`` overrides it): 5,000 rows are seconds of JVM start-up and
warm-up, which the quick (C1) compiler alone and the serial collector shorten (on a loaded 2-core
machine, start-up, read, first job and encoding took ~40% less); a long fit wants the defaults."""

_READ_BY_NAME_IN_FILE = "its columns are read by name, so each must appear once: rename the copies"


def read_local_input(source: str) -> Any:
    """A pyarrow Table from a Parquet file/directory, CSV or JSON-lines file (``--backend local``)."""
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {source!r}")
    if (path / "_delta_log").is_dir():
        raise FileNotFoundError(f"{source} is a Delta table; read it with --backend spark")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        import pyarrow.csv as pacsv

        bad: list[Any] = []

        def refuse(row: Any) -> str:  # a row with more or fewer fields than the header
            bad.append(row)
            return "error"

        try:
            options = pacsv.ParseOptions(invalid_row_handler=refuse)
            serial = pacsv.ReadOptions(use_threads=False)  # so that a bad row knows its line
            return pacsv.read_csv(path, read_options=serial, parse_options=options)
        except Exception:
            if not bad:
                raise
            raise MalformedRowError(malformed_row_message(source, bad[0].number, bad[0].text)) from None
    if suffix in (".json", ".jsonl", ".ndjson"):
        import pyarrow.json as pajson

        return pajson.read_json(path)
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except pa.ArrowInvalid:  # "Multiple matches for FieldRef.Name(x)": a column name given twice?
        repeated = _repeated_parquet_columns(path, source)
        if repeated is None:
            raise
        raise repeated from None


def _repeated_parquet_columns(path: Path, source: str) -> SchemaError | None:
    """The error for a Parquet input whose schema names a column more than once (pyarrow's dataset
    reader refuses it as "Multiple matches for FieldRef"), from its first file; else None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    first = path if path.is_file() else next(iter(sorted(path.rglob("*.parquet"))), None)
    try:
        names = [] if first is None else pq.read_schema(first).names
    except (OSError, pa.ArrowException):  # not readable either: the reader's own error says why
        return None
    return repeated_columns(names, why=_READ_BY_NAME_IN_FILE, where=f"input {source}")


def report_warnings(caught: list[warnings.WarningMessage], coord: Coordination = solo) -> list[str]:
    """Say each of ``caught`` once (the root prints): ours as ``PROG: warning: ...`` lines, returned for
    summary.json; others (a library's) as Python shows them."""
    ours = []
    for w in caught:
        if issubclass(
            w.category, (ConvergenceWarning, SeedingFallbackWarning, ModelSizeWarning, FitQualityWarning)
        ) or "mixle_spark" in str(w.filename):
            ours.append(str(w.message))
            coord.say(f"{PROG}: warning: {w.message}")
        elif coord.is_root:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return ours


def open_input(
    args: argparse.Namespace, extra: dict[str, Any], sample: Sample | None, timings: dict[str, float]
) -> tuple[Any, Any, bool]:
    """``(data, spark session or None, whether this job owns the session)`` for ``args.input``: a
    Spark DataFrame, a pyarrow Table (``--backend local``) or the path each SPMD process reads.
    ``timings`` gets ``startup`` (starting Spark, a Dask or Ray cluster) and ``read``."""
    t0 = time.perf_counter()
    if args.backend in SPMD_BACKENDS:
        return args.input, None, False
    if args.backend in ENGINE_BACKENDS:
        if args.sample:
            assert sample is not None
            args.input = str(sample.data)
        opened = open_engine_input(args, extra)
        timings["startup"] = time.perf_counter() - t0
        return opened
    if args.backend != "spark":
        if args.sample:
            assert sample is not None
            args.input = str(sample.data)
        table = read_local_input(args.input)
        timings["read"] = time.perf_counter() - t0
        return table, None, False
    from pyspark import SparkContext

    from mixle_spark.io import read_table

    # never stop a Spark that was running (a notebook's, a caller's in another thread)
    owned = SparkContext._active_spark_context is None
    # the bundled sample is read as the Parquet file it is: no Delta jar to resolve at start-up
    delta = not args.sample or args.sample_delta
    conf = {**SAMPLE_JVM, **args.spark_conf} if args.sample and owned else args.spark_conf
    spark = job_spark_session(PROG, args.master, conf, args.verbose, delta=delta)
    timings["startup"] = time.perf_counter() - t0
    try:
        extra["spark"] = {"master": spark.conf.get("spark.master"), "version": spark.version}
        t1 = time.perf_counter()
        if args.sample:
            assert sample is not None
            args.input = sample.delta_table(spark) if args.sample_delta else str(sample.data)
        data = read_table(spark, args.input)
        _plan_read(data)
        timings["read"] = time.perf_counter() - t1
        return data, spark, owned
    except BaseException:
        if owned:
            spark.stop()
        raise


def _plan_read(data: Any) -> None:
    """Plan the read now (a Delta table's snapshot, a directory's listing: seconds on a first read in a
    new JVM), so that its cost is timed as reading rather than inside the first pass that encodes."""
    try:
        data.inputFiles()
    except Exception:  # a source that lists no files: the first pass plans it instead
        pass
