"""The fit job: fit a model spec to a table by EM; write the fitted model and a run summary.

One routine for every entry point and backend::

    python jobs/em_fit.py                      # the bundled sample, see "No arguments" below
    python jobs/em_fit.py --input TABLE --model conf/models/sample.json --output DIR [options]
    spark-submit --packages io.delta:delta-spark_2.13:4.0.1 jobs/em_fit.py --input ... (same options)
    python -m mixle_spark.cli.fit --input ... (the same job from an installed package)
    mpiexec -n 4 python -m mixle_spark.cli.fit --backend mpi --input PATH --model SPEC --output DIR
    torchrun --nproc-per-node 2 -m mixle_spark.cli.fit --backend torchrun --input PATH ...

``--input`` is a Delta table path, a Parquet file or directory, a CSV file (header row, types
inferred), a JSON(-lines) file, or a metastore table name (see ``mixle_spark.io.read_table``).
``--model`` is a spec file (``conf/models/*.json``) whose ``fit`` section gives defaults that the
options override. ``--output`` is a directory that receives ``model.json`` (the fitted model, read
back with ``mixle_spark.spec.load_model``) and ``summary.json`` (rows, iterations, convergence,
log-likelihood history, free parameters, BIC / AIC, timings, a summary of the EM trace) and
``trace.jsonl`` (one JSON line per iteration: log-likelihood, gain, rows, seconds, rows/s, bytes of
statistics merged, partition time skew, stragglers, component weights, events; read it back with
``mixle_spark.em.observability.EMTrace.from_jsonl``). All are written to a staging
directory that is renamed into place, so a failed run leaves no output and an existing output is
replaced (``--overwrite``) only by a complete one. Only an output of this job is ever replaced: a
directory holding model.json, summary.json (with the job's ``format``) and at most trace.jsonl and
report.html. Anything else at ``--output`` (a folder of other files, a regular file), a symbolic
link as ``--output``, or a ``..`` that a link makes lead elsewhere is refused with one line naming
the path and what it holds (exit code 2), and nothing is written or deleted. ``--report`` adds
``report.html`` to the same directory: a self-contained page (``mixle_spark.report``) with the
log-likelihood per iteration, the component weights, the parameters and a 2-D projection of the
first 2,000 input rows coloured by component; with matplotlib (``pip install mixle-spark[plot]``)
it has figures, otherwise tables.

Per-iteration progress (iteration, log-likelihood, gain, rows, seconds, rows/s, partition time skew,
bytes of statistics merged) goes to stderr (``--quiet`` turns it off); the fitted model's description
goes to stdout. ``--trace PATH`` also writes the trace live, one line per iteration as it happens
(``tail -f`` it), for a long fit; it replaces only an EM trace (a file whose first line is the
trace's header), never another file nor through a symbolic link.

``model.json`` keeps the sufficient statistics of the fitted model's E-step over the data (one more
pass at the end of the fit; ``--no-statistics`` leaves them out), so that ``--update-from`` can fold
new rows into it later without reading these again: ``--update-from DIR --input NEW --output OUT``
(:mod:`mixle_spark.cli.update`) writes the updated model and a summary with an ``update`` section;
``--method``, ``--decay`` / ``--half-life`` with ``--time-unit``, ``--alpha``, ``--max-its`` (passes,
default 5), ``--max-drop`` with ``--on-drift warn|fail|refit`` (fail: exit code 3). The spec and the
fit's options come from DIR: ``--model``, ``--k``, ``--trials``, ``--checkpoint-dir`` and the other
fit-only flags are refused with it.

How EM starts: ``--init kmeans||`` (default; k-means|| seeding, ``--init-steps`` rounds) or ``--init
random`` (see ``mixle_spark.em.seeding``). ``--k 2:12`` (or ``--k 2,4,8``) fits every candidate number of
components of the spec's mixture (its component, or a hidden Markov model's state, repeated k times)
and keeps the best by ``--criterion bic`` (default) or ``aic``; ``--forms all`` (or ``EII,VVV``,
``tied,full``) also tries those covariance forms of a Gaussian mixture with every k (with the spec's k
alone when ``--k`` is not given), as mclust chooses form and k; ``--label-column NAME`` (integers
0..k-1, null where unknown) keeps the component of the rows it labels while the mixture is fitted;
``summary.json`` gets the table (``model_selection``) and ``--report`` the criterion curve (one line
per form). ``--init-model PATH`` starts EM from a fitted model.json (of the spec's shape) instead of
seeding (one fit: the spec's ``trials`` do not apply).

Long fits (see ``mixle_spark.em.resilient`` and ``sdc_audit``):

* ``--checkpoint-dir DIR`` saves the fit state every ``--checkpoint-every`` iterations (atomic,
  checksummed JSON files; a Hadoop/cloud URI works too). Re-running the same command after a crash
  or preemption resumes from the newest valid checkpoint and gives exactly the estimates of an
  uninterrupted run; ``--no-resume`` discards the checkpoints and starts afresh. Only the store's own
  files (``em-checkpoint-*.json`` and their temporary files) are ever replaced or deleted, and a
  checkpoint directory that is a symbolic link (or reached through one and ``..``) is refused. A
  checkpoint from a different fit (other data, spec or options) is an error, never silently used.
* ``--on-degenerate {stop,floor,reseed}``: what to do when a mixture component's M-step fails (a
  variance collapsing to 0, a component losing all its weight): stop with an error naming the
  iteration and the component (default), keep its previous parameters at a floor weight, or restart
  it from a fresh random initialisation (at most three times per component; then the fit stops).
* ``--audit-every N`` recomputes the statistics of a random ``--audit-fraction`` of the partitions
  every N iterations with independent reference kernels and stops with exit code 1, naming the
  partition, if they disagree (silent data corruption on an executor).

``--backend mpi`` / ``--backend torchrun`` (run under ``mpiexec`` / ``torchrun``): every process runs
this job and reads its share of a Parquet input (:mod:`mixle_spark.parallel.backends.mpi`); the root
process writes the output, the checkpoints and the trace and prints the progress. ``--num-workers``
threads each process's E-step (local, mpi, torchrun). An error every process saw is printed once; an
error on one process is printed with its traceback and, if the others do not all stop within
``MIXLE_SPARK_MPI_ABORT_SECONDS`` (default 30), the job is aborted.

No arguments (``jobs/em_fit.py`` only): the bundled sample ``data/customers_sample.parquet`` is
fitted with ``conf/models/sample.json`` on ``local[*]``, read as Parquet by a session without Delta
(``--sample-delta``: copied once into the local Delta table ``output/customers_sample_delta`` and
read from there); the result replaces ``output/sample_fit/`` (``$MIXLE_SPARK_OUTPUT`` moves ``output/``).
Options (``--output``, ``--master``, ``--backend local``, ``--max-its``, ...) still apply;
``--input`` and ``--model`` go together.

``--backend local`` fits in this process with numpy, without starting Spark (Parquet, CSV and
JSON-lines inputs only). ``--engine {numpy,torch}`` and ``--precision {float64,float32,bf16}`` (over
the spec's fit section; :mod:`mixle_spark.cli._compute`) choose the E-step's engine and the precision
the data is stored and computed in; summary.json records them (``compute``).

Before Spark starts, a local input's columns (a Parquet footer, a Delta table's log, a CSV header's
names) are checked against the spec as Spark would check them (:mod:`mixle_spark.cli._early`): a
missing column or a type the spec's family cannot read exits 2 at once, and the error line says the
fix where there is one (the cast, ``CAST(sex AS STRING)``, or the family that reads the type; for a
value outside a family's support, what to do with it). Remote inputs and text columns are checked in
Spark, which names the first cell that does not read and its row. While encoding or seeding runs for
more than 30 s, a line every 30 s says so, with the Spark tasks done (``--quiet`` turns it off).

Exit codes: 0 success; 2 bad arguments or bad input (an unknown option, a missing input or spec, a
spec or data error such as a string in a numeric column or an empty table, an output that exists
without ``--overwrite``, an output, checkpoint directory or trace the job did not write or that is
reached through a symbolic link, a model to update without statistics); 3 new rows that drifted
past ``--max-drop`` with ``--on-drift fail`` (nothing written); 1 any other failure. A failure prints
one line on stderr (``MIXLE_SPARK_TRACEBACK=1`` adds the traceback).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import datetime, timezone
from typing import Any

from mixle_spark._frames import frame_engine
from mixle_spark._locations import needs_session, resolve, shown_inside
from mixle_spark._outputs import check_location_free, check_writable, publish_directory
from mixle_spark.cli._arguments import (
    PROG,
    Sample,
    backend_options,
    build_parser,
    fit_options,
    reliability_options,
    resolve_args,
)
from mixle_spark.cli._common import fit_output, run_job
from mixle_spark.cli._compute import compute_summary
from mixle_spark.cli._early import check_fit_input
from mixle_spark.cli._infer import INFERRED_SPEC_FILE, infer_fit_spec, inferred_spec_text
from mixle_spark.cli._inputs import open_input, report_warnings
from mixle_spark.cli._spmd import SPMD_BACKENDS, Coordination, run_spmd, solo
from mixle_spark.cli._summary import SUMMARY_FORMAT, build_summary, long_fit_summary, statistics_summary
from mixle_spark.cli._watch import StepWatch
from mixle_spark.cli.update import run_update
from mixle_spark.em._checkpoint_store import CheckpointStore
from mixle_spark.em.observability import check_trace_path
from mixle_spark.em.seeding import SeedingFallbackWarning
from mixle_spark.errors import (
    CheckpointMismatchError,
    ConvergenceWarning,
    FitQualityWarning,
    ModelSizeWarning,
    SchemaError,
    SpecError,
)
from mixle_spark.estimation import best_of, optimize
from mixle_spark.model_selection import select_k
from mixle_spark.parallel.backends.contract import EncodedData
from mixle_spark.profile import segment_profile
from mixle_spark.scoring import assignment_counts
from mixle_spark.spec import ModelSpec, load_spec, save_model
from mixle_spark.summary import describe_model, timings_line

__all__ = ["PROG", "SUMMARY_FORMAT", "Sample", "build_parser", "main", "resolve_args", "run"]

REPORT_SAMPLE_ROWS = 2000


def path_dataset(path: str) -> Any:
    """The rows an SPMD fit read from ``path`` as a ``pyarrow.dataset.Dataset``: a Delta table's
    current snapshot (never files its log has removed), a Parquet file or directory."""
    import pyarrow.dataset as pads

    from mixle_spark.parallel.backends._mpi_io import plan_path

    plan = plan_path(path)
    if plan.hive_base is not None:
        return pads.dataset(
            list(plan.files), format="parquet", partitioning="hive", partition_base_dir=plan.hive_base
        )
    return pads.dataset(list(plan.files), format="parquet")


def _drawn_rows(n: int) -> Any:
    """``REPORT_SAMPLE_ROWS`` of ``n`` row numbers (all of them when fewer) drawn at random, in order."""
    import numpy as np

    return np.sort(np.random.default_rng(0).choice(n, size=min(n, REPORT_SAMPLE_ROWS), replace=False))


def report_sample(data: Any, rows: float) -> Any:
    """About ``REPORT_SAMPLE_ROWS`` input rows drawn uniformly at random (a pyarrow Table, or pandas)
    for the report's projection: every row equally likely, so each segment keeps its share (the first
    rows of a table sorted by anything would not). ``rows``: the table's row count (from the fit).
    ``data`` as the job holds it, or the ``pyarrow.dataset.Dataset`` of an SPMD path
    (:func:`path_dataset`)."""
    import pyarrow.dataset as pads

    fraction = min(1.0, REPORT_SAMPLE_ROWS / rows) if rows > 0 else 1.0
    if isinstance(data, str):  # the path SPMD processes read
        data = path_dataset(data)
    if isinstance(data, pads.Dataset):  # only the drawn rows are read here
        return data.take(_drawn_rows(data.count_rows()))
    engine = frame_engine(data)
    if engine == "dask":  # only the drawn rows reach the client
        import pyarrow as pa

        drawn = data.sample(frac=fraction, random_state=0).compute()
        return pa.Table.from_pandas(drawn, preserve_index=False)
    if engine == "ray":  # only the drawn rows reach the driver
        return data.random_sample(fraction, seed=0).take_batch(2 * REPORT_SAMPLE_ROWS, batch_format="pyarrow")
    if hasattr(data, "sample"):  # a Spark DataFrame: only the drawn rows reach the driver
        drawn = data.sample(fraction=fraction, seed=0)
        return drawn.toArrow() if hasattr(drawn, "toArrow") else drawn.toPandas()
    return data.take(_drawn_rows(data.num_rows))


def fit_model(
    data: Any,
    spec: ModelSpec,
    options: dict[str, Any],
    trials: int,
    backend_options: dict[str, Any],
    out: Any,
    reliability: dict[str, Any] | None = None,
    ks: list[int] | None = None,
    criterion: str = "bic",
    coord: Coordination = solo,
    label: str = "",
    *,
    keep_statistics: bool = False,
    forms: list[str] | None = None,
) -> tuple[Any, float, dict[str, float], list[str], Any]:
    """Run EM with one call of the public API, which encodes ``data`` (``optimize``; ``trials``
    restarts: ``best_of``; ``ks``: ``select_k``); ``(model, ll, timings, warnings, selection)``.

    ``reliability`` holds ``optimize``'s checkpoint / degenerate-component / audit / trace keywords.
    ``ks`` chooses the number of components among these by ``select_k`` and ``criterion``;
    ``forms`` (covariance forms) are tried with every k (the spec's own k when ``ks`` is None);
    ``selection`` is its :class:`~mixle_spark.model_selection.KSelection` (else None). ``coord``:
    the processes of an SPMD run (the root prints). ``label`` (what is fitted to what) starts the
    first progress line, printed once the data is encoded: a failure before that is the only line. A
    fit whose final checkpoint is in ``--checkpoint-dir`` returns without reading the data
    (``optimize`` finds it from the row count), and its timings say so (``encode`` 0), unless
    ``keep_statistics``: the model then gets its statistics (``model.statistics``, saved in
    model.json) from one more pass over the data.
    """
    keywords = {**options, **(reliability or {}), **backend_options, **coord.handle_options()}
    keywords["keep_statistics"] = keep_statistics
    # lines while encoding and seeding run long, until the fit's own progress starts (--print-iter 0: none)
    watch = StepWatch(out, PROG) if out is not None and options.get("print_iter") != 0 else None
    progress = _Progress(out, label, coord, watch)
    keywords["on_encoded"] = progress.encoded
    stream = progress if out is not None else None
    found = None
    with warnings.catch_warnings(record=True) as caught, watch or nullcontext():
        warnings.simplefilter("always", ConvergenceWarning)
        warnings.simplefilter("always", ModelSizeWarning)
        warnings.simplefilter("always", FitQualityWarning)
        warnings.simplefilter("always", SeedingFallbackWarning)
        if ks is None and forms is not None:  # the form alone: at the spec's number of components
            ks = [len(getattr(spec.estimator, "estimators", None) or [None])]
        if ks is not None:
            found = select_k(
                data, spec.estimator, ks=ks, criterion=criterion, forms=forms, trials=trials, out=stream,
                **keywords,
            )  # fmt: skip
            coord.say(str(found))
            model = found.model
            ll = model.fit_result.log_likelihood
        else:
            with _command_line_advice():
                if trials > 1:
                    ll, model = best_of(data, spec.estimator, trials=trials, out=stream, **keywords)
                else:
                    model = optimize(data, spec.estimator, out=stream, **keywords)
                    ll = model.fit_result.log_likelihood
    elapsed = time.perf_counter() - progress.started
    if progress.first is not None and not progress.written:
        coord.say(progress.first)  # quiet, or no progress line yet: after the fit, not before its checks
    _say_resumed(model, progress, reliability or {}, coord)
    if progress.encode_seconds is None:  # the checkpoint held this fit's result: no pass over the data
        timings = {"encode": 0.0, "em": elapsed}
    else:
        seeding = model.fit_result.seeding_seconds
        timings = {
            "encode": progress.encode_seconds,
            "seeding": seeding,
            "em": elapsed - progress.encode_seconds - seeding,
        }
    return model, ll, timings, report_warnings(caught, coord), found


def _say_resumed(model: Any, progress: _Progress, reliability: dict[str, Any], coord: Coordination) -> None:
    """That the fit resumed from a checkpoint and where, or that the checkpoints found held this fit
    on other data and it started afresh: one line a pipeline's log shows, unless the progress stream
    said it already (``--quiet`` or ``--print-iter 0`` has none; when it did, a line says when the
    checkpoint was written). summary.json has both (``long_fit.resumed_checkpoint_written_at``,
    ``long_fit.checkpoint_refit``)."""
    result, where = model.fit_result, reliability.get("checkpoint_dir")
    if progress.said_checkpoint:
        if result.resumed_from is not None and result.resumed_written_at is not None:
            coord.say(f"{PROG}: the checkpoint resumed from was written {result.resumed_written_at}")
        return
    if result.checkpoint_refit is not None:
        why = result.checkpoint_refit
        coord.say(f"{PROG}: checkpoint {where} held this fit on other data ({why}): fitted afresh")
    if result.resumed_from is not None:
        coord.say(f"{PROG}: resumed from checkpoint {where} at iteration {result.resumed_from}")


class _Progress:
    """The progress stream (``out``; None: ``--quiet``) and the line saying what is fitted and how
    many rows were encoded (``first``, made by :meth:`encoded`, the fit's ``on_encoded``), written
    before the fit's first progress line after the encoding: a fit that fails before making progress
    leaves its error as the only line on stderr."""

    def __init__(self, out: Any, label: str, coord: Coordination, watch: StepWatch | None = None) -> None:
        self.out, self.label, self.coord, self.watch = out, label, coord, watch
        if watch is not None:
            watch.step("encoding")
        self.started = time.perf_counter()
        self.encode_seconds: float | None = None
        self.first: str | None = None
        self.written = False
        self.said_checkpoint = False
        """Whether the stream showed a checkpoint note (resumed, or refitted on other data)."""

    def encoded(self, handle: EncodedData) -> None:
        self.encode_seconds = seconds = time.perf_counter() - self.started
        where = self.coord.where()
        self.first = f"{PROG}: fitting {self.label}: encoded {len(handle)} rows{where} in {seconds:.1f}s"
        if self.watch is not None:
            self.watch.step("seeding")

    def write(self, text: str) -> int:
        if self.watch is not None:
            self.watch.stop()  # the fit's own progress lines from here
        if self.first is not None and not self.written:
            self.written = True
            self.out.write(self.first + "\n")
        self.said_checkpoint = self.said_checkpoint or text.startswith(
            ("resuming from checkpoint", "checkpoint ")
        )
        return int(self.out.write(text))

    def flush(self) -> None:
        self.out.flush()


@contextmanager
def _command_line_advice() -> Iterator[None]:
    """A checkpoint of another fit: the error names the command line's ``--no-resume``."""
    try:
        yield
    except CheckpointMismatchError as err:
        if err.directory is None:
            raise
        raise CheckpointMismatchError.advising(err.directory, err.differences, "--no-resume") from None


def _columns(data: Any) -> list[str]:
    """The column names of the job's input: a Spark / Dask DataFrame, a pyarrow Table, a Ray Dataset
    or a Parquet path (the SPMD backends read it themselves)."""
    if isinstance(data, str):
        import pyarrow.dataset as pads

        return list(pads.dataset(data, format="parquet").schema.names)
    if hasattr(data, "column_names"):  # pyarrow
        return list(data.column_names)
    if hasattr(data, "columns"):  # Spark, Dask, pandas
        return [str(c) for c in data.columns]
    return list(data.schema().names)  # Ray


def starting(estimator: Any, reliability: dict[str, Any], path: str | None) -> dict[str, Any]:
    """``reliability`` (optimize's keywords), its ``--init-model`` checked against the spec: a mixture
    of as many components (SpecError naming both otherwise)."""
    start = reliability.get("prev_estimate")
    components = getattr(estimator, "estimators", None)
    if start is not None and components is not None and hasattr(start, "components"):
        if len(start.components) != len(components):
            raise SpecError(
                f"--init-model {path}: a mixture of {len(start.components)} components, but the spec's "
                f"has {len(components)}"
            )
    return reliability


def labelled(estimator: Any, label: str, data: Any) -> Any:
    """The spec's mixture fitted with ``--label-column label``: ``label_column`` set, and the column
    its components read named (``data_column``) when they read one unnamed column: the input's one
    column besides the label."""
    from mixle_spark.stats import MixtureEstimator

    if not isinstance(estimator, MixtureEstimator):
        raise SpecError(
            f"--label-column {label}: the model must be a mixture, got {type(estimator).__name__}"
        )
    columns = _columns(data)
    if label not in columns:
        raise SchemaError(
            f"--label-column {label}: column {label!r} not found; the input has columns {columns}"
        )
    data_column = None
    if dataclasses.replace(estimator, label_column=None, data_column=None).encoder().column_names() is None:
        rest = [c for c in columns if c != label]
        if len(rest) != 1:
            raise SpecError(
                f"--label-column {label}: the model reads one unnamed column, and the input has {rest} "
                "besides the label; give it only one, or a record model naming its columns"
            )
        data_column = rest[0]
    return dataclasses.replace(estimator, label_column=label, data_column=data_column)


def run(args: argparse.Namespace, sample: Sample | None = None, coord: Coordination = solo) -> dict[str, Any]:
    """Fit and write; returns the summary. Under SPMD every process runs this; the root writes."""
    t_start = time.perf_counter()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    # Before any data is read, refused paths cost nothing; a URI only the Spark session's Hadoop
    # filesystem serves is checked once the session is up, still before the data is read.
    later = args.backend == "spark" and any(needs_session(p) for p in _output_paths(args))
    if not later:
        coord.on_root(lambda: check_outputs(args))
    spec = None if args.infer_spec else coord.agree(lambda: load_spec(args.model))
    if spec is not None and args.backend == "spark" and not args.sample and args.label_column is None:
        check_fit_input(args.input, spec.estimator)  # a local input's columns, before Spark starts
    options = fit_options(args, spec)
    trials = int(options.pop("trials", 1))
    if args.init_model is not None:
        trials = 1  # one fit from that model: the spec's restarts are ways to start
    extra: dict[str, Any] = coord.summary()
    opening: dict[str, float] = {}
    data, spark, owned = open_input(args, extra, sample, opening)
    try:
        if later:
            coord.on_root(lambda: check_outputs(args))
        if spec is None:  # --infer-spec: one pass over the input chooses the spec (not under SPMD)
            spec, inferred = infer_fit_spec(data, args, sys.stderr, opening)  # the reasons: not progress
            extra["inferred_spec"] = inferred.to_dict()
        if args.label_column is not None:
            spec = dataclasses.replace(spec, estimator=labelled(spec.estimator, args.label_column, data))
        out = None if args.quiet or not coord.is_root else sys.stderr
        model, ll, timings, caught, found = fit_model(
            data,
            spec,
            options,
            trials,
            backend_options(args),
            out,
            starting(spec.estimator, reliability_options(args), args.init_model),
            args.ks,
            args.criterion,
            coord,
            f"{args.model or 'the inferred spec'} to {args.input} (backend {args.backend})",
            keep_statistics=args.statistics,
            forms=args.form_list,
        )
        if found is not None:
            extra["model_selection"] = found.to_dict()
        extra["warnings"] = caught
        extra["compute"] = compute_summary(options)
        extra["long_fit"] = long_fit_summary(args, model.fit_result)
        extra["statistics"] = statistics_summary(model.statistics)
        summary = build_summary(args, model, ll, {**options, "trials": trials}, extra)

        def write() -> None:
            write_outputs(args, model, summary, data, {**opening, **timings}, started_at, t_start)

        coord.on_root(write)
    finally:
        if spark is not None and owned:
            spark.stop()
    if coord.is_root:
        print(describe_model(model))
        print(
            f"rows {summary['rows']}, log-likelihood {ll:.6f} "
            f"({summary['log_likelihood_per_row']:.4f} per row), BIC {summary['bic']:.1f}, "
            f"{summary['iterations']} iterations, converged={summary['converged']}, "
            f"{summary['timings']['total']:.1f}s"
        )
        print(model.fit_result.trace.summary(times=False), file=sys.stderr)
        print(f"{PROG}: timings: {timings_line(summary['timings'])}", file=sys.stderr)
        written = ["model.json", "summary.json", "trace.jsonl", *(["report.html"] if args.report else [])]
        written += [INFERRED_SPEC_FILE] if args.infer_spec else []
        shown = [shown_inside(args.output, name) for name in written]
        print(f"wrote {', '.join(shown[:-1])} and {shown[-1]}")
    return summary


def write_outputs(
    args: argparse.Namespace,
    model: Any,
    summary: dict[str, Any],
    data: Any,
    timings: dict[str, float],
    started_at: str,
    t_start: float,
) -> None:
    """model.json, summary.json, trace.jsonl (and report.html) into a staging directory renamed
    into ``args.output``: a failed write leaves the previous output whole.

    ``summary`` gets the segment profile (``segments``: :func:`mixle_spark.profile.segment_profile`;
    with ``--report`` its sizes and certainty come from one scoring pass over the whole input) and
    ``timings`` (:data:`mixle_spark.summary.TIMINGS`); the report shows the same timings (all but its
    own writing and the total, which come after it)."""
    assignments, page = None, None
    if args.report:
        t0 = time.perf_counter()
        source = path_dataset(data) if isinstance(data, str) else data  # an SPMD path: planned once
        assignments = assignment_counts(model, source)
        timings["scoring"] = time.perf_counter() - t0
    summary["segments"] = segment_profile(model, assignments)
    summary["timings"] = timings  # the dict the report reads: total and report are added below
    if args.report:
        from mixle_spark import report

        t0 = time.perf_counter()
        sample = report_sample(source, float(summary["rows"]))
        page = report.report_html(model, sample=sample, summary=summary)
        timings["report"] = time.perf_counter() - t0
    layout = fit_output(args.output, args.checkpoint_dir, args.trace)
    with publish_directory(resolve(args.output, "--output"), args.overwrite, layout) as staging:
        save_model(model, staging / "model.json")
        if "inferred_spec" in summary:
            (staging / INFERRED_SPEC_FILE).write_text(inferred_spec_text(model, summary["inferred_spec"]))
        model.fit_result.trace.to_jsonl(staging / "trace.jsonl")
        if page is not None:
            (staging / "report.html").write_text(page, encoding="utf-8")
        timings["total"] = time.perf_counter() - t_start
        summary["started_at"] = started_at
        summary["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        (staging / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")


def _output_paths(args: argparse.Namespace) -> list[str]:
    return [p for p in (args.output, args.checkpoint_dir, args.trace) if p is not None]


def check_outputs(args: argparse.Namespace) -> None:
    """Every path the fit job writes, checked before the fit: ``--output`` absent, empty or (with
    ``--overwrite``) an earlier output of the job, the run's checkpoint directory and live trace
    allowed inside it; no symbolic link; each place writable (a parent that is a file, or one this
    process cannot write in, is refused now, not after the fit); a URI served by a filesystem here."""
    layout = fit_output(args.output, args.checkpoint_dir, args.trace)
    check_location_free(resolve(args.output, "--output"), args.overwrite, layout)
    check_writable(args.output, "--output")
    if args.checkpoint_dir is not None:
        CheckpointStore(args.checkpoint_dir)  # a link, a URI no filesystem serves: refused
        check_writable(args.checkpoint_dir, "--checkpoint-dir")
    if args.trace is not None:
        check_trace_path(args.trace, "--trace")
        check_writable(args.trace, "--trace")


def main(argv: list[str] | None = None, sample: Sample | None = None) -> int:
    """Entry point: parse, run, map failures to exit codes (see the module docstring)."""
    args = resolve_args(build_parser(sample is not None), argv, sample)
    if args.update_from is not None:
        if args.backend in SPMD_BACKENDS:
            return run_spmd(PROG, args.backend, lambda coord: run_update(args, coord))
        return run_job(PROG, lambda: run_update(args), verbose=args.verbose)
    if args.backend in SPMD_BACKENDS:
        return run_spmd(PROG, args.backend, lambda coord: run(args, sample, coord))
    return run_job(PROG, lambda: run(args, sample), verbose=args.verbose)


if __name__ == "__main__":
    raise SystemExit(main())
