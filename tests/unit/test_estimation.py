"""The EM driver: determinism, stopping rules, monotonicity, restarts, progress and failures."""

from __future__ import annotations

import io
import itertools
import math
import re

import numpy as np
import pytest

from mixle_spark.em.seeding import Seeding
from mixle_spark.errors import (
    ConvergenceWarning,
    EmptyDataError,
    NonFiniteLikelihoodError,
    TooFewRowsError,
)
from mixle_spark.estimation import FitOptions, best_of, initialize, iterate, optimize, trial_seeds
from mixle_spark.parallel import LocalEncodedData, encoded_data
from mixle_spark.stats import (
    CategoricalDistribution,
    CategoricalEstimator,
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
)

TRUE = MixtureDistribution(
    [GaussianDistribution(-4.0, 1.0), GaussianDistribution(0.0, 0.5), GaussianDistribution(5.0, 2.0)],
    [0.3, 0.3, 0.4],
)


@pytest.fixture(scope="module")
def data() -> list[float]:
    return list(TRUE.sampler(5).sample(3000))


def _est(k: int = 3) -> MixtureEstimator:
    return MixtureEstimator([GaussianEstimator()] * k)


def _params(model: MixtureDistribution) -> np.ndarray:
    return np.array([[w, c.mu, c.sigma2] for w, c in zip(model.w, model.components, strict=True)])


def test_same_seed_gives_the_same_model(data: list[float]) -> None:
    a = optimize(data, _est(), max_its=500, delta=1e-6, seed=7)
    b = optimize(data, _est(), max_its=500, delta=1e-6, seed=7)
    assert a == b
    c = optimize(data, _est(), max_its=1, delta=None, seed=8, init="random")
    assert c != optimize(data, _est(), max_its=1, delta=None, seed=7, init="random")


def test_result_does_not_depend_on_chunking(data: list[float]) -> None:
    whole = optimize(data, _est(), max_its=15, delta=None, seed=3)
    chunked = optimize(data, _est(), max_its=15, delta=None, seed=3, chunk_size=137)
    np.testing.assert_allclose(_params(chunked), _params(whole), rtol=1e-9)
    init_whole = initialize(data, _est(), seed=3)
    init_chunked = initialize(data, _est(), seed=3, num_chunks=7)
    np.testing.assert_allclose(_params(init_chunked), _params(init_whole), rtol=1e-12)


def test_recovers_the_mixture(data: list[float]) -> None:
    _ll, model = best_of(data, _est(), trials=3, max_its=300, delta=1e-8, seed=1)
    got = _params(model)[np.argsort([c.mu for c in model.components])]
    want = _params(TRUE)
    np.testing.assert_allclose(got[:, 0], want[:, 0], atol=0.03)
    np.testing.assert_allclose(got[:, 1], want[:, 1], atol=0.15)
    np.testing.assert_allclose(got[:, 2], want[:, 2], rtol=0.15)


def test_log_likelihood_never_decreases(data: list[float]) -> None:
    model = iterate(data, _est(), max_its=40, seed=2)
    lls = [r.log_likelihood for r in model.fit_result.history]
    assert len(lls) == 41
    assert all(b >= a - 1e-9 * abs(a) for a, b in itertools.pairwise(lls))


def test_delta_none_runs_exactly_max_its(data: list[float]) -> None:
    model = optimize(data, _est(), max_its=4, delta=None, seed=1)
    assert model.fit_result.n_iter == 4
    assert [r.iteration for r in model.fit_result.history] == [0, 1, 2, 3, 4]
    assert not model.fit_result.converged


def test_stops_when_gain_below_delta(data: list[float]) -> None:
    model = optimize(data, GaussianEstimator(), max_its=50, delta=1e-6)
    result = model.fit_result
    assert result.converged and result.stopped_because == "converged"
    assert result.n_iter <= 3
    assert 0 <= result.history[-1].gain < 1e-6


def test_not_converging_warns(data: list[float]) -> None:
    with pytest.warns(ConvergenceWarning, match=r"did not converge in 2 iterations \(delta=1e-12"):
        model = optimize(data, _est(), max_its=2, delta=1e-12, seed=1)
    assert not model.fit_result.converged


