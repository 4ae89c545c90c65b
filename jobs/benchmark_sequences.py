"""HMM E-step throughput: the batched forward-backward against a per-sequence numpy loop, one run.

    python jobs/benchmark_sequences.py                       # 1,000,000 sequences, mean length 20
    python jobs/benchmark_sequences.py --sequences 100000    # quicker

The data: ``--sequences`` sequences from a 4-state hidden Markov model with Gaussian emissions,
lengths ``1 + Poisson(mean - 1)`` (mean ``--mean-length``), as one ``array<double>`` column. Measured
in the same run:

* ``mixle spark``: the Baum-Welch E-step (forward-backward and the accumulator's statistics, merged
  across partitions) of :class:`~mixle_spark.stats.HiddenMarkovEstimator` over the cached DataFrame on
  ``local[2]``; the median of ``--rounds`` E-steps after a first one that encodes the data. Measured
  twice: in resident tasks that keep the decoded partitions between E-steps (what ``optimize`` uses
  when partitions <= task slots, the default here), and as one Spark job per E-step (what runs when
  there are more partitions than slots; it pays task launch and the Arrow transfer of the cached
  lists every time).
* ``mixle local``: the same E-step with the local backend in this process (one thread), for reference.
* ``numpy loop``: the textbook scaled forward-backward, one sequence at a time, each time step a numpy
  operation over the 4 states, computing the same statistics (initial and transition counts, state
  weights, the emissions' weighted sums, the log-likelihood). It runs on the first ``--baseline``
  sequences (its time per symbol does not depend on how many there are) and is checked against the
  local backend's statistics on the same sequences (relative 1e-9) before any time is reported.

Reported: symbols (sequence elements) per second of each, and the ratio mixle spark / numpy loop
(target: at least 20x). Absolute numbers on a shared 2-core machine are noise; the ratio is the result.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.parallel import LocalEncodedData
from mixle_spark.stats import (
    GaussianDistribution,
    GaussianEstimator,
    HiddenMarkovDistribution,
    HiddenMarkovEstimator,
)

K = 4
MU = np.array([-3.0, -1.0, 1.0, 3.0])
SIGMA2 = np.array([0.5, 0.8, 0.8, 0.5])
PI = np.array([0.4, 0.3, 0.2, 0.1])
A = np.array(
    [
        [0.85, 0.05, 0.05, 0.05],
        [0.10, 0.80, 0.05, 0.05],
        [0.05, 0.10, 0.75, 0.10],
        [0.05, 0.05, 0.20, 0.70],
    ]
)


def make_sequences(n: int, mean_length: float, seed: int) -> pa.ListArray:
    """``n`` sequences of the true model as an Arrow ``list<double>`` (vectorized over sequences)."""
    rng = np.random.default_rng(seed)
    lengths = 1 + rng.poisson(mean_length - 1.0, size=n)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    starts = offsets[:-1]
    states = np.empty(int(offsets[-1]), dtype=np.int64)
    current = (rng.random(n)[:, None] > np.cumsum(PI)[None, :]).sum(axis=1).clip(max=K - 1)
    states[starts] = current
    cum = np.cumsum(A, axis=1)
    for t in range(1, int(lengths.max())):
        alive = np.flatnonzero(lengths > t)
        u = rng.random(alive.size)
        current[alive] = (u[:, None] > cum[current[alive]]).sum(axis=1).clip(max=K - 1)
        states[starts[alive] + t] = current[alive]
    values = MU[states] + np.sqrt(SIGMA2[states]) * rng.standard_normal(states.size)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))


def start_model() -> HiddenMarkovDistribution:
    """A start away from the truth, so the E-step does real work (posteriors are not near 0/1)."""
    emissions = [GaussianDistribution(float(m) * 0.8, 1.0) for m in MU]
    transitions = np.full((K, K), 0.1 / (K - 1)) + np.eye(K) * (0.9 - 0.1 / (K - 1))
    return HiddenMarkovDistribution(emissions, np.full(K, 1.0 / K), transitions)


def numpy_forward_backward(seqs: pa.ListArray, model: HiddenMarkovDistribution) -> dict[str, Any]:
    """The per-sequence loop: scaled forward-backward over the states of one sequence at a time."""
    mu = np.array([e.mu for e in model.emissions])
    s2 = np.array([e.sigma2 for e in model.emissions])
    pi, a = np.asarray(model.initial), np.asarray(model.transitions)
    offsets = seqs.offsets.to_numpy()
    flat = seqs.values.to_numpy()
    initial, trans = np.zeros(K), np.zeros((K, K))
    weight, sx, sxx = np.zeros(K), np.zeros(K), np.zeros(K)
    ll = 0.0
    for i in range(len(seqs)):
        x = flat[offsets[i] : offsets[i + 1]]
        t_len = x.size
        log_e = -0.5 * ((x[:, None] - mu) ** 2 / s2 + np.log(2.0 * math.pi * s2))
        shift = log_e.max(axis=1, keepdims=True)
        e = np.exp(log_e - shift)
        alpha, c = np.empty((t_len, K)), np.empty(t_len)
        step = pi * e[0]
        c[0] = step.sum()
        alpha[0] = step / c[0]
        for t in range(1, t_len):
            step = (alpha[t - 1] @ a) * e[t]
            c[t] = step.sum()
            alpha[t] = step / c[t]
        beta = np.empty((t_len, K))
        beta[-1] = 1.0
        for t in range(t_len - 2, -1, -1):
            nxt = e[t + 1] * beta[t + 1]
            beta[t] = (a @ nxt) / c[t + 1]
            trans += np.outer(alpha[t], nxt) * a / c[t + 1]
        gamma = alpha * beta
        initial += gamma[0]
        weight += gamma.sum(axis=0)
        sx += gamma.T @ x
        sxx += gamma.T @ (x * x)
        ll += float(np.log(c).sum() + shift.sum())
    return {"initial": initial, "transitions": trans, "weight": weight, "sx": sx, "sxx": sxx, "ll": ll}


def check_baseline(reference: dict[str, Any], seqs: pa.ListArray, est: Any, model: Any) -> float:
    """The largest relative gap between the loop's statistics and the local backend's."""
    with LocalEncodedData(pa.table({"x": seqs}), estimator=est) as handle:
        _nobs, value = handle.pysp_stream_accumulate(est, model)
        _nobs, ll = handle.pysp_seq_log_density_sum(model)
    initial, transitions, state_weights = value[0], value[1], value[2]
    pairs = [
        (initial, reference["initial"]),
        (transitions, reference["transitions"]),
        (state_weights, reference["weight"]),
        (np.array([ll]), np.array([reference["ll"]])),
    ]
    return max(
        float(np.max(np.abs(ours - theirs) / np.maximum(np.abs(theirs), 1e-300))) for ours, theirs in pairs
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sequences", type=int, default=1_000_000)
    parser.add_argument("--mean-length", type=float, default=20.0)
    parser.add_argument("--baseline", type=int, default=10_000, help="sequences the numpy loop runs on")
    parser.add_argument("--partitions", type=int, default=2, help="<= 2 for resident tasks on local[2]")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    from mixle_spark.io import spark_session
    from mixle_spark.parallel.backends.spark import SparkEncodedData

    seqs = make_sequences(args.sequences, args.mean_length, args.seed)
    symbols = len(seqs.values)
    est = HiddenMarkovEstimator([GaussianEstimator() for _ in range(K)])
    model = start_model()
    print(
        f"{args.sequences} sequences, {symbols} symbols (mean length {symbols / args.sequences:.2f}), "
        f"{K} states, Gaussian emissions"
    )

    sub = seqs.slice(0, min(args.baseline, len(seqs)))
    sub_symbols = len(sub.flatten())
    t0 = time.perf_counter()
    reference = numpy_forward_backward(sub, model)
    loop_rate = sub_symbols / (time.perf_counter() - t0)
    gap = check_baseline(reference, sub, est, model)
    print(
        f"numpy loop on {len(sub)} sequences: {loop_rate:,.0f} symbols/s; its statistics vs ours: {gap:.1e}"
    )
    if not gap <= 1e-9:
        print("the numpy loop and mixle disagree: no timing is reported", file=sys.stderr)
        return 1

    with LocalEncodedData(pa.table({"x": seqs}), estimator=est) as handle:
        handle.pysp_stream_accumulate(est, model)
        local_times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            handle.pysp_stream_accumulate(est, model)
            local_times.append(time.perf_counter() - t0)
    local_rate = symbols / statistics.median(local_times)
    print(
        f"mixle local (1 thread): {local_rate:,.0f} symbols/s ({statistics.median(local_times):.2f} s/E-step)"
    )

    spark = spark_session(
        "mixle-benchmark-sequences",
        master="local[2]",
        conf={"spark.driver.memory": "8g", "spark.sql.shuffle.partitions": str(args.partitions)},
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.createDataFrame(pa.table({"x": seqs})).repartition(args.partitions).cache()
    df.count()
    rates = {}
    for resident in (True, False):
        with SparkEncodedData(df, estimator=est, resident=resident) as handle:
            handle.pysp_stream_accumulate(est, model)  # encodes and caches (and starts resident tasks)
            times = []
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                handle.pysp_stream_accumulate(est, model)
                times.append(time.perf_counter() - t0)
        rates[resident] = symbols / statistics.median(times)
        how = "resident tasks (as in a fit)" if resident else "one Spark job per E-step"
        print(
            f"mixle spark local[2], {args.partitions} partitions, {how}: {rates[resident]:,.0f} symbols/s "
            f"({statistics.median(times):.2f} s/E-step, median of {args.rounds})"
        )
    df.unpersist()
    spark.stop()
    print(f"mixle spark (resident) / numpy loop: {rates[True] / loop_rate:.1f}x (target >= 20x)")
    print(f"mixle spark (job per E-step) / numpy loop: {rates[False] / loop_rate:.1f}x")
    print(f"mixle local / numpy loop: {local_rate / loop_rate:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
