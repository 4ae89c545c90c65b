"""``python jobs/benchmark.py --precision``: float32 against float64 storage and compute, per backend.

For the local backend, Spark classic (``local[2]``, resident tasks) and Spark Connect (a local
Connect server, the job path): the same data (``--rows``, default 1e6; d = 10, k = 16, full
covariance) encoded once at each precision, then ``--iterations`` EM steps (default 10) from one
start, alternating float64 and float32 within each round (the machine is shared: they are compared
within a round). Printed per backend: seconds per iteration at each precision (the median over the
steps after the first, then over the rounds) and their ratio (target >= 1.6x), the mean
log-likelihoods and their relative difference (target <= 1e-5), and the bytes per row of the encoded
values at each precision (the pickled encoded chunks, without row ids and weights; Spark's cached
chunk cells, which add the row ids, are printed too).

Each backend runs in a process of its own (a process holds a classic Spark session or a Connect
one, not both), started by this script with ``--one BACKEND``; it prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import time
import warnings
from typing import Any

import numpy as np
import pyarrow as pa

BACKENDS = ("local", "spark", "connect")
PRECISIONS = ("float64", "float32")
SPEED_TARGET = 1.6
LL_TARGET = 1e-5


def parse_backends(text: str) -> list[str]:
    """``--precision-backends``: comma-separated names of :data:`BACKENDS`, in that order."""
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in BACKENDS]
    if unknown or not names:
        raise ValueError(f"--precision-backends: expected names among {', '.join(BACKENDS)}, got {text!r}")
    return [name for name in BACKENDS if name in names]


def _encoded_bytes(encoded: Any) -> int:
    """Pickled bytes of encoded chunks' values (``enc`` of each chunk)."""
    return sum(len(pickle.dumps(enc, protocol=5)) for enc in encoded)


def _handle(backend: str, x: np.ndarray, est: Any, precision: str, spark: Any) -> tuple[Any, dict[str, int]]:
    """The data encoded by ``backend`` at ``precision``, and its stored bytes."""
    from mixle_spark.parallel import encoded_data

    if backend == "local":
        handle = encoded_data(x, est, backend="local", precision=precision)
        return handle, {"encoded": _encoded_bytes(enc for _a, _b, enc in handle.chunks)}
    from mixle_spark.parallel.backends.spark._chunks import chunk_reader
    from mixle_spark.parallel.backends.spark._common import _payload_batch

    d = x.shape[1]
    flat = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), d).cast(pa.list_(pa.float64()))
    df = spark.createDataFrame(pa.table({"x": flat}))
    handle = encoded_data(df, est, precision=precision)
    read = chunk_reader(handle.encoder)

    def sizes(batches: Any) -> Any:
        yield _payload_batch(_encoded_bytes(enc for enc, _w, _ids in read(batches)))

    cells = int(handle.frame.selectExpr("sum(length(chunk)) AS b").collect()[0]["b"])
    return handle, {"encoded": sum(handle.jobs.collect(sizes)), "cells": cells}


def _session(backend: str) -> Any:
    """None for the local backend, else benchmark.py's ``local[2]`` session (classic, or Connect)."""
    if backend == "local":
        return None
    from benchmark import _benchmark_session

    return _benchmark_session(connect=backend != "spark")


def run_one(backend: str, rows: int, dim: int, k: int, its: int, seed: int, rounds: int) -> dict[str, Any]:
    """One backend's measurements (see the module docstring), as printed by ``--one``."""
    from benchmark import REG, _mixture_start, make_data, starting_point

    from mixle_spark.estimation import iterate
    from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator

    x, _ = make_data(rows, dim, k, seed)
    start = _mixture_start(starting_point(x, k, seed))
    est = MixtureEstimator([MultivariateGaussianEstimator(min_covar=REG, ridge=0.0)] * k)
    spark = _session(backend)
    handles, stored = {}, {}
    for precision in PRECISIONS:
        handles[precision], stored[precision] = _handle(backend, x, est, precision, spark)
    seconds: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    ll: dict[str, float] = {}
    try:
        for _round in range(rounds):
            for precision in PRECISIONS:
                model = iterate(handles[precision], est, max_its=its, prev_estimate=start, print_iter=0)
                history = model.fit_result.history
                seconds[precision].append(statistics.median(h.seconds for h in history[1:its]))
                ll[precision] = history[its - 1].log_likelihood / rows
        resident = {p: getattr(h, "resident_steps", None) for p, h in handles.items()}
    finally:
        for handle in handles.values():
            handle.close()
        if spark is not None:
            spark.stop()
    return {
        "backend": backend,
        "seconds": {p: statistics.median(v) for p, v in seconds.items()},
        "rounds": seconds,
        "ll": ll,
        "resident_steps": resident,
        "bytes_per_row": {p: {kind: b / rows for kind, b in stored[p].items()} for p in PRECISIONS},
    }


