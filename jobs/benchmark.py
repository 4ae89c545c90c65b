"""Per-iteration EM time of mixle_spark against a peer measured in the same run.

    python jobs/benchmark.py --local                 # n=1e6, d=10, k=16 (the performance targets' size)
    python jobs/benchmark.py --local --rows 200000   # quicker
    python jobs/benchmark.py --spark                 # Spark backend vs MLlib, vs local, driver memory
    python jobs/benchmark.py --spark --no-resident   # the job path (one Spark job per E-step) vs MLlib
    python jobs/benchmark.py --spark --connect       # over Spark Connect (the job path) vs MLlib there
    python jobs/benchmark.py --spark --no-resident --rows 10000000 --partitions 16 --rounds 1 \
        --iterations 4 --no-default-fits --memory-sizes ""   # per iteration only, at n = 1e7
    python jobs/benchmark.py --model-parallel        # component threading: 2 workers vs 1
    python jobs/benchmark.py --mp                    # mp backend: 2 worker processes vs 1
    python jobs/benchmark.py --mpi                   # mpi backend: mpiexec -n 2 vs -n 1
    python jobs/benchmark.py --dask                  # dask backend (2 workers) vs spark backend
    python jobs/benchmark.py --dask --ray            # dask and ray backends vs spark, in one run
    python jobs/benchmark.py --precision             # float32 vs float64: local, Spark, Spark Connect

``--local``: the local backend against scikit-learn's ``GaussianMixture`` (full and diagonal
covariance), both started from the same model (weights, means, covariances) on the same data, with the
same covariance regularisation (sklearn ``reg_covar`` = our absolute ``min_covar`` with ``ridge=0``).
Reports seconds per iteration, the speed-up ratio, and the log-likelihood both reach after the same
number of iterations (they follow the same EM path, so these agree closely). Absolute times on a
2-core machine are noise; the ratios are the result. scikit-learn is needed only here (extra ``bench``).

``--spark``: on ``local[2]``, one cached DataFrame with an ML Vector column in the partitioning
``createDataFrame`` gave it (16 partitions at 1e6 rows: more than the 2 task slots), the Spark backend
with default options (``optimize(df, estimator, seed=...)``: no num_chunks, no starting model) against
``pyspark.ml.clustering.GaussianMixture`` (full covariance) per iteration, the Spark backend against
the local backend from the same seed, what the resident engine reports (tasks, rows, memory held in
Python workers), and the driver's memory (Python process RSS) after fits at growing ``n`` with data
generated inside Spark (it must not grow with ``n``).

``--spark --no-resident`` and ``--spark --connect``: the same against MLlib in the same session type
(``resident=False`` on a classic session; a local Spark Connect server, where resident tasks cannot
run), then one default fit end to end each (``optimize`` until converged against
``GaussianMixture(k).fit``): wall time and mean log-likelihood.

``--model-parallel``: a 64-component full-covariance mixture on d=20 (an E-step bound by the
components, not the rows): the E-step through ``ModelParallelEstimator`` with 2 threads against 1
(the M-step is the same serial driver code for both), with one BLAS thread per process as in a Spark
task, and a check that the models estimated from the two E-steps are bit-identical.

``--mp``: the ``mp`` backend (worker processes holding their shards) with 2 workers against 1 on the
full-covariance mixture at ``--rows`` (default 1e6), seconds per iteration after the first, and the
log-likelihood both reach (equal to the local backend's). ``--mpi``: the same with the ``mpi``
backend, ``mpiexec -n 2`` against ``-n 1`` (each rank generates the data and keeps its share).

``--dask`` / ``--ray`` (together: one run, one Spark baseline): the ``dask`` backend (a local cluster
of 2 worker processes, a 2-partition DataFrame) and the ``ray`` backend (a local runtime of 2 CPUs, a
Dataset from one Arrow table) against the Spark backend on ``local[2]``, all with default options
from one seed: seconds per iteration after the first, the ratio spark/engine (above 1: the engine is
faster) and the mean log-likelihood each reaches (the same, from the same seed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mixle_spark.estimation import iterate
from mixle_spark.parallel import LocalEncodedData
from mixle_spark.stats import (
    DiagonalGaussianDistribution,
    DiagonalGaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
    MultivariateGaussianDistribution,
    MultivariateGaussianEstimator,
)

REG = 1e-6


def make_data(n: int, d: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows from k well-separated random Gaussians; returns (x, true means)."""
    rng = np.random.default_rng(seed)
    means = rng.normal(0.0, 4.0, size=(k, d))
    labels = rng.integers(0, k, size=n)
    scales = rng.uniform(0.5, 1.5, size=(k, d))
    x = means[labels] + rng.normal(size=(n, d)) * scales[labels]
    return x, means


