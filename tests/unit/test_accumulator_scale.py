"""Incremental EM's two accumulator operations, on every family of the contract cases
(tests/unit/cases_*.py): ``scale`` (statistics of the same rows with every weight times the factor)
and ``widened`` (statistics moved into a vocabulary that a later scan widened)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import mixle_spark.stats  # noqa: F401  (registers every family)
from mixle_spark.errors import OptionTypeError, SpecError
from mixle_spark.parallel.backends.model_parallel import ModelParallelAccumulator, ModelParallelEstimator
from mixle_spark.stats.base import Accumulator, Distribution, Estimator
from mixle_spark.stats.categorical import CategoricalDistribution, CategoricalEstimator
from mixle_spark.stats.gaussian import GaussianAccumulator, GaussianEstimator
from mixle_spark.stats.hidden_markov import HiddenMarkovDistribution, HiddenMarkovEstimator
from mixle_spark.stats.markov_chain import MarkovChainDistribution, MarkovChainEstimator
from mixle_spark.stats.mixture import MixtureDistribution, MixtureEstimator
from mixle_spark.stats.multinomial import MultinomialDistribution, MultinomialEstimator
from mixle_spark.stats.record import RecordEstimator
from mixle_spark.stats.sequence import SequenceEstimator
from tests.unit._cases import FamilyCase, assert_models_close
from tests.unit.test_contracts import _all_cases

CASES = _all_cases()  # every family's contract cases (tests/unit/cases_*.py)
IDS = [c.id for c in CASES]
FACTORS = [0.37, 3.0]


def _bind(est: Estimator, records: list[Any]) -> tuple[Estimator, Any]:
    enc = est.encoder()
    if enc.needs_scan:
        est = est.with_scan(enc.scan(records))
        enc = est.encoder()
    return est, enc


def _accumulate(est: Estimator, enc: Any, weights: np.ndarray, model: Distribution | None) -> Accumulator:
    acc = est.accumulator_factory().make()
    acc.seq_update(enc, weights, model)
    return acc


def _leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """The leaves of a statistics value, each with its path (``[1][0]``), in order."""
    if isinstance(value, dict):
        return [leaf for k in sorted(value, key=repr) for leaf in _leaves(value[k], f"{path}[{k!r}]")]
    if isinstance(value, (list, tuple)):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{path}[{i}]")]
    return [(path, value)]


def assert_values_equal(a: Any, b: Any, rtol: float = 1e-12) -> None:
    """Two statistics values have the same tree; float leaves agree to ``rtol`` (relative to the
    leaf's largest entry), the other leaves (None, integers) exactly."""
    leaves_a, leaves_b = _leaves(a), _leaves(b)
    assert [p for p, _ in leaves_a] == [p for p, _ in leaves_b]
    for (path, x), (_, y) in zip(leaves_a, leaves_b, strict=True):
        if x is None or isinstance(x, (int, np.integer)):
            assert type(x) is type(y) and x == y, f"leaf {path}: {x!r} != {y!r}"
            continue
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        assert x.shape == y.shape, f"leaf {path}: shapes {x.shape} != {y.shape}"
        scale = float(np.maximum(np.abs(x), np.abs(y)).max(initial=0.0))
        np.testing.assert_allclose(x, y, rtol=rtol, atol=max(rtol * scale, 1e-300), err_msg=f"leaf {path}")


def _sample(case: FamilyCase, n: int, seed: int) -> tuple[Estimator, Any, np.ndarray]:
    records = list(case.dist.sampler(seed).sample(n))
    est, encoder = _bind(case.estimator, records)
    weights = np.random.default_rng(seed).uniform(0.5, 2.0, n)
    return est, encoder.encode(records), weights


@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_scale_equals_scaled_weights(case: FamilyCase, factor: float) -> None:
    est, enc, w = _sample(case, 200, seed=21)
    scaled = _accumulate(est, enc, w, case.dist)
    assert scaled.scale(factor) is scaled
    reweighted = _accumulate(est, enc, factor * w, case.dist)
    assert_values_equal(scaled.value(), reweighted.value())
    nobs = factor * float(w.sum())
    assert_models_close(est.estimate(nobs, scaled.value()), est.estimate(nobs, reweighted.value()))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_scale_zero_then_combine_equals_the_other(case: FamilyCase) -> None:
    records = list(case.dist.sampler(22).sample(300))
    est, encoder = _bind(case.estimator, records)
    w = np.random.default_rng(22).uniform(0.5, 2.0, 300)
    first = _accumulate(est, encoder.encode(records[:150]), w[:150], case.dist)
    other = _accumulate(est, encoder.encode(records[150:]), w[150:], case.dist)
    first.scale(0.0).combine(other.value())
    assert_values_equal(first.value(), other.value())


def test_model_parallel_accumulator_scales_its_inner_statistics() -> None:
    mixture = next(c for c in CASES if c.id == "mixture-gaussian")
    case = FamilyCase(
        "model-parallel", mixture.dist, ModelParallelEstimator(mixture.estimator, num_workers=2)
    )
    est, enc, w = _sample(case, 200, seed=23)
    scaled = _accumulate(est, enc, w, case.dist)
    assert isinstance(scaled, ModelParallelAccumulator)
    assert scaled.scale(0.37) is scaled
    assert_values_equal(scaled.value(), _accumulate(est, enc, 0.37 * w, case.dist).value())


def _subclasses(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in [sub, *_subclasses(sub)]]


def test_every_built_in_accumulator_scales() -> None:
    built_in = {c for c in _subclasses(Accumulator) if c.__module__.startswith("mixle_spark.")}
    assert len(built_in) >= 30
    missing = sorted(c.__name__ for c in built_in if c._scale is Accumulator._scale)
    assert not missing, f"accumulators without _scale: {missing}"


@pytest.mark.parametrize("factor", [-1.0, -1e-300, float("nan"), float("inf"), -float("inf")])
def test_scale_refuses_a_negative_or_non_finite_factor(factor: float) -> None:
    case = next(c for c in CASES if c.id == "mixture-gaussian")
    est, enc, w = _sample(case, 50, seed=24)
    acc = _accumulate(est, enc, w, case.dist)
    before = acc.value()
    with pytest.raises(
        SpecError, match=f"scale factor must be a finite number >= 0, got {re.escape(repr(factor))}"
    ):
        acc.scale(factor)
    assert_values_equal(acc.value(), before, rtol=0.0)  # refused before any part was scaled


@pytest.mark.parametrize("factor", ["0.5", None, True])
def test_scale_refuses_a_factor_that_is_not_a_number(factor: Any) -> None:
    with pytest.raises(
        OptionTypeError, match=f"scale factor must be a finite number >= 0, got {re.escape(repr(factor))}"
    ):
        GaussianAccumulator().scale(factor)


class _ThirdPartyAccumulator(Accumulator):
    """A family outside mixle_spark that implements only the abstract methods."""

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.total = 0.0

    def seq_update(self, enc: Any, weights: np.ndarray, estimate: Any) -> None:
        self.total += float(weights.sum())

    def combine(self, value: Any) -> _ThirdPartyAccumulator:
        self.total += value
        return self

    def value(self) -> float:
        return self.total

    def from_value(self, value: Any) -> _ThirdPartyAccumulator:
        self.total = float(value)
        return self


def test_an_accumulator_without_scale_says_what_to_implement() -> None:
    acc = _ThirdPartyAccumulator().combine(2.0)
    with pytest.raises(
        NotImplementedError, match=r"_ThirdPartyAccumulator does not implement _scale\(factor\)"
    ):
        acc.scale(0.5)
    assert acc.value() == 2.0


def test_widened_defaults_to_the_value_for_a_target_of_the_same_class() -> None:
    acc = _ThirdPartyAccumulator().combine(2.0)
    assert acc.widened(_ThirdPartyAccumulator()) == 2.0
    with pytest.raises(
        SpecError, match=r"the target must be a _ThirdPartyAccumulator .*got GaussianAccumulator"
    ):
        acc.widened(GaussianAccumulator())


# Widening: batch A has labels {a, b}, batch B {b, c}. Lengths (of the list families, modelled by a
# categorical so that they have a vocabulary too) are 1-3 in A and 2-5 in B.
ALPHABETS = {"A": ("a", "b"), "B": ("b", "c")}
LENGTHS = {"A": (1, 4), "B": (2, 6)}
LENGTH_MODEL = CategoricalDistribution({n: 0.2 for n in range(1, 6)})


def _labels(rng: np.random.Generator, batch: str) -> list[str]:
    return [str(v) for v in rng.choice(ALPHABETS[batch], size=int(rng.integers(*LENGTHS[batch])))]


def _pmap(tilt: float) -> dict[str, float]:
    p = np.array([1.0 + tilt, 1.0, 1.0 + 2.0 * (1.0 - tilt)])
    return dict(zip("abc", (p / p.sum()).tolist(), strict=True))


def _chain(tilt: float) -> MarkovChainDistribution:
    return MarkovChainDistribution(_pmap(tilt), {k: _pmap(1.0 - tilt) for k in "abc"}, LENGTH_MODEL)


@dataclass
class LabelFamily:
    name: str
    owner: str
    """The accumulator class a missing label's error names."""
    estimator: Callable[[], Estimator]
    record: Callable[[np.random.Generator, str], Any]
    model: Callable[[float], Distribution]
    """A model over {a, b, c} (components of the mixtures tilt it)."""


FAMILIES = [
    LabelFamily(
        "categorical",
        "CategoricalAccumulator",
        CategoricalEstimator,
        lambda rng, batch: str(rng.choice(ALPHABETS[batch])),
        lambda tilt: CategoricalDistribution(_pmap(tilt)),
    ),
    LabelFamily(
        "multinomial",
        "MultinomialAccumulator",
        lambda: MultinomialEstimator(len_estimator=CategoricalEstimator()),
        _labels,
        lambda tilt: MultinomialDistribution(_pmap(tilt), LENGTH_MODEL),
    ),
    LabelFamily(
        "markov-chain",
        "MarkovChainAccumulator",
        lambda: MarkovChainEstimator(len_estimator=CategoricalEstimator()),
        _labels,
        _chain,
    ),
]


@dataclass
class Widening:
    id: str
    owner: str
    estimator: Estimator
    record: Callable[[np.random.Generator, str], Any]
    model: Distribution | None


def _settings() -> list[Widening]:
    out = []
    for f in FAMILIES:
        mixture = MixtureDistribution([f.model(0.0), f.model(1.0)], [0.4, 0.6])
        out += [
            Widening(f.name, f.owner, f.estimator(), f.record, None),
            Widening(
                f"{f.name}-mixture",
                f.owner,
                MixtureEstimator([f.estimator(), f.estimator()]),
                f.record,
                mixture,
            ),
            Widening(
                f"{f.name}-record",
                f.owner,
                RecordEstimator({"label": f.estimator(), "size": GaussianEstimator()}),
                lambda rng, batch, f=f: {"label": f.record(rng, batch), "size": float(rng.normal())},
                None,
            ),
        ]
    categorical = FAMILIES[0]
    out += [
        Widening(
            "sequence-categorical",
            "CategoricalAccumulator",
            SequenceEstimator(CategoricalEstimator(), len_estimator=CategoricalEstimator()),
            _labels,
            None,
        ),
        Widening(
            "hmm-categorical",
            "CategoricalAccumulator",
            HiddenMarkovEstimator([CategoricalEstimator(), CategoricalEstimator()], CategoricalEstimator()),
            _labels,
            HiddenMarkovDistribution(
                [categorical.model(0.0), categorical.model(1.0)],
                [0.5, 0.5],
                [[0.8, 0.2], [0.3, 0.7]],
                LENGTH_MODEL,
            ),
        ),
        Widening(
            "model-parallel-categorical-mixture",
            "CategoricalAccumulator",
            ModelParallelEstimator(MixtureEstimator([CategoricalEstimator()] * 2), num_workers=2),
            categorical.record,
            MixtureDistribution([categorical.model(0.0), categorical.model(1.0)], [0.4, 0.6]),
        ),
    ]
    return out


SETTINGS = _settings()


def _batches(setting: Widening) -> tuple[list[Any], np.ndarray, list[Any], np.ndarray]:
    rng = np.random.default_rng(31)
    a = [setting.record(rng, "A") for _ in range(60)]
    b = [setting.record(rng, "B") for _ in range(80)]
    return a, rng.uniform(0.5, 2.0, 60), b, rng.uniform(0.5, 2.0, 80)


def _scanned(setting: Widening, a: list[Any], b: list[Any]) -> tuple[Estimator, Estimator]:
    """The estimator scanned on batch A, then on batch B too (the incremental order)."""
    scan = setting.estimator.encoder().scan
    on_a = setting.estimator.with_scan(scan(a))
    return on_a, on_a.with_scan(scan(b))


@pytest.mark.parametrize("setting", SETTINGS, ids=[s.id for s in SETTINGS])
def test_widened_statistics_merge_with_the_wider_ones(setting: Widening) -> None:
    a, wa, b, wb = _batches(setting)
    on_a, on_ab = _scanned(setting, a, b)
    acc_a = _accumulate(on_a, on_a.encoder().encode(a), wa, setting.model)
    acc_b = _accumulate(on_ab, on_ab.encoder().encode(b), wb, setting.model)
    target = on_ab.accumulator_factory().make()
    with pytest.raises(SpecError, match="cannot combine"):  # why widening is needed
        target.make().combine(acc_a.value())
    merged = target.make().from_value(acc_a.widened(target)).combine(acc_b.value())
    whole = _accumulate(on_ab, on_ab.encoder().encode(a + b), np.concatenate([wa, wb]), setting.model)
    assert_values_equal(merged.value(), whole.value())
    nobs = float(wa.sum() + wb.sum())
    assert_models_close(on_ab.estimate(nobs, merged.value()), on_ab.estimate(nobs, whole.value()))


@pytest.mark.parametrize("setting", SETTINGS, ids=[s.id for s in SETTINGS])
def test_widened_is_the_value_for_the_same_vocabulary(setting: Widening) -> None:
    a, wa, _b, _wb = _batches(setting)
    on_a = setting.estimator.with_scan(setting.estimator.encoder().scan(a))
    acc = _accumulate(on_a, on_a.encoder().encode(a), wa, setting.model)
    assert_values_equal(acc.widened(on_a.accumulator_factory().make()), acc.value(), rtol=0.0)


@pytest.mark.parametrize("setting", SETTINGS, ids=[s.id for s in SETTINGS])
def test_widening_to_a_vocabulary_without_a_label_names_it(setting: Widening) -> None:
    a, _wa, b, wb = _batches(setting)
    on_a, on_ab = _scanned(setting, a, b)
    acc = _accumulate(on_ab, on_ab.encoder().encode(b), wb, setting.model)
    with pytest.raises(SpecError, match=rf"{setting.owner}: cannot widen statistics .* without label 'c'"):
        acc.widened(on_a.accumulator_factory().make())


def test_widening_to_a_length_vocabulary_without_a_length_names_it() -> None:
    setting = next(s for s in SETTINGS if s.id == "markov-chain")
    a, _wa, b, wb = _batches(setting)
    on_a = setting.estimator.with_scan(setting.estimator.encoder().scan(a))
    label_scan, _length_scan = setting.estimator.encoder().scan(b)
    labels_only = on_a.with_scan((label_scan, None))  # the labels of B, the lengths of A
    _, on_ab = _scanned(setting, a, b)
    acc = _accumulate(on_ab, on_ab.encoder().encode(b), wb, None)
    with pytest.raises(
        SpecError, match=r"CategoricalAccumulator: cannot widen statistics .* without label 4"
    ):
        acc.widened(labels_only.accumulator_factory().make())


def test_widening_to_another_structure_is_refused() -> None:
    two = MixtureEstimator([CategoricalEstimator(labels=["a"])] * 2).accumulator_factory().make()
    three = MixtureEstimator([CategoricalEstimator(labels=["a"])] * 3).accumulator_factory().make()
    with pytest.raises(
        SpecError, match=r"MixtureAccumulator\.widened: the target has 3 parts, this accumulator 2"
    ):
        two.widened(three)
    with pytest.raises(
        SpecError, match=r"the target must be a MixtureAccumulator .*got CategoricalAccumulator"
    ):
        two.widened(CategoricalEstimator(labels=["a"]).accumulator_factory().make())
    chain = MarkovChainEstimator(labels=["a"], len_estimator=CategoricalEstimator(labels=[1]))
    without_lengths = MarkovChainEstimator(labels=["a"]).accumulator_factory().make()
    with pytest.raises(SpecError, match=r"MarkovChainAccumulator\.widened: the target lacks a length model"):
        chain.accumulator_factory().make().widened(without_lengths)
