"""Fits advanced together (best_of restarts, select_k candidates): one pass per step for all of them,
the same models as the fits run one by one."""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
import pytest

from mixle_spark.em._lockstep import run_together
from mixle_spark.em.routine import fit_routine
from mixle_spark.errors import ConvergenceWarning
from mixle_spark.estimation import FitOptions, best_of, optimize, trial_seeds
from mixle_spark.parallel import encoded_data
from mixle_spark.spec import model_to_dict
from mixle_spark.stats import (
    CategoricalEstimator,
    GaussianEstimator,
    HiddenMarkovEstimator,
    MixtureEstimator,
    MultivariateGaussianEstimator,
    PoissonEstimator,
)


def _points() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    centres = ([-3, 0, 0], [0, 3, 0], [3, 0, 0], [0, 0, 3])
    return list(np.vstack([rng.normal(c, 1.0, size=(500, 3)) for c in centres]))


EST = MixtureEstimator([MultivariateGaussianEstimator()] * 4)


class CountingHandle:
    """Counts the passes (row passes and every other kind) a wrapped local handle makes."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.passes = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.handle, name)
        if name.startswith("pysp_") and callable(attr):

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.passes += 1
                return attr(*args, **kwargs)

            return counted
        return attr

    def __len__(self) -> int:
        return len(self.handle)


def _runs(seeds: list[int], max_its: list[int]) -> list[Any]:
    return [
        fit_routine(FitOptions(max_its=its, delta=1e-9, init_p=0.1, print_iter=0), EST, seed=s)
        for s, its in zip(seeds, max_its, strict=True)
    ]


def test_best_of_equals_the_trials_run_one_by_one() -> None:
    data = _points()
    with encoded_data(data, EST) as handle, warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ll, model = best_of(handle, EST, trials=4, max_its=40, seed=5)
        alone = [optimize(handle, EST, max_its=40, seed=s) for s in trial_seeds(5, 4)]
    best = max(alone, key=lambda m: m.fit_result.log_likelihood)
    assert model_to_dict(model) == model_to_dict(best)  # bit for bit
    assert ll == best.fit_result.log_likelihood
    assert [r.log_likelihood for r in model.fit_result.history] == [
        r.log_likelihood for r in best.fit_result.history
    ]


def test_one_pass_per_step_for_every_fit_still_running() -> None:
    data = _points()
    with encoded_data(data, EST) as handle:
        counting = CountingHandle(handle)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            models, shared = run_together(counting, _runs([1, 2, 3], [2, 6, 4]))
            alone = []
            for run in _runs([1, 2, 3], [2, 6, 4]):
                before = counting.passes
                alone.append((run(counting), counting.passes - before))
    assert [model_to_dict(m) for m in models] == [model_to_dict(m) for m, _ in alone]
    own = [passes for _, passes in alone]
    # a fit that stopped (max_its 2) dropped out: the shared passes are the longest fit's, no more
    assert shared == max(own) < sum(own)


def test_an_error_in_one_fit_is_raised_and_the_others_finish() -> None:
    data = _points()

    def broken(handle: Any) -> Any:
        handle.pysp_seq_log_density_sum(None)  # not a model: the shared pass fails

    with encoded_data(data, EST) as handle, pytest.raises(AttributeError, match="seq_log_density"):
        run_together(handle, [*_runs([1], [3]), broken])


def test_select_k_and_hidden_markov_restarts_share_passes_too() -> None:
    rng = np.random.default_rng(2)
    seqs = [list(rng.choice(["a", "b", "c"], size=int(rng.integers(2, 8)))) for _ in range(300)]
    hmm = HiddenMarkovEstimator(
        [CategoricalEstimator()] * 2, len_estimator=PoissonEstimator(), pseudo_count=1.0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        _ll, together = best_of(seqs, hmm, trials=3, max_its=15, seed=1)
        alone = max(
            (optimize(seqs, hmm, max_its=15, seed=s) for s in trial_seeds(1, 3)),
            key=lambda m: m.fit_result.log_likelihood,
        )
    assert model_to_dict(together) == model_to_dict(alone)


def test_progress_of_trials_is_labelled() -> None:
    x = list(np.random.default_rng(1).normal(size=400))
    out = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        best_of(x, MixtureEstimator([GaussianEstimator()] * 2), trials=2, max_its=3, out=out)
    lines = out.getvalue().splitlines()
    for k in (0, 1):
        mine = [line for line in lines if line.startswith(f"trial {k}: ")]
        assert mine[0].startswith(f"trial {k}: kmeans|| seeding: 2 centres")
        assert mine[-1].startswith(f"trial {k}: log-likelihood ")


def test_best_of_on_the_mp_backend_equals_local() -> None:
    data = _points()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        _ll, local = best_of(data, EST, trials=3, max_its=10, seed=4)
        _ll, mp = best_of(data, EST, trials=3, max_its=10, seed=4, backend="mp", num_workers=2)
    a, b = model_to_dict(local)["model"], model_to_dict(mp)["model"]
    np.testing.assert_allclose(
        [c["mu"] for c in b["components"]], [c["mu"] for c in a["components"]], rtol=1e-9, atol=1e-12
    )
    np.testing.assert_allclose(b["w"], a["w"], rtol=1e-9)