def starting_point(x: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Equal weights, k random rows as means, the data covariance for every component."""
    rng = np.random.default_rng(seed + 1)
    means = x[rng.choice(len(x), size=k, replace=False)]
    cov = np.cov(x[:100_000].T)
    return np.full(k, 1.0 / k), means, np.repeat(cov[None], k, axis=0)


def time_mixle(x: np.ndarray, start: Any, diagonal: bool, its: int) -> tuple[float, float]:
    w, means, covs = start
    if diagonal:
        comps = [DiagonalGaussianDistribution(m, np.diag(c)) for m, c in zip(means, covs, strict=True)]
        est = MixtureEstimator([DiagonalGaussianEstimator(min_covar=REG, ridge=0.0)] * len(w))
    else:
        comps = [MultivariateGaussianDistribution(m, c) for m, c in zip(means, covs, strict=True)]
        est = MixtureEstimator([MultivariateGaussianEstimator(min_covar=REG, ridge=0.0)] * len(w))
    handle = LocalEncodedData(x, estimator=est, chunk_size=len(x))
    model = iterate(handle, est, max_its=its, prev_estimate=MixtureDistribution(comps, w))
    hist = model.fit_result.history
    # Iteration 0's pass also builds the cached features; report the steady state.
    per_it = statistics.median(r.seconds for r in hist[1:its])
    return per_it, hist[its - 1].log_likelihood / len(x)


def time_sklearn(x: np.ndarray, start: Any, diagonal: bool, its: int) -> tuple[float, float]:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture

    w, means, covs = start
    kind = "diag" if diagonal else "full"
    prec = 1.0 / np.array([np.diag(c) for c in covs]) if diagonal else np.linalg.inv(covs)

    def fit(max_iter: int) -> tuple[float, float]:
        gm = GaussianMixture(
            len(w),
            covariance_type=kind,
            max_iter=max_iter,
            tol=0.0,
            reg_covar=REG,
            weights_init=w,
            means_init=means,
            precisions_init=prec,
            init_params="random_from_data",
            random_state=0,
        )
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gm.fit(x)
        return time.perf_counter() - t0, gm.lower_bound_

    t1, _ = fit(1)
    tn, ll = fit(its)
    return (tn - t1) / (its - 1), ll


def run_local(rows: int, dim: int, k: int, its: int, seed: int) -> list[dict[str, Any]]:
    x, _ = make_data(rows, dim, k, seed)
    start = starting_point(x, k, seed)
    results = []
    for diagonal, target in ((False, 5.0), (True, 2.0)):
        ours, ll_ours = time_mixle(x, start, diagonal, its)
        peer, ll_peer = time_sklearn(x, start, diagonal, its)
        results.append(
            {
                "model": "diagonal" if diagonal else "full",
                "mixle_s": ours,
                "sklearn_s": peer,
                "ratio": peer / ours,
                "target": target,
                "ll_mixle": ll_ours,
                "ll_sklearn": ll_peer,
            }
        )
    return results


def _rss_mib() -> float:
    """Resident memory of this (driver) Python process, MiB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _mixture_start(start: Any) -> MixtureDistribution:
    w, means, covs = start
    comps = [MultivariateGaussianDistribution(m, c) for m, c in zip(means, covs, strict=True)]
    return MixtureDistribution(comps, w)


def _benchmark_session(connect: bool) -> Any:
    """``local[2]`` as a classic session, or through a local Spark Connect server (loopback only)."""
    if not connect:
        from mixle_spark.io import spark_session

        spark = spark_session("mixle-benchmark", master="local[2]", conf={"spark.driver.memory": "12g"})
        spark.sparkContext.setLogLevel("ERROR")
        return spark
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (
        SparkSession.builder.remote("local[2]")
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .config("spark.driver.memory", "12g")
        .getOrCreate()
    )


_CONNECT_LOCAL_BYTES = 256 * 2**20
"""Inputs larger than this reach a Connect benchmark through Parquet files, not a local relation."""


def _pieces(table: pa.Table, parts: int) -> list[pa.Table]:
    step = -(-table.num_rows // parts)
    return [table.slice(i, step) for i in range(0, table.num_rows, step)]


def run_spark(
    rows: int,
    dim: int,
    k: int,
    its: int,
    seed: int,
    partitions: int | None,
    memory_sizes: list[int],
    rounds: int,
    connect: bool = False,
    resident: bool = True,
    default_fits: bool = True,
) -> None:
    from pyspark.ml.clustering import GaussianMixture as MLlibGaussianMixture
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F

    from mixle_spark.estimation import optimize

    spark = _benchmark_session(connect)
    x, _ = make_data(rows, dim, k, seed)
    est = MixtureEstimator([MultivariateGaussianEstimator()] * k)
    flat = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), dim)
    table = pa.table({"features": flat.cast(pa.list_(pa.float64()))})
    scratch = None
    if connect and table.nbytes > _CONNECT_LOCAL_BYTES:
        # A local relation this big stalls the Connect client (it sends the Arrow bytes in one plan);
        # a Databricks user's data is a table anyway: Parquet files, read by the server.
        scratch = tempfile.mkdtemp(prefix="mixle-benchmark-")
        for i, piece in enumerate(_pieces(table, partitions or 16)):
            pq.write_table(piece, os.path.join(scratch, f"part-{i:05d}.parquet"))
        df = spark.read.parquet(scratch)
        print(f"(the input reaches the server as {partitions or 16} Parquet files, {table.nbytes >> 20} MiB)")
    else:
        df = spark.createDataFrame(table)
    if partitions is not None:
        df = df.repartition(partitions)
    df = df.select(array_to_vector("features").alias("features")).cache()
    df.count()
    layout = df.select(F.spark_partition_id().alias("p")).agg(F.countDistinct("p")).collect()[0][0]
    options = {} if resident else {"resident": False}
    where = "Spark Connect local[2]" if connect else f"local[2]{'' if resident else ', resident=False'}"

    def mllib(max_iter: int) -> tuple[float, float]:
        gm = MLlibGaussianMixture(k=k, maxIter=max_iter, tol=0.0, seed=seed)
        t0 = time.perf_counter()
        model = gm.fit(df)
        return time.perf_counter() - t0, model.summary.logLikelihood / rows

    def ours() -> tuple[float, float, float, str]:
        # what a newcomer writes: the DataFrame as it is, no options, no starting model
        t0 = time.perf_counter()
        model = optimize(df, est, max_its=its, delta=None, seed=seed, print_iter=0, **options)
        total = time.perf_counter() - t0
        trace = model.fit_result.trace
        steps = statistics.median(r.seconds for r in trace[1:its])
        one_off = total - sum(r.seconds for r in trace)
        events = [e for r in trace for e in r.events]
        return steps, model.fit_result.history[its - 1].log_likelihood / rows, one_off, "; ".join(events)

    # The machines are shared and noisy: alternate the engines and compare within each round.
    print(
        f"n={rows}, d={dim}, k={k}, {where}, the DataFrame's own {layout} partitions, default options, "
        f"full covariance, {its} iterations"
    )
    header = ("round", "MLlib s/it", "mixle spark s/it", "MLlib/ours", "mixle one-off s")
    print(f"{header[0]:<6} {header[1]:>11} {header[2]:>17} {header[3]:>11} {header[4]:>16}")
    ratios, per_sparks = [], []
    mllib(2)  # warm both up (JIT, Python workers) so that round 1 measures what the others do
    _steps, _ll, _one_off, events = ours()
    for r in range(rounds):
        t1, _ = mllib(1)
        tn, ll_mllib = mllib(its)
        per_mllib = (tn - t1) / (its - 1)
        per_spark, ll_spark, one_off, events = ours()
        ratios.append(per_mllib / per_spark)
        per_sparks.append(per_spark)
        print(f"{r + 1:<6} {per_mllib:>11.3f} {per_spark:>17.3f} {ratios[-1]:>10.1f}x {one_off:>16.2f}")
    per_spark = statistics.median(per_sparks)
    target = "10x" if resident and not connect else "3x" if connect else "3.5x"
    print(f"median MLlib/ours {statistics.median(ratios):.1f}x (target {target})")
    if resident and not connect:
        print(f"mixle's resident engine: {events}")
    elif default_fits:
        _default_fits(df, est, k, rows, seed, options, x)
    local = optimize(x, est, max_its=its, delta=None, seed=seed, print_iter=0)
    local_hist = local.fit_result.history
    per_local = statistics.median(r.seconds for r in local_hist[1:its])
    print(
        f"mixle local backend {per_local:.3f} s/it: spark/local {per_spark / per_local:.2f} (target <= 1.5)"
    )
    print(
        f"mean log-likelihood after {its} iterations: mixle spark {ll_spark:.8f}, local "
        f"{local_hist[its - 1].log_likelihood / rows:.8f} (same seed); MLlib {ll_mllib:.6f} (its own start)"
    )
    df.unpersist()
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    if connect:
        spark.stop()
        return
    print(f"\ndriver memory (Python RSS) with data generated in Spark, {its} iterations each:")
    for n in memory_sizes:
        gen = spark.range(n, numPartitions=partitions or 4).select(
            F.array(*[F.randn(seed + j) * 2.0 + F.lit(float(j)) for j in range(dim)]).alias("x")
        )
        before = _rss_mib()
        model = optimize(gen, est, max_its=its, delta=None, seed=seed, print_iter=0, **options)
        print(
            f"  n={n:>9}: RSS {before:8.1f} MiB -> {_rss_mib():8.1f} MiB, "
            f"{statistics.median(r.seconds for r in model.fit_result.history[1:its]):.3f} s/iteration"
        )
    spark.stop()


