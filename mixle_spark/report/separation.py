"""How much one field separates the segments of a mixture: the report ranks its fields by this.

For component weights ``w_k`` and a field's distribution ``p_k`` in each component, the field's
mixture-average distribution is ``m = sum_k w_k p_k`` and

    I = sum_k w_k KL(p_k || m) = H(m) - sum_k w_k H(p_k)

(the generalised Jensen-Shannon divergence) is the mutual information between the field's value and
the segment a row comes from, in nats. It is 0 when every segment has the same distribution and at
most ``H(w) = -sum_k w_k ln w_k``, reached when the segments' values never overlap. The
**separation** is ``I / H(w)`` in [0, 1]: the share of the uncertainty about a row's segment that the
field's value alone removes. It is invariant to the field's units (any one-to-one transformation of
the values), and so comparable across fields of any family.

How it is computed, by family:

* labels (categorical, integer categorical, Bernoulli, a multinomial's tokens) and point masses: exactly,
  over the labels (values);
* counts (Poisson, geometric, binomial, negative binomial): exactly over the integers within 40 standard
  deviations of every component's mean (by the normal approximation where a standard deviation
  passes 500);
* continuous numbers (Gaussian, log-normal, exponential, Rayleigh, half-normal, inverse Gaussian,
  gamma, inverse gamma, Pareto, beta, Student-t, von Mises): by the trapezoidal rule on each
  component's own grid (dense around its centre, reaching far into its tails), merged; positive
  families are integrated over ``ln x`` and beta over ``logit x``, which
  leaves ``I`` unchanged;
* any other scalar family that gives its own ``quantile``: a count family exactly over the integers
  between its components' 1e-12 and 1 - 1e-12 quantiles, a continuous one by the trapezoidal rule over
  the merged grids of its components' quantiles (dense in both tails), in the data's units;
* a Markov chain: exactly, over its first two labels (the initial label and the first transition);
* anything else (hidden Markov models, nested mixtures, components of different families): no closed
  form; 0 when the field's parameters are identical in every component, else None (not ranked).

>>> from math import log
>>> round(separation([{"type": "bernoulli", "p": 0.0}, {"type": "bernoulli", "p": 1.0}], [0.5, 0.5]), 6)
1.0
>>> separation([{"type": "gaussian", "mu": 3.0, "sigma2": 2.0}] * 3, [0.2, 0.3, 0.5])
0.0
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from mixle_spark.stats._scalar_common import describes
from mixle_spark.stats.base import distribution_from_dict, registered_distributions

__all__ = ["SAME_THRESHOLD", "discrete_separation", "separation"]

SAME_THRESHOLD = 0.005
"""A field whose separation is below this is the same in all segments (the report collapses it): it
tells less than 0.5% of what knowing the segment does. Sampling noise alone gives a fitted categorical
field of ``L`` labels about ``(K - 1)(L - 1) / (2 n H(w))`` over ``n`` rows and ``K`` segments."""

_DENSE = np.linspace(-14.0, 14.0, 1401)
"""A component's dense grid around its centre, in its own scale units."""


def _entropy(weights: np.ndarray) -> float:
    w = weights[weights > 0]
    return float(-(w * np.log(w)).sum())


def _normalised(info: float, weights: np.ndarray) -> float | None:
    top = _entropy(weights)
    if top <= 0.0:  # one segment: nothing to separate
        return None
    return float(min(max(info / top, 0.0), 1.0))


