"""Score a table with a fitted model; write the scores to a Delta table in one transaction (Spark), or
to a Parquet directory moved into place when complete (``--backend dask`` / ``ray``).

    python jobs/em_score.py --input TABLE --model output/sample_fit/model.json --output SCORES [options]
    spark-submit --packages io.delta:delta-spark_2.13:4.0.1 jobs/em_score.py --input ... (same options)

``--input`` is read as by ``jobs/em_fit.py`` (Delta, Parquet, CSV, JSON path, or a metastore table).
``--model`` is a fitted model written by em_fit (``model.json``). The output Delta table holds every
input column plus ``log_likelihood`` (double, the row's log-density under the model) and, for
mixture models, ``prediction`` (int, the most probable component) and ``probability``
(array<double>, the posterior over components); for hidden Markov models ``states``
(array<int>, the Viterbi path: the most probable state of every element; for a record,
``FIELD_states`` per hidden Markov field); with ``--imputed-col NAME`` a vector model's input with
every missing (NaN or null) coordinate replaced by its conditional mean given the row's observed ones
(weighted by the posterior for a mixture). The table is written in one Delta commit: a failed run
leaves no table (or the previous one, with ``--mode overwrite``).

A row holding a label the model has not seen (a categorical label, a Markov chain label or a
multinomial token outside the fitted vocabulary) fails the job by default, naming the label and the
row (``--on-unseen error``); with ``--on-unseen null`` such rows are written with null scores and
counted in the summary line (``... 3 of them hold a label the model has not seen: scored null``).

``--backend dask`` / ``--backend ray`` score a Parquet input on a Dask cluster / Ray runtime (a local
one of ``--num-workers`` processes / CPUs, or the one at ``--dask-scheduler`` / ``--ray-address``)
and write the same columns as a Parquet directory, atomically: the files are written beside
``--output`` and moved into place once all are written (a failed run leaves no directory, or the
previous one with ``--mode overwrite``). The directory lists its files in
``_mixle_spark_files.json`` (hidden from Parquet readers by its leading ``_``). A bad value is named
by its partition (Dask) or its block (Ray) and its row there.

``--mode overwrite`` replaces only a scores table: a Delta table (``--backend spark``), or a
directory em_score wrote (the files its ``_mixle_spark_files.json`` lists, or Spark / Dask / Ray
part files, ``_SUCCESS`` and checksums only). Anything else at ``--output`` (a folder of other files,
a regular file), a symbolic link as ``--output``, or a ``..`` that a link makes lead elsewhere is
refused with one line naming the path and what it holds (exit code 2); nothing is written or
deleted.

    python jobs/em_score.py --backend dask --num-workers 2 --input data/customers_sample.parquet \
        --model output/sample_fit/model.json --output output/scores_dask

A local input (Parquet, a Delta table, a CSV header) is checked against the model before Spark
starts, as em_fit checks it: a missing column or a type the model cannot read exits 2 at once, with
the fix in the line. stderr ends with ``em_score: timings: start-up ..., read ..., scoring ..., total
...`` (scoring includes writing the table: Spark scores as it writes).

Exit codes: 0 success; 2 bad arguments or bad input (a missing input or model, a model that does
not match the table's columns or types, an output table that exists with ``--mode error``, an
output that is not a scores table or is reached through a symbolic link); 1 any other failure. A
failure prints one line on stderr naming the row of the input table where there is one
(``--verbose`` adds Spark's log and the traceback).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from mixle_spark._files import delta_layout, table_layout
from mixle_spark._locations import needs_session, resolve
from mixle_spark.cli._common import (
    JobArgumentParser,
    atomic_directory,
    check_output_free,
    in_table_rows,
    job_spark_session,
    run_job,
)
from mixle_spark.cli._early import check_score_input
from mixle_spark.cli._engines import (
    ENGINE_BACKENDS,
    add_engine_addresses,
    check_engine_addresses,
    engine_error,
    open_engine_input,
)
from mixle_spark.parallel.backends._scoring import BatchScorer
from mixle_spark.parallel.backends.registry import CONTROL_CHECKS
from mixle_spark.spec import load_model
from mixle_spark.summary import timings_line

PROG = "em_score"
SCORES = table_layout(PROG)
"""``--backend dask`` / ``ray``: a Parquet directory ``--mode overwrite`` may replace (one em_score
wrote: the files its ``_mixle_spark_files.json`` lists, or part files only)."""
DELTA_SCORES = delta_layout()
"""``--backend spark``: any Delta table may be overwritten (Delta keeps the previous version)."""


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    parser = JobArgumentParser(
        prog=PROG,
        description="Score a table with a fitted mixle_spark model into a Delta table "
        "(--backend dask / ray: a Parquet directory).",
    )
    parser.add_argument("--input", required=True, help="Delta/Parquet/CSV/JSON path or metastore table name")
    parser.add_argument("--model", required=True, help="fitted model JSON (em_fit's model.json)")
    parser.add_argument("--output", required=True, help="path of the Delta table to write")
    parser.add_argument(
        "--mode",
        choices=("error", "overwrite"),
        default="error",
        help="error (default): refuse an existing table; overwrite: replace it in one commit",
    )
    parser.add_argument(
        "--on-unseen",
        choices=("error", "null"),
        default="error",
        help="a row with a label the model has not seen: error (default) fails the job naming it; "
        "null writes the row with null scores and counts it",
    )
    parser.add_argument(
        "--imputed-col",
        metavar="NAME",
        help="also write NAME (array<double>): a vector model's input with each missing (NaN or null) "
        "coordinate replaced by its conditional mean given the row's observed ones",
    )
    parser.add_argument(
        "--backend",
        choices=("spark", *ENGINE_BACKENDS),
        default="spark",
        help="spark (default): any input, a Delta table out; dask / ray: Parquet in, Parquet out",
    )
    add_engine_addresses(parser)
    parser.add_argument(
        "--num-workers",
        type=CONTROL_CHECKS["num_workers"].argument("integer"),
        help="dask: the local cluster's processes; ray: the local runtime's CPUs (default: this machine's)",
    )
    parser.add_argument("--master", help="Spark master (default: spark-submit's, $MASTER or local[*])")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting (repeatable)"
    )
    parser.add_argument(
        "--verbose", action="store_true", help="Spark's console output and a failure's traceback on stderr"
    )
    return parser


def _report(
    where: str, rows: int, columns: list[str], unseen: int | None, started: float, timings: dict[str, float]
) -> dict[str, Any]:
    """Print the summary line (with the unseen-label count, None unless ``--on-unseen null``) and the
    seconds, and on stderr the ``timings:`` line as em_fit's (``startup``, ``read``, ``scoring``: the
    scores computed as the output is written, and counted back; ``total``); return the small report
    both backends' ``run`` return."""
    line = f"wrote {rows} rows {where} ({', '.join(columns)})"
    if unseen is not None:
        line += f"; {unseen} of them hold a label the model has not seen: scored null"
    print(line)
    timings["total"] = time.perf_counter() - started
    print(f"{timings['total']:.1f}s")
    print(f"{PROG}: timings: {timings_line(timings)}", file=sys.stderr)
    return {"rows": rows, "columns": columns, "unseen": unseen or 0, "timings": timings}