def _mllib_model(fitted: Any) -> MixtureDistribution:
    """An MLlib ``GaussianMixtureModel`` as our mixture (its weights, means and covariances)."""
    weights = np.asarray(fitted.weights, dtype=np.float64)
    comps = [
        MultivariateGaussianDistribution(np.asarray(r["mean"].toArray()), np.asarray(r["cov"].toArray()))
        for r in fitted.gaussiansDF.collect()
    ]
    return MixtureDistribution(comps, weights / weights.sum())


def _default_fits(
    df: Any, est: Any, k: int, rows: int, seed: int, options: dict[str, Any], x: np.ndarray
) -> None:
    """End to end with the defaults a newcomer passes: encode, seed and iterate (``optimize`` until
    converged, at most 100 iterations) against MLlib's ``GaussianMixture(k)`` (its own maxIter / tol);
    both returned models are then scored by one function on the same rows (MLlib's summary figure
    comes from its last E-step, not from the model it returns)."""
    from pyspark.ml.clustering import GaussianMixture as MLlibGaussianMixture

    from mixle_spark.estimation import optimize

    t0 = time.perf_counter()
    mllib = MLlibGaussianMixture(k=k, seed=seed).fit(df)
    t_mllib = time.perf_counter() - t0
    t0 = time.perf_counter()
    model = optimize(df, est, max_its=100, delta=1e-6, seed=seed, print_iter=0, **options)
    t_ours = time.perf_counter() - t0
    print(
        f"default end-to-end fits: MLlib {t_mllib:.1f} s (mean log-likelihood "
        f"{mllib.summary.logLikelihood / rows:.6f}, {mllib.summary.numIter} iterations), mixle "
        f"{t_ours:.1f} s ({model.fit_result.log_likelihood / rows:.6f}, {model.fit_result.n_iter} "
        f"iterations): MLlib/ours {t_mllib / t_ours:.1f}x"
    )
    theirs = float(np.mean(_mllib_model(mllib).score_samples(x)))
    print(
        f"  the returned models scored alike (mean log-likelihood): MLlib {theirs:.7f}, "
        f"mixle {float(np.mean(model.score_samples(x))):.7f}"
    )


