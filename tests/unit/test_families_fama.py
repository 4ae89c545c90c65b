"""Rayleigh, half-normal and inverse Gaussian (issue 54): the fit against scipy.stats' maximum-likelihood
fit on fresh draws, densities against scipy's logpdf, a two-component mixture's recovery, weights,
priors, the out-of-support error, JSON and the optional / sequence wrappings. The contract suite
(tests/unit/cases_scalar.py) runs them on the backends."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import scipy.stats as st

from mixle_spark.cli._fixes import fix_for
from mixle_spark.errors import DataValueError, SpecError
from mixle_spark.estimation import optimize
from mixle_spark.profile import field_cell
from mixle_spark.report.separation import separation
from mixle_spark.stats import (
    HalfNormalDistribution,
    HalfNormalEstimator,
    InverseGaussianDistribution,
    InverseGaussianEstimator,
    MixtureEstimator,
    OptionalEstimator,
    PoissonEstimator,
    RayleighDistribution,
    RayleighEstimator,
    RecordEstimator,
    SequenceEstimator,
    distribution_from_dict,
    estimator_from_dict,
)
from mixle_spark.stats.criteria import count_free_parameters

N = 20_000


@dataclass
class Family:
    """One family's ties to scipy.stats: ``frozen(params)`` is the scipy distribution, ``scipy_fit(x)``
    scipy's MLE with loc (and what the family fixes) fixed, in the family's parameters."""

    name: str
    make: Callable[..., Any]
    estimator: Callable[..., Any]
    frozen: Callable[[tuple[float, ...]], Any]
    scipy_fit: Callable[[np.ndarray], tuple[float, ...]]
    truth: tuple[float, ...]
    pair: tuple[tuple[float, ...], tuple[float, ...]]
    outside: float
    expectation: str
    fix: str

    def params(self, model: Any) -> tuple[float, ...]:
        return tuple(getattr(model, p.name) for p in model.parameters)


def _invgauss_fit(x: np.ndarray) -> tuple[float, float]:
    """scipy's fit ``(mu / lam, 0, lam)`` with ``floc=0`` as ``(mu, lam)``."""
    shape, _, scale = st.invgauss.fit(x, floc=0)
    return (shape * scale, scale)


FAMILIES = {
    "inverse_gaussian": Family(
        "inverse_gaussian",
        InverseGaussianDistribution,
        InverseGaussianEstimator,
        lambda p: st.invgauss(p[0] / p[1], scale=p[1]),
        lambda x: _invgauss_fit(x),
        (3.0, 4.5),
        ((1.0, 20.0), (30.0, 60.0)),
        0.0,
        "a positive finite number",
        "WHERE dur > 0",
    ),
    "half_normal": Family(
        "half_normal",
        HalfNormalDistribution,
        HalfNormalEstimator,
        lambda p: st.halfnorm(scale=p[0]),
        lambda x: (st.halfnorm.fit(x, floc=0)[1],),
        (1.7,),
        ((1.0,), (15.0,)),
        -0.5,
        "a non-negative finite number",
        "filter the rows where dur < 0",
    ),
    "rayleigh": Family(
        "rayleigh",
        RayleighDistribution,
        RayleighEstimator,
        lambda p: st.rayleigh(scale=p[0]),
        lambda x: (st.rayleigh.fit(x, floc=0)[1],),
        (2.5,),
        ((1.0,), (12.0,)),
        0.0,
        "a positive finite number",
        "WHERE dur > 0",
    ),
}
NAMES = sorted(FAMILIES)


def _fit(est: Any, x: np.ndarray, weights: np.ndarray | None = None) -> Any:
    enc = est.encoder().encode(list(x))
    acc = est.accumulator_factory().make()
    w = np.ones(len(x)) if weights is None else weights
    acc.seq_update(enc, w, None)
    return est.estimate(float(w.sum()), acc.value())


def _log_likelihood(model: Any, x: np.ndarray) -> float:
    return float(model.seq_log_density(model.encoder().encode(list(x))).sum())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", [54_101, 54_102])
def test_the_fit_matches_scipy_and_beats_the_true_parameters(name: str, seed: int) -> None:
    fam = FAMILIES[name]
    x = fam.frozen(fam.truth).rvs(size=N, random_state=np.random.default_rng(seed))
    fit = _fit(fam.estimator(), x)
    np.testing.assert_allclose(fam.params(fit), fam.scipy_fit(x), rtol=1e-6)
    assert _log_likelihood(fit, x) >= _log_likelihood(fam.make(*fam.truth), x)
    np.testing.assert_allclose(fam.params(fit), fam.truth, rtol=0.05)


