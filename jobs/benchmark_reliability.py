"""What checkpointing, the live trace and the silent-corruption audit cost per EM iteration.

    python jobs/benchmark_reliability.py                  # n=1e6, d=10, k=16, local backend
    python jobs/benchmark_reliability.py --rows 200000    # quicker

One dataset and start (``jobs/benchmark.py``'s full-covariance mixture), fitted with the local
backend (``--chunks`` chunks, the audit's "partitions") for ``--iterations`` iterations in each
configuration, in rotation for ``--rounds`` rounds so drift on a shared 2-core machine hits every
configuration alike. Reported: the median seconds per iteration after the first and the ratio to the
plain fit in the same round (the overhead), and whether every configuration reached the same
log-likelihood path bit for bit (none of them may change the estimates):

* ``plain``: no checkpoint, no live trace, no audit. The per-partition telemetry (timings, bytes of
  statistics merged) is always on; its share is measured separately as the time ``stat_nbytes``
  takes on one partition's statistics against that partition's E-step time.
* ``trace``: the EM trace written live to a JSON-lines file (one line per iteration).
* ``checkpoint``: a checksummed checkpoint written atomically (fsync) after every iteration.
* ``audit 1/10``: every iteration, one partition in ten recomputed with the reference kernels.
* ``audit all``: every iteration, every partition recomputed (the worst case: about 2x).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mixle_spark.em.observability import stat_nbytes
from mixle_spark.em.sdc_audit import SDCAudit
from mixle_spark.estimation import optimize
from mixle_spark.parallel import LocalEncodedData
from mixle_spark.stats import (
    MixtureDistribution,
    MixtureEstimator,
    MultivariateGaussianDistribution,
    MultivariateGaussianEstimator,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import REG, make_data, starting_point  # the sibling script


def _options(name: str, workdir: Path, round_: int) -> dict[str, Any]:
    fresh = workdir / f"{name.replace(' ', '_').replace('/', '-')}-{round_}"
    return {
        "plain": {},
        "trace": {"trace_path": fresh.with_suffix(".jsonl")},
        "checkpoint": {"checkpoint_dir": fresh, "checkpoint_every": 1},
        "audit 1/10": {"audit": SDCAudit(every=1, fraction=0.1)},
        "audit all": {"audit": SDCAudit(every=1, fraction=1.0)},
    }[name]


CONFIGS = ("plain", "trace", "checkpoint", "audit 1/10", "audit all")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--components", type=int, default=16)
    parser.add_argument("--chunks", type=int, default=20, help="local chunks (the audited partitions)")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    x, _ = make_data(args.rows, args.dim, args.components, args.seed)
    w, means, covs = starting_point(x, args.components, args.seed)
    start = MixtureDistribution(
        [MultivariateGaussianDistribution(m, c) for m, c in zip(means, covs, strict=True)], w
    )
    est = MixtureEstimator([MultivariateGaussianEstimator(min_covar=REG, ridge=0.0)] * args.components)
    print(
        f"reliability overhead: n={args.rows}, d={args.dim}, k={args.components}, {args.chunks} chunks, "
        f"{args.iterations} iterations x {args.rounds} rounds, local backend"
    )
    per_it: dict[str, list[float]] = {c: [] for c in CONFIGS}
    ratios: dict[str, list[float]] = {c: [] for c in CONFIGS}
    paths: dict[str, list[float]] = {}
    with (
        LocalEncodedData(x, estimator=est, num_chunks=args.chunks) as handle,
        tempfile.TemporaryDirectory() as tmp,
    ):
        for round_ in range(args.rounds):
            this_round: dict[str, float] = {}
            for name in CONFIGS:
                model = optimize(
                    handle, est, max_its=args.iterations, delta=None, prev_estimate=start,
                    **_options(name, Path(tmp), round_),
                )  # fmt: skip
                hist = model.fit_result.history
                this_round[name] = statistics.median(r.seconds for r in hist[1 : args.iterations])
                paths.setdefault(name, [r.log_likelihood for r in hist])
            for name in CONFIGS:
                per_it[name].append(this_round[name])
                ratios[name].append(this_round[name] / this_round["plain"])
        # the always-on telemetry: measuring one partition's statistics against its E-step
        handle.pysp_em_step(est, start)  # warm
        parts = handle.last_parts
        value = est.accumulator_factory().make().value()
        t0 = time.perf_counter()
        for _ in range(100):
            stat_nbytes(value)
        measure = (time.perf_counter() - t0) / 100
        estep = statistics.median(p.seconds for p in parts)

    print(f"{'configuration':<14} {'s/it (median)':>14} {'vs plain':>9}")
    for name in CONFIGS:
        print(f"{name:<14} {statistics.median(per_it[name]):>14.4f} {statistics.median(ratios[name]):>8.3f}x")
    same = all(p == paths["plain"] for p in paths.values())
    print(f"log-likelihood paths identical across configurations: {same}")
    print(
        f"telemetry: stat_nbytes on one partition's statistics {measure * 1e6:.1f} us vs its E-step "
        f"{estep * 1e3:.1f} ms ({measure / estep:.2e} of it), {len(parts)} partitions"
    )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