def run_model_parallel(rows: int, seed: int, rounds: int) -> int:
    """2 threads vs 1 on a component-bound E-step (re-executed with one BLAS thread per process)."""
    if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        cmd = [sys.executable, os.path.abspath(__file__), "--model-parallel", "--mp-rows", str(rows)]
        return subprocess.call([*cmd, "--seed", str(seed), "--rounds", str(rounds)], env=env)
    from mixle_spark.parallel import ModelParallelEstimator

    k, d = 64, 20
    rng = np.random.default_rng(seed)
    comps = [
        MultivariateGaussianDistribution(rng.normal(0.0, 3.0, d), np.diag(rng.uniform(0.5, 2.0, d)))
        for _ in range(k)
    ]
    model = MixtureDistribution(comps, np.full(k, 1.0 / k))
    x = np.asarray(model.sampler(seed).sample(rows))
    est = MixtureEstimator([MultivariateGaussianEstimator(dim=d, min_covar=REG, ridge=0.0)] * k)
    handle = LocalEncodedData(x, estimator=est, chunk_size=65_536)
    handle.pysp_em_step(est, model)  # builds the cached features once

    def estep(workers: int) -> tuple[float, Any]:
        t0 = time.perf_counter()
        nobs, value = handle.pysp_stream_accumulate(ModelParallelEstimator(est, num_workers=workers), model)
        return time.perf_counter() - t0, est.estimate(nobs, value)

    print(f"model-parallel E-step: n={rows}, d={d}, k={k}, one BLAS thread, {rounds} rounds")
    print(f"{'round':<6} {'1 worker s':>11} {'2 workers s':>12} {'speed-up':>9}")
    ratios = []
    for r in range(rounds):
        t1, one = estep(1)
        t2, two = estep(2)
        if one.to_dict() != two.to_dict():
            print("RESULTS DIFFER between 1 and 2 workers", file=sys.stderr)
            return 1
        ratios.append(t1 / t2)
        print(f"{r + 1:<6} {t1:>11.3f} {t2:>12.3f} {ratios[-1]:>8.2f}x")
    print(f"median speed-up {statistics.median(ratios):.2f}x (target 1.6x); models bit-identical")
    return 0