def discrete_separation(pmfs: Any, weights: Sequence[float] | np.ndarray) -> float | None:
    """The separation of a field over a finite set of values: ``pmfs`` is components x values (each
    row a probability vector), ``weights`` the components' weights (summing to 1). None for a single
    segment.

    >>> round(discrete_separation([[1.0, 0.0], [0.5, 0.5]], [0.5, 0.5]), 4)
    0.3113
    """
    p = np.asarray(pmfs, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return _from_logs(np.log(p), np.asarray(weights, dtype=np.float64), None)


def _from_logs(logs: np.ndarray, w: np.ndarray, steps: np.ndarray | None) -> float | None:
    """The separation from the components' log probabilities (components x points): a sum over the
    points, or with ``steps`` (the points' spacing) the trapezoidal rule over them. The mixture's log
    density is a log-sum-exp, so no term divides by an underflowed mixture."""
    keep = w > 0
    logs, w = logs[keep], w[keep]
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        logs = np.where(np.isnan(logs), -np.inf, logs)
        log_m = np.logaddexp.reduce(np.log(w)[:, None] + logs, axis=0)
        dens = np.exp(logs)
        terms = w @ np.where(dens > 0, dens * (logs - log_m), 0.0)
    info = float(terms.sum()) if steps is None else float(np.sum((terms[1:] + terms[:-1]) * steps) / 2)
    return _normalised(info, w)


def _continuous(
    logpdfs: list[Callable[[np.ndarray], np.ndarray]], grids: list[np.ndarray], w: np.ndarray
) -> float | None:
    """The separation by the trapezoidal rule over the merged grids of the components' log densities."""
    u = np.unique(np.concatenate(grids))
    u = u[np.isfinite(u)]
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        logs = np.array([f(u) for f in logpdfs])
    return _from_logs(logs, w, np.diff(u))


def _log_i0(kappa: float) -> float:
    """``ln I0(kappa)``, the von Mises normaliser, without overflow."""
    return math.log(float(np.i0(kappa))) if kappa < 700 else kappa - 0.5 * math.log(2 * math.pi * kappa)


def _density(spec: Mapping[str, Any]) -> tuple[Callable[[np.ndarray], np.ndarray], np.ndarray]:
    """A continuous family's log density over a transformed variable ``u`` and the grid of ``u`` that
    holds its mass (``u = x``, ``ln x`` for positive families, ``logit x`` for beta)."""
    family = str(spec["type"])
    if family in ("gaussian", "log_gaussian"):  # a log-normal is a Gaussian in ln x
        mu, var = float(spec["mu"]), float(spec["sigma2"])
        const = 0.5 * math.log(2 * math.pi * var)
        return (lambda u: -0.5 * (u - mu) ** 2 / var - const), mu + math.sqrt(var) * _DENSE
    if family == "exponential":  # u = ln x
        lb = math.log(float(spec["beta"]))
        return (lambda u: u - lb - np.exp(u - lb)), lb + np.linspace(-45.0, 5.0, 2001)
    if family == "rayleigh":  # u = ln x: log p = 2 (u - ln sigma) - exp(2 (u - ln sigma)) / 2
        ls = math.log(float(spec["sigma"]))
        return (lambda u: 2.0 * (u - ls) - 0.5 * np.exp(2.0 * (u - ls))), ls + np.linspace(-25.0, 4.0, 2001)
    if family == "half_normal":  # u = ln x: log p = c + (u - ln sigma) - exp(2 (u - ln sigma)) / 2
        ls = math.log(float(spec["sigma"]))
        const = 0.5 * math.log(2 / math.pi)
        return (lambda u: const + (u - ls) - 0.5 * np.exp(2.0 * (u - ls))), ls + np.linspace(-45.0, 4.0, 2001)
    if family == "inverse_gaussian":  # u = ln x: log p = c - u / 2 - lam (x - mu)^2 / (2 mu^2 x)
        mu, lam = float(spec["mu"]), float(spec["lam"])
        const = 0.5 * math.log(lam / (2 * math.pi))
        centre, ratio = math.log(mu), lam / mu  # ln x has sd about 1 / sqrt(ratio) when ratio is large
        lo, hi = centre + min(math.log(ratio), 0.0) - 12.0, centre + max(-math.log(ratio), 0.0) + 7.0
        grid = np.concatenate([centre + _DENSE / math.sqrt(max(ratio, 1.0)), np.linspace(lo, hi, 4001)])

        def log_density(u: np.ndarray) -> np.ndarray:
            x = np.exp(u)
            return const - 0.5 * u - lam * (x - mu) ** 2 / (2 * mu * mu * x)  # type: ignore[no-any-return]

        return log_density, grid
    if family == "gamma":  # u = ln x
        k, lt = float(spec["k"]), math.log(float(spec["theta"]))
        const = math.lgamma(k) + k * lt
        centre = lt + math.log(k)
        grid = np.concatenate(
            [
                centre + _DENSE / math.sqrt(k),
                np.linspace(centre - 45.0 / min(k, 1.0) - 5.0, centre + 6.0, 2001),
            ]
        )
        return (lambda u: k * u - np.exp(u - lt) - const), grid
    if family == "inverse_gamma":  # u = ln x: the gamma's density in -u
        a, lb = float(spec["a"]), math.log(float(spec["b"]))
        const = a * lb - math.lgamma(a)
        centre = lb - math.log(a)
        grid = np.concatenate(
            [
                centre + _DENSE / math.sqrt(a),
                np.linspace(centre - 6.0, centre + 45.0 / min(a, 1.0) + 5.0, 2001),
            ]
        )
        return (lambda u: const - a * u - np.exp(lb - u)), grid
    if family == "pareto":  # u = ln x: alpha exp(-alpha (u - ln x_m)) from u = ln x_m on
        alpha, lxm = float(spec["alpha"]), math.log(float(spec["x_m"]))
        edge = np.array([np.nextafter(lxm, -np.inf), lxm])  # the jump at x_m, resolved
        grid = np.concatenate([edge, lxm + np.geomspace(1e-9, 60.0, 2001) / alpha])
        la = math.log(alpha)
        return (lambda u: np.where(u >= lxm, la - alpha * (u - lxm), -np.inf)), grid
    if family == "beta":  # u = logit x
        a, b = float(spec["alpha"]), float(spec["beta"])
        const = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
        centre = math.log(a / b)
        lo, hi = centre - 45.0 / min(a, 1.0) - 5.0, centre + 45.0 / min(b, 1.0) + 5.0
        grid = np.concatenate([centre + math.sqrt(1 / a + 1 / b) * _DENSE, np.linspace(lo, hi, 2001)])
        return (lambda u: -a * np.logaddexp(0.0, -u) - b * np.logaddexp(0.0, u) - const), grid
    if family == "student_t":
        mu, s, dof = float(spec["mu"]), float(spec["sigma"]), float(spec["dof"])
        const = (
            math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi) - math.log(s)
        )
        tail = np.logspace(1.0, min(30.0 / dof, 150.0), 801)  # mass beyond R scales is about R**-dof
        grid = np.concatenate([mu + s * _DENSE, mu + s * tail, mu - s * tail])
        return (lambda u: const - (dof + 1) / 2 * np.log1p(((u - mu) / s) ** 2 / dof)), grid
    if family == "von_mises":  # on the circle: [-pi, pi]
        mu, kappa = float(spec["mu"]), float(spec["kappa"])
        const = math.log(2 * math.pi) + _log_i0(kappa)
        centre = math.atan2(math.sin(mu), math.cos(mu))
        local = centre + _DENSE / math.sqrt(max(kappa, 1e-12))
        grid = np.concatenate([np.linspace(-math.pi, math.pi, 4001), local[np.abs(local) <= math.pi]])
        return (lambda u: kappa * np.cos(u - mu) - const), grid
    raise KeyError(family)


