"""The torch compute engine against the numpy one: every family with the feature protocol, each
precision, the edge rows, the device and thread choices (CUDA when this machine has it)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from mixle_spark.engines import Compute, EngineUnavailableError, narrow_encoded, resolve_compute, using_engine
from mixle_spark.engines.numpy_engine import NumpyEngine
from mixle_spark.errors import ConvergenceWarning, NonFiniteLikelihoodError
from mixle_spark.estimation import optimize
from mixle_spark.parallel import encoded_data
from mixle_spark.stats import GaussianDistribution
from mixle_spark.stats._mixture_kernels import feature_matrix, features_shared
from mixle_spark.stats.mixture import MixtureDistribution, MixtureEstimator
from tests.unit._cases import FamilyCase, model_numbers
from tests.unit.test_contracts import CASES, _flat

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from mixle_spark.engines.torch_engine import DEVICE_VARIABLE, TorchEngine, thread_budget  # noqa: E402


def _one_case_per_family() -> list[FamilyCase]:
    seen: dict[str, FamilyCase] = {}
    for case in CASES:
        if hasattr(case.dist, "feature_key") and case.dist.family not in seen:
            seen[case.dist.family] = case
    return list(seen.values())


FEATURE_CASES = _one_case_per_family()
DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
    ),
]
TOLERANCE = {"float64": 1e-9, "float32": 1e-5, "bfloat16": 1e-2}


@pytest.fixture
def torch_passes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The precision of every fused E-step the torch engine ran (so a comparison with numpy cannot
    pass because numpy ran both sides)."""
    seen: list[str] = []
    run = TorchEngine.feature_e_step

    def spy(self: TorchEngine, *args: Any) -> Any:
        seen.append(self.precision)
        return run(self, *args)

    monkeypatch.setattr(TorchEngine, "feature_e_step", spy)
    return seen


def _close(a: Any, b: Any, rtol: float) -> None:
    """Equal to ``rtol`` relative to the largest magnitude of the values compared."""
    fa, fb = _flat(a), _flat(b)
    assert fa.shape == fb.shape
    scale = np.maximum(np.abs(fa), np.abs(fb)).max(initial=1.0)
    np.testing.assert_allclose(fa, fb, rtol=rtol, atol=rtol * scale)


def _same_ll(ll: np.ndarray, want: np.ndarray, weights: np.ndarray, precision: str) -> None:
    """Per-row log-likelihoods equal to the precision's tolerance; in bfloat16 (whose features keep 8
    bits, so a row moves by up to ~0.1) the batch's weighted total to 1e-2."""
    assert ll.dtype == np.float64 and ll.shape == want.shape and np.isfinite(ll).all()
    if precision == "bfloat16":
        assert float(weights @ ll) == pytest.approx(float(weights @ want), rel=TOLERANCE[precision])
    else:
        _close(ll, want, TOLERANCE[precision])


def _fitted(case: FamilyCase, n: int = 300) -> tuple[MixtureEstimator, Any, list[Any], MixtureDistribution]:
    """Two components fitted (two EM steps from a seeded start) to ``n`` of the case's records."""
    records = list(case.dist.sampler(7).sample(n))
    est = MixtureEstimator([case.estimator] * 2)
    with encoded_data(records, est) as handle:
        model = optimize(handle, est, max_its=2, seed=3, delta=None, print_iter=0)
    encoder = est.encoder()
    if encoder.needs_scan:
        est = est.with_scan(encoder.scan(records))
        encoder = est.encoder()
    return est, encoder, records, model


def _e_step(est: Any, encoder: Any, records: list[Any], model: Any, compute: Compute) -> tuple[Any, Any]:
    enc = narrow_encoded(encoder, encoder.encode(records), compute)
    acc = est.accumulator_factory().make()
    assert features_shared(model.components, acc.accumulators, enc)  # the engine's path is taken
    weights = np.linspace(0.5, 1.5, len(records))
    with using_engine(compute):
        ll = acc.seq_update(enc, weights, model)
    return ll, acc.value()