def run_mp(rows: int, dim: int, k: int, its: int, seed: int, rounds: int) -> int:
    """mp backend: throughput of 2 worker processes against 1 (and the local backend's result)."""
    from mixle_spark.parallel import MPEncodedData

    x, _ = make_data(rows, dim, k, seed)
    start = starting_point(x, k, seed)
    est = MixtureEstimator([MultivariateGaussianEstimator(min_covar=REG, ridge=0.0)] * k)
    per_it: dict[int, list[float]] = {1: [], 2: []}
    lls: dict[int, float] = {}
    print(f"mp backend: n={rows}, d={dim}, k={k}, full covariance, {its} iterations, {rounds} rounds")
    print(f"{'round':<6} {'1 worker s/it':>14} {'2 workers s/it':>15} {'throughput ratio':>17}")
    handles = {w: MPEncodedData(x, est, num_workers=w) for w in (1, 2)}
    try:
        for r in range(rounds):
            for w, handle in handles.items():
                model = iterate(handle, est, max_its=its, prev_estimate=_mixture_start(start))
                hist = model.fit_result.history
                per_it[w].append(statistics.median(h.seconds for h in hist[1:its]))
                lls[w] = hist[its - 1].log_likelihood / rows
            one, two = per_it[1][-1], per_it[2][-1]
            print(f"{r + 1:<6} {one:>14.3f} {two:>15.3f} {one / two:>16.2f}x")
    finally:
        for handle in handles.values():
            handle.close()
    ratio = statistics.median(a / b for a, b in zip(per_it[1], per_it[2], strict=True))
    print(f"median throughput ratio 2 workers / 1: {ratio:.2f}x (target 1.7x)")
    print(f"mean log-likelihood after {its} iterations: 1 worker {lls[1]:.8f}, 2 workers {lls[2]:.8f}")
    return 0


