"""zero_inflated (issue 54): densities against likelihoods written by hand from scipy.stats, the exact
EM's fit against scipy.optimize on the hand-written likelihood, monotone EM, a two-component mixture,
BIC choosing a zero-inflated Poisson over a Poisson on excess zeros, bad input, JSON, weights and the
optional / sequence / record wrappings. The contract suite (tests/unit/cases_combinators.py) runs it on
the backends."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import scipy.optimize as so
import scipy.stats as st

from mixle_spark.errors import ConvergenceWarning, DataValueError
from mixle_spark.estimation import optimize
from mixle_spark.profile import segment_profile
from mixle_spark.stats import (
    ExponentialDistribution,
    GammaDistribution,
    GammaEstimator,
    GaussianEstimator,
    GeometricDistribution,
    GeometricEstimator,
    MixtureDistribution,
    MixtureEstimator,
    NegativeBinomialDistribution,
    NegativeBinomialEstimator,
    OptionalEstimator,
    PoissonDistribution,
    PoissonEstimator,
    RecordDistribution,
    RecordEstimator,
    SequenceDistribution,
    SequenceEstimator,
    ZeroInflatedDistribution,
    ZeroInflatedEstimator,
    distribution_from_dict,
    estimator_from_dict,
)
from mixle_spark.stats.criteria import count_free_parameters, information_criteria

INNER = {
    "poisson": (PoissonDistribution(2.5), st.poisson(2.5).logpmf),
    "negative_binomial": (NegativeBinomialDistribution(3.0, 0.4), st.nbinom(3.0, 0.4).logpmf),
    "geometric": (GeometricDistribution(0.3), st.geom(0.3).logpmf),
    "exponential": (ExponentialDistribution(2.0), st.expon(scale=2.0).logpdf),
    "gamma": (GammaDistribution(2.5, 1.5), st.gamma(2.5, scale=1.5).logpdf),
}


def _hand_log_likelihood(x: np.ndarray, pi: float, inner_log_f: Any) -> np.ndarray:
    """log p(x): log(pi + (1 - pi) f(0)) at a zero, log(1 - pi) + log f(x) elsewhere; a continuous
    family's density at 0 counts as its f(0) (the mixed measure), 0 where 0 is off its support."""
    with np.errstate(divide="ignore"):
        f0 = math.exp(float(inner_log_f(0.0))) if np.isfinite(inner_log_f(0.0)) else 0.0
        return np.where(x == 0, math.log(pi + (1 - pi) * f0), math.log1p(-pi) + inner_log_f(x))


def _ll(model: Any, x: Any) -> float:
    return float(model.seq_log_density(model.encoder().encode(list(x))).sum())


@pytest.mark.parametrize("name", sorted(INNER))
def test_the_density_is_the_hand_written_mixture(name: str) -> None:
    inner, log_f = INNER[name]
    model = ZeroInflatedDistribution(inner, 0.3)
    draws = np.asarray(model.sampler(54_201).sample(400), dtype=np.float64)
    x = np.concatenate([[0.0, 0.0], draws])
    got = model.seq_log_density(model.encoder().encode(list(x)))
    np.testing.assert_allclose(got, _hand_log_likelihood(x, 0.3, log_f), rtol=1e-12)
    assert model.log_density(x[5]) == pytest.approx(got[5], rel=1e-12)
    assert np.mean(draws == 0) == pytest.approx(
        0.3 + 0.7 * (math.exp(log_f(0.0)) if name in ("poisson", "negative_binomial") else 0.0), abs=0.08
    )


def _zip_mle(x: np.ndarray) -> tuple[float, float]:
    """The zero-inflated Poisson MLE by scipy.optimize on the hand-written likelihood."""

    def nll(t: np.ndarray) -> float:
        pi, lam = 1.0 / (1.0 + math.exp(-t[0])), math.exp(t[1])
        return -float(_hand_log_likelihood(x, pi, st.poisson(lam).logpmf).sum())

    res = so.minimize(
        nll,
        [0.0, math.log(max(x.mean(), 0.1))],
        method="Nelder-Mead",
        options={"xatol": 1e-12, "fatol": 1e-12, "maxiter": 20_000},
    )
    return 1.0 / (1.0 + math.exp(-res.x[0])), math.exp(res.x[1])


