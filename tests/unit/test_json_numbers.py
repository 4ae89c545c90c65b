"""Numbers in a spec or a model file that Python would not read, or not read as a finite number: an
integer of thousands of digits, a literal beyond float64's range. Refused in one line naming the file,
the place and what was expected (issue 51), by the library and by the jobs (exit code 2)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mixle_spark.errors import ModelFormatError, SpecError
from mixle_spark.spec import (
    MAX_INTEGER_DIGITS,
    load_model,
    load_spec,
    model_from_json,
    model_to_json,
    save_model,
)
from mixle_spark.stats import CategoricalDistribution, GaussianDistribution

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "customers_sample.parquet"
TRUTH = SAMPLE.with_suffix(".truth.json")
SPEC = ROOT / "conf" / "models" / "sample.json"
DIGITS_5000 = "2" + "0" * 4999


def _gaussian_file(tmp_path: Path, mu: str) -> Path:
    """A saved Gaussian model whose ``mu`` is written as the literal ``mu`` (line 7 of the file)."""
    path = save_model(GaussianDistribution(1.5, 2.0), tmp_path / "model.json", overwrite=True)
    text = path.read_text()
    assert text.splitlines()[6] == '    "mu": 1.5,'
    path.write_text(text.replace('"mu": 1.5', f'"mu": {mu}'))
    return path


def test_an_integer_of_5000_digits_in_a_model_is_refused_naming_the_file_and_place(tmp_path: Path) -> None:
    path = _gaussian_file(tmp_path, DIGITS_5000)
    message = (
        f"model {path} at line 7, column 11: expected a number of at most 308 digits (float64's range), "
        "got an integer of 5,000 digits (2000000000...0000000000)"
    )
    with pytest.raises(ModelFormatError, match=f"^{re.escape(message)}$"):
        load_model(path)


def test_an_integer_too_long_for_a_float_parameter_is_refused_not_an_overflow(tmp_path: Path) -> None:
    """400 digits: under Python's 4,300-digit limit, but the float parameter overflowed (OverflowError)."""
    path = _gaussian_file(tmp_path, "-" + "9" * 400)
    with pytest.raises(
        ModelFormatError, match=r"got an integer of 400 digits \(-999999999\.\.\.9999999999\)$"
    ):
        load_model(path)


def test_the_digit_limit_is_float64s_range(tmp_path: Path) -> None:
    assert MAX_INTEGER_DIGITS == len(str(int(sys.float_info.max))) - 1 == 308
    big = int("1" * MAX_INTEGER_DIGITS)  # a label of 308 digits still reads (and an integer label at all)
    model = CategoricalDistribution({big: 0.25, 7: 0.75})
    assert model_from_json(model_to_json(model)).log_density(big) == pytest.approx(-1.3862943611198906)
    text = model_to_json(CategoricalDistribution({int("1" * (MAX_INTEGER_DIGITS + 1)): 1.0}))
    with pytest.raises(
        ModelFormatError, match=r"^model at line 1, column \d+: .* got an integer of 309 digits"
    ):
        model_from_json(text)


@pytest.mark.parametrize("literal", ["1e999999", "-1e999999", "1" + "0" * 400 + ".0"])
def test_a_number_beyond_float64_is_refused_naming_the_literal(tmp_path: Path, literal: str) -> None:
    path = _gaussian_file(tmp_path, literal)
    shown = literal if len(literal) <= 24 else "1000000000...00000000.0"
    message = (
        f"model {path} at line 7, column 11: expected a number within float64's range (about ±1.8e308), "
        f"got {shown}"
    )
    with pytest.raises(ModelFormatError, match=f"^{re.escape(message)}$"):
        load_model(path)


def test_a_long_float_literal_within_range_and_a_tiny_one_still_read(tmp_path: Path) -> None:
    assert load_model(_gaussian_file(tmp_path, "1." + "5" + "0" * 5000)).mu == 1.5
    assert load_model(_gaussian_file(tmp_path, "1e-999999")).mu == 0.0  # underflow is rounding