_TAIL_P = np.concatenate([np.logspace(-14.0, -2.0, 241), np.linspace(0.01, 0.99, 1961)])
_GRID_P = np.unique(np.concatenate([_TAIL_P, 1.0 - _TAIL_P]))
"""The probabilities whose quantiles make a self-described component's grid: dense in both tails."""

_MAX_COUNT_SPAN = 200_000
"""A self-described count family is summed exactly over at most this many integers, else not ranked."""


def is_number(family: str) -> bool:
    """Whether ``family`` is a scalar family that gives its own moments (mean and variance)."""
    cls = registered_distributions().get(family)
    return cls is not None and describes(cls, "moments")


def _described(specs: Sequence[Mapping[str, Any]], w: np.ndarray) -> float | None:
    """The separation of a scalar family that gives its own ``quantile`` (and no closed form here): a
    count family summed over the integers between its components' 1e-12 and 1 - 1e-12 quantiles, a
    continuous one by the trapezoidal rule over the merged grids of its components' quantiles. Raises
    KeyError for a family that does not describe itself."""
    if not all(is_number(str(s.get("type"))) for s in specs):
        raise KeyError(str(specs[0].get("type")))
    dists: list[Any] = [distribution_from_dict(dict(s)) for s in specs]
    if not all(describes(d, "quantile") for d in dists):
        raise KeyError(str(specs[0].get("type")))
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if all(getattr(d, "record_type", float) is int for d in dists):
            ends = np.array([d.quantile(np.array([1e-12, 1.0 - 1e-12])) for d in dists])
            low, high = float(ends[:, 0].min()), float(ends[:, 1].max())
            if not (math.isfinite(low) and math.isfinite(high)) or high - low > _MAX_COUNT_SPAN:
                return None
            x = np.arange(low, high + 1.0)
            steps = None
        else:
            x = np.unique(np.concatenate([d.quantile(_GRID_P) for d in dists]))
            x = x[np.isfinite(x)]
            steps = np.diff(x)
        logs = np.array([d.seq_log_density(d.encoder().pack(x)) for d in dists], dtype=np.float64)
    return _from_logs(logs, w, steps)


