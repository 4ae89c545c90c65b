"""The fit job's command line: its options, their checks, and the fit, reliability and backend
options they become (:mod:`mixle_spark.cli.fit` runs the job; its ``--update-from`` mode's flags are
:mod:`~mixle_spark.cli._update_arguments`'s)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mixle_spark._checks import field_check
from mixle_spark.cli._common import EXIT_BAD_INPUT, JobArgumentParser, error_line
from mixle_spark.cli._compute import add_compute_arguments, check_compute_arguments, checked_compute
from mixle_spark.cli._engines import ENGINE_BACKENDS, add_engine_addresses, check_engine_addresses
from mixle_spark.cli._infer import refuse_with_infer_spec
from mixle_spark.cli._spmd import SPMD_BACKENDS
from mixle_spark.cli._update_arguments import add_update_arguments, check_update_arguments
from mixle_spark.em.options import TOL, option_check
from mixle_spark.em.sdc_audit import SDCAudit
from mixle_spark.em.seeding import INIT_MODES
from mixle_spark.errors import CheckpointStoreError, SpecError
from mixle_spark.estimation import ON_DEGENERATE, FitOptions
from mixle_spark.io import check_input_exists, parse_conf
from mixle_spark.model_selection import parse_forms, parse_ks
from mixle_spark.parallel.backends.registry import CONTROL_CHECKS
from mixle_spark.spec import FIT_OPTIONS, ModelSpec, load_model

__all__ = [
    "PROG",
    "Sample",
    "backend_options",
    "build_parser",
    "fit_options",
    "reliability_options",
    "resolve_args",
]

PROG = "em_fit"


@dataclass(frozen=True)
class Sample:
    """The bundled sample a job fits when run without ``--input`` / ``--model``: its data (Parquet,
    read as it is), spec, default output, and ``delta_table(spark)`` giving it as a Delta table path
    (``--sample-delta``: the Delta round trip)."""

    data: Path
    spec: Path
    output: Path
    delta_table: Callable[[Any], str]


def _flag(option: str, metavar: str = "integer", expected: str | None = None) -> Any:
    """The argparse ``type`` of a fit option's flag: the option's declared check
    (:func:`~mixle_spark.em.options.option_check`)."""
    return option_check(option).argument(metavar, expected)


def _control(name: str) -> Any:
    """The argparse ``type`` of a backend control's flag: the registry's declared check."""
    return CONTROL_CHECKS[name].argument("integer")


def _audit(name: str) -> Any:
    """The argparse ``type`` of an audit flag: :class:`SDCAudit`'s declared check."""
    return field_check(SDCAudit, name).argument()


