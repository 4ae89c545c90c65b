"""The entry point of the ``mpi`` backend: ``mpiexec -n N python -m mixle_spark.parallel.backends.mpi ...``.

Every rank runs :func:`main`; the data is read in shares (see :mod:`mixle_spark.parallel.backends.mpi`), the root
writes ``model.json`` and ``summary.json`` (atomically, into ``--output``) and prints progress on its
stderr. Exit codes: 0 success; 2 bad arguments or bad input; 1 any other failure.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mixle_spark.parallel.backends.mpi import MPIEncodedData, agree, on_root, require_mpi

__all__ = ["PROG", "build_parser", "main"]

PROG = "mixle_spark.parallel.backends.mpi"


def build_parser() -> Any:
    """The command line of ``python -m mixle_spark.parallel.backends.mpi`` (run it under ``mpiexec``)."""
    from mixle_spark._cli import JobArgumentParser

    parser = JobArgumentParser(
        prog=PROG,
        description="Fit a model spec by EM over MPI ranks; the root writes model.json and summary.json.",
    )
    parser.add_argument("--input", required=True, help="Parquet file / directory or Delta table path")
    parser.add_argument("--model", required=True, help="model spec JSON (conf/models/*.json)")
    parser.add_argument("--output", required=True, help="output directory for model.json and summary.json")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    parser.add_argument("--max-its", type=int, help="most EM iterations")
    parser.add_argument("--delta", type=float, help="stop when the log-likelihood gain is below this")
    parser.add_argument("--seed", type=int, help="initialization seed")
    parser.add_argument("--init-p", type=float, help="fraction of rows used for the initial model")
    parser.add_argument("--trials", type=int, help="random restarts (the best log-likelihood wins)")
    parser.add_argument("--num-workers", type=int, help="threads per rank for the E-step")
    parser.add_argument("--quiet", action="store_true", help="no per-iteration progress on stderr")
    return parser


def _fit_and_write(args: Any, comm: Any) -> None:
    import json
    import sys
    import time
    import warnings

    from mixle_spark._cli import atomic_directory, check_output_free
    from mixle_spark._version import __version__
    from mixle_spark.errors import ConvergenceWarning
    from mixle_spark.estimation import best_of, optimize
    from mixle_spark.spec import load_spec, save_model
    from mixle_spark.summary import count_free_parameters, information_criteria

    started = time.perf_counter()
    is_root = comm.Get_rank() == 0
    on_root(comm, 0, lambda: check_output_free(__import__("pathlib").Path(args.output), args.overwrite))
    spec = agree(comm, lambda: load_spec(args.model))
    options = dict(spec.fit)
    for key in ("max_its", "delta", "seed", "init_p", "trials"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    trials = int(options.pop("trials", 1))
    out: Any = sys.stderr if is_root and not args.quiet else None
    with MPIEncodedData(args.input, spec.estimator, comm=comm, num_workers=args.num_workers) as handle:
        if is_root:
            print(f"{PROG}: {len(handle)} rows over {comm.Get_size()} ranks", file=sys.stderr)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            if trials > 1:
                ll, model = best_of(handle, spec.estimator, trials=trials, out=out, **options)
            else:
                model = optimize(handle, spec.estimator, out=out, **options)
                ll = model.fit_result.log_likelihood
    notes = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    result = model.fit_result
    rows = result.history[-1].nobs
    n_params = count_free_parameters(model)
    summary = {
        "format": "mixle_spark.fit_summary",
        "format_version": 1,
        "mixle_spark_version": __version__,
        "input": args.input,
        "model_spec": args.model,
        "backend": "mpi",
        "ranks": comm.Get_size(),
        "rows": rows,
        "iterations": result.n_iter,
        "converged": result.converged,
        "stopped_because": result.stopped_because,
        "log_likelihood": ll,
        "free_parameters": n_params,
        **information_criteria(ll, n_params, rows),
        "seed": result.seed,
        "fit_options": {**options, "trials": trials},
        "history": [
            {"iteration": r.iteration, "log_likelihood": r.log_likelihood, "gain": r.gain, "rows": r.nobs}
            for r in result.history
            if np.isfinite(r.log_likelihood)
        ],
        "warnings": notes,
    }

    def write() -> None:
        for note in notes:
            print(f"{PROG}: warning: {note}", file=sys.stderr)
        with atomic_directory(args.output, overwrite=args.overwrite) as staging:
            save_model(model, staging / "model.json")
            summary["seconds"] = time.perf_counter() - started
            (staging / "summary.json").write_text(json.dumps(summary, indent=2, default=float) + "\n")
        print(
            f"{PROG}: wrote {args.output}/model.json and summary.json (log-likelihood {ll:.6f})",
            file=sys.stderr,
        )

    on_root(comm, 0, write)


def main(argv: list[str] | None = None, comm: Any = None) -> int:
    """Entry point on every rank: 0 success, 2 bad arguments or input, 1 other failures.

    Errors the ranks agreed on are printed once, by the root. Any other error is printed with its
    traceback by the rank that raised it; if the other ranks do not all reach the error handler
    within ``MIXLE_SPARK_MPI_ABORT_SECONDS`` (default 30), the job is aborted (``comm.Abort``).
    """
    import os
    import sys
    import time
    import traceback

    from mixle_spark._cli import error_line, exit_code

    args = build_parser().parse_args(argv)
    comm = require_mpi().COMM_WORLD if comm is None else comm
    try:
        _fit_and_write(args, comm)
        return 0
    except Exception as err:
        code = exit_code(err)
        agreed = getattr(err, "mpi_agreed", False)
        if not agreed:
            print(f"{PROG}: error on rank {comm.Get_rank()}: {error_line(err)}", file=sys.stderr)
            traceback.print_exc(file=sys.stderr)
            # Did every rank fail too? Wait for them without blocking; abort the job if not.
            request = comm.Ibarrier()
            deadline = time.monotonic() + float(os.environ.get("MIXLE_SPARK_MPI_ABORT_SECONDS", "30"))
            while not request.Test():
                if time.monotonic() > deadline:
                    sys.stderr.flush()
                    comm.Abort(code)
                time.sleep(0.01)
        elif comm.Get_rank() == 0:
            print(f"{PROG}: error: {error_line(err)}", file=sys.stderr)
            if os.environ.get("MIXLE_SPARK_TRACEBACK"):
                traceback.print_exc(file=sys.stderr)
        return code