def test_the_cases_cover_every_family_with_the_feature_protocol() -> None:
    import inspect

    import mixle_spark.stats as stats

    families = {
        cls.family
        for _, module in inspect.getmembers(stats, inspect.ismodule)
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if "feature_key" in vars(cls) and getattr(cls, "family", None)
    }
    assert len(families) >= 19
    assert families <= {c.dist.family for c in FEATURE_CASES}


@pytest.mark.parametrize("case", FEATURE_CASES, ids=[c.dist.family for c in FEATURE_CASES])
def test_the_e_step_equals_numpys_at_each_precision(case: FamilyCase, torch_passes: list[str]) -> None:
    """float64 against numpy's float64; float32 and bfloat16 against numpy's float32 on the same
    stored data (float32 storage itself moves values stored far from their centre by its rounding)."""
    est, encoder, records, model = _fitted(case)
    reference = {
        "float64": _e_step(est, encoder, records, model, Compute()),
        "float32": _e_step(est, encoder, records, model, resolve_compute("numpy", "float32")),
    }
    assert np.isfinite(reference["float64"][0]).all()
    for precision, rtol in TOLERANCE.items():
        ll, stats = _e_step(est, encoder, records, model, resolve_compute("torch", precision))
        want_ll, want_stats = reference["float64" if precision == "float64" else "float32"]
        _same_ll(ll, want_ll, np.linspace(0.5, 1.5, len(records)), precision)
        _close(stats, want_stats, rtol)
        assert torch_passes[-1:] == [precision]


@pytest.mark.parametrize("case", FEATURE_CASES, ids=[c.dist.family for c in FEATURE_CASES])
def test_a_local_fit_on_torch_matches_numpy(case: FamilyCase, torch_passes: list[str]) -> None:
    records = list(case.dist.sampler(11).sample(250))
    est = MixtureEstimator([case.estimator] * 2)
    fits = {}
    for engine, precision in [("numpy", "float64"), ("numpy", "float32"), *(("torch", p) for p in TOLERANCE)]:
        with encoded_data(records, est, engine=engine, precision=precision) as handle:
            assert getattr(handle, "compute", None) in (None, resolve_compute(engine, precision))
            model = optimize(handle, est, max_its=3, seed=5, delta=None, print_iter=0)
            fits[engine, precision] = (model_numbers(model), handle.pysp_seq_log_density_sum(model)[1])
    assert sorted(set(torch_passes)) == sorted(TOLERANCE)
    reference = fits["numpy", "float64"]
    _close(fits["torch", "float64"][0], reference[0], 1e-9)
    assert fits["torch", "float64"][1] == pytest.approx(reference[1], rel=1e-9)
    _close(fits["torch", "float32"][0], fits["numpy", "float32"][0], 1e-5)
    assert fits["torch", "float32"][1] == pytest.approx(reference[1], rel=1e-5)
    assert fits["torch", "bfloat16"][1] == pytest.approx(reference[1], rel=1e-2)


