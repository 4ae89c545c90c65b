"""The contract suite: every registered family's cases (tests/unit/cases_*.py) pass the same checks.

A new family gets all of it by adding a ``cases_<group>.py`` module with ``CASES``.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import warnings
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import mixle_spark.stats  # noqa: F401  (registers every family)
import tests.unit as unit_tests
from mixle_spark.errors import ConvergenceWarning
from mixle_spark.estimation import optimize
from mixle_spark.spec import model_from_json, model_to_json
from mixle_spark.stats.base import (
    Distribution,
    Estimator,
    RowRandom,
    distribution_from_dict,
    estimator_from_dict,
    registered_distributions,
)
from tests.unit._cases import FamilyCase


def _all_cases() -> list[FamilyCase]:
    cases: list[FamilyCase] = []
    for info in pkgutil.iter_modules(unit_tests.__path__):
        if info.name.startswith("cases_"):
            cases += importlib.import_module(f"tests.unit.{info.name}").CASES
    return cases


CASES = _all_cases()
IDS = [c.id for c in CASES]


def _records(case: FamilyCase, n: int, seed: int) -> list[Any]:
    out = case.dist.sampler(seed).sample(n)
    return list(out)


def _bind(est: Estimator, records: list[Any]) -> tuple[Estimator, Any]:
    enc = est.encoder()
    if enc.needs_scan:
        est = est.with_scan(enc.scan(records))
        enc = est.encoder()
    return est, enc


def _flat(value: Any) -> np.ndarray:
    """All numbers of a statistics value, flattened in a canonical order."""
    if value is None:
        return np.zeros(0)
    if isinstance(value, dict):
        return np.concatenate([np.zeros(0)] + [_flat(value[k]) for k in sorted(value, key=repr)])
    if isinstance(value, (list, tuple)):
        return np.concatenate([np.zeros(0)] + [_flat(v) for v in value])
    return np.atleast_1d(np.asarray(value, dtype=np.float64)).ravel()


def _stats_equal(a: Any, b: Any, rtol: float = 1e-9) -> None:
    fa, fb = _flat(a), _flat(b)
    assert fa.shape == fb.shape
    scale = np.maximum(np.abs(fa), np.abs(fb)).max(initial=1.0)
    np.testing.assert_allclose(fa, fb, rtol=rtol, atol=rtol * scale)


def _accumulate(est: Estimator, enc: Any, weights: np.ndarray, model: Distribution | None) -> Any:
    acc = est.accumulator_factory().make()
    acc.seq_update(enc, weights, model)
    return acc


def _split_value(
    est: Estimator,
    encoder: Any,
    records: list[Any],
    w: np.ndarray,
    model: Distribution | None,
    rng: np.random.Generator,
) -> Any:
    cuts = np.sort(rng.choice(np.arange(1, len(records)), size=3, replace=False))
    parts = np.split(np.arange(len(records)), cuts)
    rng.shuffle(parts)
    values = []
    for idx in parts:
        enc = encoder.encode([records[i] for i in idx])
        values.append(_accumulate(est, enc, w[idx], model).value())
    acc = est.accumulator_factory().make()
    for v in values:
        acc.combine(v)
    return acc.value()


def test_there_are_cases_for_every_registered_family() -> None:
    covered = {c.dist.family for c in CASES}
    missing = set(registered_distributions()) - covered
    assert not missing, f"families without contract cases: {sorted(missing)}"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_seq_log_density_matches_log_density(case: FamilyCase) -> None:
    records = _records(case, 200, seed=1)
    enc = case.dist.encoder().encode(records)
    seq = case.dist.seq_log_density(enc)
    one = np.array([case.dist.log_density(r) for r in records])
    assert seq.shape == (len(records),)
    assert np.all(np.isfinite(seq))
    np.testing.assert_allclose(seq, one, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_accumulator_split_merge_equals_whole(case: FamilyCase) -> None:
    records = _records(case, 300, seed=2)
    est, encoder = _bind(case.estimator, records)
    w = np.random.default_rng(0).uniform(0.5, 2.0, len(records))
    model = case.dist if case.em_its else None
    whole = _accumulate(est, encoder.encode(records), w, model).value()
    for trial in range(3):
        _stats_equal(_split_value(est, encoder, records, w, model, np.random.default_rng(trial)), whole)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_weight_two_equals_record_twice(case: FamilyCase) -> None:
    records = _records(case, 50, seed=3)
    est, encoder = _bind(case.estimator, records)
    model = case.dist if case.em_its else None
    w = np.ones(len(records))
    w[:10] = 2.0
    doubled = _accumulate(est, encoder.encode(records), w, model).value()
    twice = _accumulate(est, encoder.encode(records + records[:10]), np.ones(len(records) + 10), model)
    _stats_equal(doubled, twice.value())


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_seq_initialize_is_independent_of_batching(case: FamilyCase) -> None:
    records = _records(case, 120, seed=4)
    est, encoder = _bind(case.estimator, records)
    w = np.ones(len(records))
    whole = est.accumulator_factory().make()
    whole.seq_initialize(encoder.encode(records), w, RowRandom.for_rows(11, 0, len(records)))
    pieces = est.accumulator_factory().make()
    for start, stop in [(0, 37), (37, 100), (100, 120)]:
        acc = est.accumulator_factory().make()
        acc.seq_initialize(
            encoder.encode(records[start:stop]), w[start:stop], RowRandom.for_rows(11, start, stop - start)
        )
        pieces.combine(acc.value())
    _stats_equal(pieces.value(), whole.value())


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_embedding_is_per_row_and_has_its_declared_width(case: FamilyCase) -> None:
    """The seeding embedding (init="kmeans||") of a row does not depend on the batch it is in."""
    records = _records(case, 120, seed=4)
    _est, encoder = _bind(case.estimator, records)
    width = len(encoder.embedding_scales())
    whole = encoder.embed(encoder.encode(records))
    assert whole.shape == (120, width) and whole.dtype == np.float64
    assert not np.isinf(whole).any()
    pieces = np.vstack(
        [encoder.embed(encoder.encode(records[a:b])) for a, b in [(0, 37), (37, 100), (100, 120)]]
    )
    np.testing.assert_array_equal(pieces, whole)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_json_round_trip(case: FamilyCase) -> None:
    records = _records(case, 50, seed=5)
    restored = model_from_json(model_to_json(case.dist))
    assert type(restored) is type(case.dist)
    assert restored.to_dict() == case.dist.to_dict()
    enc = case.dist.encoder().encode(records)
    np.testing.assert_array_equal(restored.seq_log_density(enc), case.dist.seq_log_density(enc))
    assert distribution_from_dict(json.loads(json.dumps(case.dist.to_dict()))) == case.dist
    assert estimator_from_dict(json.loads(json.dumps(case.estimator.to_dict()))) == case.estimator


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_arrow_encoding_matches_python_encoding(case: FamilyCase) -> None:
    records = _records(case, 80, seed=6)
    arrow = case.to_arrow(records) if case.to_arrow is not None else pa.array(records)
    encoder = case.dist.encoder()
    via_arrow = case.dist.seq_log_density(encoder.from_arrow(arrow))
    via_python = case.dist.seq_log_density(encoder.encode(records))
    np.testing.assert_allclose(via_arrow, via_python, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_parameter_recovery(case: FamilyCase) -> None:
    """The fitted model scores held-out data (nearly) as well as the true model."""
    train = _records(case, case.n, seed=7)
    test = _records(case, case.n, seed=8)
    if case.em_its:
        with warnings.catch_warnings():  # MAP fits (pseudo-counts) may stop at a rounding-size dip
            warnings.simplefilter("ignore", ConvergenceWarning)
            model = optimize(train, case.estimator, max_its=case.em_its, delta=1e-8, seed=3)
    else:
        est, encoder = _bind(case.estimator, train)
        acc = _accumulate(est, encoder.encode(train), np.ones(len(train)), None)
        model = est.estimate(float(len(train)), acc.value())
    enc = case.dist.encoder().union(model.encoder()).encode(test)
    gap = float(np.mean(case.dist.seq_log_density(enc)) - np.mean(model.seq_log_density(enc)))
    assert gap < case.recovery_tol, f"fitted model is {gap:.4f} nats/row worse than the truth"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_samplers_are_reproducible(case: FamilyCase) -> None:
    a = json.dumps(_records(case, 20, seed=9), default=repr)
    b = json.dumps(_records(case, 20, seed=9), default=repr)
    c = json.dumps(_records(case, 20, seed=10), default=repr)
    assert a == b
    if not case.extra.get("deterministic"):  # a point mass draws its value whatever the seed
        assert a != c
