"""Every family's ``seq_log_density`` against scipy.stats' ``logpdf`` / ``logpmf`` on the same values.

    python jobs/benchmark_families.py                  # 1,000,000 values per family
    python jobs/benchmark_families.py --values 100000  # quicker
    python jobs/benchmark_families.py --markdown       # the table docs/benchmarks.md shows

For each family with a scipy twin (:data:`TWINS`: the same parameters written as scipy's), the values
are ``--values`` draws of the twin (a fresh seed per family). Measured in the same run, each the median
of ``--rounds``:

* ``mixle``: the family's ``seq_log_density`` over the encoded batch (what an E-step calls; encoding
  happens once, when the data are cached, and is not timed);
* ``scipy``: the frozen twin's ``logpdf`` / ``logpmf`` over the raw values.

Before any time is reported the two are compared: the largest relative difference over the values
(where the scipy value is finite) must be below ``--tolerance`` (default 1e-9), else the run fails.

Reported: milliseconds of each and the ratio mixle / scipy (target: at most 2). Absolute times on a
shared 2-core machine are noise; the ratio is the result. A registered family without a twin is listed
with the reason (scipy has no such distribution).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.stats.base import distribution_from_dict, registered_distributions

try:
    import scipy.stats as st
except ImportError:  # pragma: no cover - scipy comes with the bench extra (scikit-learn)
    sys.exit("jobs/benchmark_families.py needs scipy: pip install 'mixle_spark[bench]'")

Spec = dict[str, Any]
Twin = tuple[Spec, Callable[[Mapping[str, Any]], Any]]

TWINS: dict[str, Twin] = {
    "gaussian": ({"mu": 1.5, "sigma2": 4.0}, lambda p: st.norm(p["mu"], math.sqrt(p["sigma2"]))),
    "log_gaussian": (
        {"mu": 0.5, "sigma2": 0.64},
        lambda p: st.lognorm(math.sqrt(p["sigma2"]), scale=math.exp(p["mu"])),
    ),
    "exponential": ({"beta": 2.5}, lambda p: st.expon(scale=p["beta"])),
    "gamma": ({"k": 2.5, "theta": 1.5}, lambda p: st.gamma(p["k"], scale=p["theta"])),
    "beta": ({"alpha": 2.0, "beta": 5.0}, lambda p: st.beta(p["alpha"], p["beta"])),
    "student_t": (
        {"mu": 1.0, "sigma": 2.0, "dof": 4.0},
        lambda p: st.t(p["dof"], loc=p["mu"], scale=p["sigma"]),
    ),
    "von_mises": ({"mu": 0.5, "kappa": 3.0}, lambda p: st.vonmises(p["kappa"], loc=p["mu"])),
    "rayleigh": ({"sigma": 2.0}, lambda p: st.rayleigh(scale=p["sigma"])),
    "half_normal": ({"sigma": 2.0}, lambda p: st.halfnorm(scale=p["sigma"])),
    "inverse_gaussian": (
        {"mu": 2.0, "lam": 5.0},
        lambda p: st.invgauss(p["mu"] / p["lam"], scale=p["lam"]),
    ),
    "pareto": ({"x_m": 2.0, "alpha": 3.0}, lambda p: st.pareto(p["alpha"], scale=p["x_m"])),
    "inverse_gamma": ({"a": 3.0, "b": 2.0}, lambda p: st.invgamma(p["a"], scale=p["b"])),
    "uniform": ({"low": -2.0, "high": 8.0}, lambda p: st.uniform(p["low"], p["high"] - p["low"])),
    "laplace": ({"mu": 1.0, "b": 2.0}, lambda p: st.laplace(p["mu"], p["b"])),
    "logistic": ({"mu": 1.0, "s": 2.0}, lambda p: st.logistic(p["mu"], p["s"])),
    "gumbel": ({"mu": 1.0, "beta": 2.0}, lambda p: st.gumbel_r(p["mu"], p["beta"])),
    "skew_normal": (
        {"xi": 1.0, "omega": 2.0, "alpha": 4.0},
        lambda p: st.skewnorm(p["alpha"], loc=p["xi"], scale=p["omega"]),
    ),
    "ex_gaussian": (
        {"mu": 1.0, "sigma": 0.5, "tau": 2.0},
        lambda p: st.exponnorm(p["tau"] / p["sigma"], loc=p["mu"], scale=p["sigma"]),
    ),
    "weibull": ({"k": 1.7, "lam": 3.0}, lambda p: st.weibull_min(p["k"], scale=p["lam"])),
    "nakagami": ({"m": 2.5, "omega": 9.0}, lambda p: st.nakagami(p["m"], scale=math.sqrt(p["omega"]))),
    "generalized_pareto": ({"xi": 0.3, "sigma": 2.0}, lambda p: st.genpareto(p["xi"], scale=p["sigma"])),
    "generalized_extreme_value": (
        {"xi": 0.2, "mu": 1.0, "sigma": 2.0},
        lambda p: st.genextreme(-p["xi"], loc=p["mu"], scale=p["sigma"]),
    ),
    "poisson": ({"lam": 4.0}, lambda p: st.poisson(p["lam"])),
    "geometric": ({"p": 0.3}, lambda p: st.geom(p["p"])),
    "binomial": ({"p": 0.3, "n": 20}, lambda p: st.binom(p["n"], p["p"])),
    "negative_binomial": ({"r": 3.0, "p": 0.4}, lambda p: st.nbinom(p["r"], p["p"])),
    "bernoulli": ({"p": 0.3}, lambda p: st.bernoulli(p["p"])),
    "beta_binomial": (
        {"n": 20, "alpha": 2.0, "beta": 5.0},
        lambda p: st.betabinom(p["n"], p["alpha"], p["beta"]),
    ),
    "log_series": ({"p": 0.8}, lambda p: st.logser(p["p"])),
    "skellam": ({"mu1": 4.0, "mu2": 1.5}, lambda p: st.skellam(p["mu1"], p["mu2"])),
}
"""Spec name -> (the family's parameters, its scipy twin built from them)."""

NO_TWIN: dict[str, str] = {
    "point_mass": "scipy has no point mass (its log-density is 0 or -inf: nothing to time)",
}
"""Scalar families left out, and why (the label families, categorical and integer categorical, are table
lookups outside :class:`~mixle_spark.stats._scalar_common.ScalarFamily`)."""


def scalar_families() -> list[str]:
    """The registered scalar leaf families (what :data:`TWINS` and :data:`NO_TWIN` must cover)."""
    from mixle_spark.stats._scalar_common import ScalarFamily

    return sorted(name for name, cls in registered_distributions().items() if issubclass(cls, ScalarFamily))


def encoded(dist: Any, values: np.ndarray) -> Any:
    """The batch an E-step sees: the values read from Arrow by the family's encoder."""
    return dist.encoder().from_arrow(pa.array(values))


def agreement(name: str, n: int, seed: int) -> tuple[Any, Any, np.ndarray, Any]:
    """``(mixle distribution, scipy twin, values, encoded batch)`` for ``n`` fresh draws."""
    params, make = TWINS[name]
    twin = make(params)
    values = np.asarray(twin.rvs(size=n, random_state=np.random.default_rng(seed)), dtype=np.float64)
    dist = distribution_from_dict({"type": name, **params})
    return dist, twin, values, encoded(dist, values)


def scipy_log(twin: Any, values: np.ndarray) -> np.ndarray:
    method = twin.logpmf if hasattr(twin, "logpmf") else twin.logpdf
    return np.asarray(method(values), dtype=np.float64)


def max_relative_difference(ours: np.ndarray, theirs: np.ndarray) -> float:
    keep = np.isfinite(theirs)
    if not np.array_equal(np.isfinite(ours), keep):
        return math.inf
    return float(np.max(np.abs(ours[keep] - theirs[keep]) / np.maximum(np.abs(theirs[keep]), 1.0)))


def timed(call: Callable[[], Any], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(values: int, rounds: int, tolerance: float, names: list[str] | None = None) -> list[dict[str, Any]]:
    rows = []
    for i, name in enumerate(names or sorted(TWINS)):
        dist, twin, x, enc = agreement(name, values, seed=20261207 + i)
        diff = max_relative_difference(dist.seq_log_density(enc), scipy_log(twin, x))
        if not diff <= tolerance:
            raise SystemExit(f"{name}: seq_log_density differs from scipy by {diff:.3g} (> {tolerance:g})")
        ours = timed(lambda d=dist, e=enc: d.seq_log_density(e), rounds)
        theirs = timed(lambda t=twin, v=x: scipy_log(t, v), rounds)
        rows.append(
            {"family": name, "mixle_ms": 1e3 * ours, "scipy_ms": 1e3 * theirs, "ratio": ours / theirs}
        )
        rows[-1]["difference"] = diff
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--values", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tolerance", type=float, default=1e-9)
    parser.add_argument("--family", action="append", help="only these families (repeatable)")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args(argv)
    rows = run(args.values, args.rounds, args.tolerance, args.family)
    if args.markdown:
        print("| family | mixle ms | scipy ms | mixle / scipy |\n|---|---:|---:|---:|")
        for r in rows:
            print(f"| `{r['family']}` | {r['mixle_ms']:.1f} | {r['scipy_ms']:.1f} | {r['ratio']:.2f} |")
    else:
        print(f"{'family':<28}{'mixle ms':>10}{'scipy ms':>10}{'ratio':>8}  max rel diff")
        for r in rows:
            print(
                f"{r['family']:<28}{r['mixle_ms']:>10.1f}{r['scipy_ms']:>10.1f}{r['ratio']:>8.2f}"
                f"  {r['difference']:.1e}"
            )
    slow = [r["family"] for r in rows if r["ratio"] > 2.0]
    print(f"{len(rows)} families at {args.values:,} values; over 2x scipy: {', '.join(slow) or 'none'}")
    for name in sorted(set(scalar_families()) - set(TWINS)):
        print(f"no twin: {name}: {NO_TWIN.get(name, 'not in TWINS')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
