"""Model specs -> estimators, and models <-> JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mixle_spark.errors import ModelFormatError, SpecError, UnknownNameError
from mixle_spark.spec import (
    FIT_OPTIONS,
    estimator_from_spec,
    load_model,
    load_spec,
    model_from_json,
    model_to_dict,
    model_to_json,
    save_model,
)
from mixle_spark.stats import (
    GaussianDistribution,
    MixtureDistribution,
    MixtureEstimator,
    RecordEstimator,
)
from mixle_spark.stats.base import distribution_from_dict

ROOT = Path(__file__).resolve().parents[2]


def test_sample_spec_builds_a_mixture_of_records() -> None:
    spec = load_spec(ROOT / "conf" / "models" / "sample.json")
    est = spec.estimator
    assert isinstance(est, MixtureEstimator)
    assert len(est.estimators) == 3
    assert all(isinstance(e, RecordEstimator) for e in est.estimators)
    assert list(est.estimators[0].fields) == ["amount", "channel", "n_items", "tags"]
    assert spec.fit["max_its"] == 200


def test_shorthand_expands_to_k_copies() -> None:
    est = estimator_from_spec({"type": "mixture", "k": 4, "component": "gaussian"})
    assert len(est.estimators) == 4
    assert estimator_from_spec(est.to_dict()) == est


def test_hidden_markov_shorthand_expands_to_k_emissions() -> None:
    est = estimator_from_spec(
        {"type": "hidden_markov", "k": 3, "emission": {"type": "gaussian"}, "len_estimator": "poisson"}
    )
    assert len(est.estimators) == 3 and all(e == est.estimators[0] for e in est.estimators)
    assert est.len_estimator is not None
    assert estimator_from_spec(est.to_dict()) == est
    with pytest.raises(SpecError, match="hidden_markov shorthand needs both 'k' and 'emission'"):
        estimator_from_spec({"type": "hidden_markov", "k": 2})
    with pytest.raises(SpecError, match="give either 'estimators' or 'k' with 'emission', not both"):
        estimator_from_spec({"type": "hidden_markov", "k": 2, "emission": "gaussian", "estimators": []})


def test_unknown_spec_key_is_named() -> None:
    with pytest.raises(SpecError, match=r"unknown key 'sigma' in gaussian spec"):
        estimator_from_spec({"type": "gaussian", "sigma": 1.0})


def test_unknown_family_lists_the_valid_ones() -> None:
    with pytest.raises(
        UnknownNameError,
        match=r"unknown estimator family 'gausian' \(did you mean 'gaussian'\?\); "
        r"expected one of: .*gaussian",
    ):
        estimator_from_spec({"type": "gausian"})


@pytest.mark.parametrize(
    ("family", "meant"),
    [
        ("lognormal", "log_gaussian"),
        ("gausian", "gaussian"),
        ("poison", "poisson"),
        ("categoral", "categorical"),
        ("Multivariate-Normal", "multivariate_gaussian"),
    ],
)
def test_a_misspelt_family_suggests_the_closest(family: str, meant: str) -> None:
    with pytest.raises(UnknownNameError) as caught:
        estimator_from_spec({"type": family})
    assert str(caught.value).startswith(
        f"unknown estimator family {family.lower()!r} (did you mean {meant!r}?); expected one of: bernoulli, "
    )
    with pytest.raises(UnknownNameError, match=rf"unknown model family {family.lower()!r} \(did you mean"):
        distribution_from_dict({"type": family})


@pytest.mark.parametrize("family", ["banana", "wishart", "hmm", "xyz"])  # weibull is a family since issue 54
def test_an_unrelated_family_suggests_nothing(family: str) -> None:
    with pytest.raises(UnknownNameError, match=rf"^unknown estimator family '{family}'; expected one of: "):
        estimator_from_spec({"type": family})


def test_a_misspelt_spec_key_suggests_the_closest() -> None:
    with pytest.raises(
        SpecError,
        match=r"^unknown key 'pseudocount' in categorical spec \(did you mean 'pseudo_count'\?\); "
        r"expected one of: .*pseudo_count",
    ):
        estimator_from_spec({"type": "categorical", "pseudocount": 1.0})
    with pytest.raises(SpecError, match=r"^unknown key 'sigma' in gaussian spec; expected one of: "):
        estimator_from_spec({"type": "gaussian", "sigma": 1.0})  # nothing like it


def test_bad_mixture_shorthand() -> None:
    with pytest.raises(SpecError, match="k must be a positive integer, got 0"):
        estimator_from_spec({"type": "mixture", "k": 0, "component": "gaussian"})


def test_unknown_fit_option(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"estimator": "gaussian", "fit": {"max_iter": 3}}))
    with pytest.raises(SpecError, match=r"unknown fit option\(s\) \['max_iter'\]"):
        load_spec(path)


@pytest.mark.parametrize(
    ("fit", "message"),
    [
        ({"max_its": -1}, "max_its must be an integer >= 0, got -1"),
        ({"delta": "small"}, "delta must be None or a finite number >= 0, got 'small'"),
        ({"init": "kmeans"}, "init must be one of 'kmeans||', 'random' or a Seeding, got 'kmeans'"),
        ({"init_steps": 0}, "init_steps must be None or an integer >= 1, got 0"),
        ({"init_p": 1.5}, "init_p must be a number in (0, 1], got 1.5"),
        ({"print_iter": -2}, "print_iter must be an integer >= 0, got -2"),
        ({"trials": 0}, "trials must be an integer >= 1, got 0"),
    ],
)
def test_a_bad_fit_option_value_is_refused_when_the_spec_is_read(fit: dict, message: str) -> None:
    """The fit section is checked by the checks FitOptions declares (and best_of's trials)."""
    with pytest.raises(SpecError) as caught:
        load_spec({"estimator": "gaussian", "fit": fit})
    assert str(caught.value) == f"spec: fit section: {message}"


def test_every_fit_option_of_a_spec_is_a_fit_option_of_optimize_a_flag_and_a_param() -> None:
    import dataclasses

    from mixle_spark.cli._arguments import build_parser
    from mixle_spark.em.options import FitOptions
    from mixle_spark.jobspec import COMPUTE_OPTIONS

    fields = {f.name for f in dataclasses.fields(FitOptions)}
    # trials is best_of's; engine / precision (issue 55) are encoded_data's controls
    assert set(FIT_OPTIONS) - fields == {"trials", *COMPUTE_OPTIONS} == {"trials", "engine", "precision"}
    flags = {action.dest for action in build_parser()._actions}
    assert set(FIT_OPTIONS) <= flags
    pytest.importorskip("pyspark")
    from mixle_spark.ml._params import FIT_OPTION_PARAMS

    assert set(FIT_OPTION_PARAMS) <= set(FIT_OPTIONS)


def test_misspelt_fit_options_and_spec_keys_suggest_the_closest(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"estimator": "gaussian", "fit": {"max_iter": 3}}))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert str(caught.value) == (
        f"{path}: unknown fit option(s) ['max_iter'] (did you mean 'max_its'?); "
        f"expected one of {', '.join(FIT_OPTIONS)}"
    )
    spec = {"estimator": "gaussian", "fit": {"max_iter": 3, "sed": 1, "zzz": 0}}
    with pytest.raises(
        SpecError,
        match=r"^spec: unknown fit option\(s\) \['max_iter', 'sed', 'zzz'\] "
        r"\(did you mean 'max_its' for 'max_iter', 'seed' for 'sed'\?\); expected one of ",
    ):
        load_spec(spec)
    with pytest.raises(
        SpecError,
        match=r"^spec: unknown key\(s\) \['fitt'\] \(did you mean 'fit'\?\); expected estimator, fit, "
        r"description$",
    ):
        load_spec({"estimator": "gaussian", "fitt": {}})