@pytest.mark.parametrize("device", [*DEVICES, "cpu-in-order"])
@pytest.mark.parametrize("case", FEATURE_CASES[:3] + FEATURE_CASES[-2:], ids=lambda c: c.dist.family)
def test_the_engine_on_each_device_equals_numpys_kernels(case: FamilyCase, device: str) -> None:
    """On each device, and on the CPU run as CUDA runs (large blocks in order, statistics kept on the
    device until the batch is done): the path a GPU takes, minus the GPU."""
    _, encoder, records, model = _fitted(case)
    enc = encoder.encode(records)
    phi = feature_matrix(model.components[0], enc)
    coef = np.array([c.feature_coefficients(enc) for c in model.components])
    weights = np.linspace(0.5, 1.5, len(records))
    expected = NumpyEngine("float64").feature_e_step(phi, coef, weights, model, map)
    for precision, rtol in TOLERANCE.items():
        engine = TorchEngine(precision, device=device.removesuffix("-in-order"))
        assert engine.device.startswith(device.removesuffix("-in-order"))
        if device.endswith("-in-order"):
            engine.in_order, engine.device_block_values = True, 256 * len(coef)  # 256-row blocks
        x = phi.astype(np.float32) if precision != "float64" else phi
        ll, counts, sums = engine.feature_e_step(x, coef, weights, model, map)
        _same_ll(ll, expected[0], weights, precision)
        _close(counts, expected[1], rtol)
        _close(sums, expected[2], rtol)
        joint = engine.feature_joint(x, coef)
        assert joint.dtype == np.float64 and joint.shape == (len(coef), len(x))
        _close(joint, coef @ phi.T, rtol if precision != "bfloat16" else 2e-2)


def _edge_batch() -> tuple[np.ndarray, np.ndarray, MixtureDistribution]:
    """Two blocks of rows (the second all finite); in the first, row 1 is impossible under both
    components (-inf) and row 3 is +inf under both."""
    rng = np.random.default_rng(0)
    n = 9000
    phi = np.column_stack([np.ones(n), rng.normal(size=n), np.zeros(n), rng.normal(size=n) ** 2])
    coef = np.array([[-1.0, 0.5, 1.0, -0.5], [-2.0, -0.3, 2.0, -0.25]])
    phi[1, 2] = -np.inf
    phi[3, 2] = np.inf
    mixture = MixtureDistribution(
        [GaussianDistribution(0.0, 1.0), GaussianDistribution(1.0, 2.0)], [0.3, 0.7]
    )
    return phi, coef, mixture


@pytest.mark.parametrize("device", [*DEVICES, "cpu-in-order"])
@pytest.mark.parametrize("precision", list(TOLERANCE))
def test_edge_rows_behave_as_numpys(precision: str, device: str) -> None:
    phi, coef, mixture = _edge_batch()
    weights = np.full(len(phi), 2.0)
    with np.errstate(invalid="ignore"):
        ll0, counts0, sums0 = NumpyEngine("float64").feature_e_step(phi, coef, weights, mixture, map)
    engine = TorchEngine(precision, device=device.removesuffix("-in-order"))
    if device.endswith("-in-order"):
        engine.in_order, engine.device_block_values = True, 4096 * len(coef)
    x = phi.astype(np.float32) if precision != "float64" else phi
    with np.errstate(invalid="ignore"):
        ll, counts, sums = engine.feature_e_step(x, coef, weights, mixture, map)
    assert ll[1] == -np.inf and ll[3] == np.inf
    finite = np.isfinite(ll0)
    _same_ll(ll[finite], ll0[finite], weights[finite], precision)
    _close(counts, counts0, TOLERANCE[precision])
    np.testing.assert_array_equal(np.isnan(sums), np.isnan(sums0))
    # the impossible row's weight is spread by the prior weights, the +inf row's evenly
    edge_weights = np.zeros(len(phi))
    edge_weights[[1, 3]] = 2.0
    with np.errstate(invalid="ignore"):
        edge_counts = engine.feature_e_step(phi, coef, edge_weights, mixture, map)[1]
    np.testing.assert_allclose(edge_counts, [2 * 0.3 + 1.0, 2 * 0.7 + 1.0], rtol=1e-15)
    phi[5, 1] = np.nan
    with pytest.raises(
        NonFiniteLikelihoodError, match=r"^mixture component 0 gave a NaN log-density \(row 6 of"
    ):
        engine.feature_e_step(phi, coef, weights, mixture, map)


