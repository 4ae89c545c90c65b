"""Fit a model spec to a table by EM and write the fitted model as JSON.

    python jobs/em_fit.py --input data/customers_sample.parquet \
        --model conf/models/customers.json --output output/customers_model.json

Input: a Parquet file or directory, a CSV file, or a JSON-lines file. The model spec is a JSON file
(see ``conf/models/``); its ``fit`` section gives defaults that command-line options override.
Exit code 0 only on success; on failure nothing is written and the error is printed in one line.
(This job runs on the local backend; the Spark backend plugs in through ``--backend`` when present.)
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from mixle_spark.errors import MixleError
from mixle_spark.estimation import best_of, optimize
from mixle_spark.spec import load_spec, save_model
from mixle_spark.summary import describe_model


def read_table(path: str) -> pa.Table:
    """Read a Parquet file/directory, CSV or JSON-lines file into an Arrow table."""
    source = Path(path)
    if not source.exists():
        raise FileNotFoundError(f"input not found: {source}")
    suffix = source.suffix.lower()
    if suffix == ".csv":
        import pyarrow.csv as pacsv

        return pacsv.read_csv(source)
    if suffix in (".json", ".jsonl", ".ndjson"):
        import pyarrow.json as pajson

        return pajson.read_json(source)
    import pyarrow.parquet as pq

    return pq.read_table(source)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Fit a mixle_spark model spec to a table by EM.")
    parser.add_argument("--input", required=True, help="Parquet file/directory, CSV or JSON-lines file")
    parser.add_argument("--model", required=True, help="model spec JSON (see conf/models/)")
    parser.add_argument("--output", required=True, help="where to write the fitted model (JSON)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    parser.add_argument("--backend", default="local", help="encoded-data backend (default: local)")
    parser.add_argument("--max-its", type=int, help="most EM iterations (default: the spec's fit.max_its)")
    parser.add_argument("--delta", type=float, help="stop when the log-likelihood gain is below this")
    parser.add_argument("--seed", type=int, help="initialization seed")
    parser.add_argument("--init-p", type=float, help="fraction of rows used for the initial model")
    parser.add_argument("--trials", type=int, help="random restarts (best log-likelihood wins)")
    parser.add_argument("--quiet", action="store_true", help="no per-iteration progress")
    return parser


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Fit and save; returns a small summary dict."""
    output = Path(args.output)
    if output.exists() and not args.overwrite:
        raise FileExistsError(f"output {output} exists; pass --overwrite to replace it")
    spec = load_spec(args.model)
    fit = dict(spec.fit)
    for key in ("max_its", "delta", "seed", "init_p", "trials"):
        value = getattr(args, key)
        if value is not None:
            fit[key] = value
    trials = int(fit.pop("trials", 1))
    table = read_table(args.input)
    out = None if args.quiet else sys.stdout
    started = time.perf_counter()
    print(f"fitting {args.model} to {args.input} ({table.num_rows} rows, backend {args.backend})")
    if trials > 1:
        ll, model = best_of(table, spec.estimator, trials=trials, out=out, backend=args.backend, **fit)
    else:
        model = optimize(table, spec.estimator, out=out, backend=args.backend, **fit)
        ll = model.fit_result.log_likelihood
    seconds = time.perf_counter() - started
    save_model(model, output, overwrite=args.overwrite)
    result = model.fit_result
    print(describe_model(model))
    print(
        f"log-likelihood {ll:.6f} ({ll / table.num_rows:.4f} per row), "
        f"{result.n_iter} iterations, converged={result.converged}, {seconds:.1f}s"
    )
    print(f"wrote {output}")
    return {"log_likelihood": ll, "rows": table.num_rows, "output": str(output)}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        run(args)
    except (MixleError, FileNotFoundError, FileExistsError, ValueError, TypeError) as err:
        print(f"em_fit: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