def build_parser(sample: bool = False) -> argparse.ArgumentParser:
    """The command line (see the module docstring); ``sample``: the job has a bundled sample."""
    parser = JobArgumentParser(
        prog=PROG,
        description="Fit a mixle_spark model spec to a table by EM; write model.json and summary.json.",
        epilog="With no arguments: fit conf/models/sample.json to the bundled sample on local[*]."
        if sample
        else None,
    )
    io = parser.add_argument_group("input and output")
    io.add_argument("--input", help="Delta/Parquet/CSV/JSON path or metastore table name")
    io.add_argument("--model", help="model spec JSON (conf/models/*.json)")
    io.add_argument(
        "--infer-spec",
        action="store_true",
        help="instead of --model: infer a record spec from --input (each column's family by BIC, "
        "docs/infer-spec.md), write it as spec.json beside model.json, and fit it (a mixture of it "
        "with --k)",
    )
    io.add_argument("--output", help="output directory for model.json and summary.json")
    io.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    io.add_argument(
        "--report", action="store_true", help="also write report.html (figures need mixle-spark[plot])"
    )
    if sample:
        io.add_argument(
            "--sample-delta",
            action="store_true",
            help="without --input: copy the bundled sample into a local Delta table (once) and fit that, "
            "not the Parquet file itself (Spark with Delta; slower to start)",
        )
    io.add_argument(
        "--no-statistics",
        dest="statistics",
        action="store_false",
        help="do not keep the sufficient statistics in model.json (kept by default, at the cost of one "
        "more pass over the data, so that --update-from can fold new rows into the model later)",
    )
    fit = parser.add_argument_group("fit (defaults: the spec's fit section)")
    fit.add_argument(
        "--max-its",
        type=_flag("max_its"),
        help="most EM iterations (0: the starting model, not refined); with --update-from, most passes "
        "over the new rows (>= 1, default 5)",
    )
    fit.add_argument(
        "--tol",
        type=_flag("tol", "number"),
        help="stop when the log-likelihood gains less than this per row (default 1e-6 unless the spec "
        "gives delta; with --update-from, per new row)",
    )
    fit.add_argument(
        "--delta",
        type=_flag("delta", "number"),
        help="instead of --tol: stop when the total log-likelihood gains less than this (with "
        "--update-from: this times the new rows' log-likelihood)",
    )
    fit.add_argument("--seed", type=_flag("seed", expected="an integer"), help="initialization seed")
    fit.add_argument(
        "--init",
        choices=INIT_MODES,
        help="how EM starts: kmeans|| seeding (default) or random responsibilities over a row sample",
    )
    fit.add_argument("--init-steps", type=_flag("init_steps"), help="k-means|| rounds (default 2)")
    fit.add_argument(
        "--init-p", type=_flag("init_p", "number"), help="fraction of rows used for a random initial model"
    )
    fit.add_argument("--trials", type=_flag("trials"), help="random restarts (the best log-likelihood wins)")
    fit.add_argument(
        "--print-iter", type=_flag("print_iter"), help="print progress every N iterations (0: never)"
    )
    fit.add_argument(
        "--k",
        metavar="KS",
        help="choose the number of components: fit each candidate (2:12 or 2,4,8) and keep the best "
        "by --criterion (the spec's mixture component, or hidden Markov state, is repeated k times)",
    )
    fit.add_argument(
        "--init-model",
        metavar="PATH",
        help="start EM from this fitted model (a model.json of the spec's shape) instead of seeding",
    )
    fit.add_argument(
        "--label-column",
        metavar="NAME",
        help="a column of known components (0..k-1, null where unknown): those rows keep their "
        "component while the mixture is fitted (partly labelled data)",
    )
    fit.add_argument(
        "--forms",
        metavar="FORMS",
        help="also choose the covariance form of a Gaussian mixture: fit each of these forms (all, or "
        "e.g. EII,VVI,EEE,VVV or tied,full) with every --k (default: the spec's k) and keep the best",
    )
    fit.add_argument(
        "--criterion", choices=("bic", "aic"), default="bic", help="how --k and --forms choose (default: bic)"
    )
    run = parser.add_argument_group("execution")
    run.add_argument(
        "--backend",
        choices=("spark", "local", *ENGINE_BACKENDS, *SPMD_BACKENDS),
        default="spark",
        help="default: spark; dask / ray: a Dask cluster / Ray runtime reading Parquet; "
        "mpi / torchrun under mpiexec / torchrun",
    )
    add_engine_addresses(run)
    run.add_argument(
        "--num-workers",
        type=_control("num_workers"),
        help="threads per process for the E-step (local, mpi, torchrun); dask: the local cluster's "
        "processes; ray: the local runtime's CPUs",
    )
    run.add_argument(
        "--partitions",
        type=_control("num_chunks"),
        help="repartition the encoded data (num_chunks; default: one partition per task slot)",
    )
    add_compute_arguments(run)
    run.add_argument(
        "--no-resident",
        action="store_true",
        help="one Spark job per E-step, not resident tasks holding every task slot for the fit "
        "(for a cluster shared with other jobs; keeps the input's partitioning)",
    )
    run.add_argument("--depth", type=_control("depth"), help="treeAggregate depth (spark; default 2)")
    run.add_argument("--master", help="Spark master (default: spark-submit's, $MASTER or local[*])")
    run.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting (repeatable)"
    )
    run.add_argument("--quiet", action="store_true", help="no per-iteration progress on stderr")
    run.add_argument(
        "--verbose", action="store_true", help="Spark's console output and a failure's traceback on stderr"
    )
    run.add_argument("--trace", metavar="PATH", help="also write the EM trace live to this JSON-lines file")
    long = parser.add_argument_group("long fits")
    long.add_argument("--checkpoint-dir", metavar="DIR", help="checkpoint the fit here and resume from it")
    long.add_argument(
        "--checkpoint-every",
        type=_flag("checkpoint_every"),
        default=FitOptions.checkpoint_every,
        metavar="N",
        help="checkpoint every N iterations",
    )
    long.add_argument(
        "--no-resume", dest="resume", action="store_false", help="discard existing checkpoints, start afresh"
    )
    long.add_argument(
        "--checkpoint-key-file",
        metavar="FILE",
        help="authenticate the checkpoints with the key in FILE (HMAC-SHA256; default: "
        "$MIXLE_SPARK_CHECKPOINT_KEY, else checkpoints are checked for damage only)",
    )
    long.add_argument(
        "--on-degenerate",
        choices=ON_DEGENERATE,
        default=FitOptions.on_degenerate,
        help="a mixture component whose M-step fails: stop (default), floor or reseed it",
    )
    long.add_argument(
        "--audit-every",
        type=_audit("every"),
        metavar="N",
        help="audit partition statistics every N iterations",
    )
    long.add_argument(
        "--audit-fraction",
        type=_audit("fraction"),
        default=SDCAudit.fraction,
        metavar="F",
        help=f"fraction of the partitions recomputed per audit (default {SDCAudit.fraction})",
    )
    add_update_arguments(parser)
    return parser


