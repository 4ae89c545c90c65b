"""Hidden Markov models: the batch kernels against brute-force enumeration of state paths, Viterbi,
recovery of a 2-state HMM from 20,000 sequences, edge cases and errors."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import DataValueError, SpecError
from mixle_spark.estimation import optimize
from mixle_spark.spec import model_from_json, model_to_json
from mixle_spark.stats import (
    CategoricalDistribution,
    CategoricalEstimator,
    GaussianDistribution,
    GaussianEstimator,
    HiddenMarkovDistribution,
    HiddenMarkovEstimator,
    PoissonDistribution,
    PoissonEstimator,
)
from mixle_spark.stats._hmm_kernels import baum_welch, forward, viterbi


def _enumerate(log_e, lengths, weights, pi, a):  # type: ignore[no-untyped-def]
    """Every quantity by summing over all K^L state paths of every sequence."""
    m, k = log_e.shape
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(int)
    ll, best, best_paths = np.zeros(len(lengths)), np.zeros(len(lengths)), []
    gamma, initial, xi = np.zeros((m, k)), np.zeros(k), np.zeros((k, k))
    with np.errstate(divide="ignore"):
        log_pi, log_a = np.log(pi), np.log(a)
    for i, (s, n) in enumerate(zip(starts, lengths, strict=True)):
        if n == 0:
            best_paths.append(())
            continue
        paths = list(itertools.product(range(k), repeat=int(n)))
        lp = np.array(
            [
                log_pi[p[0]]
                + log_e[s, p[0]]
                + sum(log_a[p[t - 1], p[t]] + log_e[s + t, p[t]] for t in range(1, n))
                for p in paths
            ]
        )
        ll[i] = np.logaddexp.reduce(lp)
        best[i] = lp.max()
        best_paths.append(paths[int(np.argmax(lp))])
        post = np.exp(lp - ll[i]) if np.isfinite(ll[i]) else np.zeros(len(paths))
        for p, q in zip(paths, post, strict=True):
            initial[p[0]] += weights[i] * q
            for t in range(n):
                gamma[s + t, p[t]] += q
            for t in range(1, n):
                xi[p[t - 1], p[t]] += weights[i] * q
    return ll, gamma, initial, xi, best, best_paths


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_forward_backward_and_viterbi_equal_enumeration(k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.dirichlet(np.ones(k), size=k)
    pi = rng.dirichlet(np.ones(k))
    if k >= 3:  # a forbidden transition
        a[0, 1] = 0.0
        a[0] /= a[0].sum()
    lengths = np.array([3, 0, 1, 5, 2, 4, 1, 0, 3])
    log_e = rng.normal(size=(int(lengths.sum()), k)) * 3
    if k >= 2:
        log_e[4] -= 1000.0  # every state emits ~e^-1000 here: the step goes through the log path
    weights = rng.uniform(0.5, 2.0, size=len(lengths))
    ll, gamma, initial, xi, best, paths = _enumerate(log_e, lengths, weights, pi, a)

    bw = baum_welch(log_e, lengths, weights, pi, a)
    np.testing.assert_allclose(bw.log_likelihood, ll, rtol=1e-12)
    np.testing.assert_allclose(bw.gamma, gamma, atol=1e-12)
    np.testing.assert_allclose(bw.initial, initial, atol=1e-12)
    np.testing.assert_allclose(bw.transitions, xi, atol=1e-12)
    np.testing.assert_array_equal(forward(log_e, lengths, pi, a), bw.log_likelihood)

    with np.errstate(divide="ignore"):
        states, log_p = viterbi(log_e, lengths, np.log(pi), np.log(a))
    np.testing.assert_allclose(log_p, best, rtol=1e-12)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    got = [tuple(states[s : s + n].tolist()) for s, n in zip(starts, lengths, strict=True)]
    assert got == paths


def test_viterbi_of_the_distribution_equals_brute_force_on_short_sequences() -> None:
    hmm = HiddenMarkovDistribution(
        [
            CategoricalDistribution({"a": 0.6, "b": 0.3, "c": 0.1}),
            CategoricalDistribution({"a": 0.1, "b": 0.3, "c": 0.6}),
            CategoricalDistribution({"a": 0.3, "b": 0.4, "c": 0.3}),
        ],
        initial=[0.5, 0.2, 0.3],
        transitions=[[0.7, 0.2, 0.1], [0.1, 0.7, 0.2], [0.25, 0.25, 0.5]],
        len_dist=PoissonDistribution(4.0),
    )
    seqs = [s for s in hmm.sampler(5).sample(300) if 1 <= len(s) <= 6]
    enc = hmm.encoder().encode(seqs)
    states, log_p = hmm.seq_viterbi(enc)
    emit = [{lab: math.log(p) for lab, p in e.pmap.items()} for e in hmm.emissions]
    ends = np.cumsum(enc.lengths)
    unique = 0
    for i, seq in enumerate(seqs):
        scored = {
            path: math.log(hmm.initial[path[0]])
            + emit[path[0]][seq[0]]
            + sum(
                math.log(hmm.transitions[path[t - 1], path[t]]) + emit[path[t]][seq[t]]
                for t in range(1, len(seq))
            )
            for path in itertools.product(range(3), repeat=len(seq))
        }
        top = max(scored.values())
        got = tuple(states[ends[i] - len(seq) : ends[i]].tolist())
        assert scored[got] == pytest.approx(top, rel=1e-12)  # a most probable path (ties happen)
        if sum(v > top - 1e-9 for v in scored.values()) == 1:
            unique += 1
            assert got == max(scored, key=scored.__getitem__)
        assert log_p[i] == pytest.approx(top + hmm.len_dist.log_density(len(seq)), rel=1e-12)
    assert unique > 100
    assert hmm.viterbi(seqs[0]) == states[: len(seqs[0])].tolist()


def _two_state_truth() -> HiddenMarkovDistribution:
    return HiddenMarkovDistribution(
        [GaussianDistribution(-1.0, 0.5), GaussianDistribution(2.0, 1.0)],
        initial=[0.7, 0.3],
        transitions=[[0.9, 0.1], [0.25, 0.75]],
        len_dist=PoissonDistribution(15.0),
    )


def test_two_state_hmm_is_recovered_from_20000_sequences() -> None:
    truth = _two_state_truth()
    seqs, paths = truth.draw_with_states(truth.sampler(1), 20_000)
    data = pa.array(seqs, pa.list_(pa.float64()))
    est = HiddenMarkovEstimator([GaussianEstimator()] * 2, len_estimator=PoissonEstimator())
    model = optimize(data, est, max_its=300, delta=1e-9, seed=3)
    assert model.fit_result.converged
    order = np.argsort([e.mu for e in model.emissions])  # states are only defined up to a permutation
    np.testing.assert_allclose([model.emissions[j].mu for j in order], [-1.0, 2.0], atol=0.02)
    np.testing.assert_allclose([model.emissions[j].sigma2 for j in order], [0.5, 1.0], rtol=0.03)
    np.testing.assert_allclose(model.initial[order], [0.7, 0.3], atol=0.015)
    np.testing.assert_allclose(model.transitions[np.ix_(order, order)], truth.transitions, atol=0.01)
    assert model.len_dist.lam == pytest.approx(15.0, rel=0.01)

    # the decoded states agree with the sampled ones (up to the permutation) on >95% of elements
    states, _ = model.seq_viterbi(model.encoder().from_arrow(data))
    truth_states = np.concatenate([np.asarray(p, dtype=np.int64) for p in paths])
    assert np.mean(order[states] == truth_states) > 0.95


def test_empty_and_impossible_sequences_score_without_nan_or_warnings() -> None:
    hmm = HiddenMarkovDistribution(
        [CategoricalDistribution({"a": 1.0}), CategoricalDistribution({"b": 1.0})],
        initial=[1.0, 0.0],
        transitions=[[1.0, 0.0], [0.0, 1.0]],  # never leaves state 0, which only emits "a"
    )
    enc = hmm.encoder().encode([[], ["a", "a"], ["a", "b"], ["b"]])
    ll = hmm.seq_log_density(enc)
    np.testing.assert_array_equal(ll, [0.0, 0.0, -np.inf, -np.inf])
    states, log_p = hmm.seq_viterbi(enc)
    np.testing.assert_array_equal(log_p, [0.0, 0.0, -np.inf, -np.inf])
    assert states.tolist() == [0, 0, 0, 0, 0]
    gamma = hmm.seq_state_posteriors(enc)
    assert np.all(np.isfinite(gamma)) and gamma[:2].tolist() == [[1.0, 0.0], [1.0, 0.0]]


def test_sampling_follows_the_chain() -> None:
    truth = _two_state_truth()
    seqs, paths = truth.draw_with_states(truth.sampler(9), 20_000)
    flat = np.concatenate([np.asarray(p) for p in paths if p])
    firsts = np.array([p[0] for p in paths if p])
    assert np.mean(firsts == 0) == pytest.approx(0.7, abs=0.015)
    pairs = np.concatenate([np.stack([p[:-1], p[1:]], axis=1) for p in map(np.asarray, paths) if len(p) > 1])
    stay0 = np.mean(pairs[pairs[:, 0] == 0, 1] == 0)
    stay1 = np.mean(pairs[pairs[:, 0] == 1, 1] == 1)
    assert (stay0, stay1) == (pytest.approx(0.9, abs=0.01), pytest.approx(0.75, abs=0.01))
    values = np.concatenate([np.asarray(s) for s in seqs if s])
    assert np.mean(values[flat == 1]) == pytest.approx(2.0, abs=0.02)
    assert np.mean([len(s) for s in seqs]) == pytest.approx(15.0, abs=0.1)


def test_parameters_are_validated_with_clear_messages() -> None:
    g = [GaussianDistribution(0.0, 1.0), GaussianDistribution(1.0, 1.0)]
    with pytest.raises(
        SpecError, match=r"transitions must be probabilities summing to 1 within 1e-9 \(row 1 sums"
    ):
        HiddenMarkovDistribution(g, [0.5, 0.5], [[0.5, 0.5], [0.5, 0.6]])
    with pytest.raises(SpecError, match=r"transitions must be a matrix of shape \(2, 2\)"):
        HiddenMarkovDistribution(g, [0.5, 0.5], [[1.0]])
    with pytest.raises(SpecError, match=r"initial must be finite and >= 0"):
        HiddenMarkovDistribution(g, [1.5, -0.5], [[0.5, 0.5], [0.5, 0.5]])
    with pytest.raises(SpecError, match="sampling needs len_dist"):
        HiddenMarkovDistribution(g, [0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]]).sampler(0)
    with pytest.raises(SpecError, match="all states must read one encoding"):
        HiddenMarkovEstimator([GaussianEstimator(), CategoricalEstimator()]).encoder()
    with pytest.raises(SpecError, match="pseudo_count must be a non-negative number"):
        HiddenMarkovEstimator([GaussianEstimator()], pseudo_count=-1.0)


def test_bad_data_names_the_row() -> None:
    hmm = _two_state_truth()
    with pytest.raises(
        DataValueError, match=r"expected a sequence \(a missing list needs OptionalEstimator\).*row 2 of 3"
    ):
        hmm.encoder().from_arrow(pa.array([[1.0], None, [2.0]], pa.list_(pa.float64())))
    with pytest.raises(DataValueError, match=r"row 2 of 2"):
        hmm.encoder().from_arrow(pa.array([[1.0], [2.0, float("nan")]], pa.list_(pa.float64())))


def test_json_round_trip_is_exact_and_smoothing_fills_unvisited_states() -> None:
    truth = _two_state_truth()
    restored = model_from_json(model_to_json(truth))
    assert restored.to_dict() == truth.to_dict()
    spec = json.loads(
        json.dumps(HiddenMarkovEstimator([GaussianEstimator()] * 2, pseudo_count=2.0).to_dict())
    )
    assert spec == {"type": "hidden_markov", "estimators": [{"type": "gaussian"}] * 2, "pseudo_count": 2.0}
    est = HiddenMarkovEstimator([CategoricalEstimator(labels=["a", "b"])] * 2, pseudo_count=2.0)
    acc = est.accumulator_factory().make()
    value = list(acc.value())
    value[0] = np.array([3.0, 0.0])
    value[1] = np.array([[2.0, 0.0], [0.0, 0.0]])  # state 1 never left
    value[2] = np.array([5.0, 0.0])
    value[3] = (np.array([4.0, 1.0]), np.array([0.0, 0.0]))
    model = est.estimate(3.0, tuple(value))
    np.testing.assert_allclose(model.initial, [4.0 / 5.0, 1.0 / 5.0])
    np.testing.assert_allclose(model.transitions, [[0.75, 0.25], [0.5, 0.5]])