def test_the_em_fit_is_the_hand_written_mle_and_climbs_monotonely() -> None:
    rng = np.random.default_rng(54_202)
    x = np.where(rng.random(20_000) < 0.35, 0, st.poisson(2.2).rvs(20_000, random_state=rng)).astype(float)
    est = ZeroInflatedEstimator(PoissonEstimator())
    enc = est.encoder().encode(list(x))
    model, lls = None, []
    for _ in range(400):
        acc = est.accumulator_factory().make()
        acc.seq_update(enc, np.ones(len(x)), model)
        model = est.estimate(None, acc.value())
        lls.append(_ll(model, x))
    assert np.all(np.diff(lls) >= -1e-9 * abs(lls[-1]))
    pi, lam = _zip_mle(x)
    assert model.pi == pytest.approx(pi, rel=1e-6)
    assert model.dist.lam == pytest.approx(lam, rel=1e-6)
    assert lls[-1] >= _ll(ZeroInflatedDistribution(PoissonDistribution(2.2), 0.35), x)
    fit = optimize(list(x), est, max_its=1000, delta=1e-13, print_iter=0)
    assert (fit.pi, fit.dist.lam) == pytest.approx((pi, lam), rel=1e-6)


def test_a_two_component_mixture_recovers_its_components() -> None:
    """Which component a zero came from is unidentified by the zeros alone (a mixture of two
    zero-inflated Poissons has as many equations as free weights), so the components are told apart by
    a second field, as in a table: a record of a spend and a zero-inflated visit count."""
    rng = np.random.default_rng(54_203)
    visits = np.concatenate(
        [
            np.where(rng.random(20_000) < 0.4, 0, rng.poisson(2.0, 20_000)),
            np.where(rng.random(30_000) < 0.2, 0, rng.poisson(25.0, 30_000)),
        ]
    )
    spend = np.concatenate([rng.normal(0.0, 1.0, 20_000), rng.normal(10.0, 1.0, 30_000)])
    order = rng.permutation(50_000)
    table = pa.table({"spend": spend[order], "visits": visits[order]})
    est = MixtureEstimator(
        [RecordEstimator({"spend": GaussianEstimator(), "visits": ZeroInflatedEstimator(PoissonEstimator())})]
        * 2
    )
    fit = optimize(table, est, max_its=300, delta=1e-10, seed=54_204, print_iter=0)
    comps = sorted((c.fields["visits"] for c in fit.components), key=lambda c: c.dist.lam)
    assert [c.dist.lam for c in comps] == pytest.approx([2.0, 25.0], rel=0.05)
    assert [c.pi for c in comps] == pytest.approx([0.4, 0.2], rel=0.05)
    assert sorted(fit.w) == pytest.approx([0.4, 0.6], abs=0.02)
    assert count_free_parameters(fit) == 1 + 2 * (2 + 2)


def test_bic_prefers_the_zero_inflated_poisson_on_excess_zeros_and_the_poisson_without() -> None:
    rng = np.random.default_rng(54_205)
    for excess, zip_wins in ((0.25, True), (0.0, False)):
        x = np.where(rng.random(5000) < excess, 0, rng.poisson(3.0, 5000)).tolist()
        bics = {}
        for label, est in (
            ("zip", ZeroInflatedEstimator(PoissonEstimator())),
            ("poisson", PoissonEstimator()),
        ):
            fit = optimize(x, est, max_its=500, delta=1e-10, print_iter=0)
            bics[label] = information_criteria(_ll(fit, x), count_free_parameters(fit), len(x))["bic"]
        assert (bics["zip"] < bics["poisson"]) is zip_wins


def test_a_continuous_inner_family_makes_every_zero_structural() -> None:
    rng = np.random.default_rng(54_206)
    x = np.where(rng.random(8000) < 0.15, 0.0, rng.gamma(3.0, 2.0, 8000))
    fit = optimize(list(x), ZeroInflatedEstimator(GammaEstimator()), max_its=5, print_iter=0)
    assert fit.pi == pytest.approx(float(np.mean(x == 0)), rel=1e-12)
    k, _, theta = st.gamma.fit(x[x > 0], floc=0)
    assert (fit.dist.k, fit.dist.theta) == pytest.approx((k, theta), rel=1e-6)
    assert fit.zero_share() == pytest.approx(fit.pi, rel=1e-12)
    geo = optimize(
        [0, 0, 1, 2, 5, 0, 3], ZeroInflatedEstimator(GeometricEstimator()), max_its=3, print_iter=0
    )
    assert geo.pi == pytest.approx(3 / 7, rel=1e-12)