def run_engine(args: argparse.Namespace) -> dict[str, Any]:
    """``--backend dask`` / ``ray``: read the Parquet input as the engine's frame, score it there and
    write a Parquet directory atomically; returns a small report (as :func:`run`)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as pads

    from mixle_spark.scoring import score

    started = time.perf_counter()
    model = load_model(args.model)
    BatchScorer(model, imputed_col=args.imputed_col)  # what it cannot add fails before any engine starts
    local = None if needs_session(args.output) else resolve(args.output, "--output").local
    if local is None:  # dbfs:/ (without its mount), s3://, ...: never ./dbfs:/...
        raise ValueError(
            f"--output {args.output}: --backend {args.backend} writes a directory of this machine "
            "(or a mounted one), moved into place when complete"
        )
    output = local
    check_output_free(output, args.mode == "overwrite", SCORES)  # before any engine starts
    t0 = time.perf_counter()
    data, engine, _ = open_engine_input(args, {})
    timings = {"startup": time.perf_counter() - t0}
    t0 = time.perf_counter()
    try:
        scored = score(model, data, on_unseen=args.on_unseen, imputed_col=args.imputed_col)
        with atomic_directory(output, args.mode == "overwrite", SCORES) as staging:
            if args.backend == "dask":
                scored.to_parquet(str(staging), write_index=False)
            else:
                scored.context.raise_original_map_exception = True  # our error, not Ray's wrapper
                scored.write_parquet(str(staging))
    except Exception as err:
        err = engine_error(err)
        raise in_table_rows(err, data) or err from None  # the row of the table where it is known
    finally:
        engine.stop()
    written = pads.dataset(output, format="parquet")
    rows = written.count_rows()
    columns = written.schema.names
    unseen = (
        written.count_rows(filter=pc.field("log_likelihood").is_null()) if args.on_unseen == "null" else None
    )
    timings["scoring"] = time.perf_counter() - t0
    return _report(f"as Parquet to {output}", rows, columns, unseen, started, timings)


def run(args: argparse.Namespace, spark_conf: dict[str, str]) -> dict[str, Any]:
    """Read, score, write; returns a small report."""
    from mixle_spark.io import check_input_exists, read_table, write_table

    started = time.perf_counter()
    model = load_model(args.model)
    scorer = BatchScorer(model, imputed_col=args.imputed_col)  # what it cannot add fails before any engine
    check_input_exists(args.input)  # a mistyped local path fails before Spark starts
    check_score_input(args.input, scorer)  # and a local input's columns the model cannot read
    output = args.output
    if not needs_session(output):  # fail before starting Spark: a link, or what is not a Delta table
        check_output_free(resolve(output, "--output").local or output, args.mode == "overwrite", DELTA_SCORES)
    from pyspark import SparkContext

    # never stop a Spark that was running (a notebook's, a caller's in another thread)
    owned = SparkContext._active_spark_context is None
    t0 = time.perf_counter()
    spark = job_spark_session(PROG, args.master, spark_conf, args.verbose)
    timings = {"startup": time.perf_counter() - t0}
    try:
        from mixle_spark.scoring import score

        t0 = time.perf_counter()
        data = read_table(spark, args.input)
        timings["read"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            scored = score(model, data, on_unseen=args.on_unseen, imputed_col=args.imputed_col)
            write_table(scored, output, mode=args.mode)
        except Exception as err:
            located = in_table_rows(err, data)  # the row of the table, not of a partition
            if located is None:
                raise
            raise located from None
        written = read_table(spark, output, format="delta")
        rows = written.count()
        columns = written.columns
        unseen = (
            written.filter(written["log_likelihood"].isNull()).count() if args.on_unseen == "null" else None
        )
        timings["scoring"] = time.perf_counter() - t0
    finally:
        if owned:
            spark.stop()
    return _report(f"to the Delta table {output}", rows, columns, unseen, started, timings)


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse, run, map failures to exit codes (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check_engine_addresses(parser, args)
    if args.backend == "spark" and args.num_workers is not None:
        parser.error("--num-workers applies to --backend dask and ray (spark: spark.task.cpus)")
    if args.backend != "spark" and (args.master is not None or args.conf):
        parser.error("--master and --conf only apply to --backend spark")
    if args.backend in ENGINE_BACKENDS:
        return run_job(PROG, lambda: run_engine(args), verbose=args.verbose)
    from mixle_spark.io import parse_conf

    try:
        spark_conf = parse_conf(args.conf)
    except ValueError as err:
        parser.error(str(err))
    return run_job(PROG, lambda: run(args, spark_conf), verbose=args.verbose)


if __name__ == "__main__":
    raise SystemExit(main())