def resolve_args(
    parser: argparse.ArgumentParser, argv: list[str] | None, sample: Sample | None = None
) -> argparse.Namespace:
    """Parse ``argv`` and fill in the sample defaults; argument conflicts, and a local ``--input``
    that does not exist (but under mpi / torchrun), exit with code 2 (one line on stderr)."""
    args = parser.parse_args(argv)
    if args.tol is not None and args.delta is not None:
        parser.error("give one stopping rule: --tol (a gain per row) or --delta, not both")
    check_update_arguments(parser, args, argv)
    if args.infer_spec:
        refuse_with_infer_spec(parser, args)
    elif args.update_from is None:
        if sample is None and (args.input is None or args.model is None):
            parser.error("--input and --model are required")
        if (args.input is None) != (args.model is None):
            parser.error("--input and --model go together (give neither to fit the bundled sample)")
    args.sample = args.input is None
    args.sample_delta = getattr(args, "sample_delta", False)
    if args.sample_delta and not args.sample:
        parser.error("--sample-delta applies to the bundled sample (without --input and --model)")
    if args.sample_delta and args.backend != "spark":
        parser.error("--sample-delta needs --backend spark (Delta tables are read with Spark)")
    if args.sample:
        assert sample is not None
        args.model = str(sample.spec)
        if args.output is None:
            args.output, args.overwrite = str(sample.output), True
    elif args.output is None:
        parser.error("--output is required with --input")
    if args.sample and args.backend in SPMD_BACKENDS:
        parser.error(
            f"--backend {args.backend} needs --input and --model (a Parquet path each process reads)"
        )
    if args.num_workers is not None and args.backend == "spark":
        parser.error(
            "--num-workers applies to --backend local, dask, ray, mpi and torchrun (spark: spark.task.cpus)"
        )
    check_engine_addresses(parser, args)
    check_compute_arguments(parser, args)
    if args.backend != "spark":
        given = [f"--{n}" for n in ("depth", "master") if getattr(args, n) is not None]
        given += ["--conf"] if args.conf else []
        given += ["--no-resident"] if args.no_resident else []
        if given:
            parser.error(
                f"{', '.join(given)} only appl{'ies' if len(given) == 1 else 'y'} to --backend spark"
            )
    if args.checkpoint_key_file is not None and args.checkpoint_dir is None:
        parser.error("--checkpoint-key-file needs --checkpoint-dir")
    args.ks = None
    if args.k is not None:
        try:
            args.ks = parse_ks(args.k)
        except SpecError as err:
            parser.error(f"--k: {err}")
        _single_fit_only(parser, args, "--k")
    if args.init_model is not None:
        clash = [flag for flag, given in (("--k", args.k), ("--forms", args.forms)) if given is not None]
        if args.trials is not None and args.trials > 1:
            clash.append("--trials")
        if clash:
            parser.error(
                f"--init-model starts one fit from that model; {', '.join(clash)} would start several"
            )
    args.form_list = None
    if args.forms is not None:
        try:
            args.form_list = parse_forms(args.forms)
        except SpecError as err:
            parser.error(f"--forms: {err}")
        _single_fit_only(parser, args, "--forms")
    try:
        args.spark_conf = parse_conf(args.conf)
    except ValueError as err:
        parser.error(str(err))
    # A mistyped local path fails now, not once Spark (or Dask, Ray) has started. Under mpi /
    # torchrun every process would print this line: there the processes' read reports it, once.
    if not args.sample and args.backend not in SPMD_BACKENDS:
        try:
            check_input_exists(args.input)
        except FileNotFoundError as err:
            parser.exit(EXIT_BAD_INPUT, f"{parser.prog}: error: {error_line(err)}\n")
    return args