def test_a_value_outside_the_inner_support_is_one_error_naming_column_row_and_value() -> None:
    table = pa.table({"visits": [0, 3, -2, 1, -5]})
    est = RecordEstimator({"visits": ZeroInflatedEstimator(PoissonEstimator())})
    with pytest.raises(
        DataValueError,
        match=r"^column 'visits': expected a non-negative integer count for PoissonEstimator, got -2.0 "
        r"\(2 bad rows, first at row 3 of 5\)$",
    ):
        est.encoder().from_arrow(table)
    with pytest.raises(DataValueError, match=r"got 1.5 \(row 3 of 3\)"):
        ZeroInflatedEstimator(PoissonEstimator()).encoder().encode([0, 0, 1.5])
    with pytest.raises(DataValueError, match=r"got nan \(row 2 of 2\)"):
        ZeroInflatedEstimator(GammaEstimator()).encoder().encode([0.0, math.nan])


def test_weights_json_and_wrappings() -> None:
    rng = np.random.default_rng(54_207)
    x = np.where(rng.random(300) < 0.3, 0, rng.negative_binomial(2.0, 0.3, 300)).astype(float)
    counts = rng.integers(0, 4, 300)
    est = ZeroInflatedEstimator(NegativeBinomialEstimator())
    start = ZeroInflatedDistribution(NegativeBinomialDistribution(1.0, 0.2), 0.5)

    def step(values: np.ndarray, w: np.ndarray) -> Any:
        acc = est.accumulator_factory().make()
        acc.seq_update(est.encoder().encode(list(values)), w, start)
        return est.estimate(None, acc.value())

    weighted, repeated = step(x, counts.astype(float)), step(np.repeat(x, counts), np.ones(counts.sum()))
    assert weighted.pi == pytest.approx(repeated.pi, rel=1e-12)
    assert (weighted.dist.r, weighted.dist.p) == pytest.approx((repeated.dist.r, repeated.dist.p), rel=1e-9)
    spec = json.loads(json.dumps(weighted.to_dict()))
    assert spec["type"] == "zero_inflated" and spec["dist"]["type"] == "negative_binomial"
    assert distribution_from_dict(spec).to_dict() == weighted.to_dict()
    est_spec = {"type": "zero_inflated", "estimator": {"type": "poisson"}, "pseudo_count": 2.0}
    assert estimator_from_dict(est_spec).to_dict() == est_spec
    assert count_free_parameters(weighted) == 3
    records = [None if m else v for v, m in zip(x.tolist(), rng.random(300) < 0.2, strict=True)]
    with pytest.warns(ConvergenceWarning):
        fit = optimize(records, OptionalEstimator(est), max_its=20, print_iter=0)
    assert fit.p == pytest.approx(0.2, abs=0.06) and 0.0 < fit.dist.pi < 1.0
    # inside a sequence, one EM step from the same start is the flat step
    lists = [x[i : i + 3].tolist() for i in range(0, 300, 3)]
    seq_est = SequenceEstimator(est, PoissonEstimator())
    acc = seq_est.accumulator_factory().make()
    acc.seq_update(
        seq_est.encoder().encode(lists), np.ones(100), SequenceDistribution(start, PoissonDistribution(3.0))
    )
    seq = seq_est.estimate(None, acc.value())
    flat = step(x, np.ones(300))
    assert seq.dist.pi == pytest.approx(flat.pi, rel=1e-12)
    assert seq.dist.dist.r == pytest.approx(flat.dist.r, rel=1e-9)


def test_the_profile_shows_the_zero_share_then_the_inner_family() -> None:
    model = MixtureDistribution(
        [
            RecordDistribution({"v": ZeroInflatedDistribution(PoissonDistribution(2.0), 0.3)}),
            RecordDistribution({"v": ZeroInflatedDistribution(PoissonDistribution(20.0), 0.1)}),
        ],
        [0.5, 0.5],
    )
    share, inner = segment_profile(model)["fields"]
    assert share["field"] == "v (zero share)" and share["kind"] == "share"
    assert [c["share"] for c in share["cells"]] == pytest.approx(
        [0.3 + 0.7 * math.exp(-2.0), 0.1 + 0.9 * math.exp(-20.0)], rel=1e-12
    )
    assert share["cells"][0]["text"] == "39.5% zeros"
    assert inner["field"] == "v" and [c["mean"] for c in inner["cells"]] == [2.0, 20.0]