def _child(backend: str, args: list[str]) -> dict[str, Any]:
    """``--one backend`` run in a process of its own; its ``RESULT`` line."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    command = [sys.executable, os.path.join(here, "benchmark_precision.py"), "--one", backend, *args]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=7200)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"the {backend} precision benchmark failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(line[len("RESULT ") :])
    return result


def report(results: list[dict[str, Any]], rows: int, dim: int, k: int, its: int, rounds: int) -> bool:
    """Print the table; whether every backend met both targets."""
    print(
        f"float32 vs float64: n={rows}, d={dim}, k={k}, full covariance, {its} iterations from one start, "
        f"{rounds} round(s) alternating the precisions; load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'backend':<8} {'f64 s/it':>9} {'f32 s/it':>9} {'f64/f32':>8} {'mean ll f64':>14} "
        f"{'mean ll f32':>14} {'rel diff':>9} {'B/row f64':>10} {'B/row f32':>10} {'cells f64':>10} "
        f"{'cells f32':>10}"
    )
    ok = True
    for r in results:
        s, ll, b = r["seconds"], r["ll"], r["bytes_per_row"]
        ratio = s["float64"] / s["float32"]
        rel = abs(ll["float32"] / ll["float64"] - 1.0)
        ok &= ratio >= SPEED_TARGET and rel <= LL_TARGET
        cells = [f"{b[p]['cells']:>10.1f}" if "cells" in b[p] else f"{'-':>10}" for p in PRECISIONS]
        print(
            f"{r['backend']:<8} {s['float64']:>9.3f} {s['float32']:>9.3f} {ratio:>7.2f}x "
            f"{ll['float64']:>14.8f} {ll['float32']:>14.8f} {rel:>9.1e} {b['float64']['encoded']:>10.1f} "
            f"{b['float32']['encoded']:>10.1f} {cells[0]} {cells[1]}"
        )
    for r in results:
        if r.get("resident_steps", {}).get("float64") is not None:
            print(f"{r['backend']}: E-steps served by resident tasks {r['resident_steps']}")
    print(
        f"targets (f64/f32 >= {SPEED_TARGET}x, rel diff <= {LL_TARGET:.0e}): " + ("met" if ok else "MISSED")
    )
    return ok


def run_precision(backends: list[str], rows: int, dim: int, k: int, its: int, seed: int, rounds: int) -> int:
    """The ``--precision`` benchmark: each backend in a process of its own, then the table."""
    args = ["--rows", str(rows), "--dim", str(dim), "--components", str(k)]
    args += ["--iterations", str(its), "--seed", str(seed), "--rounds", str(rounds)]
    started = time.perf_counter()
    results = [_child(backend, args) for backend in backends]
    report(results, rows, dim, k, its, rounds)
    print(f"({time.perf_counter() - started:.0f} s in all)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--one", choices=BACKENDS, help="measure this backend; print its RESULT line")
    parser.add_argument("--precision-backends", default=",".join(BACKENDS))
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--components", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if args.iterations < 2:
        parser.error(f"--iterations: the steps after the first are timed, so >= 2; got {args.iterations}")
    shape = (args.rows, args.dim, args.components, args.iterations, args.seed)
    if args.one:
        warnings.simplefilter("ignore")  # ConvergenceWarning: the steps are counted, not converged
        print("RESULT " + json.dumps(run_one(args.one, *shape, args.rounds)))
        return 0
    try:
        backends = parse_backends(args.precision_backends)
    except ValueError as err:
        parser.error(str(err))
    return run_precision(backends, *shape, args.rounds)


if __name__ == "__main__":
    raise SystemExit(main())
