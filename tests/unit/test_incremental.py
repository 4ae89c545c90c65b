"""Incremental updates: statistics kept with a model, folded into by ``update`` without the old rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle_spark.em.incremental import DriftError, decay_factor, update
from mixle_spark.em.statistics import Statistics, collect_statistics, value_from_json, value_to_json
from mixle_spark.errors import ModelFormatError, SpecError
from mixle_spark.estimation import best_of, optimize
from mixle_spark.parallel import encoded_data
from mixle_spark.spec import load_model, model_from_json, model_to_json, save_model
from mixle_spark.stats import (
    CategoricalEstimator,
    GaussianEstimator,
    MixtureEstimator,
    MultivariateGaussianEstimator,
    RecordEstimator,
)

QUIET: dict[str, Any] = {"print_iter": 0}


def _gaussian_rows(n: int, mean: float, sd: float, seed: int) -> list[float]:
    return list(np.random.default_rng(seed).normal(mean, sd, n))


def _blobs(n: int, seed: int, shift: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]]) + shift
    return centres[rng.integers(0, 3, n)] + rng.normal(size=(n, 2))


MIX = MixtureEstimator([MultivariateGaussianEstimator()] * 3)


# -- closed forms -------------------------------------------------------------------------------------
def test_an_update_of_a_gaussian_equals_the_fit_on_all_rows() -> None:
    old, new = _gaussian_rows(3000, 1.0, 2.0, 1), _gaussian_rows(500, 4.0, 1.0, 2)
    model = optimize(old, GaussianEstimator(), keep_statistics=True, **QUIET)
    updated = update(model, new)
    both = np.array(old + new)
    assert updated.mu == pytest.approx(both.mean(), rel=1e-12)
    assert updated.sigma2 == pytest.approx(both.var(), rel=1e-10)
    assert updated.statistics.rows == 3500 and updated.statistics.updates == 1
    assert updated.update_result.passes == 2  # no latent variables: the second pass changes nothing


def test_decay_weighs_the_old_rows_by_the_factor() -> None:
    old, new = _gaussian_rows(2000, 0.0, 1.0, 3), _gaussian_rows(1000, 3.0, 1.0, 4)
    model = optimize(old, GaussianEstimator(), keep_statistics=True, **QUIET)
    for kwargs, gamma in (
        ({"decay": 0.25}, 0.25),
        ({"half_life": 2.0}, 0.5**0.5),
        ({"half_life": 500.0, "time_unit": "points"}, 0.5 ** (1000 / 500)),
    ):
        updated = update(model, new, **kwargs)
        w = np.r_[np.full(2000, gamma), np.ones(1000)]
        x = np.r_[old, new]
        assert updated.mu == pytest.approx(np.average(x, weights=w), rel=1e-12), kwargs
        assert updated.update_result.decay == pytest.approx(gamma, rel=1e-15)
        assert updated.statistics.weight == pytest.approx(2000 * gamma + 1000, rel=1e-12)


def test_stepwise_moves_the_mean_by_the_step_size() -> None:
    old, new = _gaussian_rows(2000, 0.0, 1.0, 5), _gaussian_rows(100, 10.0, 1.0, 6)
    model = optimize(old, GaussianEstimator(), keep_statistics=True, **QUIET)
    first = update(model, new, method="stepwise", alpha=0.7)
    eta = 2.0**-0.7  # the first update: k = 0
    assert first.mu == pytest.approx((1 - eta) * np.mean(old) + eta * np.mean(new), rel=1e-12)
    second = update(first, new, method="stepwise", alpha=0.7)
    eta2 = 3.0**-0.7
    assert second.mu == pytest.approx((1 - eta2) * first.mu + eta2 * np.mean(new), rel=1e-12)
    assert second.statistics.updates == 2


def test_decay_factor_checks_its_arguments() -> None:
    assert decay_factor() == 1.0
    with pytest.raises(SpecError, match=r"^decay must be a number in \(0, 1\], got 1\.5$"):
        decay_factor(1.5)
    with pytest.raises(SpecError, match="give decay or half_life, not both"):
        decay_factor(0.5, half_life=3)
    with pytest.raises(SpecError, match=r"^time_unit must be one of 'batches', 'points', got 'rows'$"):
        decay_factor(time_unit="rows")


# -- mixtures -----------------------------------------------------------------------------------------
def test_incremental_em_on_new_rows_comes_close_to_the_batch_fit() -> None:
    old, new = _blobs(6000, 7), _blobs(2000, 8)
    model = optimize(old, MIX, seed=1, max_its=100, delta=1e-9, keep_statistics=True, **QUIET)
    updated = update(model, new, max_its=20)
    batch = optimize(np.r_[old, new], MIX, prev_estimate=model, max_its=100, delta=1e-9, **QUIET)
    every = np.r_[old, new]
    mean_ll = float(np.mean(updated.seq_log_density(updated.encoder().encode(list(every)))))
    mean_batch = batch.fit_result.log_likelihood / len(every)
    assert abs(mean_ll - mean_batch) < 1e-3 * abs(mean_batch)
    result = updated.update_result
    assert result.method == "incremental" and 1 < result.passes <= 20
    assert result.weights_before == pytest.approx(list(model.w)) and len(result.weights_after) == 3
    assert 0 <= result.weight_shift < 0.05
    assert result.drift == pytest.approx(
        model.statistics.mean_log_likelihood - result.mean_log_likelihood_before, rel=1e-12
    )


def test_a_shifted_batch_shows_as_drift_and_max_drop_acts_on_it() -> None:
    old = _blobs(3000, 9)
    model = optimize(old, MIX, seed=2, max_its=60, keep_statistics=True, **QUIET)
    same = update(model, _blobs(1000, 10), max_its=1)
    moved = update(model, _blobs(1000, 11, shift=3.0), max_its=1)
    assert abs(same.update_result.drift) < 0.1
    assert moved.update_result.drift > 1.0
    lines: list[str] = []
    update(model, _blobs(1000, 11, shift=3.0), max_drop=0.5, out=lines.append)
    assert lines[0].startswith("warning: drift ") and "exceeds max_drop 0.5" in lines[0]
    with pytest.raises(DriftError, match=r"nats/row below the model's .* nothing was updated") as caught:
        update(model, _blobs(1000, 11, shift=3.0), max_drop=0.5, on_drift="raise")
    assert caught.value.result.drift > 1.0
    refit = update(model, _blobs(1000, 11, shift=3.0), max_drop=0.5, on_drift="refit")
    assert refit.update_result.refitted and refit.statistics.rows == 1000


def test_a_replayed_batch_id_is_skipped() -> None:
    model = optimize(_blobs(2000, 12), MIX, seed=3, max_its=30, keep_statistics=True, **QUIET)
    first = update(model, _blobs(500, 13), batch_id=0)
    assert first.statistics.last_batch == 0
    assert update(first, _blobs(500, 13), batch_id=0) is first
    second = update(first, _blobs(500, 14), batch_id=1)
    assert second.statistics.last_batch == 1 and second.statistics.updates == 2


def test_no_component_is_lost_when_new_rows_pull_one_onto_a_single_value() -> None:
    rng = np.random.default_rng(0)
    x = np.r_[rng.normal(0.0, 1.0, 500), rng.normal(10.0, 1.0, 500)]
    est = MixtureEstimator([GaussianEstimator()] * 2)
    model = optimize(x, est, seed=1, max_its=50, keep_statistics=True, **QUIET)
    far = int(np.argmax([c.mu for c in model.components]))
    new = np.r_[rng.normal(0.0, 1.0, 100), [10.0] * 5]  # the far component sees only one value
    got = update(model, new, decay=1e-300)  # the past all but forgotten
    collapsed = got.components[far]
    assert collapsed.mu == pytest.approx(10.0, abs=1e-9)
    # the floor, as in a fit: min_var relative to the variance of the column the update reads
    assert collapsed.sigma2 == pytest.approx(GaussianEstimator().min_var * np.var(new), rel=1e-9)
    np.testing.assert_allclose(got.w[far], 5 / 105, rtol=1e-9)
    assert np.isfinite(got.statistics.weight)


def test_a_failed_m_step_stops_the_update_and_keeps_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from mixle_spark.errors import DegenerateComponentError

    model = optimize(_blobs(600, 21), MIX, seed=3, max_its=10, keep_statistics=True, **QUIET)

    def fail(self: Any, nobs: float, value: Any) -> Any:
        raise DegenerateComponentError([(1, "covariance not positive definite")], [None] * 3, [0.3] * 3)

    monkeypatch.setattr(type(model.statistics.estimator), "estimate", fail)
    with pytest.raises(DegenerateComponentError) as raised:
        update(model, _blobs(100, 22))
    assert str(raised.value) == (
        "update, pass 1: the M-step could not build component 1 (covariance not positive definite); "
        "nothing was updated (err.last_model is the model as it was)"
    )
    assert raised.value.last_model is model and model.statistics.updates == 0


def test_update_needs_statistics_and_checks_its_options() -> None:
    plain = optimize(_gaussian_rows(100, 0, 1, 1), GaussianEstimator(), **QUIET)
    assert plain.statistics is None
    with pytest.raises(SpecError, match="keep_statistics=True"):
        update(plain, [1.0, 2.0])
    kept = optimize(_gaussian_rows(100, 0, 1, 1), GaussianEstimator(), keep_statistics=True, **QUIET)
    with pytest.raises(SpecError, match=r"^method must be one of 'incremental', 'stepwise', got 'online'$"):
        update(kept, [1.0], method="online")
    with pytest.raises(SpecError, match=r"^alpha must be a number in \(0\.5, 1\], got 0\.5$"):
        update(kept, [1.0], method="stepwise", alpha=0.5)


# -- statistics kept with the model ------------------------------------------------------------------
def test_statistics_round_trip_exactly_through_the_model_file(tmp_path: Path) -> None:
    est = MixtureEstimator(
        [RecordEstimator({"x": GaussianEstimator(), "c": CategoricalEstimator(pseudo_count=0.5)})] * 2
    )
    rng = np.random.default_rng(0)
    xs, cs = rng.normal(size=400), rng.choice(list("abc"), 400)
    rows = [{"x": float(x), "c": str(c)} for x, c in zip(xs, cs, strict=True)]
    model = optimize(rows, est, seed=4, max_its=10, delta=None, keep_statistics=True, **QUIET)
    path = save_model(model, tmp_path / "model.json")
    loaded = load_model(path)
    assert isinstance(loaded.statistics, Statistics)
    assert loaded.statistics.estimator.to_dict() == model.statistics.estimator.to_dict()
    assert json.dumps(value_to_json(loaded.statistics.value)) == json.dumps(
        value_to_json(model.statistics.value)
    )
    assert (loaded.statistics.weight, loaded.statistics.rows) == (400.0, 400)
    a, b = update(model, rows[:50]), update(loaded, rows[:50])
    assert a.to_dict() == b.to_dict() and a.statistics.to_dict() == b.statistics.to_dict()
    # a model file without statistics loads as before; one with damaged statistics is refused
    payload = json.loads(model_to_json(model))
    assert (
        model_from_json(json.dumps({k: v for k, v in payload.items() if k != "statistics"})).statistics
        is None
    )
    payload["statistics"]["format_version"] = 99
    with pytest.raises(ModelFormatError, match="statistics: format_version 99"):
        model_from_json(json.dumps(payload))


def test_the_value_codec_keeps_arrays_tuples_and_non_finite_numbers() -> None:
    value = (
        np.array([[1.0, np.inf], [np.nan, -0.0]]),
        [np.int64(3), 2.5, float("-inf")],
        {"a": np.arange(3, dtype=np.int32), ("t", 1): None},
        "label",
        True,
    )
    back = value_from_json(json.loads(json.dumps(value_to_json(value), allow_nan=False)))
    np.testing.assert_array_equal(back[0], value[0])
    assert back[0].dtype == np.float64 and back[1][0] == 3 and back[1][2] == float("-inf")
    np.testing.assert_array_equal(back[2]["a"], np.arange(3)) and back[2]["a"].dtype == np.int32
    assert back[2][("t", 1)] is None and back[3:] == ("label", True)
    with pytest.raises(TypeError, match="dtype object"):
        value_to_json(np.array([object()]))


class _CountedPasses:
    """The local backend's handle, counting the passes a fit makes over it."""

    def __init__(self, data: Any, estimator: Any) -> None:
        from mixle_spark.parallel import encoded_data

        self.inner, self.passes = encoded_data(data, estimator, backend="local"), 0
        self._finish = self.inner._finish

        def counted(*args: Any) -> Any:
            self.passes += 1
            return self._finish(*args)

        self.inner._finish = counted


