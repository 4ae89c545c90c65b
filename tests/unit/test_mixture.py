"""MixtureDistribution / MixtureEstimator / MixtureAccumulator and IgnoredDistribution."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import NonFiniteLikelihoodError, SpecError
from mixle_spark.stats.base import RowRandom, distribution_from_dict, estimator_from_dict
from mixle_spark.stats.gaussian import GaussianDistribution, GaussianEstimator
from mixle_spark.stats.ignored import (
    IgnoredAccumulator,
    IgnoredDistribution,
    IgnoredEncoder,
    IgnoredEstimator,
)
from mixle_spark.stats.mixture import (
    MixtureAccumulator,
    MixtureDistribution,
    MixtureEncoder,
    MixtureEstimator,
)

TRUE_MU = np.array([-5.0, 0.0, 4.0])
TRUE_VAR = np.array([1.0, 0.5, 2.0])
TRUE_W = np.array([0.3, 0.45, 0.25])


def _true_mix() -> MixtureDistribution:
    comps = [GaussianDistribution(m, v) for m, v in zip(TRUE_MU, TRUE_VAR, strict=True)]
    return MixtureDistribution(comps, TRUE_W)


def _est(k: int = 3, **kw) -> MixtureEstimator:
    return MixtureEstimator([GaussianEstimator()] * k, **kw)


def _values_close(a, b, rtol: float) -> None:
    def flat(v):
        if isinstance(v, (tuple, list)):
            return np.concatenate([np.zeros(0)] + [flat(x) for x in v])
        return np.atleast_1d(np.asarray(v, dtype=np.float64)).ravel()

    fa, fb = flat(a), flat(b)
    assert fa.shape == fb.shape
    np.testing.assert_allclose(fa, fb, rtol=rtol, atol=rtol * max(1.0, np.abs(fa).max()))


def _em(x: np.ndarray, est: MixtureEstimator, its: int, seed: int = 0, init_p: float = 1.0):
    """Initialize on a row-keyed random subsample (fraction ``init_p``), then ``its`` EM steps."""
    enc = est.encoder().encode(x)
    w = np.ones(len(x))
    rng = RowRandom.for_rows(seed, 0, len(x))
    keep = (rng.child("keep").uniform() < init_p).astype(np.float64)
    acc = est.accumulator_factory().make()
    acc.seq_initialize(enc, keep, rng)
    model = est.estimate(None, acc.value())
    lls = []
    for _ in range(its):
        acc = est.accumulator_factory().make()
        lls.append(float(acc.seq_update(enc, w, model).sum()))
        model = est.estimate(None, acc.value())
    return model, np.array(lls)


def test_em_recovers_three_gaussians_and_ll_never_decreases() -> None:
    x = np.asarray(_true_mix().sampler(123).sample(30000))
    # Random responsibilities over ALL rows give K near-identical starting components (each a
    # random third of the data) and EM leaves that saddle very slowly in 1-D; initializing on a
    # small subsample (as optimize's init_p does) starts from distinct components.
    model, lls = _em(x, _est(), its=150, init_p=0.001)
    assert np.all(np.diff(lls) >= -1e-9 * np.abs(lls[1:])), "EM log-likelihood decreased"
    order = np.argsort([c.mu for c in model.components])
    mu = np.array([model.components[i].mu for i in order])
    var = np.array([model.components[i].sigma2 for i in order])
    np.testing.assert_allclose(model.w[order], TRUE_W, atol=0.015)
    np.testing.assert_allclose(mu, TRUE_MU, atol=0.06)
    np.testing.assert_allclose(var, TRUE_VAR, rtol=0.08)
    # the fitted model is at least as likely as the truth on its training data
    enc = model.encoder().encode(x)
    assert model.seq_log_density(enc).sum() >= _true_mix().seq_log_density(enc).sum()


def test_fast_path_equals_generic_path() -> None:
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(-3, 1, 4000), rng.normal(50, 3, 3000)])
    comps = [
        GaussianDistribution(float(m), float(v))
        for m, v in zip(np.linspace(-5, 55, 7), np.linspace(0.5, 9, 7), strict=True)
    ]
    w = rng.dirichlet(np.ones(7))
    w[3] = 0.0  # a zero-weight component stays exactly zero on both paths
    model = MixtureDistribution(comps, w / w.sum())
    est = _est(7)
    enc = est.encoder().encode(x)
    weights = rng.uniform(0, 2, len(x))
    fast, slow = est.accumulator_factory().make(), est.accumulator_factory().make()
    slow.use_fast_path = False
    ll_fast = fast.seq_update(enc, weights, model)
    ll_slow = slow.seq_update(enc, weights, model)
    np.testing.assert_allclose(ll_fast, ll_slow, rtol=1e-10)
    np.testing.assert_allclose(ll_slow, model.seq_log_density(enc), rtol=1e-12)
    _values_close(fast.value(), slow.value(), rtol=1e-10)
    assert fast.value()[0][3] == 0.0 and slow.value()[0][3] == 0.0
    # and the estimates agree
    a, b = est.estimate(None, fast.value()), est.estimate(None, slow.value())
    for ca, cb in zip(a.components, b.components, strict=True):
        assert ca.mu == pytest.approx(cb.mu, rel=1e-10, abs=1e-10)
        assert ca.sigma2 == pytest.approx(cb.sigma2, rel=1e-10)


def test_seq_update_returns_loglik_and_posteriors_sum_to_one() -> None:
    mix = _true_mix()
    x = np.asarray(mix.sampler(1).sample(500))
    enc = mix.encoder().encode(x)
    one = np.array([mix.log_density(v) for v in x])
    acc = _est().accumulator_factory().make()
    np.testing.assert_allclose(acc.seq_update(enc, np.ones(len(x)), mix), one, rtol=1e-10)
    post = mix.seq_posterior(enc)
    assert post.shape == (500, 3)
    np.testing.assert_allclose(post.sum(axis=1), 1.0, rtol=1e-14)
    np.testing.assert_allclose(post[7], mix.posterior(x[7]), rtol=1e-12)
    np.testing.assert_allclose(acc.value()[0], post.sum(axis=0), rtol=1e-10)
    assert mix.seq_component_log_density(enc).shape == (500, 3)


def test_initialize_split_equals_whole_and_counts_weights() -> None:
    x = np.asarray(_true_mix().sampler(2).sample(1000))
    est = _est()
    enc = est.encoder()
    w = np.random.default_rng(0).uniform(0, 2, len(x))
    w[::7] = 0.0
    whole = est.accumulator_factory().make()
    whole.seq_initialize(enc.encode(x), w, RowRandom.for_rows(99, 0, len(x)))
    assert whole.value()[0].sum() == pytest.approx(w.sum(), rel=1e-12)
    pieces = est.accumulator_factory().make()
    for start, stop in [(600, 1000), (0, 250), (250, 600)]:
        acc = est.accumulator_factory().make()
        rows = RowRandom.for_rows(99, start, stop - start)
        acc.seq_initialize(enc.encode(x[start:stop]), w[start:stop], rows)
        pieces.combine(acc.value())
    _values_close(pieces.value(), whole.value(), rtol=1e-12)
    # another seed gives another start
    other = est.accumulator_factory().make()
    other.seq_initialize(enc.encode(x), w, RowRandom.for_rows(100, 0, len(x)))
    assert not np.allclose(other.value()[0], whole.value()[0])


def test_weight_two_equals_duplicate_rows_and_zero_weight_is_noop() -> None:
    mix = _true_mix()
    x = np.asarray(mix.sampler(3).sample(200))
    est = _est()
    enc = est.encoder()
    w = np.ones(200)
    w[:20] = 2.0
    doubled = est.accumulator_factory().make()
    doubled.seq_update(enc.encode(x), w, mix)
    twice = est.accumulator_factory().make()
    twice.seq_update(enc.encode(np.concatenate([x, x[:20]])), np.ones(220), mix)
    _values_close(doubled.value(), twice.value(), rtol=1e-11)
    w0 = np.ones(200)
    w0[150:] = 0.0
    zero = est.accumulator_factory().make()
    zero.seq_update(enc.encode(x), w0, mix)
    head = est.accumulator_factory().make()
    head.seq_update(enc.encode(x[:150]), np.ones(150), mix)
    _values_close(zero.value(), head.value(), rtol=1e-11)


@pytest.mark.parametrize("trial", range(4))
def test_combine_any_split_any_order_equals_whole(trial: int) -> None:
    rng = np.random.default_rng(trial)
    mix = _true_mix()
    x = np.asarray(mix.sampler(trial).sample(600))
    est = _est()
    enc = est.encoder()
    w = rng.uniform(0.1, 3, 600)
    whole = est.accumulator_factory().make()
    whole.seq_update(enc.encode(x), w, mix)
    cuts = np.sort(rng.choice(np.arange(1, 600), size=4, replace=False))
    parts = np.split(np.arange(600), cuts)
    rng.shuffle(parts)
    values = []
    for idx in parts:
        acc = est.accumulator_factory().make()
        acc.seq_update(enc.encode(x[idx]), w[idx], mix)
        values.append(acc.value())
    # a tree of merges: ((p0 + p1) + (p2 + (p3 + p4)))
    left = est.accumulator_factory().make().combine(values[0]).combine(values[1])
    right = est.accumulator_factory().make().combine(values[3]).combine(values[4])
    right = est.accumulator_factory().make().combine(values[2]).combine(right.value())
    total = left.combine(right.value())
    _values_close(total.value(), whole.value(), rtol=1e-11)
    restored = est.accumulator_factory().make().from_value(total.value())
    _values_close(restored.value(), total.value(), rtol=0)


def test_combine_does_not_alias_its_argument() -> None:
    est = _est(2)
    value = (np.array([1.0, 2.0]), ((1.0, 1.0, 1.0, 0.0), (2.0, 2.0, 2.0, 0.0)))
    acc = est.accumulator_factory().make().combine(value)
    acc.combine(value)
    np.testing.assert_array_equal(value[0], [1.0, 2.0])
    np.testing.assert_array_equal(acc.value()[0], [2.0, 4.0])


def test_impossible_rows_get_prior_weights_and_minus_inf() -> None:
    class HalfLine(GaussianDistribution):
        """A Gaussian restricted to x >= 0 (unnormalised; enough to make rows impossible)."""

        def log_density(self, x):
            return super().log_density(x) if x >= 0 else -np.inf

        def seq_log_density(self, enc):
            return np.where(enc >= 0, super().seq_log_density(enc), -np.inf)

    mix = MixtureDistribution([HalfLine(1.0, 1.0), HalfLine(2.0, 1.0)], [0.25, 0.75])
    x = np.array([1.0, -1.0, 3.0])
    enc = mix.encoder().encode(x)
    ll = mix.seq_log_density(enc)
    assert ll[1] == -np.inf and np.isfinite(ll[[0, 2]]).all()
    assert mix.log_density(-1.0) == -np.inf
    np.testing.assert_allclose(ll[[0, 2]], [mix.log_density(1.0), mix.log_density(3.0)], rtol=1e-12)
    post = mix.seq_posterior(enc)
    np.testing.assert_array_equal(post[1], [0.25, 0.75])
    acc = MixtureEstimator([GaussianEstimator()] * 2).accumulator_factory().make()
    acc.use_fast_path = False
    out = acc.seq_update(enc, np.array([1.0, 2.0, 1.0]), mix)
    assert out[1] == -np.inf
    # the impossible row (weight 2) is spread by the prior weights
    np.testing.assert_allclose(acc.value()[0], post[0] + 2 * np.array([0.25, 0.75]) + post[2], rtol=1e-12)


def test_nan_component_density_names_the_component() -> None:
    class Broken(GaussianDistribution):
        def seq_log_density(self, enc):
            return np.full(len(enc), np.nan)

    mix = MixtureDistribution([GaussianDistribution(0.0, 1.0), Broken(0.0, 1.0)], [0.5, 0.5])
    acc = _est(2).accumulator_factory().make()
    acc.use_fast_path = False
    with pytest.raises(NonFiniteLikelihoodError, match=r"component 1 gave a NaN log-density \(row 1 of 3"):
        acc.seq_update(np.array([0.0, 1.0, 2.0]), np.ones(3), mix)
    with pytest.raises(NonFiniteLikelihoodError, match="component 1"):
        mix.seq_log_density(np.array([0.0]))


@pytest.mark.parametrize(
    ("w", "match"),
    [
        ([0.5, 0.6], r"w must be summing to 1 \(within 1e-9\), got \[0.5, 0.6\]"),
        ([1.5, -0.5], r"w must be non-negative, got \[1.5, -0.5\]"),
        ([0.5, float("nan")], r"w must be finite, got \[0.5, nan\]"),
        ([1.0], r"w must be a sequence of 2 weights \(one per component\), got \[1.0\]"),
    ],
)
def test_bad_weights_raise(w, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        MixtureDistribution([GaussianDistribution(0.0, 1.0)] * 2, w)


def test_other_spec_errors() -> None:
    with pytest.raises(SpecError, match=r"components must be a non-empty list of distributions, got \[\]"):
        MixtureDistribution([], [])
    with pytest.raises(SpecError, match=r"components\[1\] must be a Distribution, got 'x'"):
        MixtureDistribution([GaussianDistribution(0.0, 1.0), "x"], [0.5, 0.5])
    with pytest.raises(SpecError, match=r"w_min must be in \[0, 1/K\] = \[0, 0.5\], got 0.75"):
        _est(2, w_min=0.75)
    with pytest.raises(SpecError, match=r"keys must be a pair \(weight_key, comp_key\), got 'k'"):
        _est(2, keys="k")
    with pytest.raises(SpecError, match=r"pseudo_count must be a non-negative number, got -1"):
        _est(2, pseudo_count=-1)
    mismatch = r"component 0 reads GaussianEncoder\(\) and component 1 reads IgnoredEncoder\(\)"
    with pytest.raises(SpecError, match=mismatch):
        MixtureEstimator([GaussianEstimator(), IgnoredEstimator()]).encoder()
    with pytest.raises(SpecError, match=r"component 1 reads IgnoredEncoder\(\)"):
        MixtureDistribution([GaussianDistribution(0.0, 1.0), IgnoredDistribution()], [0.5, 0.5]).encoder()
    with pytest.raises(SpecError, match=r"unknown key 'weights' in mixture spec"):
        distribution_from_dict({"type": "mixture", "components": [], "weights": [1.0]})
    with pytest.raises(SpecError, match=r"needs the current MixtureDistribution as estimate.*got None"):
        _est(2).accumulator_factory().make().seq_update(np.zeros(2), np.ones(2), None)


def test_json_round_trip_is_exact() -> None:
    w = np.array([0.1, 0.2, 0.7000000000000002])  # sums to 1 + 2 ulp: renormalised exactly once
    mix = MixtureDistribution(
        [GaussianDistribution(0.1, 0.3), GaussianDistribution(1e6, 0.25), GaussianDistribution(-2.0, 4.0)], w
    )
    spec = json.loads(json.dumps(mix.to_dict()))
    assert spec["type"] == "mixture" and len(spec["components"]) == 3
    again = distribution_from_dict(spec)
    assert again == mix
    np.testing.assert_array_equal(again.w, mix.w)
    est = MixtureEstimator(
        [GaussianEstimator(min_var=1e-3), GaussianEstimator()],
        pseudo_count=2.0,
        w_min=0.01,
        keys=("wk", "ck"),
        name="seg",
    )
    assert estimator_from_dict(json.loads(json.dumps(est.to_dict()))) == est
    assert estimator_from_dict({"type": "mixture", "components": ["gaussian", "gaussian"]}).min_rows() == 2
    nested = MixtureDistribution([mix, GaussianDistribution(0.0, 1.0)], [0.5, 0.5])
    assert distribution_from_dict(json.loads(json.dumps(nested.to_dict()))) == nested


def test_estimate_weights_pseudo_count_floor_and_zero_total() -> None:
    value = (np.array([0.0, 30.0, 70.0]), tuple((c, c, c + 1.0, 0.0) for c in (0.0, 30.0, 70.0)))
    plain = _est().estimate(None, value)
    np.testing.assert_allclose(plain.w, [0.0, 0.3, 0.7])
    assert plain.components[0] == GaussianDistribution(0.0, 1.0)  # the Gaussian zero-weight fallback
    pc = _est(pseudo_count=3.0).estimate(None, value)
    np.testing.assert_allclose(pc.w, np.array([1.0, 31.0, 71.0]) / 103.0)
    floored = _est(w_min=0.1).estimate(None, value)
    np.testing.assert_allclose(floored.w, np.array([0.1, 0.3, 0.7]) / 1.1)
    empty = _est().estimate(None, (np.zeros(3), value[1]))
    np.testing.assert_allclose(empty.w, [1 / 3] * 3)
    with pytest.raises(NonFiniteLikelihoodError, match=r"non-finite component counts \[nan, 1.0, 1.0\]"):
        _est().estimate(None, (np.array([np.nan, 1.0, 1.0]), value[1]))


def test_key_merge_pools_weights_and_components() -> None:
    mix = _true_mix()
    est = _est(keys=("wk", "ck"))
    x1 = np.asarray(mix.sampler(4).sample(300))
    x2 = np.asarray(mix.sampler(5).sample(200))
    a, b = est.accumulator_factory().make(), est.accumulator_factory().make()
    a.seq_update(x1, np.ones(300), mix)
    b.seq_update(x2, np.ones(200), mix)
    both = est.accumulator_factory().make()
    both.seq_update(np.concatenate([x1, x2]), np.ones(500), mix)
    stats: dict = {}
    a.key_merge(stats)
    b.key_merge(stats)
    a.key_replace(stats)
    b.key_replace(stats)
    _values_close(a.value(), both.value(), rtol=1e-11)
    _values_close(b.value(), both.value(), rtol=1e-11)
    # only the weights tied: components stay apart
    tied_weights = _est(keys=("wk", None))
    c, d = tied_weights.accumulator_factory().make(), tied_weights.accumulator_factory().make()
    c.seq_update(x1, np.ones(300), mix)
    d.seq_update(x2, np.ones(200), mix)
    own = c.value()[1]
    stats = {}
    for acc in (c, d):
        acc.key_merge(stats)
    for acc in (c, d):
        acc.key_replace(stats)
    np.testing.assert_allclose(c.value()[0], both.value()[0], rtol=1e-12)
    _values_close(c.value()[1], own, rtol=0)


def test_sampler_frequencies_and_reproducibility() -> None:
    mix = _true_mix()
    draws = np.asarray(mix.sampler(7).sample(20000))
    assert draws.shape == (20000,)
    labels = mix.seq_posterior(mix.encoder().encode(draws)).argmax(axis=1)
    np.testing.assert_allclose(np.bincount(labels, minlength=3) / 20000, TRUE_W, atol=0.02)
    np.testing.assert_array_equal(mix.sampler(7).sample(50), mix.sampler(7).sample(50))
    assert not np.array_equal(mix.sampler(7).sample(50), mix.sampler(8).sample(50))
    assert isinstance(mix.sampler(1).sample(), float)
    assert len(MixtureDistribution([IgnoredDistribution()], [1.0]).sampler(0).sample(4)) == 4


def test_estimator_from_distribution_and_nested_mixture_encoders() -> None:
    mix = _true_mix()
    est = mix.estimator(pseudo_count=3.0)
    assert est.pseudo_count == 3.0 and est.estimators[0].pseudo_count == 1.0
    assert mix.estimator().to_dict() == _est().to_dict()
    nested = MixtureDistribution([mix, GaussianDistribution(0.0, 1.0)], [0.5, 0.5])
    assert nested.encoder() == mix.encoder() == MixtureEncoder(GaussianDistribution(0.0, 1.0).encoder())
    x = np.asarray(nested.sampler(3).sample(100))
    np.testing.assert_allclose(
        nested.seq_log_density(nested.encoder().encode(x)), [nested.log_density(v) for v in x], rtol=1e-12
    )
    acc = MixtureEstimator([_est(), GaussianEstimator()]).accumulator_factory().make()
    ll = acc.seq_update(nested.encoder().encode(x), np.ones(100), nested)
    np.testing.assert_allclose(ll, nested.seq_log_density(x), rtol=1e-12)
    assert isinstance(acc, MixtureAccumulator)
    wrapped = MixtureEncoder(GaussianDistribution(0.0, 1.0).encoder())
    assert wrapped.from_arrow(pa.array([1, 2])).tolist() == [1.0, 2.0]


def test_ignored_family() -> None:
    d = IgnoredDistribution()
    assert d.log_density("anything") == 0.0 and d.log_density(None) == 0.0
    enc = d.encoder()
    assert enc.encode(["a", None, {"x": 1}]) == 3
    assert enc.from_arrow(pa.array(["a", None])) == 2
    assert enc.from_arrow(pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]})) == 3
    np.testing.assert_array_equal(d.seq_log_density(3), np.zeros(3))
    acc = IgnoredEstimator().accumulator_factory().make()
    assert isinstance(acc, IgnoredAccumulator)
    assert acc.seq_update(5, np.ones(5), d) is None and acc.value() is None
    assert acc.combine(None) is acc and acc.from_value(None) is acc
    assert IgnoredEstimator().estimate(5.0, None) == d
    assert distribution_from_dict(json.loads(json.dumps(d.to_dict()))) == d
    est = IgnoredEstimator(name="id_column")
    assert estimator_from_dict(json.loads(json.dumps(est.to_dict()))) == est
    assert enc == IgnoredEncoder() and enc.union(IgnoredEncoder()) == enc
    with pytest.raises(SpecError, match=r"unknown key 'p' in ignored spec"):
        distribution_from_dict({"type": "ignored", "p": 1})
    with pytest.raises(SpecError, match=r"pseudo_count must be a non-negative number, got -2"):
        IgnoredEstimator(pseudo_count=-2)
    # a mixture of ignored components is fine and scores 0
    mix = MixtureDistribution([d, d], [0.5, 0.5])
    np.testing.assert_allclose(mix.seq_log_density(mix.encoder().encode([1, "b"])), [0.0, 0.0], atol=1e-15)