def _count_log_pmf(spec: Mapping[str, Any], x: np.ndarray) -> np.ndarray:
    family = str(spec["type"])
    lgamma = np.vectorize(math.lgamma, otypes=[np.float64])
    with np.errstate(divide="ignore", invalid="ignore"):
        if family == "poisson":
            lam = float(spec["lam"])
            return x * math.log(lam) - lam - lgamma(x + 1) if lam > 0 else np.where(x == 0, 0.0, -np.inf)
        p = float(spec["p"])
        log_q = math.log1p(-p) if p < 1 else -math.inf
        if family == "geometric":  # 1, 2, ...
            return np.where(x >= 1, math.log(p) + np.where(x > 1, (x - 1) * log_q, 0.0), -np.inf)
        if family == "binomial":
            n = float(spec["n"])
            out = lgamma(n + 1) - lgamma(x + 1) - lgamma(np.maximum(n - x, 0) + 1)
            out = out + np.where(x > 0, x * math.log(p) if p > 0 else -np.inf, 0.0)
            return np.where(x <= n, out + np.where(n - x > 0, (n - x) * log_q, 0.0), -np.inf)
        r = float(spec["r"])  # negative binomial: mean r (1 - p) / p
        return (
            lgamma(x + r) - math.lgamma(r) - lgamma(x + 1) + r * math.log(p) + np.where(x > 0, x * log_q, 0.0)
        )


_COUNT_MOMENTS: dict[str, Callable[[Mapping[str, Any]], tuple[float, float]]] = {
    "poisson": lambda p: (p["lam"], p["lam"]),
    "geometric": lambda p: (1 / p["p"], (1 - p["p"]) / p["p"] ** 2),
    "binomial": lambda p: (p["n"] * p["p"], p["n"] * p["p"] * (1 - p["p"])),
    "negative_binomial": lambda p: (p["r"] * (1 - p["p"]) / p["p"], p["r"] * (1 - p["p"]) / p["p"] ** 2),
}


_EXACT_COUNT_SD = 500.0
"""Counts whose standard deviation is above this are taken as Gaussians of the same mean and variance
(the windows of exact sums would pass 40,000 values)."""