def test_prev_estimate_is_the_starting_model(data: list[float]) -> None:
    start = initialize(data, _est(), seed=4)
    handle = encoded_data(data, _est())
    expected = handle.pysp_seq_estimate(_est(), start)
    got = optimize(handle, _est(), max_its=1, delta=None, prev_estimate=start)
    np.testing.assert_allclose(_params(got), _params(expected), rtol=1e-14)
    assert got.fit_result.history[0].log_likelihood == pytest.approx(
        handle.pysp_seq_log_density_sum(start)[1], rel=1e-12
    )


def test_best_of_uses_distinct_seeds_and_returns_the_best(data: list[float]) -> None:
    seeds = trial_seeds(5, 4)
    assert len(set(seeds)) == 4 and trial_seeds(5, 4) == seeds
    out = io.StringIO()
    ll, model = best_of(data, _est(), trials=4, max_its=30, seed=5, out=out)
    trial_lls = [
        float(line.rsplit(" ", 1)[1])
        for line in out.getvalue().splitlines()
        if line.startswith("trial") and ": log-likelihood" in line
    ]
    assert len(trial_lls) == 4
    assert ll == pytest.approx(max(trial_lls), rel=1e-10)
    assert ll == model.fit_result.log_likelihood


def test_best_of_warns_when_the_returned_trial_did_not_converge(data: list[float]) -> None:
    """The trials advance together and their own warnings are silenced; the one returned is named."""
    with pytest.warns(ConvergenceWarning) as caught:
        _ll, model = best_of(data, _est(), trials=3, max_its=2, delta=1e-9, seed=5, print_iter=0)
    assert len(caught) == 1
    result = model.fit_result
    assert not result.converged and result.stopped_because == "max_its"
    chosen = trial_seeds(5, 3).index(result.seed)
    assert str(caught[0].message) == (
        f"trial {chosen} (the best of 3): EM did not converge in 2 iterations (delta=1e-09, "
        f"last gain={result.history[-1].gain}); raise max_its or delta"
    )
    _ll, model = best_of(data, _est(), trials=3, max_its=300, delta=1e-6, seed=5, print_iter=0)  # no warning
    assert model.fit_result.converged