@pytest.mark.parametrize("token", ["Infinity", "-Infinity", "NaN"])
def test_the_non_finite_json_tokens_are_refused_by_the_familys_own_check(tmp_path: Path, token: str) -> None:
    """``Infinity`` / ``NaN`` are not number literals (json reads them as constants): the parameter's
    check refuses them, naming the parameter."""
    with pytest.raises(
        ModelFormatError,
        match=r"^invalid model: GaussianDistribution: mu must be a finite number, got (-?inf|nan)$",
    ):
        load_model(_gaussian_file(tmp_path, token))


def test_kept_statistics_are_read_with_the_same_limit() -> None:
    payload = json.loads(model_to_json(GaussianDistribution(0.0, 1.0)))
    payload["statistics"] = {"format": "mixle_spark.statistics", "rows": 0}
    text = json.dumps(payload).replace('"rows": 0', f'"rows": {DIGITS_5000}')
    with pytest.raises(
        ModelFormatError, match=r"^model at line 1, column \d+: .* got an integer of 5,000 digits"
    ):
        model_from_json(text)


def test_a_spec_file_is_read_with_the_same_limits(tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text('{"type": "mixture",\n "k": ' + DIGITS_5000 + ', "component": "gaussian"}')
    message = (
        f"model spec {spec} at line 2, column 7: expected a number of at most 308 digits (float64's range), "
        "got an integer of 5,000 digits (2000000000...0000000000)"
    )
    with pytest.raises(SpecError, match=f"^{re.escape(message)}$"):
        load_spec(spec)
    spec.write_text('{"estimator": "gaussian", "fit": {"delta": 1e400}}')
    with pytest.raises(
        SpecError, match=rf"^model spec {re.escape(str(spec))} at line 1, column 44: .* got 1e400$"
    ):
        load_spec(spec)


def _job(job: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / f"{job}.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_the_jobs_exit_2_with_the_one_line(tmp_path: Path) -> None:
    model = tmp_path / "model.json"
    model.write_text(TRUTH.read_text().replace('"mu": 2.5', f'"mu": {DIGITS_5000}', 1))
    spec = tmp_path / "spec.json"
    spec.write_text(SPEC.read_text().replace('"k": 3', f'"k": {DIGITS_5000}', 1))
    expected = "expected a number of at most 308 digits (float64's range), got an integer of 5,000 digits"
    out = str(tmp_path / "out")
    fit = ("--backend", "local", "--input", str(SAMPLE), "--output", out, "--quiet")
    for job, args, where in (
        (
            "em_fit",
            (*fit, "--model", str(SPEC), "--init-model", str(model)),
            f"model {model} at line 13, column 19",
        ),
        ("em_fit", (*fit, "--model", str(spec)), f"model spec {spec} at line 5, column 10"),
        (
            "em_score",
            ("--input", str(SAMPLE), "--model", str(model), "--output", out),
            f"model {model} at line 13, column 19",
        ),
    ):
        proc = _job(job, *args)
        assert (proc.returncode, proc.stderr.splitlines()) == (
            2,
            [f"{job}: error: {where}: {expected} (2000000000...0000000000)"],
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json", "spec.json"]


def test_the_ml_params_refuse_a_number_json_cannot_hold_in_one_line(tmp_path: Path) -> None:
    """modelSpec (JSON text or a file) and initialModel (the model's JSON) read numbers as model files
    do: Python's digit-limit text never reaches the user."""
    pytest.importorskip("pyspark")
    from mixle_spark.ml import MixleEstimator

    huge = "7" * 5000
    with pytest.raises(
        SpecError, match=r"^param 'modelSpec': JSON text at line 1, column 50: expected a number of"
    ):
        MixleEstimator(modelSpec='{"type": "mixture", "k": 2, "component": 1, "x": ' + huge + "}")
    spec = tmp_path / "spec.json"
    spec.write_text('{"type": "poisson", "min_lam": ' + huge + "}")
    with pytest.raises(SpecError, match=rf"model spec file {spec}: the file at line 1, column 32: expected"):
        MixleEstimator(modelSpec=str(spec))
    with pytest.raises(
        SpecError, match=r"^param 'initialModel': the model JSON at line 1, column 38: expected"
    ):
        MixleEstimator(initialModel='{"format": "mixle_spark.model", "x": ' + huge + "}")
