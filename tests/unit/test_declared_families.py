"""What follows from a family's declarations (issue 19): option checks that name the value, the spec
round trip of options that differ from their defaults, accumulators that are their own factories."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import mixle_spark.stats as stats
from mixle_spark.errors import SpecError
from mixle_spark.stats import (
    CategoricalEstimator,
    GammaEstimator,
    GaussianEstimator,
    HiddenMarkovEstimator,
    MarkovChainEstimator,
    MixtureDistribution,
    MixtureEstimator,
    PoissonEstimator,
    RecordEstimator,
    SequenceEstimator,
    distribution_from_dict,
    estimator_from_dict,
    registered_estimators,
)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: GammaEstimator(min_k="a"), r"GammaEstimator: min_k must be positive, got 'a'"),
        (
            lambda: GammaEstimator(min_k=2.0, max_k=1.0),
            r"\(min_k, max_k\) must be positive with min_k < max_k",
        ),
        (
            lambda: GaussianEstimator(suff_stat=(0.0, -1.0)),
            r"GaussianEstimator: suff_stat must be a pair \(mu0, sigma2_0\) of finite numbers with "
            r"sigma2_0 > 0, got \(0.0, -1.0\)",
        ),
        (
            lambda: PoissonEstimator(pseudo_count=True),
            r"pseudo_count must be a non-negative number, got True",
        ),
        (
            lambda: MarkovChainEstimator(pseudo_count=-1.0),
            r"pseudo_count must be a non-negative number, got -1.0",
        ),
        (
            lambda: CategoricalEstimator(min_prob=1.0),
            r"CategoricalEstimator: min_prob must be in \[0, 1\), got 1.0",
        ),
        (lambda: MixtureEstimator([GaussianEstimator(), 3]), r"estimators\[1\] must be an Estimator, got 3"),
        (lambda: MixtureEstimator([]), r"estimators must be a non-empty list of estimators, got \[\]"),
        (lambda: SequenceEstimator(3), r"SequenceEstimator: estimator must be an Estimator, got 3"),
        (
            lambda: SequenceEstimator(GaussianEstimator(), 3),
            r"len_estimator must be an Estimator or None, got 3",
        ),
    ],
)
def test_an_option_that_fails_its_check_is_named_with_its_value(build, message) -> None:
    with pytest.raises(SpecError, match=message):
        build()


def test_spec_keys_and_shapes_are_checked_from_the_declaration() -> None:
    with pytest.raises(SpecError, match=r"unknown key 'min_x' in gamma spec"):
        estimator_from_dict({"type": "gamma", "min_x": 1.0})
    with pytest.raises(SpecError, match=r"mixture spec is missing required key 'components'"):
        estimator_from_dict({"type": "mixture"})
    with pytest.raises(
        SpecError, match=r"MixtureEstimator: components must be a list of estimator specs, got \{'a': 1\}"
    ):
        estimator_from_dict({"type": "mixture", "components": {"a": 1}})
    with pytest.raises(
        SpecError, match=r"MixtureDistribution: components must be a list of distribution specs, got 'x'"
    ):
        distribution_from_dict({"type": "mixture", "components": "x", "w": [1.0]})


def test_only_options_that_differ_from_their_default_are_written_and_they_round_trip() -> None:
    est = MixtureEstimator([GammaEstimator(max_k=50.0)] * 2, init_rows_per_component=None, keys=("w", "c"))
    spec = est.to_dict()
    assert spec == {
        "type": "mixture",
        "components": [{"type": "gamma", "max_k": 50.0}, {"type": "gamma", "max_k": 50.0}],
        "keys": ["w", "c"],
        "init_rows_per_component": None,  # differs from the default 20: written as null
    }
    back = estimator_from_dict(spec)
    assert back == est and back.init_rows_per_component is None and back.keys == ("w", "c")
    record = RecordEstimator({"x": CategoricalEstimator(labels=["b", "a"], suff_stat={"a": 1.0})})
    assert record.to_dict()["fields"]["x"] == {
        "type": "categorical",
        "suff_stat": [["a", 1.0]],
        "labels": ["a", "b"],
    }
    assert estimator_from_dict(record.to_dict()) == record


def test_with_scan_replaces_only_what_the_scan_fixes() -> None:
    est = CategoricalEstimator(pseudo_count=2.0, min_prob=0.01, name="colour", keys="k")
    scanned = est.with_scan(frozenset({"red", "blue"}))
    assert scanned.labels == ("blue", "red")
    assert dataclasses.replace(scanned, labels=None) == est
    hmm = HiddenMarkovEstimator([CategoricalEstimator()] * 2, pseudo_count=1.0)
    hmm_scanned = hmm.with_scan((frozenset({"a"}), None))
    assert [e.labels for e in hmm_scanned.estimators] == [("a",), ("a",)]
    assert hmm_scanned.pseudo_count == 1.0 and hmm_scanned.init_rows_per_state == 20


def test_every_accumulator_is_its_own_factory_and_make_gives_a_fresh_one() -> None:
    for name in stats.__all__:
        if name.endswith("AccumulatorFactory") and name != "AccumulatorFactory":
            assert getattr(stats, name) is getattr(stats, name[: -len("Factory")]), name
    est = MixtureEstimator([GaussianEstimator(), GaussianEstimator()])
    factory = est.accumulator_factory()
    acc = factory.make()
    enc = est.encoder().encode([0.0, 1.0, 5.0])
    acc.seq_update(enc, np.ones(3), MixtureDistribution([stats.GaussianDistribution(0, 1)] * 2, [0.5, 0.5]))
    fresh = acc.make()
    assert fresh is not acc and np.all(fresh.counts == 0.0) and acc.counts.sum() == pytest.approx(3.0)
    assert [a.sw for a in fresh.accumulators] == [0.0, 0.0]
    assert [a is b for a, b in zip(fresh.accumulators, acc.accumulators, strict=True)] == [False, False]


def test_every_registered_estimator_round_trips_its_default_spec() -> None:
    for family, cls in registered_estimators().items():
        if family in (
            "mixture",
            "hidden_markov",
            "composite",
            "record",
            "optional",
            "sequence",
            "model_parallel",
            "zero_inflated",
            "hurdle",
            "truncated",
            "censored",
        ):
            continue  # need parts: covered by the contract cases
        est = cls()
        assert est.to_dict() == {"type": family}, family
        assert estimator_from_dict(est.to_dict()) == est


def test_a_family_registered_outside_stats_reads_without_importing_its_module() -> None:
    """model_parallel is registered by mixle_spark.parallel: a spec naming it, and the list an unknown
    family's error gives, do not depend on whether the caller imported that package."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from mixle_spark.stats import estimator_from_dict, registered_estimators\n"
        "assert 'mixle_spark.parallel.backends.model_parallel' not in sys.modules\n"
        "est = estimator_from_dict({'type': 'model_parallel', 'estimator': 'gaussian', 'num_workers': 2})\n"
        "print(type(est).__name__, est.num_workers, 'model_parallel' in registered_estimators())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["ModelParallelEstimator", "2", "True"]