def test_progress_lines_go_to_out(data: list[float]) -> None:
    out = io.StringIO()
    optimize(data, _est(), max_its=3, delta=None, seed=1, out=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 5
    assert re.fullmatch(
        r"kmeans\|\| seeding: 3 centres in \d+ passes over the data \(\d+\.\d\d s\)", lines[0]
    )
    lines = lines[1:]
    assert lines[1].startswith("iteration    1  log-likelihood -") and " gain " in lines[1]
    assert re.search(r" rows \d+  \d+\.\d{3}s  [\d.]+[KMGT]? rows/s", lines[1]), lines[1]


def test_weights_equal_duplicated_rows(data: list[float]) -> None:
    w = np.ones(len(data))
    w[:500] = 2.0
    weighted = optimize(data, _est(), max_its=10, delta=None, seed=1, weights=w, prev_estimate=TRUE)
    duplicated = optimize(data + data[:500], _est(), max_its=10, delta=None, seed=1, prev_estimate=TRUE)
    np.testing.assert_allclose(_params(weighted), _params(duplicated), rtol=1e-10)


def test_validation_data_selects_the_model(data: list[float]) -> None:
    vdata = list(TRUE.sampler(99).sample(500))
    model = optimize(data, _est(), max_its=10, delta=None, seed=1, vdata=vdata)
    assert model.fit_result.validation_log_likelihood == pytest.approx(
        LocalEncodedData(vdata, model=model).pysp_seq_log_density_sum(model)[1], rel=1e-12
    )


def test_more_components_than_rows_is_an_error() -> None:
    with pytest.raises(TooFewRowsError, match=r"needs at least 5 rows .* the data has 3"):
        optimize([1.0, 2.0, 3.0], _est(5))


def test_empty_data_is_an_error() -> None:
    with pytest.raises(EmptyDataError, match="empty"):
        optimize([], GaussianEstimator())


def test_zero_density_start_names_iteration_and_row() -> None:
    start = CategoricalDistribution({"a": 0.5, "b": 0.5})
    with pytest.raises(
        NonFiniteLikelihoodError, match=r"log-likelihood is -inf at iteration 0.*row 3 has log-density -inf"
    ):
        optimize(["a", "b", "c", "a"], CategoricalEstimator(), prev_estimate=start)


def test_initial_model_with_zero_density_rows_is_repaired() -> None:
    # 2 of 400 rows carry a rare label the 10% initial sample is likely to miss.
    data = ["a"] * 200 + ["b"] * 198 + ["rare"] * 2
    model = optimize(data, MixtureEstimator([CategoricalEstimator()] * 2), max_its=20, seed=0)
    assert math.isfinite(model.fit_result.log_likelihood)
    assert model.log_density("rare") == pytest.approx(math.log(2 / 400), rel=1e-6)


def test_recovers_a_mixture_of_mixed_type_records() -> None:
    from mixle_spark.spec import estimator_from_spec
    from mixle_spark.stats import (
        LogGaussianDistribution,
        OptionalDistribution,
        PoissonDistribution,
        RecordDistribution,
        RecordEstimator,
        SequenceDistribution,
    )

    def segment(mu: float, channels: dict, lam: float, tags: dict, p_missing: float) -> RecordDistribution:
        return RecordDistribution(
            {
                "amount": LogGaussianDistribution(mu, 0.25),
                "channel": CategoricalDistribution(channels),
                "n_items": OptionalDistribution(PoissonDistribution(lam), p_missing),
                "tags": SequenceDistribution(CategoricalDistribution(tags), PoissonDistribution(2.0)),
            }
        )

    truth = MixtureDistribution(
        [
            segment(2.0, {"web": 0.8, "store": 0.2}, 1.0, {"a": 0.7, "b": 0.3}, 0.1),
            segment(3.5, {"web": 0.1, "store": 0.6, "app": 0.3}, 5.0, {"b": 0.2, "c": 0.8}, 0.3),
            segment(5.0, {"app": 0.9, "web": 0.1}, 10.0, {"a": 0.5, "d": 0.5}, 0.0),
        ],
        [0.5, 0.3, 0.2],
    )
    rows = truth.sampler(11).sample(6000)
    est = estimator_from_spec(
        {
            "type": "mixture",
            "k": 3,
            "component": {
                "type": "record",
                "fields": {
                    "amount": "log_gaussian",
                    "channel": "categorical",
                    "n_items": {"type": "optional", "estimator": "poisson"},
                    "tags": {"type": "sequence", "estimator": "categorical", "len_estimator": "poisson"},
                },
            },
        }
    )
    assert isinstance(est.estimators[0], RecordEstimator)
    _ll, model = best_of(rows, est, trials=3, max_its=200, delta=1e-7, seed=2)
    order = np.argsort([c.fields["amount"].mu for c in model.components])
    fitted = [model.components[i] for i in order]
    np.testing.assert_allclose(np.asarray(model.w)[order], [0.5, 0.3, 0.2], atol=0.03)
    for got, want in zip(fitted, truth.components, strict=True):
        assert got.fields["amount"].mu == pytest.approx(want.fields["amount"].mu, abs=0.05)
        assert got.fields["n_items"].dist.lam == pytest.approx(want.fields["n_items"].dist.lam, rel=0.06)
        assert got.fields["n_items"].p == pytest.approx(want.fields["n_items"].p, abs=0.03)
        for label, prob in want.fields["channel"].pmap.items():
            assert got.fields["channel"].pmap[label] == pytest.approx(prob, abs=0.04)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_its": -1}, ValueError, r"^max_its must be an integer >= 0, got -1$"),
        ({"max_its": "10"}, ValueError, r"^max_its must be an integer >= 0, got '10'$"),
        ({"max_its": "10"}, TypeError, r"^max_its must be an integer >= 0, got '10'$"),
        ({"max_its": 2.5}, TypeError, r"^max_its must be an integer >= 0, got 2\.5$"),
        ({"delta": float("nan")}, ValueError, r"^delta must be None or a finite number >= 0, got nan$"),
        ({"delta": -1e-3}, ValueError, r"^delta must be None or a finite number >= 0, got -0\.001$"),
        ({"checkpoint_every": 2.5}, ValueError, r"^checkpoint_every must be an integer >= 1, got 2\.5$"),
        ({"init_p": 0}, ValueError, r"^init_p must be a number in \(0, 1\], got 0$"),
        ({"init_p": 10}, ValueError, r"^init_p must be a number in \(0, 1\], got 10$"),
        ({"print_iter": -1}, ValueError, r"^print_iter must be an integer >= 0, got -1$"),
        ({"seed": 1.5}, TypeError, r"^seed must be None, an integer or a string, got 1\.5$"),
    ],
)
def test_each_fit_option_is_refused_naming_it_the_value_and_what_it_expects(
    kwargs: dict, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        FitOptions(**kwargs)
    with pytest.raises(error, match=match):
        optimize([1.0, 2.0, 3.0], GaussianEstimator(), **kwargs)


def test_a_whole_float_is_kept_as_the_integer_it_is() -> None:
    options = FitOptions(max_its=5.0, checkpoint_every=2.0, init_steps=3.0, seed=7.0)
    assert (options.max_its, options.checkpoint_every, options.init_steps, options.seed) == (5, 2, 3, 7)
    assert all(type(v) is int for v in (options.max_its, options.checkpoint_every, options.init_steps))


def test_trials_are_checked_alike_by_best_of_and_select_k() -> None:
    from mixle_spark.em.options import check_trials
    from mixle_spark.errors import SpecError
    from mixle_spark.model_selection import select_k

    est = MixtureEstimator([GaussianEstimator()])
    with pytest.raises(SpecError, match=r"^trials must be an integer >= 1, got 0$"):
        best_of([1.0, 2.0, 3.0], est, trials=0)
    with pytest.raises(SpecError, match=r"^trials must be an integer >= 1, got 1\.5$"):
        select_k([1.0, 2.0, 3.0], est, ks=[1], trials=1.5)
    with pytest.raises(SpecError, match=r"^trials must be an integer >= 1, got True$"):
        best_of([1.0, 2.0, 3.0], est, trials=True)
    assert check_trials(2.0) == 2 and type(check_trials(2.0)) is int


def test_a_restart_has_its_own_seed_checkpoints_and_trace() -> None:
    base = FitOptions(seed=3, checkpoint_dir="ckpt/", trace_path="out/trace.jsonl", audit=True)
    trial = base.for_trial(2, 77)
    assert (trial.seed, trial.checkpoint_dir, str(trial.trace_path)) == (
        77,
        "ckpt/trial-2",
        "out/trace.trial-2.jsonl",
    )
    assert base.seed == 3 and base.checkpoint_dir == "ckpt/" and trial.audit is True
    assert trial.sdc_audit is not None and FitOptions().sdc_audit is None
    assert FitOptions(audit=False).sdc_audit is None
    assert FitOptions().for_trial(1, 5).checkpoint_dir is None
    assert FitOptions(init="random", init_steps=4).seeding == Seeding(mode="random", steps=4)


def test_one_fit_is_made_from_the_handle_the_estimator_the_options_and_its_inputs(data: list[float]) -> None:
    """The loop takes the options object as it is (no argument list of its own)."""
    import inspect

    from mixle_spark.em._run import EMRun, FitInputs

    assert list(inspect.signature(EMRun).parameters) == ["handle", "estimator", "options", "inputs"]
    options = FitOptions(max_its=5, delta=None, seed=4, print_iter=0)
    with encoded_data(data, _est()) as handle:
        run = EMRun(handle, _est(), options, FitInputs(label="x: ")).run()
    want = optimize(data, _est(), options=options)
    assert run.to_dict() == want.to_dict() and run.fit_result.n_iter == 5


def test_best_of_and_select_k_tell_on_encoded_the_handle_they_encode(data: list[float]) -> None:
    from mixle_spark.model_selection import select_k

    seen: list[int] = []
    best_of(data, _est(), trials=2, max_its=2, delta=None, on_encoded=lambda h: seen.append(len(h)))
    select_k(data, _est(), ks=[1, 2], max_its=2, delta=None, on_encoded=lambda h: seen.append(len(h)))
    assert seen == [3000, 3000]