def run_engines(engines: list[str], rows: int, dim: int, k: int, its: int, seed: int, rounds: int) -> int:
    """The dask and / or ray backends against the Spark backend: per-iteration time on the same data,
    from one seed, each engine given the machine's 2 cores (2 Dask worker processes; a Ray runtime
    of 2 CPUs; Spark ``local[2]``) and default options."""
    import pandas as pd

    from mixle_spark.estimation import optimize
    from mixle_spark.io import spark_session

    x, _ = make_data(rows, dim, k, seed)
    est = MixtureEstimator([MultivariateGaussianEstimator()] * k)
    table = pa.table(
        {"features": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), dim).cast(pa.list_(pa.float64()))}
    )
    frames: dict[str, Any] = {}
    stops: list[Any] = []
    spark = spark_session("mixle-benchmark", master="local[2]", conf={"spark.driver.memory": "12g"})
    spark.sparkContext.setLogLevel("ERROR")
    stops.append(spark.stop)
    try:
        if "dask" in engines:
            import dask.dataframe as dd

            from mixle_spark.cli._runtimes import start_local_dask

            stops.append(start_local_dask(2, silence_logs=40).stop)  # the job's cluster: loopback, TLS
            frames["dask"] = dd.from_pandas(
                table.to_pandas(types_mapper=pd.ArrowDtype), npartitions=2
            ).persist()
        if "ray" in engines:
            import ray
            import ray.data

            from mixle_spark.cli._runtimes import start_local_ray

            quiet = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
            stops.append(start_local_ray(ray, 2, **quiet).stop)  # the job's runtime: its own token
            ray.data.DataContext.get_current().enable_progress_bars = False
            frames["ray"] = ray.data.from_arrow(table)
        df = spark.createDataFrame(table).cache()
        df.count()

        def per_iteration(data: Any) -> tuple[float, float]:
            model = optimize(data, est, max_its=its, delta=None, seed=seed, print_iter=0)
            trace = model.fit_result.trace
            return statistics.median(r.seconds for r in trace[1:its]), model.fit_result.history[
                its - 1
            ].log_likelihood / rows

        print(
            f"{' and '.join(engines)} backend{'s' if len(engines) > 1 else ''} vs spark backend: n={rows}, "
            f"d={dim}, k={k}, full covariance, {its} iterations, 2 cores each (Dask: 2 worker processes, "
            "2 partitions; Ray: a runtime of 2 CPUs; Spark local[2], the DataFrame's own partitions), "
            "default options"
        )
        header = f"{'round':<6} {'spark s/it':>11}" + "".join(f" {e + ' s/it':>10}" for e in engines)
        print(header + "".join(f" {'spark/' + e:>11}" for e in engines))
        for data in (df, *frames.values()):  # warm every engine up
            per_iteration(data)
        ratios: dict[str, list[float]] = {e: [] for e in engines}
        lls: dict[str, float] = {}
        for r in range(rounds):
            t_spark, lls["spark"] = per_iteration(df)
            times = {}
            for engine in engines:
                times[engine], lls[engine] = per_iteration(frames[engine])
                ratios[engine].append(t_spark / times[engine])
            line = f"{r + 1:<6} {t_spark:>11.3f}" + "".join(f" {times[e]:>10.3f}" for e in engines)
            print(line + "".join(f" {ratios[e][-1]:>10.2f}x" for e in engines))
        for engine in engines:
            print(f"median spark/{engine} {statistics.median(ratios[engine]):.2f}x")
        print(
            f"mean log-likelihood after {its} iterations (same seed): "
            + ", ".join(f"{name} {value:.8f}" for name, value in lls.items())
        )
    finally:
        for stop in reversed(stops):
            stop()
    return 0