@pytest.mark.parametrize("delta", [None, 1e-5])
def test_keeping_the_statistics_costs_no_pass_when_the_last_model_is_returned(delta: float | None) -> None:
    data = _blobs(1200, 16)
    counts, models = [], []
    for keep in (False, True):
        counted = _CountedPasses(data, MIX)
        fit = optimize(counted.inner, MIX, seed=2, max_its=8, delta=delta, keep_statistics=keep, **QUIET)
        models.append(fit)
        counts.append(counted.passes)
    assert counts[0] == counts[1]  # the pass that scored the last model kept its statistics
    assert models[1].to_dict() == models[0].to_dict()
    kept = models[1].statistics
    again = collect_statistics(encoded_data(data, MIX, backend="local"), MIX, models[1])
    assert kept.weight == again.weight == 1200
    assert kept.log_likelihood == pytest.approx(again.log_likelihood, rel=1e-12)
    ours, theirs = (json.dumps(s.estimator.estimate(s.weight, s.value).to_dict()) for s in (kept, again))
    assert np.allclose(_numbers(ours), _numbers(theirs), rtol=1e-12, atol=0)


def _numbers(text: str) -> list[float]:
    import re

    return [float(v) for v in re.findall(r"-?\d+\.?\d*(?:e[-+]?\d+)?", text)]