def _single_fit_only(parser: argparse.ArgumentParser, args: argparse.Namespace, flag: str) -> None:
    """Refuse, naming them, the flags of a single fit (a checkpoint directory, a trace) beside ``flag``,
    which fits several models."""
    clash = [f"--{n.replace('_', '-')}" for n in ("checkpoint_dir", "trace") if getattr(args, n) is not None]
    if clash:
        parser.error(f"{flag} fits several models; {', '.join(clash)} apply to a single fit")


def fit_options(args: argparse.Namespace, spec: ModelSpec | None) -> dict[str, Any]:
    """The spec's fit options overridden by the command line (a stopping rule given there, ``--tol``
    or ``--delta``, replaces the spec's); without a rule in either, ``tol`` at its default. ``spec``
    is None for ``--infer-spec`` (no fit section: the command line's options and the defaults).
    ``engine`` / ``precision`` (``--engine`` / ``--precision`` over the spec's) are checked together
    here, before any data is read (ValueError or ImportError, one line)."""
    options = dict(spec.fit) if spec is not None else {}
    if args.tol is not None or args.delta is not None:
        options.pop("tol", None)
        options.pop("delta", None)
    for key in FIT_OPTIONS:
        value = getattr(args, key)
        if value is not None:
            options[key] = value
    if "tol" not in options and "delta" not in options:
        options["tol"] = TOL
    options.setdefault("init", FitOptions.init)
    checked_compute(options)  # --engine / --precision with the spec's: before any data is read
    return options


def reliability_options(args: argparse.Namespace) -> dict[str, Any]:
    """``optimize``'s checkpoint, degenerate-component, audit and live-trace keywords from ``args``,
    and its starting model (``--init-model``)."""
    options: dict[str, Any] = {"on_degenerate": args.on_degenerate}
    if args.checkpoint_dir is not None:
        options.update(
            checkpoint_dir=args.checkpoint_dir,
            checkpoint_every=args.checkpoint_every,
            resume=args.resume,
            on_other_data="refit",  # a scheduled run on new data fits it; never yesterday's model
        )
    if args.checkpoint_key_file is not None:
        options["checkpoint_key"] = read_key_file(args.checkpoint_key_file)
    if args.audit_every is not None:
        options["audit"] = SDCAudit(every=args.audit_every, fraction=args.audit_fraction)
    if args.trace is not None:
        options["trace_path"] = args.trace
    if args.init_model is not None:
        options["prev_estimate"] = load_model(args.init_model)
    return options


def read_key_file(path: str) -> bytes:
    """The key in ``path`` (its bytes, less one trailing newline); refused when it is readable by
    other users, as ssh refuses a private key."""
    target = Path(path)
    if not target.is_file():
        raise FileNotFoundError(f"--checkpoint-key-file {path}: no such file")
    mode = target.stat().st_mode & 0o777
    if mode & 0o077:
        raise CheckpointStoreError(
            f"--checkpoint-key-file {path}: readable by other users (mode {mode:04o}); chmod 600 it"
        )
    key = target.read_bytes()
    return key[:-1] if key.endswith(b"\n") else key


def backend_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {"backend": args.backend}
    for flag, key in (
        ("partitions", "num_chunks"),
        ("depth", "depth"),
        ("num_workers", "num_workers"),
        ("engine", "engine"),
        ("precision", "precision"),
    ):
        if flag == "num_workers" and args.backend in ENGINE_BACKENDS:
            continue  # the local cluster's processes / runtime's CPUs (open_*_input), not E-step threads
        if getattr(args, flag) is not None:
            options[key] = getattr(args, flag)
    if args.no_resident:
        options["resident"] = False
    return options