def test_scoring_through_the_mixture_uses_the_engine() -> None:
    case = next(c for c in FEATURE_CASES if c.dist.family == "multivariate_gaussian")
    _, encoder, records, model = _fitted(case)
    enc = encoder.encode(records)
    expected = model.seq_log_density(enc)
    with using_engine(resolve_compute("torch", "float64")):
        got = model.seq_log_density(enc)
        post = model.seq_posterior(enc)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    np.testing.assert_allclose(post, model.seq_posterior(enc), rtol=1e-9, atol=1e-15)
    with using_engine(resolve_compute("torch", "bf16")):
        _close(
            model.seq_log_density(narrow_encoded(encoder, enc, Compute("torch", "bfloat16"))), expected, 1e-2
        )


def test_the_device_comes_from_the_argument_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from mixle_spark.parallel import DeviceSpec

    monkeypatch.setenv(DEVICE_VARIABLE, "cpu")
    assert TorchEngine("float32").device == "cpu"
    assert TorchEngine("float64", device=DeviceSpec("cpu:3")).device == "cpu"
    monkeypatch.setenv(DEVICE_VARIABLE, "tpu:0")
    with pytest.raises(
        ValueError, match=r"^device='tpu:0' is not a device of engine='torch'; expected 'cpu'"
    ):
        TorchEngine("float32")
    with pytest.raises(ValueError, match=r"^device='mps' is not a device of engine='torch'"):
        TorchEngine("float32", device="mps")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"^device='cuda:1': CUDA is not available to torch"):
            TorchEngine("float32", device="cuda:1")
    monkeypatch.delenv(DEVICE_VARIABLE)
    assert TorchEngine("float32").device == ("cuda:0" if torch.cuda.is_available() else "cpu")


def test_torch_never_uses_more_threads_than_the_process_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert thread_budget() == 1
        TorchEngine("float32", device="cpu")
        assert torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "")
        monkeypatch.setenv("MKL_NUM_THREADS", "not a number")
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
        assert thread_budget() >= 1
    finally:
        torch.set_num_threads(before)


def test_bfloat16_needs_torch_and_a_missing_torch_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from mixle_spark.engines import _registry

    with pytest.raises(
        ValueError, match=r"^engine='numpy' computes in float32, float64; precision='bfloat16'"
    ):
        resolve_compute("numpy", "bf16")
    assert resolve_compute("TORCH", "bf16") == Compute("torch", "bfloat16")
    monkeypatch.setattr(_registry, "_ENGINES", {})
    monkeypatch.setattr(_registry, "find_spec", lambda name: None)
    with pytest.raises(
        EngineUnavailableError,
        match=r"^engine='torch' needs torch, which is not installed: pip install 'mixle-spark\[torch\]'$",
    ):
        resolve_compute("torch", "float32")


def test_a_fit_on_torch_says_nothing_but_convergence() -> None:
    """No warning from the engine (read-only features, dtype casts) reaches the user."""
    case = next(c for c in FEATURE_CASES if c.dist.family == "gaussian")
    records = list(case.dist.sampler(1).sample(200))
    est = MixtureEstimator([case.estimator] * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", ConvergenceWarning)
        with encoded_data(np.asarray(records), est, engine="torch", precision="float32") as handle:
            optimize(handle, est, max_its=2, seed=1, print_iter=0)


def test_a_family_without_the_feature_protocol_runs_numpys_kernels_under_torch(
    torch_passes: list[str],
) -> None:
    from mixle_spark.stats import StudentTEstimator

    x = list(np.random.default_rng(0).standard_t(4, 400))
    est = MixtureEstimator([StudentTEstimator()] * 2)
    fits = []
    for engine, precision in [("numpy", "float64"), ("torch", "bf16")]:
        with encoded_data(x, est, engine=engine, precision=precision) as handle:
            fits.append(model_numbers(optimize(handle, est, max_its=3, seed=1, delta=None, print_iter=0)))
    np.testing.assert_array_equal(fits[1], fits[0])  # the same numpy kernels, in float64
    assert torch_passes == []