def test_best_of_keeps_the_statistics_of_the_model_it_returns() -> None:
    _ll, model = best_of(_blobs(1500, 15), MIX, trials=3, seed=5, max_its=20, keep_statistics=True, **QUIET)
    assert model.statistics is not None and model.statistics.rows == 1500
    # the statistics' pass scored the model returned: its log-likelihood is the fit's
    assert model.statistics.log_likelihood == pytest.approx(model.fit_result.log_likelihood, rel=1e-12)


def test_a_new_label_extends_the_vocabulary_and_its_rows_are_counted_apart() -> None:
    est = MixtureEstimator(
        [RecordEstimator({"x": GaussianEstimator(), "c": CategoricalEstimator(pseudo_count=0.1)})] * 2
    )
    rng = np.random.default_rng(8)
    old = [
        {"x": float(x), "c": str(c)}
        for x, c in zip(rng.normal(size=300), rng.choice(["a", "b"], 300), strict=True)
    ]
    new = [{"x": float(x), "c": "z" if i % 4 == 0 else "a"} for i, x in enumerate(rng.normal(size=80))]
    model = optimize(old, est, seed=1, max_its=20, delta=None, keep_statistics=True, **QUIET)
    updated = update(model, new)
    result = updated.update_result
    assert result.unseen_rows == 20.0  # every 4th new row has the unseen label "z"
    assert np.isfinite(result.mean_log_likelihood_before)  # the other rows' mean
    for component in updated.components:
        assert set(component.fields["c"].pmap) == {"a", "b", "z"}
    labels = updated.statistics.estimator.to_dict()["components"][0]["fields"]["c"]["labels"]
    assert labels == ["a", "b", "z"]
    # the z rows weigh 20 of 380 rows: the mixture gives "z" that share
    share = sum(w * c.fields["c"].pmap["z"] for w, c in zip(updated.w, updated.components, strict=True))
    assert share == pytest.approx(20 / 380, rel=0.02)
    # a vocabulary fixed by labels= stays fixed
    fixed = MixtureEstimator([CategoricalEstimator(labels=["a", "b"])] * 2)
    closed = optimize([r["c"] for r in old], fixed, seed=1, max_its=5, keep_statistics=True, **QUIET)
    with pytest.raises(ValueError, match="label 'z' is not in the model's vocabulary"):
        update(closed, [r["c"] for r in new])