def _counts(specs: Sequence[Mapping[str, Any]], w: np.ndarray) -> float | None:
    """Exactly over the union of the components' windows (mean +- 40 sd, and 0 .. 60); with a standard
    deviation over :data:`_EXACT_COUNT_SD`, by the normal approximation of every component."""
    moments = [tuple(float(v) for v in _COUNT_MOMENTS[str(s["type"])](s)) for s in specs]
    if max(var for _, var in moments) > _EXACT_COUNT_SD**2:
        gaussians = [_density({"type": "gaussian", "mu": mean, "sigma2": var}) for mean, var in moments]
        return _continuous([f for f, _ in gaussians], [g for _, g in gaussians], w)
    windows = [np.arange(0.0, 61.0)]
    for mean, var in moments:
        half = 40.0 * math.sqrt(max(var, 0.0)) + 60.0
        windows.append(np.arange(max(0.0, math.floor(mean - half)), math.ceil(mean + half) + 1))
    x = np.unique(np.concatenate(windows)).astype(np.float64)
    return _from_logs(np.array([_count_log_pmf(s, x) for s in specs]), w, None)


def _labels(pmaps: Sequence[Sequence[tuple[Any, float]]], w: np.ndarray) -> float | None:
    index: dict[str, int] = {}
    for pmap in pmaps:
        for label, _ in pmap:
            index.setdefault(json.dumps(label, default=str), len(index))
    pmfs = np.zeros((len(pmaps), max(len(index), 1)))
    for k, pmap in enumerate(pmaps):
        for label, p in pmap:
            pmfs[k, index[json.dumps(label, default=str)]] += float(p)
    return discrete_separation(pmfs, w)


def _markov(specs: Sequence[Mapping[str, Any]], w: np.ndarray) -> float | None:
    """Over the first two labels: ``(a, b)`` with ``initial[a] * transitions[a][b]``, ``(a, end)``
    where ``a`` has no way on."""
    pmaps = []
    for s in specs:
        rows = {json.dumps(a, default=str): row for a, row in s["transitions"]}
        pairs: list[tuple[Any, float]] = []
        for a, p in s["initial"]:
            row = rows.get(json.dumps(a, default=str), [])
            out = sum(float(q) for _, q in row)
            pairs += [([a, b], float(p) * float(q)) for b, q in row]
            if out < 1.0:
                pairs.append(([a, None], float(p) * (1.0 - out)))
        pmaps.append(pairs)
    return _labels(pmaps, w)


def separation(specs: Sequence[Mapping[str, Any]], weights: Sequence[float] | np.ndarray) -> float | None:
    """The separation (module doc) of one field: ``specs`` is its spec in every component (as in
    ``model.to_dict()``), ``weights`` the components' weights. None where the family has no closed
    form and the specs differ, or for a single segment."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum() if w.sum() > 0 else w
    if _entropy(w) <= 0.0:
        return None
    if len({json.dumps(s, sort_keys=True, default=str) for s in specs}) == 1:
        return 0.0  # the same parameters everywhere: exactly, not to rounding
    families = {str(s.get("type")) for s in specs}
    family = families.pop() if len(families) == 1 else ""
    if family in ("categorical", "multinomial"):
        return _labels([[(label, p) for label, p in s["pmap"]] for s in specs], w)
    if family == "integer_categorical":
        return _labels([[(int(s["min_val"]) + i, p) for i, p in enumerate(s["p_vec"])] for s in specs], w)
    if family == "point_mass":  # each component one value: exactly, over the values
        values = sorted({float(s["value"]) for s in specs})
        return discrete_separation([[float(float(s["value"]) == v) for v in values] for s in specs], w)
    if family == "bernoulli":
        return discrete_separation([[1.0 - float(s["p"]), float(s["p"])] for s in specs], w)
    if family in _COUNT_MOMENTS:
        return _counts(specs, w)
    if family == "markov_chain":
        return _markov(specs, w)
    try:
        parts = [_density(s) for s in specs]
    except KeyError:
        try:
            return _described(specs, w)
        except KeyError:  # no closed form, and the parameters differ
            return None
    return _continuous([f for f, _ in parts], [g for _, g in parts], w)
