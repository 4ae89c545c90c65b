"""truncated, censored and hurdle (issue 54) over poisson, negative_binomial, exponential, gamma,
geometric, gaussian, log_gaussian and weibull: densities against likelihoods written by hand from
scipy.stats, the EM fits against scipy.optimize on the hand-written likelihoods (to 1e-6), monotone EM,
a mixture, bad input and clear errors, JSON, weights and the wrappings. The tail quadrature's own
error is checked in test_tail_quadrature_* (about 1e-13 relative; the fits are compared at 1e-6)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import mpmath
import numpy as np
import pyarrow as pa
import pytest
import scipy.optimize as so
import scipy.stats as st

from mixle_spark.cli._fixes import fix_for
from mixle_spark.errors import DataValueError, SpecError
from mixle_spark.estimation import optimize
from mixle_spark.stats import (
    BinomialEstimator,
    CategoricalEstimator,
    CensoredDistribution,
    CensoredEstimator,
    ExponentialDistribution,
    ExponentialEstimator,
    GammaDistribution,
    GammaEstimator,
    GaussianDistribution,
    GaussianEstimator,
    GeometricDistribution,
    GeometricEstimator,
    HurdleDistribution,
    HurdleEstimator,
    LogGaussianDistribution,
    LogGaussianEstimator,
    MixtureEstimator,
    NegativeBinomialDistribution,
    NegativeBinomialEstimator,
    OptionalEstimator,
    PoissonDistribution,
    PoissonEstimator,
    RecordEstimator,
    SequenceEstimator,
    TruncatedDistribution,
    TruncatedEstimator,
    WeibullDistribution,
    WeibullEstimator,
    distribution_from_dict,
    estimator_from_dict,
)
from mixle_spark.stats._tails import _continuous_nodes, log_tail
from mixle_spark.stats.criteria import count_free_parameters

# name: (distribution from its parameters, estimator, scipy frozen from the parameters, truth)
INNER: dict[str, tuple[Callable[..., Any], Callable[[], Any], Callable[..., Any], tuple[float, ...]]] = {
    "poisson": (PoissonDistribution, PoissonEstimator, lambda lam: st.poisson(lam), (4.0,)),
    "negative_binomial": (NegativeBinomialDistribution, NegativeBinomialEstimator, st.nbinom, (3.0, 0.4)),
    "exponential": (ExponentialDistribution, ExponentialEstimator, lambda b: st.expon(scale=b), (2.0,)),
    "gamma": (GammaDistribution, GammaEstimator, lambda k, t: st.gamma(k, scale=t), (2.0, 1.5)),
    "geometric": (GeometricDistribution, GeometricEstimator, st.geom, (0.3,)),
    # the continuous families users truncate and censor most (a capped reading, a session timeout)
    "gaussian": (GaussianDistribution, GaussianEstimator, lambda m, v: st.norm(m, math.sqrt(v)), (3.0, 4.0)),
    "log_gaussian": (
        LogGaussianDistribution,
        LogGaussianEstimator,
        lambda m, v: st.lognorm(math.sqrt(v), scale=math.exp(m)),
        (1.0, 0.36),
    ),
    "weibull": (
        WeibullDistribution,
        WeibullEstimator,
        lambda k, lam: st.weibull_min(k, scale=lam),
        (1.6, 3.0),
    ),
}
BOUNDS = {  # (low, high) of truncation and of censoring, inside each family's bulk
    "poisson": (2.0, 7.0),
    "negative_binomial": (1.0, 8.0),
    "exponential": (0.5, 4.0),
    "gamma": (0.4, 7.0),
    "geometric": (2.0, 6.0),
    "gaussian": (1.0, 6.0),
    "log_gaussian": (1.2, 6.0),
    "weibull": (0.8, 6.0),
}
NAMES = sorted(INNER)


def _log_f(name: str, params: tuple[float, ...], x: np.ndarray) -> np.ndarray:
    frozen = INNER[name][2](*params)
    return frozen.logpmf(x) if hasattr(frozen, "logpmf") else frozen.logpdf(x)


def _is_count(name: str) -> bool:
    return name in ("poisson", "negative_binomial", "geometric")


def _hand_truncated(
    name: str, params: tuple[float, ...], x: np.ndarray, low: float, high: float
) -> np.ndarray:
    f = INNER[name][2](*params)
    mass = f.cdf(high) - (f.cdf(low - 1) if _is_count(name) else f.cdf(low))
    return _log_f(name, params, x) - math.log(mass)


def _hand_censored(
    name: str, params: tuple[float, ...], x: np.ndarray, low: float, high: float
) -> np.ndarray:
    f = INNER[name][2](*params)
    upper = f.logsf(high - 1) if _is_count(name) else f.logsf(high)
    inside = _log_f(name, params, np.clip(x, low + 1e-9, high - 1e-9))
    return np.where(x <= low, f.logcdf(low), np.where(x >= high, upper, inside))


def _hand_hurdle(name: str, params: tuple[float, ...], x: np.ndarray, pi: float) -> np.ndarray:
    f = INNER[name][2](*params)
    with np.errstate(divide="ignore"):
        positive = math.log1p(-pi) + _log_f(name, params, np.maximum(x, 1e-300)) - f.logsf(0)
    return np.where(x == 0, math.log(pi), positive)


def _params(model: Any) -> tuple[float, ...]:
    return tuple(getattr(model, p.name) for p in model.parameters)


def _scipy_mle(nll: Callable[[tuple[float, ...]], float], start: tuple[float, ...], name: str) -> np.ndarray:
    """The MLE of a hand-written likelihood: logs of positive parameters (a probability by its logit)."""

    def to_params(t: np.ndarray) -> tuple[float, ...]:
        if name == "negative_binomial":
            return (math.exp(t[0]), 1.0 / (1.0 + math.exp(-t[1])))
        if name == "geometric":
            return (1.0 / (1.0 + math.exp(-t[0])),)
        return tuple(math.exp(v) for v in t)

    def from_params(p: tuple[float, ...]) -> list[float]:
        if name == "negative_binomial":
            return [math.log(p[0]), math.log(p[1] / (1 - p[1]))]
        if name == "geometric":
            return [math.log(p[0] / (1 - p[0]))]
        return [math.log(v) for v in p]

    res = so.minimize(
        lambda t: nll(to_params(t)),
        from_params(start),
        method="Nelder-Mead",
        options={"xatol": 1e-11, "fatol": 1e-9, "maxiter": 4000},
    )
    return np.array(to_params(res.x))


def _em(est: Any, x: np.ndarray, its: int) -> tuple[Any, list[float]]:
    """EM steps from the first pass's fit until a step gains at most 1e-12 in log-likelihood (at
    most ``its``); the log-likelihood after each."""
    enc = est.encoder().encode(list(x))
    model, lls = None, []
    for _ in range(its):
        acc = est.accumulator_factory().make()
        acc.seq_update(enc, np.ones(len(x)), model)
        model = est.estimate(None, acc.value())
        lls.append(float(model.seq_log_density(enc).sum()))
        if len(lls) > 2 and lls[-1] - lls[-2] <= 1e-12:
            break
    return model, lls


def _draws(name: str, n: int, seed: int) -> np.ndarray:
    _make, _, frozen, truth = INNER[name]
    return np.asarray(frozen(*truth).rvs(size=n, random_state=np.random.default_rng(seed)), dtype=np.float64)


@pytest.mark.parametrize("name", NAMES)
def test_densities_are_the_hand_written_likelihoods(name: str) -> None:
    make, _, _frozen, truth = INNER[name]
    low, high = BOUNDS[name]
    x = _draws(name, 2000, 54_301)
    inner = make(*truth)
    inside = x[(x >= low) & (x <= high)]
    trunc = TruncatedDistribution(inner, low, high)
    got = trunc.seq_log_density(trunc.encoder().encode(list(inside)))
    np.testing.assert_allclose(got, _hand_truncated(name, truth, inside, low, high), rtol=1e-12)
    cens = CensoredDistribution(inner, low, high)
    got = cens.seq_log_density(cens.encoder().encode(list(x)))
    np.testing.assert_allclose(got, _hand_censored(name, truth, x, low, high), rtol=1e-12)
    hx = np.where(np.random.default_rng(54_302).random(2000) < 0.3, 0.0, x)
    hx = hx[(hx == 0) | (hx > 0)]
    hurdle = HurdleDistribution(inner, 0.3)
    got = hurdle.seq_log_density(hurdle.encoder().encode(list(hx)))
    np.testing.assert_allclose(got, _hand_hurdle(name, truth, hx, 0.3), rtol=1e-12)
    assert trunc.log_density(inside[0]) == pytest.approx(
        float(_hand_truncated(name, truth, inside[:1], low, high)[0]), rel=1e-12
    )


@pytest.mark.parametrize("name", NAMES)
def test_truncated_em_reaches_the_hand_written_truncated_mle_monotonely(name: str) -> None:
    _make, estimator, _frozen, truth = INNER[name]
    low, high = BOUNDS[name]
    x = _draws(name, 60_000, 54_303)
    x = x[(x >= low) & (x <= high)][:20_000]
    model, lls = _em(TruncatedEstimator(estimator(), low=low, high=high), x, 1500)
    assert np.all(np.diff(lls) >= -1e-10 * abs(lls[-1]))

    def nll(p: tuple[float, ...]) -> float:
        return -float(_hand_truncated(name, p, x, low, high).sum())

    mle = _scipy_mle(nll, _params(model.dist), name)
    np.testing.assert_allclose(_params(model.dist), mle, rtol=1e-6)
    assert lls[-1] >= -nll(truth)
    np.testing.assert_allclose(_params(model.dist), truth, rtol=0.1)


@pytest.mark.parametrize("name", NAMES)
def test_censored_em_reaches_the_hand_written_censored_mle_monotonely(name: str) -> None:
    _make, estimator, _frozen, truth = INNER[name]
    low, high = BOUNDS[name]
    x = np.clip(_draws(name, 20_000, 54_304), low, high)
    model, lls = _em(CensoredEstimator(estimator(), low=low, high=high), x, 600)
    assert np.all(np.diff(lls) >= -1e-10 * abs(lls[-1]))

    def nll(p: tuple[float, ...]) -> float:
        return -float(_hand_censored(name, p, x, low, high).sum())

    mle = _scipy_mle(nll, _params(model.dist), name)
    np.testing.assert_allclose(_params(model.dist), mle, rtol=1e-6)
    assert lls[-1] >= -nll(truth)
    np.testing.assert_allclose(_params(model.dist), truth, rtol=0.05)


@pytest.mark.parametrize("name", NAMES)
def test_hurdle_fit_is_the_zero_share_and_the_truncated_mle(name: str) -> None:
    make, estimator, frozen, truth = INNER[name]
    x = HurdleDistribution(make(*truth), 0.35).sampler(54_306).sample(20_000)
    x = np.asarray(x, dtype=np.float64)
    model, lls = _em(HurdleEstimator(estimator()), x, 800)
    assert np.all(np.diff(lls) >= -1e-10 * abs(lls[-1]))
    assert model.pi == pytest.approx(float(np.mean(x == 0)), rel=1e-12)
    positive = x[x > 0]

    def nll(p: tuple[float, ...]) -> float:
        f = frozen(*p)
        return -float((_log_f(name, p, positive) - f.logsf(0)).sum())

    mle = _scipy_mle(nll, _params(model.dist), name)
    np.testing.assert_allclose(_params(model.dist), mle, rtol=1e-6)
    np.testing.assert_allclose(_params(model.dist), truth, rtol=0.05)


def test_tail_quadrature_is_exact_to_about_1e_13() -> None:
    d = ExponentialDistribution(2.0)
    for b in (0.5, 3.0):
        x, q = _continuous_nodes(d, b, True, log_tail(d, b, True))
        assert float(q @ x / q.sum()) == pytest.approx(b + 2.0, rel=1e-13)  # memorylessness
        x, q = _continuous_nodes(d, b, False, log_tail(d, b, False))
        mean = 2.0 - b * math.exp(-b / 2) / -math.expm1(-b / 2)
        assert float(q @ x / q.sum()) == pytest.approx(mean, rel=1e-13)
    g, f = GammaDistribution(0.7, 1.5), st.gamma(0.7, scale=1.5)
    x, q = _continuous_nodes(g, 0.2, False, log_tail(g, 0.2, False))
    # E[ln X | X <= b] of a gamma: the partial moment by mpmath's quadrature at 30 digits
    mpmath.mp.dps = 30
    k, theta = mpmath.mpf(0.7), mpmath.mpf(1.5)
    pdf = lambda t: t ** (k - 1) * mpmath.exp(-t / theta) / (mpmath.gamma(k) * theta**k)  # noqa: E731
    exact = float(mpmath.quad(lambda t: mpmath.log(t) * pdf(t), [0, 0.2]) / mpmath.quad(pdf, [0, 0.2]))
    del f
    assert float(q @ np.log(x) / q.sum()) == pytest.approx(exact, rel=1e-12)


def test_a_two_component_mixture_of_truncated_poissons_recovers_its_components() -> None:
    rng = np.random.default_rng(54_307)
    a = rng.poisson(3.0, 80_000)
    b = rng.poisson(30.0, 80_000)
    a, b = a[a >= 1][:20_000], b[(b >= 1) & (b <= 40)][:30_000]
    x = rng.permutation(np.concatenate([a, b])).tolist()
    est = MixtureEstimator([TruncatedEstimator(PoissonEstimator(), low=1.0, high=40.0)] * 2)
    fit = optimize(x, est, max_its=500, delta=1e-10, seed=54_308, print_iter=0)
    lams = sorted(c.dist.lam for c in fit.components)
    assert lams == pytest.approx([3.0, 30.0], rel=0.05)
    assert sorted(fit.w) == pytest.approx([0.4, 0.6], abs=0.02)
    assert count_free_parameters(fit) == 1 + 2


def test_bad_input_and_clear_refusals() -> None:
    table = pa.table({"pages": [3, 5, 9, 4, 12]})
    est = RecordEstimator({"pages": TruncatedEstimator(PoissonEstimator(), low=1.0, high=8.0)})
    line = "column 'pages': expected a number in [1.0, 8.0] for TruncatedEstimator, got 9.0"
    with pytest.raises(DataValueError, match=rf"^{re_escape(line)} \(2 bad rows, first at row 3 of 5\)$"):
        est.encoder().from_arrow(table)
    assert "censored" in fix_for(line + " (row 3 of 5)")
    with pytest.raises(DataValueError, match=r"for HurdleEstimator, got -1.0 \(row 2 of 2\)"):
        HurdleEstimator(PoissonEstimator()).encoder().encode([0, -1])
    with pytest.raises(DataValueError, match=r"for PoissonEstimator, got 2.5 \(row 2 of 3\)"):
        CensoredEstimator(PoissonEstimator(), high=5.0).encoder().encode([1, 2.5, 7])
    with pytest.raises(SpecError, match=r"truncated needs the cdf of binomial, which it does not give"):
        TruncatedEstimator(BinomialEstimator(), low=1.0)
    with pytest.raises(SpecError, match=r"censored needs the cdf of categorical, which it does not give"):
        CensoredEstimator(CategoricalEstimator(), high=1.0)
    with pytest.raises(SpecError, match=r"low must be below high, got low=5.0, high=1.0"):
        TruncatedEstimator(PoissonEstimator(), low=5.0, high=1.0)
    with pytest.raises(SpecError, match=r"low must be below high, got low=2.0, high=2.0"):
        CensoredDistribution(PoissonDistribution(1.0), low=2.0, high=2.0)
    with pytest.raises(SpecError, match=r"give low, high or both"):
        TruncatedEstimator(PoissonEstimator())
    with pytest.raises(SpecError, match=r"gives no probability to \[1.2, 1.8\]"):
        TruncatedDistribution(PoissonDistribution(1.0), low=1.2, high=1.8)
    with pytest.raises(SpecError, match=r"hurdle needs the survival function of binomial"):
        HurdleEstimator(BinomialEstimator())


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_json_weights_free_parameters_and_wrappings() -> None:
    model = TruncatedDistribution(GammaDistribution(2.0, 1.5), low=1.0, high=5.0)
    for m in (
        model,
        CensoredDistribution(PoissonDistribution(3.0), high=6.0),
        HurdleDistribution(PoissonDistribution(2.0), 0.2),
    ):
        spec = json.loads(json.dumps(m.to_dict()))
        assert distribution_from_dict(spec).to_dict() == m.to_dict()
    spec = {"type": "truncated", "estimator": {"type": "gamma"}, "low": 1.0, "high": 5.0}
    assert estimator_from_dict(spec).to_dict() == spec
    spec = {"type": "censored", "estimator": {"type": "poisson"}, "high": 6.0}
    assert estimator_from_dict(spec).to_dict() == spec
    assert (
        estimator_from_dict({"type": "hurdle", "estimator": {"type": "poisson"}}).to_dict()["type"]
        == "hurdle"
    )
    assert count_free_parameters(model) == 2
    assert count_free_parameters(HurdleDistribution(NegativeBinomialDistribution(2.0, 0.5), 0.2)) == 3
    # weights are repeated rows: one EM step from the same model
    rng = np.random.default_rng(54_309)
    x = np.clip(rng.poisson(3.0, 300), 0, 6).astype(float)
    counts = rng.integers(0, 4, 300)
    est = CensoredEstimator(PoissonEstimator(), high=6.0)
    start = CensoredDistribution(PoissonDistribution(2.0), high=6.0)

    def step(values: np.ndarray, w: np.ndarray) -> Any:
        acc = est.accumulator_factory().make()
        acc.seq_update(est.encoder().encode(list(values)), w, start)
        return est.estimate(None, acc.value())

    weighted = step(x, counts.astype(float))
    repeated = step(np.repeat(x, counts), np.ones(int(counts.sum())))
    assert weighted.dist.lam == pytest.approx(repeated.dist.lam, rel=1e-12)
    records = [None if m else v for v, m in zip(x.tolist(), rng.random(300) < 0.2, strict=True)]
    fit = optimize(records, OptionalEstimator(est), max_its=200, delta=1e-12, print_iter=0)
    present = [v for v in records if v is not None]
    alone = optimize(present, est, max_its=200, delta=1e-12, print_iter=0)
    assert fit.dist.dist.lam == pytest.approx(alone.dist.lam, rel=1e-6)
    lists = [x[i : i + 3].tolist() for i in range(0, 300, 3)]
    seq = optimize(lists, SequenceEstimator(est, PoissonEstimator()), max_its=200, delta=1e-12, print_iter=0)
    flat = optimize(x.tolist(), est, max_its=200, delta=1e-12, print_iter=0)
    assert seq.dist.dist.lam == pytest.approx(flat.dist.lam, rel=1e-6)


def test_profile_rows_of_hurdle_and_truncated_fields() -> None:
    from mixle_spark.profile import segment_profile
    from mixle_spark.stats import MixtureDistribution, RecordDistribution

    model = MixtureDistribution(
        [
            RecordDistribution(
                {
                    "n": HurdleDistribution(PoissonDistribution(2.0), 0.6),
                    "t": TruncatedDistribution(GammaDistribution(2.0, 1.5), high=5.0),
                }
            ),
            RecordDistribution(
                {
                    "n": HurdleDistribution(PoissonDistribution(9.0), 0.1),
                    "t": TruncatedDistribution(GammaDistribution(4.0, 1.5), high=5.0),
                }
            ),
        ],
        [0.5, 0.5],
    )
    share, counts, times = segment_profile(model)["fields"]
    assert share["field"] == "n (zero share)" and [c["share"] for c in share["cells"]] == [0.6, 0.1]
    assert counts["field"] == "n" and [c["mean"] for c in counts["cells"]] == [2.0, 9.0]
    assert times["field"] == "t" and [c["mean"] for c in times["cells"]] == pytest.approx([3.0, 6.0])
