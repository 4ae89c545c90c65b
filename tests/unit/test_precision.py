"""``precision="float32"``: what each family stores and computes in float32, the fits it gives on the
local and mp backends against float64 (1e-5 relative), the bytes it saves, the statistics it keeps in
float64 and what it says when a family computes in float64 only (docs/precision.md)."""

from __future__ import annotations

import importlib
import logging
import pkgutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mixle_spark.stats
import tests.unit as unit_tests
from mixle_spark.em._records import has_decreased, rounding_rtol
from mixle_spark.engines import Compute, using_engine
from mixle_spark.errors import ConvergenceWarning
from mixle_spark.estimation import optimize
from mixle_spark.parallel import encoded_data
from mixle_spark.stats import (
    CompositeDistribution,
    CompositeEstimator,
    GaussianEstimator,
    MixtureEstimator,
    MultivariateGaussianEstimator,
    StudentTEstimator,
)
from mixle_spark.stats import _scalar_common as scalar_common
from mixle_spark.stats._encoder import narrow_floats
from tests.unit._cases import FamilyCase

F32 = np.dtype(np.float32)


def _cases() -> list[FamilyCase]:
    cases: list[FamilyCase] = []
    for info in pkgutil.iter_modules(unit_tests.__path__):
        if info.name.startswith("cases_"):
            cases += importlib.import_module(f"tests.unit.{info.name}").CASES
    return cases


CASES = _cases()
FEATURE_CASES = [c for c in CASES if hasattr(c.dist, "feature_key")]
FEATURE_FAMILIES = sorted({c.dist.family for c in FEATURE_CASES})


def float32_families() -> list[str]:
    """The registered families whose encoder stores a batch of their own samples in float32 (the
    table docs/precision.md prints: tests/unit/test_precision.py checks it)."""
    out = set()
    for case in CASES:
        handle = encoded_data(_records(case, 64, 3), case.estimator)
        if _float_dtypes(handle.encoder.narrow(handle.chunks[0][2], F32)) & {F32}:
            out.add(case.dist.family)
    return sorted(out)


def _float_dtypes(enc: Any) -> set[np.dtype]:
    """The dtypes of the float arrays in an encoded batch (tuples, named tuples, vector batches)."""
    if isinstance(enc, np.ndarray):
        return {enc.dtype} if enc.dtype.kind == "f" else set()
    if hasattr(enc, "dtype") and hasattr(enc, "c"):  # a VectorBatch
        return {np.dtype(enc.dtype)}
    if isinstance(enc, tuple):
        return set().union(*(_float_dtypes(e) for e in enc)) if enc else set()
    return set()


def _records(case: FamilyCase, n: int, seed: int) -> list[Any]:
    return list(case.dist.sampler(seed).sample(n))


# -- each family: float32 features and log-densities within 1e-5 of float64 ------------------------
@pytest.mark.parametrize("case", FEATURE_CASES, ids=[c.id for c in FEATURE_CASES])
def test_feature_families_store_float32_and_score_within_1e5(case: FamilyCase) -> None:
    records = _records(case, 300, 1)
    handle = encoded_data(records, case.estimator)
    encoder, enc = handle.encoder, handle.chunks[0][2]
    narrowed = encoder.narrow(enc, F32)
    if case.id == "gaussian-large-offset":  # 1e6 +- 0.5: float32 would lose the spread's digits
        assert narrowed is enc
        return
    assert _float_dtypes(narrowed) == {F32}
    phi = np.asarray(case.dist.seq_features(narrowed))
    assert phi.dtype == F32
    exact = np.asarray(case.dist.seq_log_density(enc))
    approx = np.asarray(case.dist.seq_log_density(narrowed), dtype=np.float64)
    scale = np.maximum(1.0, np.abs(exact))
    # Count families lose digits as counts grow (x log x in float32): the large-count Poisson case.
    tol = 5e-5 if case.id == "poisson-large" else 1e-5
    assert float(np.max(np.abs(approx - exact) / scale)) < tol


