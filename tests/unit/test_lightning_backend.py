"""The ``lightning`` backend (aliases ``pl``, ``minibatch``): a fit over its handle is mini-batch
(stepwise) EM over its global mini-batches, equal to ``minibatch_em`` over the same batches."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from mixle_spark.em.handles import trial_seeds
from mixle_spark.em.minibatch import minibatch_em
from mixle_spark.errors import OptionTypeError, SpecError
from mixle_spark.estimation import best_of, optimize
from mixle_spark.parallel import available_encoded_data_backends
from mixle_spark.parallel.backends.contract import MiniBatches
from mixle_spark.parallel.backends.minibatch import LightningEncodedData
from mixle_spark.parallel.backends.registry import UnsupportedControlError, encoded_data
from mixle_spark.parallel.training.lightning_data import take_rows
from mixle_spark.stats import GaussianEstimator, MixtureEstimator

RNG = np.random.default_rng(8)
X = np.concatenate([RNG.normal(-3, 1, 1500), RNG.normal(2, 0.7, 1500)])
EST = MixtureEstimator([GaussianEstimator()] * 2)


def _params(model: Any) -> np.ndarray:
    return np.array([*model.w, *(c.mu for c in model.components), *(c.sigma2 for c in model.components)])


def _assert_same(a: Any, b: Any) -> None:
    np.testing.assert_allclose(_params(a), _params(b), rtol=1e-12, atol=0)


def test_a_fit_over_the_handle_equals_minibatch_em_over_the_lightning_datamodule() -> None:
    pytest.importorskip("lightning")
    from mixle_spark.parallel.training.lightning_data import encoded_datamodule

    handle = encoded_data(X, EST, backend="lightning", batch_size=500, shuffle=True, seed=0)
    assert isinstance(handle, LightningEncodedData) and isinstance(handle, MiniBatches)
    fitted = optimize(handle, EST, seed=1, print_iter=0)
    module = encoded_datamodule(X, batch_size=500, seed=0, rank=0, world_size=1)
    want = minibatch_em(module, EST, seed=1)
    _assert_same(fitted, want)
    assert want.statistics.updates == 5 * 6 - 1  # 5 epochs of 6 batches; the first one is fitted
    # the handle's datamodule is the same module: the same batches, the same model
    _assert_same(minibatch_em(handle.datamodule, EST, seed=1), want)
    # optimize builds the handle itself from the backend keywords
    _assert_same(optimize(X, EST, seed=1, print_iter=0, backend="pl", batch_size=500), want)
    handle.close()


def test_the_fit_result_scores_every_row_and_records_one_entry_per_epoch() -> None:
    with encoded_data(X, EST, backend="lightning", batch_size=600, seed=2, epochs=3) as handle:
        fitted = optimize(handle, EST, seed=4, print_iter=0)
        result = fitted.fit_result
        nobs, ll = handle.pysp_seq_log_density_sum(fitted)
        assert nobs == len(X) and result.log_likelihood == ll
        assert ll == pytest.approx(
            float(np.sum(fitted.seq_log_density(fitted.encoder().encode(X)))), rel=1e-12
        )
        assert (result.n_iter, result.stopped_because, result.converged) == (3, "epochs", False)
        assert [r.iteration for r in result.history] == [0, 1, 2]
        assert [r.nobs for r in result.history] == [len(X)] * 3  # each epoch reads every row once
        assert [len(t.events) for t in result.trace] == [1, 1, 1]
        assert result.trace[0].events[0] == "epoch 0: 5 mini-batches"
        assert fitted.statistics is None
        kept = optimize(handle, EST, seed=4, print_iter=0, keep_statistics=True)
        _assert_same(kept, fitted)
        assert kept.statistics.updates == 3 * 5 - 1


def test_shuffle_false_serves_the_rows_in_order_every_epoch() -> None:
    mixed = X[np.random.default_rng(0).permutation(len(X))]  # rows of both components in every batch
    handle = encoded_data(mixed, EST, backend="lightning", batch_size=700, shuffle=False)
    for epoch in (0, 3):
        batches = list(handle.global_minibatches(epoch))
        assert [len(b) for b in batches] == [700, 700, 700, 700, 200]
        np.testing.assert_array_equal(np.concatenate(batches), mixed)

    class InOrder:
        world_size = 1

        def global_minibatches(self, epoch: int) -> Any:
            return (mixed[i : i + 700] for i in range(0, len(mixed), 700))

    in_order = optimize(handle, EST, seed=1, print_iter=0)
    _assert_same(in_order, minibatch_em(InOrder(), EST, seed=1))
    shuffled = optimize(mixed, EST, seed=1, print_iter=0, backend="lightning", batch_size=700)
    assert np.abs(_params(in_order) - _params(shuffled)).max() > 1e-6
    handle.close()


def test_the_seed_draws_the_batches_and_changes_the_result() -> None:
    a = encoded_data(X, EST, backend="lightning", batch_size=500, seed=0)
    b = encoded_data(X, EST, backend="lightning", batch_size=500, seed=7)
    again = encoded_data(X, EST, backend="lightning", batch_size=500, seed=0)
    rows_a, rows_b = a.batch_rows(0), b.batch_rows(0)
    assert sorted(np.concatenate(rows_a).tolist()) == list(range(len(X)))  # an epoch partitions the rows
    assert not np.array_equal(rows_a[0], rows_b[0])
    assert not np.array_equal(a.batch_rows(0)[0], a.batch_rows(1)[0])  # a new permutation each epoch
    fit_a, fit_b = optimize(a, EST, seed=1, print_iter=0), optimize(b, EST, seed=1, print_iter=0)
    assert np.abs(_params(fit_a) - _params(fit_b)).max() > 1e-6
    _assert_same(optimize(again, EST, seed=1, print_iter=0), fit_a)
    for h in (a, b, again):
        h.close()


def test_best_of_runs_one_minibatch_fit_per_trial() -> None:
    with encoded_data(X, EST, backend="lightning", batch_size=1000, epochs=2) as handle:
        ll, model = best_of(handle, EST, trials=2, seed=3, print_iter=0)
        fits = [minibatch_em(handle, EST, epochs=2, seed=s) for s in trial_seeds(3, 2)]
        scores = [handle.pysp_seq_log_density_sum(m)[1] for m in fits]
        assert ll == pytest.approx(max(scores), rel=1e-12)
        _assert_same(model, fits[int(np.argmax(scores))])
        assert model.fit_result.stopped_because == "epochs"


@pytest.mark.parametrize(
    ("controls", "error", "message"),
    [
        ({"batch_size": 0}, SpecError, "batch_size must be an integer >= 1, got 0"),
        ({"batch_size": True}, OptionTypeError, "batch_size must be an integer >= 1, got True"),
        ({"batch_size": "64"}, OptionTypeError, "batch_size must be an integer >= 1, got '64'"),
        ({"shuffle": "yes"}, OptionTypeError, "shuffle must be True or False, got 'yes'"),
        ({"shuffle": 1}, OptionTypeError, "shuffle must be True or False, got 1"),
        ({"seed": 1.5}, OptionTypeError, "seed must be an integer >= 0, got 1.5"),
        ({"seed": -1}, SpecError, "seed must be an integer >= 0, got -1"),
        ({"epochs": 0}, SpecError, "epochs must be an integer >= 1, got 0"),
        ({"alpha": 0.4}, SpecError, r"alpha must be a number in \(0.5, 1\], got 0.4"),
        ({"num_workers": 2}, UnsupportedControlError, "'lightning' backend cannot honour num_workers=2"),
        ({"comm": "world"}, UnsupportedControlError, "'lightning' backend cannot honour comm='world'"),
        ({"weights": np.ones(len(X))}, ValueError, "'lightning' backend cannot honour weights="),
        ({"precision": "float32"}, ValueError, "engine=numpy, precision=float32 cannot be honoured here"),
    ],
)
def test_bad_controls_are_refused_in_one_line(controls: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message) as raised:
        encoded_data(X, EST, backend="lightning", **controls)
    assert "\n" not in str(raised.value)


def test_options_a_minibatch_fit_cannot_honour_are_refused(tmp_path: Any) -> None:
    with encoded_data(X, EST, backend="lightning", batch_size=1000) as handle:
        with pytest.raises(SpecError, match=r"checkpoint_dir=.* cannot apply to a mini-batch fit \(backend "):
            optimize(handle, EST, checkpoint_dir=str(tmp_path), print_iter=0)
        with pytest.raises(SpecError, match=r"trace_path=.* cannot apply to a mini-batch fit"):
            optimize(handle, EST, trace_path=str(tmp_path / "t.jsonl"), print_iter=0)
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_registry_lists_it_under_its_name_and_aliases() -> None:
    assert "lightning" in available_encoded_data_backends()
    for name in ("lightning", "PL", "minibatch"):
        with encoded_data(X[:100], EST, backend=name) as handle:
            assert type(handle) is LightningEncodedData
            assert (handle.batch_size, handle.shuffle, handle.seed, handle.epochs) == (10, True, 0, 5)
    # the other backends still refuse the mini-batch controls
    with pytest.raises(UnsupportedControlError, match="'local' backend cannot honour batch_size=64"):
        encoded_data(X, EST, batch_size=64)


def test_batches_keep_the_kind_of_rows_given() -> None:
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame({"x": X[:50]})
    records = X[:50].tolist()
    for data in (frame, records):
        with encoded_data(data, GaussianEstimator(), backend="lightning", batch_size=20) as handle:
            batches = list(handle.global_minibatches(0))
            assert [len(b) for b in batches] == [20, 20, 10]
            assert type(batches[0]) is type(take_rows(data, np.arange(2)))
    with pytest.raises(TypeError, match="data must be a numpy array, a pandas DataFrame"):
        encoded_data({1, 2, 3}, GaussianEstimator(), backend="lightning")


def test_the_backend_runs_without_lightning_and_torch() -> None:
    """Fitting needs neither library (the batches are cut with numpy); the Lightning DataModule of a
    handle names the extra when lightning is missing."""
    script = """
import sys
sys.modules["lightning"] = None
sys.modules["torch"] = None
import numpy as np
from mixle_spark.estimation import optimize
from mixle_spark.parallel.backends.registry import encoded_data
from mixle_spark.stats import GaussianEstimator, MixtureEstimator
x = np.concatenate([np.linspace(-4, -2, 300), np.linspace(1, 3, 300)])
est = MixtureEstimator([GaussianEstimator()] * 2)
handle = encoded_data(x, est, backend="lightning", batch_size=100, seed=1)
model = optimize(handle, est, seed=0, print_iter=0)
print(sorted(round(c.mu) for c in model.components))
try:
    handle.datamodule
except ImportError as err:
    print(err)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "[-3, 2]"
    assert lines[1].startswith("lightning_data needs") and "mixle-spark[lightning]" in lines[1]