def _mpi_rank_main(rows: int, dim: int, k: int, its: int, seed: int) -> int:
    """One rank of ``--mpi``: fit with the mpi backend; the root prints ``MPI_RESULT s/it ll``."""
    from mixle_spark.parallel.backends.mpi import MPIEncodedData

    x, _ = make_data(rows, dim, k, seed)
    start = starting_point(x, k, seed)
    est = MixtureEstimator([MultivariateGaussianEstimator(min_covar=REG, ridge=0.0)] * k)
    with MPIEncodedData(x, est) as handle:
        model = iterate(handle, est, max_its=its, prev_estimate=_mixture_start(start), print_iter=0)
        if handle.rank == 0:
            hist = model.fit_result.history
            per_it = statistics.median(h.seconds for h in hist[1:its])
            print(f"MPI_RESULT {per_it:.6f} {hist[its - 1].log_likelihood / rows:.10f}", flush=True)
    return 0


def run_mpi(rows: int, dim: int, k: int, its: int, seed: int, rounds: int) -> int:
    """mpi backend: ``mpiexec -n 2`` against ``-n 1`` (per iteration after the first)."""
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        print("benchmark: mpiexec not found; pip install 'mixle-spark[mpi]'", file=sys.stderr)
        return 2
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    args = ["--rows", str(rows), "--dim", str(dim), "--components", str(k), "--iterations", str(its)]
    print(f"mpi backend: n={rows}, d={dim}, k={k}, full covariance, {its} iterations, {rounds} rounds")
    print(f"{'round':<6} {'1 rank s/it':>12} {'2 ranks s/it':>13} {'throughput ratio':>17}")
    ratios = []
    for r in range(rounds):
        results = {}
        for ranks in (1, 2):
            command = [mpiexec, "-n", str(ranks), sys.executable, os.path.abspath(__file__), "--mpi-rank"]
            done = subprocess.run(
                [*command, *args, "--seed", str(seed)], capture_output=True, text=True, env=env, timeout=1800
            )
            line = next((ln for ln in done.stdout.splitlines() if ln.startswith("MPI_RESULT")), None)
            if done.returncode or line is None:
                print(done.stderr, file=sys.stderr)
                return 1
            results[ranks] = [float(v) for v in line.split()[1:]]
        ratios.append(results[1][0] / results[2][0])
        print(f"{r + 1:<6} {results[1][0]:>12.3f} {results[2][0]:>13.3f} {ratios[-1]:>16.2f}x")
    print(f"median throughput ratio 2 ranks / 1: {statistics.median(ratios):.2f}x (target 1.7x)")
    print(f"mean log-likelihood: 1 rank {results[1][1]:.8f}, 2 ranks {results[2][1]:.8f}")
    return 0


