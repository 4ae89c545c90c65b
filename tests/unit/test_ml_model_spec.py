"""MixleEstimator's ``modelSpec``: the four forms it accepts (a spec file path, the full spec, the
estimator part, an Estimator), the spec's fit section against the Params, and one-line errors.

Params are plain Python objects: no SparkSession is started here.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from mixle_spark.errors import SpecError
from mixle_spark.spec import load_spec

pytest.importorskip("pyspark")

from mixle_spark.ml import MixleEstimator
from mixle_spark.ml._fit_plan import fit_plan, spec_parts

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "conf" / "models" / "sample.json"
SAMPLE_COLUMNS = ["amount", "channel", "n_items", "tags"]
DEFAULTS = {"max_its": 100, "tol": 1e-6, "init": "kmeans||", "init_steps": 2, "init_p": 0.1}
SMALL = {
    "estimator": {"type": "mixture", "k": 2, "component": "gaussian"},
    "fit": {
        "max_its": 3,
        "tol": 0.5,
        "init": "random",
        "init_steps": 4,
        "init_p": 0.25,
        "seed": 7,
        "trials": 2,
        "print_iter": 10,
    },
}


def _sample() -> dict[str, Any]:
    return json.loads(SAMPLE.read_text())


def test_every_form_gives_the_same_estimator(monkeypatch: pytest.MonkeyPatch) -> None:
    full = _sample()
    monkeypatch.chdir(ROOT)
    forms = {
        "relative path": "conf/models/sample.json",
        "str path": str(SAMPLE),
        "Path": SAMPLE,
        "full spec dict": full,
        "full spec JSON": json.dumps(full),
        "estimator dict": full["estimator"],
        "estimator JSON": json.dumps(full["estimator"]),
        "Estimator": load_spec(SAMPLE).estimator,
    }
    want = load_spec(SAMPLE).estimator.to_dict()
    for form, value in forms.items():
        estimator = MixleEstimator(modelSpec=value)
        got = fit_plan(estimator, SAMPLE_COLUMNS).estimator.to_dict()
        assert got == want, form
        assert MixleEstimator(modelSpec=estimator.getModelSpec()).getModelSpec() == estimator.getModelSpec()
    # a path stores the file's content (the full spec), not the path
    stored = {MixleEstimator(modelSpec=forms[f]).getModelSpec() for f in list(forms)[:5]}
    assert len(stored) == 1 and json.loads(stored.pop()) == full
    assert spec_parts(MixleEstimator(modelSpec=SAMPLE).getModelSpec()) == (full["estimator"], full["fit"])
    # the estimator part at its smallest: a family name (or its JSON)
    by_name = {MixleEstimator(modelSpec=v).getModelSpec() for v in ("gaussian", '"gaussian"', " gaussian ")}
    assert by_name == {'"gaussian"'}


def test_a_spec_file_is_read_once_when_the_param_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "model"  # no .json, no separator: a path because the file exists
    path.write_text(json.dumps(SMALL))
    monkeypatch.chdir(tmp_path)
    estimator = MixleEstimator(modelSpec="model")
    path.unlink()
    assert json.loads(estimator.getModelSpec()) == SMALL
    assert json.loads(estimator.copy().getModelSpec()) == SMALL  # the stored JSON, not the path
    with pytest.raises(SpecError, match="unknown estimator family 'model'"):
        MixleEstimator(modelSpec="model")  # the file is gone: a family name again


def test_the_fit_section_fills_the_params_left_unset() -> None:
    plan = fit_plan(MixleEstimator(modelSpec=SMALL), ["features"])
    assert plan.options == {**DEFAULTS, **{k: v for k, v in SMALL["fit"].items() if k in DEFAULTS}, "seed": 7}
    assert plan.trials == 2
    assert plan.from_spec == {
        "maxIter": 3,
        "tol": 0.5,
        "initMode": "random",
        "initSteps": 4,
        "initFraction": 0.25,
        "seed": 7,
    }
    # a Param set explicitly wins, even when set to its default value, before or after modelSpec
    explicit = MixleEstimator(maxIter=100, initMode="k-means||", seed=1, modelSpec=SMALL).setTol(1e-6)
    plan = fit_plan(explicit, ["features"])
    assert plan.options == {**DEFAULTS, "init_steps": 4, "init_p": 0.25, "seed": 1}
    assert plan.from_spec == {"initSteps": 4, "initFraction": 0.25}
    assert explicit.getMaxIter() == 100 and explicit.getInitSteps() == 2  # the estimator's own Params
    # the Param spelling of init, and no fit section at all
    kmeans = {**SMALL, "fit": {"init": "kmeans||"}}
    plan = fit_plan(MixleEstimator(modelSpec=kmeans), ["features"])
    assert plan.options["init"] == "kmeans||" and plan.from_spec == {"initMode": "k-means||"}
    for bare in (SMALL["estimator"], {"estimator": SMALL["estimator"]}, {**SMALL, "fit": None}):
        plan = fit_plan(MixleEstimator(modelSpec=bare, seed=3), ["features"])
        assert plan.options == {**DEFAULTS, "seed": 3} and plan.trials == 1 and plan.from_spec == {}
    # a spec written before tol: its delta (a total gain, no Param) is the rule, unless tol is set
    old = {**SMALL, "fit": {"delta": 0.5}}
    plan = fit_plan(MixleEstimator(modelSpec=old, seed=3), ["features"])
    assert plan.options == {**{k: v for k, v in DEFAULTS.items() if k != "tol"}, "seed": 3, "delta": 0.5}
    assert plan.from_spec == {}
    plan = fit_plan(MixleEstimator(modelSpec=old, seed=3, tol=1e-4), ["features"])
    assert plan.options == {**DEFAULTS, "seed": 3, "tol": 1e-4} and "delta" not in plan.options


def test_a_sequence_spec_with_an_estimator_key_is_an_estimator_spec() -> None:
    spec = {"type": "sequence", "estimator": "categorical", "len_estimator": "poisson"}
    estimator = MixleEstimator(modelSpec=spec)
    assert spec_parts(estimator.getModelSpec()) == (spec, {})


def _without_type(spec: dict[str, Any], *keys: str) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    node = out
    for key in keys:
        node = node[key]
    del node["type"]
    return out


def _family(spec: dict[str, Any], family: str) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    out["estimator"]["component"]["fields"]["tags"]["estimator"]["type"] = family
    return out


BIG = "x" * 5000
TAGS = ("estimator", "component", "fields", "tags", "estimator")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (_without_type(_sample(), "estimator"), "the spec's 'estimator' has no 'type' key"),
        (
            _without_type(_sample(), *TAGS),
            "estimator spec dict {'pseudo_count': 0.5} has no 'type' key",
        ),
        (
            {"fields": {"a": {"type": "categorical", "note": BIG}}},
            f"estimator spec dict {{'fields': {{'a': {{'type': 'categorical', 'note': '{'x' * 7}... has no "
            "'type' key",
        ),
        (
            {**_sample(), "estimator": [BIG]},
            "the spec's 'estimator' must be a dict with a 'type' key "
            "or a family name, got list ['xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...",
        ),
        (
            {**_sample(), BIG: 1},
            f"unknown key(s) ['{'x' * 75}...; expected estimator, fit, description",
        ),
        (
            {**_sample(), "fit": {"verbose": 3}},
            "unknown fit option(s) ['verbose']; expected one of max_its, tol, delta, init, init_steps, "
            "init_p, seed, trials, print_iter, engine, precision",
        ),
        ({**_sample(), "fit": [3]}, "the spec's 'fit' must be a dict of fit options, got list [3]"),
        (
            {**SMALL, "fit": {"max_its": -1}},
            "the spec's fit option 'max_its' (param 'maxIter'): expected an integer >= 0, got -1",
        ),
        (
            {**SMALL, "fit": {"init": "kmeans++"}},
            "the spec's fit option 'init' (param 'initMode'): expected one of 'k-means||', 'random', "
            "got string 'kmeans++'",
        ),
        (
            {**SMALL, "fit": {"trials": 0}},
            "the spec's fit option 'trials': expected an integer >= 1, got 0",
        ),
        ('{"type": gaussian}', "JSON text is not valid JSON (Expecting value: line 1 column 10 (char 9))"),
    ],
)
def test_a_bad_spec_is_one_short_line(value: Any, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        MixleEstimator(modelSpec=value)
    text = str(caught.value)
    assert text == f"param 'modelSpec': {message}"
    assert len(text) < 300 and "\n" not in text
    error = caught.value  # printed once: no chained error repeats it
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)


def test_an_unknown_family_deep_in_a_spec_file_is_named_once(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(_family(_sample(), "lognormal")))
    for value in (path, _family(_sample(), "lognormal")):
        with pytest.raises(SpecError) as caught:
            MixleEstimator(modelSpec=value)
        text = str(caught.value)
        where = f": spec file {path}" if isinstance(value, Path) else ""
        hint = r"( \(did you mean 'log_gaussian'\?\))?"  # the closest name, where errors suggest one
        prefix = re.escape(f"param 'modelSpec'{where}: unknown estimator family 'lognormal'")
        assert re.match(f"{prefix}{hint}; expected one of: bernoulli, beta, ", text), text
        assert "log_gaussian" in text and "\n" not in text and "Customer segments" not in text
        assert text.count("modelSpec") == 1 and text.count("lognormal") == 1
    with pytest.raises(SpecError) as caught:
        MixleEstimator(modelSpec=BIG)
    assert f"unknown estimator family '{'x' * 76}...; expected one of: " in str(caught.value)


@pytest.mark.parametrize("name", ["conf/customers.json", "customers.json", "sub/dir/spec"])
def test_a_missing_spec_file_is_one_line(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for value in (name, Path(name)):
        with pytest.raises(FileNotFoundError) as caught:
            MixleEstimator(modelSpec=value)
        assert str(caught.value) == f"param 'modelSpec': model spec file not found: {name}"
    (tmp_path / "bad.json").write_text('{"estimator": ')
    with pytest.raises(SpecError, match=r"^param 'modelSpec': model spec file bad\.json: not valid JSON \("):
        MixleEstimator(modelSpec="bad.json")
    with pytest.raises(TypeError, match=r"param 'modelSpec': expected a spec file path.*got 3$"):
        MixleEstimator(modelSpec=3)


@pytest.mark.parametrize(
    ("params", "columns", "message"),
    [
        (
            {"weightCol": "wieght"},
            ["features", "weight"],
            "column 'wieght' not found (did you mean 'weight'?); ",
        ),
        ({}, ["featurs"], "column 'features' not found (did you mean 'featurs'?); "),
        (
            {"inputCols": ["amount", "chanel"]},
            ["amount", "channel"],
            "['chanel'] not found (did you mean 'channel'?)",
        ),
    ],
)
def test_a_misspelt_column_names_the_close_one(
    params: dict[str, Any], columns: list[str], message: str
) -> None:
    from mixle_spark.errors import SchemaError

    with pytest.raises(SchemaError) as caught:
        fit_plan(MixleEstimator(**params), columns)
    assert message in str(caught.value)