@pytest.mark.parametrize("name", NAMES)
def test_weights_count_as_repeated_rows(name: str) -> None:
    fam = FAMILIES[name]
    x = fam.frozen(fam.truth).rvs(size=200, random_state=np.random.default_rng(54_103))
    counts = np.random.default_rng(54_104).integers(0, 4, size=200)
    weighted = _fit(fam.estimator(), x, counts.astype(np.float64))
    repeated = _fit(fam.estimator(), np.repeat(x, counts))
    np.testing.assert_allclose(fam.params(weighted), fam.params(repeated), rtol=1e-12)
    halves = fam.estimator().accumulator_factory().make()
    enc = fam.estimator().encoder().encode(list(x))
    half = fam.estimator().encoder().encode(list(x[:77]))
    rest = fam.estimator().encoder().encode(list(x[77:]))
    halves.seq_update(half, np.ones(77), None)
    other = fam.estimator().accumulator_factory().make()
    other.seq_update(rest, np.ones(123), None)
    whole = fam.estimator().accumulator_factory().make()
    whole.seq_update(enc, np.ones(200), None)
    np.testing.assert_allclose(halves.combine(other.value()).value(), whole.value(), rtol=1e-13)


@pytest.mark.parametrize("name", NAMES)
def test_seq_log_density_is_scipys_logpdf(name: str) -> None:
    fam = FAMILIES[name]
    for params in (fam.truth, *fam.pair):
        frozen = fam.frozen(params)
        x = np.concatenate([frozen.ppf(np.linspace(1e-9, 1 - 1e-9, 401)), frozen.ppf([1e-15]) * [0.5, 1e-3]])
        model = fam.make(*params)
        got = model.seq_log_density(model.encoder().encode(list(x)))
        np.testing.assert_allclose(got, frozen.logpdf(x), rtol=1e-12, atol=1e-300)
        assert [model.log_density(v) for v in x[::40]] == pytest.approx(list(got[::40]), rel=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_a_two_component_mixture_recovers_its_components(name: str) -> None:
    fam = FAMILIES[name]
    rng = np.random.default_rng(54_105)
    first = fam.frozen(fam.pair[0]).rvs(size=20_000, random_state=rng)
    second = fam.frozen(fam.pair[1]).rvs(size=30_000, random_state=rng)
    x = rng.permutation(np.concatenate([first, second]))
    est = MixtureEstimator([fam.estimator(), fam.estimator()])
    fit = optimize(list(x), est, max_its=200, delta=1e-9, seed=54_106, print_iter=0)
    comps = sorted(fit.components, key=lambda c: fam.frozen(fam.params(c)).mean())
    for comp, truth in zip(comps, fam.pair, strict=True):
        np.testing.assert_allclose(fam.params(comp), truth, rtol=0.05)
    assert sorted(fit.w) == pytest.approx([0.4, 0.6], abs=0.02)
    assert count_free_parameters(fit) == 1 + 2 * len(fam.truth)


@pytest.mark.parametrize("name", NAMES)
def test_a_value_outside_the_support_is_one_error_naming_column_row_and_value(name: str) -> None:
    fam = FAMILIES[name]
    good = float(fam.frozen(fam.truth).median())
    table = pa.table({"dur": [good, good, fam.outside, -3.0]})
    est = RecordEstimator({"dur": fam.estimator()})
    estimator_name = type(fam.estimator()).__name__
    with pytest.raises(
        DataValueError,
        match=rf"^column 'dur': expected {fam.expectation} for {estimator_name}, got "
        rf"{fam.outside} \(2 bad rows, first at row 3 of 4\)$",
    ):
        est.encoder().from_arrow(table)
    line = f"column 'dur': expected {fam.expectation} for {estimator_name}, got {fam.outside} (row 3 of 4)"
    assert fam.fix in fix_for(line)
    with pytest.raises(DataValueError, match=r"got -3.0 \(row 2 of 2"):
        fam.estimator().encoder().encode([good, -3.0])
    with pytest.raises(DataValueError, match=r"got inf \(row 1 of 1"):
        fam.estimator().encoder().encode([math.inf])


@pytest.mark.parametrize("name", NAMES)
def test_json_round_trip_and_priors(name: str) -> None:
    fam = FAMILIES[name]
    model = fam.make(*fam.truth)
    spec = json.loads(json.dumps(model.to_dict()))
    assert spec["type"] == name
    assert distribution_from_dict(spec).to_dict() == model.to_dict()
    est = fam.estimator(pseudo_count=2.0, suff_stat=fam.truth[0] if len(fam.truth) == 1 else fam.truth)
    again = estimator_from_dict(json.loads(json.dumps(est.to_dict())))
    assert again == est and again.to_dict() == est.to_dict()
    # the prior alone (no data) is the prior, and a strong prior pulls the fit to it
    only_prior = est.estimate(0.0, est.accumulator_factory().make().value())
    np.testing.assert_allclose(fam.params(only_prior), fam.truth, rtol=1e-12)
    strong = fam.estimator(pseudo_count=1e12, suff_stat=est.suff_stat)
    x = fam.frozen(fam.pair[1]).rvs(size=50, random_state=np.random.default_rng(54_107))
    np.testing.assert_allclose(fam.params(_fit(strong, x)), fam.truth, rtol=1e-6)
    assert count_free_parameters(model) == len(fam.truth)


@pytest.mark.parametrize("name", NAMES)
def test_optional_and_sequence_wrappings_fit(name: str) -> None:
    fam = FAMILIES[name]
    rng = np.random.default_rng(54_108)
    x = fam.frozen(fam.truth).rvs(size=4000, random_state=rng)
    records = [None if m else float(v) for v, m in zip(x, rng.random(4000) < 0.25, strict=True)]
    fit = optimize(records, OptionalEstimator(fam.estimator()), max_its=3, print_iter=0)
    present = np.array([r for r in records if r is not None])
    np.testing.assert_allclose(fam.params(fit.dist), fam.params(_fit(fam.estimator(), present)), rtol=1e-12)
    assert fit.p == pytest.approx(0.25, abs=0.02)
    lists = [list(x[i : i + n]) for i, n in zip(range(0, 4000, 8), rng.integers(0, 8, size=500), strict=True)]
    fit = optimize(lists, SequenceEstimator(fam.estimator(), PoissonEstimator()), max_its=3, print_iter=0)
    flat = np.array([v for row in lists for v in row])
    np.testing.assert_allclose(fam.params(fit.dist), fam.params(_fit(fam.estimator(), flat)), rtol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_profile_quartiles_and_separation(name: str) -> None:
    fam = FAMILIES[name]
    frozen = fam.frozen(fam.truth)
    cell = field_cell(fam.make(*fam.truth).to_dict())
    assert cell["mean"] == pytest.approx(frozen.mean(), rel=1e-12)
    assert cell["sd"] == pytest.approx(frozen.std(), rel=1e-12)
    quartiles = [cell["q1"], cell["median"], cell["q3"]]
    assert quartiles == pytest.approx(list(frozen.ppf([0.25, 0.5, 0.75])), rel=1e-9)
    specs = [fam.make(*p).to_dict() for p in fam.pair]
    apart = separation(specs, [0.4, 0.6])
    assert apart is not None and 0.3 < apart <= 1.0
    assert separation([specs[0], specs[0]], [0.4, 0.6]) == 0.0
    near = separation([specs[0], fam.make(*(v * 1.001 for v in fam.pair[0])).to_dict()], [0.5, 0.5])
    assert near is not None and 0.0 < near < 1e-3


def test_degenerate_data_keep_a_finite_density() -> None:
    constant = InverseGaussianEstimator().estimate(3.0, (3.0, 6.0, 1.5, 3 * math.log(2.0)))
    assert (constant.mu, constant.lam) == (2.0, 2e8)
    assert math.isfinite(constant.log_density(2.0))
    zeros = _fit(HalfNormalEstimator(), np.zeros(3))
    assert zeros.sigma == 1e-12 and math.isfinite(zeros.log_density(0.0))
    assert _fit(RayleighEstimator(), np.full(4, 1e-300)).sigma == 1e-12
    for est in (RayleighEstimator(), HalfNormalEstimator(), InverseGaussianEstimator()):
        empty = est.estimate(0.0, est.accumulator_factory().make().value())
        assert all(v == 1.0 for v in FAMILIES[est.to_dict()["type"]].params(empty))


def test_inverse_gaussian_shape_bounds_are_checked() -> None:
    with pytest.raises(SpecError, match=r"\(min_lam_over_mu, max_lam_over_mu\).*\(5.0, 2.0\)"):
        InverseGaussianEstimator(min_lam_over_mu=5.0, max_lam_over_mu=2.0)


@pytest.mark.parametrize(("mu", "lam"), [(1.0, 1e-6), (5000.0, 1000.0), (1.0, 500.0), (2.0, 1e5)])
def test_inverse_gaussian_quartiles_in_the_tails_of_its_shape(mu: float, lam: float) -> None:
    """Bisection on the cdf, whose ``exp(2 lam / mu)`` term is taken in logs (it alone overflows past
    lam / mu = 355): the quartiles match scipy's ppf from a nearly exponential-tailed shape to a nearly
    Gaussian one."""
    cell = field_cell(InverseGaussianDistribution(mu, lam).to_dict())
    expected = st.invgauss(mu / lam, scale=lam).ppf([0.25, 0.5, 0.75])
    assert [cell["q1"], cell["median"], cell["q3"]] == pytest.approx(list(expected), rel=1e-9)
    assert cell["text"].startswith("median ")


@pytest.mark.parametrize("name", NAMES)
def test_the_mixture_fast_path_scores_and_sums_as_the_direct_path(name: str) -> None:
    fam = FAMILIES[name]
    model = fam.make(*fam.truth)
    x = fam.frozen(fam.truth).rvs(size=400, random_state=np.random.default_rng(54_109))
    est = fam.estimator()
    enc = est.encoder().encode(list(x))
    phi = model.seq_features(enc)
    np.testing.assert_allclose(phi @ model.feature_coefficients(enc), model.seq_log_density(enc), rtol=1e-12)
    w = np.random.default_rng(54_110).random(400)
    direct = est.accumulator_factory().make()
    direct.seq_update(enc, w, model)
    fast = est.accumulator_factory().make()
    fast.add_feature_sums(w @ phi, enc, model)
    np.testing.assert_allclose(fast.value(), direct.value(), rtol=1e-12)
