"""One stopping rule per row: ``tol`` (a gain per unit of row weight) beside the reference's ``delta``
(a gain of the total log-likelihood), on every surface that takes one."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle_spark.em.incremental import update
from mixle_spark.errors import CheckpointMismatchError, ConvergenceWarning, SpecError
from mixle_spark.estimation import FitOptions, optimize
from mixle_spark.model_selection import select_k
from mixle_spark.spec import load_spec
from mixle_spark.stats import GaussianEstimator, MixtureEstimator, MultivariateGaussianEstimator
from tests.unit.test_jobs import _run as _job  # em_fit --backend local in a subprocess

ROOT = Path(__file__).resolve().parents[2]
QUIET: dict[str, Any] = {"print_iter": 0}
MIX = MixtureEstimator([GaussianEstimator()] * 2)


def _rows(n: int, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.where(rng.random(n) < 0.4, rng.normal(-2.0, 1.0, n), rng.normal(1.5, 0.7, n))


def _gains(model: Any) -> list[float]:
    return [r.gain for r in model.fit_result.history[1:]]


@pytest.mark.parametrize("n", [500, 8000])
def test_tol_is_delta_times_the_row_count(n: int) -> None:
    """The same rule on any number of rows: tol per row stops where delta = tol * n stops."""
    x = list(_rows(n))
    per_row = optimize(x, MIX, seed=1, max_its=500, tol=1e-5, **QUIET)
    total = optimize(x, MIX, seed=1, max_its=500, delta=1e-5 * n, **QUIET)
    assert per_row.fit_result.converged and per_row.fit_result.tol == 1e-5
    assert per_row.fit_result.n_iter == total.fit_result.n_iter
    assert per_row.to_dict() == total.to_dict()
    gains = _gains(per_row)  # the last record scores the returned model: the stopping gain is before it
    assert 0 <= gains[-2] < 1e-5 * n and all(g >= 1e-5 * n for g in gains[:-2])


def test_tol_counts_row_weight_not_rows() -> None:
    x = _rows(2000)
    weights = np.full(2000, 2.5)
    from mixle_spark.parallel import encoded_data

    handle = encoded_data(list(x), MIX, weights=list(weights))
    fit = optimize(handle, MIX, seed=1, max_its=500, tol=1e-5, **QUIET)
    same = optimize(handle, MIX, seed=1, max_its=500, delta=1e-5 * 5000.0, **QUIET)
    assert fit.fit_result.n_iter == same.fit_result.n_iter and fit.to_dict() == same.to_dict()


def test_one_rule_at_a_time() -> None:
    x = list(_rows(300))
    with pytest.raises(SpecError, match=r"give one stopping rule: tol=0.001 \(a gain per row\) or delta=0.5"):
        optimize(x, MIX, tol=1e-3, delta=0.5)
    with pytest.raises(SpecError, match="give one stopping rule"):
        FitOptions(tol=1e-3, delta=0.5)
    # a keyword's rule replaces the options' own, either way round
    assert FitOptions.gather(FitOptions(tol=1e-3), {"delta": 0.5})[0].stop_gain(100.0) == 0.5
    assert FitOptions.gather(FitOptions(delta=0.5), {"tol": 1e-3})[0].stop_gain(100.0) == pytest.approx(0.1)
    assert FitOptions.gather(FitOptions(tol=1e-3), {"delta": None})[0].stop_gain(100.0) is None
    assert FitOptions().stopping == "delta=1e-09" and FitOptions(tol=1e-4).stopping == "tol=0.0001 per row"
    with pytest.raises(SpecError, match=r"tol must be None or a finite number >= 0, got -1"):
        FitOptions(tol=-1)


def test_iterate_and_delta_none_run_max_its_whatever_the_tol() -> None:
    x = list(_rows(300))
    fit = optimize(x, MIX, seed=1, max_its=7, options=FitOptions(tol=10.0), delta=None, **QUIET)
    assert fit.fit_result.n_iter == 7 and not fit.fit_result.converged


def test_an_unconverged_fit_names_its_rule_per_row() -> None:
    x = list(_rows(400))
    with pytest.warns(ConvergenceWarning) as caught:
        fit = optimize(x, MIX, seed=1, max_its=2, tol=1e-12, **QUIET)
    last = fit.fit_result.history[-1]
    assert str(caught[0].message) == (
        f"EM did not converge in 2 iterations (tol=1e-12 per row, last gain={last.gain / 400:.3g} per row "
        "over 400 rows); raise max_its or tol"
    )


def test_select_k_stops_per_row_by_default_and_takes_delta_when_given() -> None:
    x = list(_rows(600))
    est = MixtureEstimator([GaussianEstimator()])
    default = select_k(x, est, ks=[2], seed=1)
    per_row = optimize(x, MIX, seed=1, max_its=100, tol=1e-6, **QUIET)
    assert default.model.to_dict() == per_row.to_dict()
    old = select_k(x, est, ks=[2], seed=1, delta=1e-6)
    total = optimize(x, MIX, seed=1, max_its=100, delta=1e-6, **QUIET)
    assert old.model.to_dict() == total.to_dict()
    assert old.model.fit_result.n_iter > default.model.fit_result.n_iter


def test_a_spec_gives_tol_or_delta_and_old_files_keep_delta(tmp_path: Path) -> None:
    def spec(fit: dict[str, Any]) -> Path:
        path = tmp_path / f"spec{len(list(tmp_path.iterdir()))}.json"
        path.write_text(
            json.dumps({"estimator": {"type": "mixture", "k": 2, "component": "gaussian"}, "fit": fit})
        )
        return path

    assert load_spec(spec({"tol": 1e-4})).fit == {"tol": 1e-4}
    assert load_spec(spec({"delta": 1e-6})).fit == {"delta": 1e-6}  # a spec file from before tol
    with pytest.raises(
        SpecError, match=r"fit section: give one stopping rule, 'tol' .*got tol=0.001, delta=1e-06"
    ):
        load_spec(spec({"tol": 1e-3, "delta": 1e-6}))
    with pytest.raises(SpecError, match=r"fit section: tol must be None or a finite number >= 0, got 'x'"):
        load_spec(spec({"tol": "x"}))
    bundled = json.loads((ROOT / "conf" / "models" / "sample.json").read_text())["fit"]
    assert bundled["tol"] == 1e-6 and "delta" not in bundled


@pytest.mark.filterwarnings("ignore::mixle_spark.errors.ConvergenceWarning")
def test_a_checkpoint_records_the_rule(tmp_path: Path) -> None:
    x = list(_rows(500))
    optimize(x, MIX, seed=1, max_its=2, tol=1e-4, checkpoint_dir=tmp_path / "c", **QUIET)
    with pytest.raises(CheckpointMismatchError, match=r"tol: checkpoint 0.0001, now None"):
        optimize(x, MIX, seed=1, max_its=2, delta=1e-3, checkpoint_dir=tmp_path / "c", **QUIET)


def test_update_stops_per_new_row_by_default_and_refuses_both() -> None:
    rng = np.random.default_rng(5)
    old = rng.normal(size=(3000, 2)) + np.where(rng.random(3000) < 0.5, 4.0, 0.0)[:, None]
    new = rng.normal(size=(1000, 2)) + np.where(rng.random(1000) < 0.5, 4.0, 0.0)[:, None]
    est = MixtureEstimator([MultivariateGaussianEstimator()] * 2)
    model = optimize(old, est, seed=1, max_its=100, tol=1e-9, keep_statistics=True, **QUIET)
    for kwargs in ({}, {"tol": 1e-6}):
        updated = update(model, new, max_its=50, **kwargs)
        gains = np.diff(updated.update_result.history)
        assert gains[-1] < 1e-6 * 1000 and all(g >= 1e-6 * 1000 for g in gains[:-1])
    with pytest.raises(SpecError, match=r"give one stopping rule: tol=0\.001"):
        update(model, new, tol=1e-3, delta=1e-6)


def test_the_fit_job_refuses_both_flags_and_a_flag_replaces_the_specs_rule(tmp_path: Path) -> None:
    both = _job("--tol", "1e-3", "--delta", "1")
    assert both.returncode == 2
    assert both.stderr.strip().splitlines() == [
        "em_fit: error: give one stopping rule: --tol (a gain per row) or --delta, not both (see --help)"
    ]
    out = tmp_path / "fit"
    done = _job("--output", str(out), "--trials", "1", "--seed", "7", "--delta", "1e-6", "--quiet")
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["fit_options"]["delta"] == 1e-6 and "tol" not in summary["fit_options"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gains = [h["log_likelihood"] for h in summary["history"]]
    assert summary["converged"] and 0 <= gains[-1] - gains[-2] < 1e-6