@pytest.mark.parametrize("method", ["incremental", "stepwise"])
def test_the_mp_backend_updates_as_the_local_one(method: str) -> None:
    model = optimize(_blobs(3000, 20), MIX, seed=6, max_its=30, keep_statistics=True, **QUIET)
    new = _blobs(1200, 21, shift=0.5)
    local = update(model, new, method=method, decay=0.8)
    mp = update(model, new, method=method, decay=0.8, backend="mp", num_workers=2, num_chunks=3)
    np.testing.assert_allclose(mp.w, local.w, rtol=1e-9)
    for a, b in zip(mp.components, local.components, strict=True):
        np.testing.assert_allclose(a.mu, b.mu, rtol=1e-9)
        np.testing.assert_allclose(a.covar, b.covar, rtol=1e-9)
    assert mp.update_result.mean_log_likelihood_before == pytest.approx(
        local.update_result.mean_log_likelihood_before, rel=1e-12
    )


def test_with_decay_a_stream_follows_a_shift_and_without_it_does_not() -> None:
    """The mixture's means move at batch 50 of 60: with a half-life of one batch the model fits the
    last 10 batches within 1% of a fresh fit to them; without decay it stays far off."""
    rng = np.random.default_rng(31)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])

    def batch(i: int) -> np.ndarray:
        shift = 0.0 if i < 50 else 2.5
        return centres[rng.integers(0, 3, 300)] + shift + rng.normal(size=(300, 2))

    batches = [batch(i) for i in range(60)]
    first = optimize(batches[0], MIX, seed=1, max_its=50, keep_statistics=True, **QUIET)
    decayed = kept = first
    for part in batches[1:]:
        decayed = update(decayed, part, half_life=1.0)
        kept = update(kept, part)
    last = np.concatenate(batches[50:])
    fresh = optimize(last, MIX, seed=1, max_its=100, **QUIET)

    def mean_ll(model: Any) -> float:
        return float(np.mean(model.seq_log_density(model.encoder().encode(list(last)))))

    target = mean_ll(fresh)
    assert abs(mean_ll(decayed) - target) < 0.01 * abs(target)
    assert mean_ll(kept) < target - 0.01 * abs(target)


def test_the_update_record_is_saved_with_the_model(tmp_path: Path) -> None:
    model = optimize(_blobs(1000, 40), MIX, seed=7, max_its=20, keep_statistics=True, **QUIET)
    updated = update(model, _blobs(300, 41), batch_id=4)
    loaded = load_model(save_model(updated, tmp_path / "m.json"))
    assert loaded.update_result == updated.update_result
    assert loaded.statistics.last_batch == 4 and loaded.statistics.updates == 1