def test_float64_round_trips_exactly() -> None:
    model = MixtureDistribution(
        [GaussianDistribution(0.1 + 0.2, 1 / 3), GaussianDistribution(1e-300, 7e22)], [1 / 3, 2 / 3]
    )
    restored = model_from_json(model_to_json(model))
    assert restored.components[0].mu == 0.1 + 0.2
    assert restored.components[1].sigma2 == 7e22
    assert restored.w[0] == model.w[0]
    x = np.array([0.0, 1.5, -2.0])
    np.testing.assert_array_equal(restored.seq_log_density(x), model.seq_log_density(x))


def test_newer_format_version_is_refused() -> None:
    payload = model_to_dict(GaussianDistribution(0.0, 1.0))
    payload["format_version"] = 99
    with pytest.raises(ModelFormatError, match=r"format version 99.*upgrade mixle_spark"):
        model_from_json(json.dumps(payload))


def test_not_a_model_file() -> None:
    with pytest.raises(ModelFormatError, match="not a mixle_spark model"):
        model_from_json('{"format": "something-else"}')
    with pytest.raises(ModelFormatError, match="not valid JSON"):
        model_from_json("{nope")


def test_invalid_parameters_in_a_model_file_are_rejected() -> None:
    payload = model_to_dict(GaussianDistribution(0.0, 1.0))
    payload["model"]["sigma2"] = -1.0
    with pytest.raises(ModelFormatError, match=r"sigma2 must be a positive finite number, got -1.0"):
        model_from_json(json.dumps(payload))


def test_save_and_load(tmp_path: Path) -> None:
    model = GaussianDistribution(1.25, 4.0)
    path = save_model(model, tmp_path / "m" / "model.json")
    assert load_model(path) == model
    with pytest.raises(FileExistsError, match="exists; pass overwrite=True"):
        save_model(model, path)
    save_model(GaussianDistribution(2.0, 1.0), path, overwrite=True)
    assert load_model(path).mu == 2.0
    assert [p.name for p in path.parent.iterdir()] == ["model.json"]  # no temporary left behind
    with pytest.raises(FileNotFoundError, match="model file not found"):
        load_model(tmp_path / "missing.json")


def test_a_bare_sequence_spec_file_is_an_estimator_not_a_job_spec(tmp_path: Path) -> None:
    """A sequence's spec has an ``estimator`` key too; its ``type`` says it is not a job spec."""
    path = tmp_path / "tags.json"
    path.write_text(json.dumps({"type": "sequence", "estimator": "categorical", "len_estimator": "poisson"}))
    spec = load_spec(path)
    assert spec.fit == {} and spec.estimator.to_dict()["type"] == "sequence"