def test_counts_above_2_to_24_stay_float64() -> None:
    est = MixtureEstimator([mixle_spark.stats.PoissonEstimator()] * 2)
    encoder = est.encoder()
    small, large = encoder.encode([3, 5, 2**24]), encoder.encode([3, 5, 2**24 + 1])
    assert _float_dtypes(encoder.narrow(small, F32)) == {F32}
    assert encoder.narrow(large, F32) is large


# -- fits: one composite of k=2 mixtures, one per family with the feature protocol ----------------
def _fit_cases() -> list[FamilyCase]:
    """One case per family with the feature protocol (its first), none far from 0 (that stays float64)."""
    seen: dict[str, FamilyCase] = {}
    for case in FEATURE_CASES:
        if case.id != "gaussian-large-offset":
            seen.setdefault(case.dist.family, case)
    return list(seen.values())


FIT_CASES = _fit_cases()


def _composite_data(n: int) -> tuple[list[tuple[Any, ...]], CompositeEstimator]:
    columns = [_records(case, n, 7 + i) for i, case in enumerate(FIT_CASES)]
    rows = list(zip(*columns, strict=True))
    est = CompositeEstimator([MixtureEstimator([c.estimator] * 2) for c in FIT_CASES])
    return rows, est


def _start(data: Any, est: Any, its: int, seed: int) -> Any:
    """A model after ``its`` float64 EM iterations (the common start of the fits compared)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return optimize(data, est, max_its=its, seed=seed, print_iter=0)


def _em(handle: Any, est: Any, start: Any, its: int) -> Any:
    model = start
    for _ in range(its):
        _, _, model = handle.pysp_em_step(est, model)
    return model


def _field_lls(model: CompositeDistribution, encs: list[tuple[Any, ...]]) -> np.ndarray:
    """Each field's log-likelihood (float64 data, float64 kernels) under ``model``'s field mixture."""
    return np.array(
        [
            sum(float(np.sum(comp.seq_log_density(enc[j]))) for enc in encs)
            for j, comp in enumerate(model.components)
        ]
    )


def test_float32_fits_match_float64_on_local_and_mp() -> None:
    rows, est = _composite_data(600)
    local64 = encoded_data(rows, est, num_chunks=2)
    local32 = encoded_data(rows, est, num_chunks=2, precision="float32")
    start = _em(local64, est, local64.pysp_seq_initialize(est, 3, 1.0), 2)  # (optimize: see below)
    encs = [chunk[2] for chunk in local64.chunks]
    fit64 = _em(local64, est, start, 4)
    fit32 = _em(local32, est, start, 4)
    with encoded_data(rows, est, backend="mp", num_workers=2, precision="float32") as mp32:
        assert mp32.compute == Compute("numpy", "float32")
        fit32_mp = _em(mp32, est, start, 4)
    ll64, ll32, ll32_mp = _field_lls(fit64, encs), _field_lls(fit32, encs), _field_lls(fit32_mp, encs)
    names = [c.id for c in FIT_CASES]
    off = {
        n: float(abs(a / b - 1)) for n, a, b in zip(names, ll32, ll64, strict=True) if abs(a / b - 1) > 1e-5
    }
    assert not off, f"float32 vs float64 log-likelihood beyond 1e-5 relative: {off}"
    off = {
        n: float(abs(a / b - 1))
        for n, a, b in zip(names, ll32_mp, ll32, strict=True)
        if abs(a / b - 1) > 1e-5
    }
    assert not off, f"mp vs local float32 log-likelihood beyond 1e-5 relative: {off}"
    assert not np.allclose(ll32, ll64, rtol=1e-15, atol=0)  # float32 did compute in float32


STORED_CASES = [
    c
    for c in CASES
    if c.id
    in {
        "record-mixed",
        "optional-p",
        "sequence-poisson-length",
        "hmm-record",
        "multivariate_student_t-heavy-prior",
        "poisson-large",
        "von_mises_fisher-tight-prior",
    }
]


@pytest.mark.parametrize("case", STORED_CASES, ids=[c.id for c in STORED_CASES])
def test_combinators_and_stored_families_fit_within_1e5(case: FamilyCase) -> None:
    """Families that store float32 but score per component (records, optional, sequences, hidden
    Markov models, the Student t) and the hard cases of the fused ones fit as float64 does to 1e-5."""
    records = _records(case, 400, 5)
    est = MixtureEstimator([case.estimator] * 2)
    h64 = encoded_data(records, est, num_chunks=2)
    h32 = encoded_data(records, est, num_chunks=2, precision="float32")
    assert _float_dtypes(h32.chunks[0][2]) & {F32}
    start = _em(h64, est, h64.pysp_seq_initialize(est, 3, 1.0), 2)
    encs = [chunk[2] for chunk in h64.chunks]
    ll64, ll32 = (
        sum(float(np.sum(model.seq_log_density(enc))) for enc in encs)
        for model in (_em(h64, est, start, 3), _em(h32, est, start, 3))
    )
    assert abs(ll32 / ll64 - 1) < 1e-5


def test_mp_workers_store_float32() -> None:
    x = np.random.default_rng(0).normal(size=(400, 4))
    est = MixtureEstimator([MultivariateGaussianEstimator(dim=4)] * 2)
    start = _start(x, est, 2, 1)
    with encoded_data(x, est, backend="mp", num_workers=2, precision="float32") as mp32:
        _, ll_mp, _ = mp32.pysp_em_step(est, start)
    local32 = encoded_data(x, est, num_chunks=2, precision="float32")
    _, ll_local, _ = local32.pysp_em_step(est, start)
    _, ll64, _ = encoded_data(x, est).pysp_em_step(est, start)
    assert abs(ll_mp / ll_local - 1) < 1e-6
    assert abs(ll_mp / ll64 - 1) < 1e-5
    assert ll_mp != ll64  # the workers computed in float32


def test_mp_and_model_parallel_accept_precision_and_refuse_bad_ones() -> None:
    x = np.random.default_rng(0).normal(size=50)
    est = MixtureEstimator([GaussianEstimator()] * 2)
    handle = encoded_data(x, est, backend="model_parallel", precision="fp32")
    assert handle.compute == Compute("numpy", "float32")
    assert handle.chunks[0][2].dtype == F32
    with pytest.raises(ValueError, match="precision='bfloat16' cannot be honoured"):
        encoded_data(x, est, backend="mp", precision="bf16")


# -- storage: vectors take half the bytes; statistics stay float64 ---------------------------------
def test_vector_rows_take_half_the_bytes() -> None:
    x = np.random.default_rng(1).normal(size=(1000, 8)) + 1e6  # far from 0: stored centred
    est = MixtureEstimator([MultivariateGaussianEstimator(dim=8)] * 2)
    b64 = sum(c[2].nbytes for c in encoded_data(x, est, num_chunks=3).chunks)
    h32 = encoded_data(x, est, num_chunks=3, precision="float32")
    b32 = sum(c[2].nbytes for c in h32.chunks)
    assert b64 == 1000 * 8 * 8
    assert b32 == b64 // 2
    batch = h32.chunks[0][2]
    assert batch.x.dtype == np.float64
    np.testing.assert_allclose(batch.x, x[: len(batch)], rtol=0, atol=1e-6)  # the digits kept


def test_statistics_stay_float64_after_a_float32_e_step() -> None:
    x = np.random.default_rng(2).normal(size=(300, 3))
    est = MixtureEstimator([MultivariateGaussianEstimator(dim=3)] * 2)
    start = _start(x, est, 1, 1)
    handle = encoded_data(x, est, precision="float32")
    acc = handle.bind(est).accumulator_factory().make()
    enc = handle.chunks[0][2]
    assert enc.dtype == F32
    with using_engine(Compute("numpy", "float32")):
        ll = acc.seq_update(enc, np.ones(len(enc)), start)
    value = acc.value()
    flat = [v for v in _leaves(value) if isinstance(v, np.ndarray) and v.dtype.kind == "f"]
    assert flat and all(v.dtype == np.float64 for v in flat)
    assert np.asarray(ll).dtype == np.float64


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in _leaves(v)]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    return [value]


# -- a family without float32 kernels says so once and fits as in float64 ---------------------------
def test_a_float64_family_says_so_once_and_fits_as_float64(caplog: pytest.LogCaptureFixture) -> None:
    x = np.random.default_rng(4).standard_t(4, size=600) + np.repeat([0.0, 6.0], 300)
    est = MixtureEstimator([StudentTEstimator()] * 2)
    start = _start(x, est, 1, 2)
    h32 = encoded_data(x, est, num_chunks=3, precision="float32")
    assert h32.chunks[0][2].dtype == np.float64  # student t computes in float64: kept
    with caplog.at_level(logging.INFO, logger="mixle_spark.engines"):
        fit32 = _em(h32, est, start, 3)
    notes = [r.getMessage() for r in caplog.records if "student_t has no numpy kernels" in r.getMessage()]
    assert notes == [
        "student_t has no numpy kernels at float32: it runs its numpy kernels in float64 (data upcast)"
    ]
    fit64 = _em(encoded_data(x, est, num_chunks=3), est, start, 3)
    ll32, ll64 = float(np.sum(fit32.seq_log_density(x))), float(np.sum(fit64.seq_log_density(x)))
    assert abs(ll32 / ll64 - 1) < 1e-9


def test_a_scalar_column_far_from_zero_stays_float64_and_says_so(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scalar_common, "_OFFSET_NOTED", set())  # said once per process: say it here
    x = 1e6 + np.random.default_rng(5).normal(size=200)
    est = MixtureEstimator([GaussianEstimator()] * 2)
    with caplog.at_level(logging.WARNING, logger="mixle_spark.engines"):
        handle = encoded_data(x, est, precision="float32")
        centred = encoded_data(x - x.mean(), est, precision="float32")
    assert handle.chunks[0][2].dtype == np.float64
    assert centred.chunks[0][2].dtype == F32
    assert any("GaussianEstimator: values around 1e+06" in r.getMessage() for r in caplog.records)


def test_narrow_floats_keeps_integers_and_other_values() -> None:
    x, codes, label = narrow_floats((np.array([1.5]), np.array([2]), "a"), F32)
    assert (x.dtype, codes.dtype, label) == (F32, np.dtype(np.int64), "a")


def test_the_docs_table_lists_the_float32_families() -> None:
    page = (Path(__file__).parents[2] / "docs" / "precision.md").read_text()
    table = page[page.index("<!-- float32 families -->") : page.index("<!-- end float32 families -->")]
    rows = [
        [cell.strip() for cell in line.split("|")[1:3]]
        for line in table.splitlines()
        if line.startswith("| `")
    ]
    assert sorted(name.strip("`") for name, _ in rows) == float32_families()
    fused = sorted(name.strip("`") for name, e_step in rows if e_step.startswith("float32"))
    assert fused == FEATURE_FAMILIES


def test_a_float32_fit_counts_its_rounding_as_no_decrease() -> None:
    """A float32 E-step's total log-likelihood carries ~1e-8 relative rounding: a drop within 1e-6 is
    convergence, not a decrease (the docs/precision.md example stopped with a ConvergenceWarning at
    1e-9)."""
    x = np.zeros((4, 2))
    est = MixtureEstimator([MultivariateGaussianEstimator(dim=2)] * 2)
    assert rounding_rtol(encoded_data(x, est, precision="float32")) == 1e-6
    assert rounding_rtol(encoded_data(x, est)) == 1e-9
    assert has_decreased(-1000.0 - 1e-5, -1000.0) and not has_decreased(-1000.0 - 1e-5, -1000.0, 1e-6)


def test_a_certain_component_scores_in_float32_as_in_float64() -> None:
    """A Bernoulli with p = 1 has log(0) coefficients (-1e300 in float64, -inf if cast to float32:
    0 * inf would be NaN); the float32 E-step clips them and matches float64."""
    x = np.r_[np.ones(100), np.zeros(3)]
    est = MixtureEstimator([mixle_spark.stats.BernoulliEstimator()] * 2)
    model = mixle_spark.stats.MixtureDistribution(
        [mixle_spark.stats.BernoulliDistribution(1.0), mixle_spark.stats.BernoulliDistribution(0.5)],
        [0.5, 0.5],
    )
    _, ll32, _ = encoded_data(x, est, precision="float32").pysp_em_step(est, model)
    _, ll64, _ = encoded_data(x, est).pysp_em_step(est, model)
    assert abs(ll32 / ll64 - 1) < 1e-6