def _run_precision(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--precision``: :mod:`benchmark_precision` (its own processes per backend), 3 rounds at most."""
    from benchmark_precision import parse_backends, run_precision

    its = 10 if args.iterations is None else args.iterations
    if its < 2:
        parser.error(f"--iterations: the steps after the first are timed, so >= 2; got {its}")
    try:
        backends = parse_backends(args.precision_backends)
    except ValueError as err:
        parser.error(str(err))
    shape = (args.rows, args.dim, args.components, its, args.seed)
    return run_precision(backends, *shape, min(args.rounds, 3))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--local", action="store_true", help="local backend vs scikit-learn")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--components", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=None, help="EM steps (default 6; --precision: 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spark", action="store_true", help="Spark backend vs MLlib and vs local")
    parser.add_argument(
        "--connect", action="store_true", help="with --spark: over Spark Connect (remote('local[2]'))"
    )
    parser.add_argument(
        "--no-resident", action="store_true", help="with --spark: resident=False (one Spark job per E-step)"
    )
    parser.add_argument(
        "--no-default-fits",
        action="store_true",
        help="with --spark: skip the end-to-end default fits (MLlib runs 100 iterations: long at n=1e7)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="repartition the input first (default: the DataFrame's own partitioning, as a user has it)",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="measurement rounds (--spark, --model-parallel)"
    )
    parser.add_argument(
        "--model-parallel", action="store_true", help="component threading: 2 workers vs 1 (k=64, d=20)"
    )
    parser.add_argument("--mp-rows", type=int, default=200_000, help="rows for --model-parallel")
    parser.add_argument("--mp", action="store_true", help="mp backend: 2 worker processes vs 1")
    parser.add_argument("--mpi", action="store_true", help="mpi backend: mpiexec -n 2 vs -n 1")
    parser.add_argument("--dask", action="store_true", help="dask backend (2 workers) vs spark backend")
    parser.add_argument("--ray", action="store_true", help="ray backend (2 CPUs) vs spark backend")
    parser.add_argument("--mpi-rank", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--precision",
        action="store_true",
        help="float32 vs float64 per backend (jobs/benchmark_precision.py)",
    )
    parser.add_argument(
        "--precision-backends", default="local,spark,connect", help="with --precision: which backends"
    )
    parser.add_argument(
        "--memory-sizes",
        default="100000,1000000,4000000",
        help="comma-separated n for the driver-memory check (--spark)",
    )
    args = parser.parse_args(argv)
    if args.precision:
        return _run_precision(parser, args)
    args.iterations = 6 if args.iterations is None else args.iterations
    if (args.connect or args.no_resident) and not args.spark:
        parser.error("--connect and --no-resident go with --spark")
    if args.mpi_rank:
        return _mpi_rank_main(args.rows, args.dim, args.components, args.iterations, args.seed)
    if not (args.local or args.spark or args.model_parallel or args.mp or args.mpi or args.dask or args.ray):
        parser.error(
            "choose a benchmark: --local, --spark, --model-parallel, --mp, --mpi, --dask, --ray "
            "and/or --precision"
        )
    rounds3 = min(args.rounds, 3)
    status = 0
    if args.mpi:
        status |= run_mpi(args.rows, args.dim, args.components, args.iterations, args.seed, rounds3)
    if args.model_parallel:
        status |= run_model_parallel(args.mp_rows, args.seed, args.rounds)
    engines = [name for name in ("dask", "ray") if getattr(args, name)]
    if engines:
        status |= run_engines(
            engines, args.rows, args.dim, args.components, args.iterations, args.seed, rounds3
        )
    if args.mp:
        status |= run_mp(args.rows, args.dim, args.components, args.iterations, args.seed, rounds3)
    if args.spark:
        sizes = [int(v) for v in args.memory_sizes.split(",") if v]
        run_spark(
            args.rows,
            args.dim,
            args.components,
            args.iterations,
            args.seed,
            args.partitions,
            sizes,
            args.rounds,
            connect=args.connect,
            resident=not args.no_resident,
            default_fits=not args.no_default_fits,
        )
    if not args.local:
        return status
    try:
        import sklearn  # noqa: F401
    except ImportError:
        print("benchmark: scikit-learn is not installed; pip install 'mixle-spark[bench]'", file=sys.stderr)
        return 2
    print(
        f"local backend vs scikit-learn GaussianMixture: n={args.rows}, d={args.dim}, "
        f"k={args.components}, {args.iterations} iterations from the same start"
    )
    print(
        f"{'covariance':<10} {'mixle s/it':>11} {'sklearn s/it':>13} {'speed-up':>9} {'target':>7} "
        f"{'mean ll mixle':>15} {'mean ll sklearn':>16}"
    )
    ok = True
    for r in run_local(args.rows, args.dim, args.components, args.iterations, args.seed):
        ok &= r["ratio"] >= r["target"]
        print(
            f"{r['model']:<10} {r['mixle_s']:>11.3f} {r['sklearn_s']:>13.3f} {r['ratio']:>8.1f}x "
            f"{r['target']:>6.0f}x {r['ll_mixle']:>15.8f} {r['ll_sklearn']:>16.8f}"
        )
    print("targets met" if ok else "TARGET MISSED")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
