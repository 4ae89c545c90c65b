"""Each fit option and backend control is checked by one declaration, and every entry point (the
Python API, a spec's fit section, the fit job's flags, the ML Params) runs it: the same values are
refused by all of them, with the same words for what is expected."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from typing import Any

import pytest

from mixle_spark._checks import Check, integer, number, one_of
from mixle_spark.cli._arguments import build_parser
from mixle_spark.em.options import FitOptions, option_check
from mixle_spark.errors import OptionTypeError, SpecError
from mixle_spark.parallel.backends.registry import CONTROL_CHECKS
from mixle_spark.spec import FIT_OPTIONS, load_spec

# option -> (job flag, refused command-line word, accepted word and the value it gives)
FLAGS: dict[str, tuple[str, str, str, Any]] = {
    "max_its": ("--max-its", "-1", "0", 0),
    "tol": ("--tol", "-0.5", "0", 0.0),
    "delta": ("--delta", "-0.5", "0", 0.0),
    "init_steps": ("--init-steps", "0", "3", 3),
    "init_p": ("--init-p", "1.5", "1", 1.0),
    "seed": ("--seed", "x", "-3", -3),
    "trials": ("--trials", "0", "2", 2),
    "print_iter": ("--print-iter", "-1", "0", 0),
}
# option -> a value every entry point refuses (one out of range, one of the wrong kind)
REFUSED: dict[str, tuple[Any, Any]] = {
    "max_its": (-1, "10"),
    "tol": (-0.5, "small"),
    "delta": (-0.5, "small"),
    "init_steps": (0, 2.5),
    "init_p": (0.0, "all"),
    "trials": (0, 1.5),
    "print_iter": (-1, True),
}


def _job_error(*argv: str) -> str:
    """The one line the job's parser refuses ``argv`` with."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(list(argv))
    assert stopped.value.code == 2
    return stderr.getvalue().strip().splitlines()[-1]


def test_every_fit_option_of_a_spec_has_a_job_flag_with_its_check() -> None:
    # --init: argparse choices of the same INIT_MODES; --engine / --precision: checked by the engines
    # (issue 55, tests/unit/test_compute_options.py)
    assert set(FLAGS) == set(FIT_OPTIONS) - {"init", "engine", "precision"}
    for option, (flag, bad, good, value) in FLAGS.items():
        expected = (
            "an integer" if option == "seed" else option_check(option).expected.removeprefix("None or ")
        )
        assert f"argument {flag}: expected {expected}, got {bad} (" in _job_error(flag, bad)
        dest = flag.removeprefix("--").replace("-", "_")
        parsed = getattr(build_parser().parse_args([flag, good]), dest)
        assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize("option", sorted(REFUSED))
def test_api_spec_job_and_param_refuse_the_same_values_alike(option: str) -> None:
    check = option_check(option)
    for value in REFUSED[option]:
        error = SpecError if check.kind(value) else OptionTypeError
        # the Python API (trials is best_of's, checked by the same declaration)
        with pytest.raises(error) as api:
            check(value, option) if option == "trials" else FitOptions(**{option: value})
        assert str(api.value) == f"{option} must be {check.expected}, got {value!r}"
        # a spec's fit section
        with pytest.raises(SpecError) as spec:
            load_spec({"estimator": "gaussian", "fit": {option: value}})
        assert str(spec.value) == f"spec: fit section: {option} must be {check.expected}, got {value!r}"


def test_the_ml_params_run_the_declared_checks() -> None:
    pytest.importorskip("pyspark")
    from mixle_spark.ml import MixleEstimator
    from mixle_spark.ml._params import FIT_OPTION_PARAMS

    for option, param in FIT_OPTION_PARAMS.items():
        if option not in REFUSED:
            continue
        expected = option_check(option).expected.removeprefix("None or ")
        low, wrong = REFUSED[option]
        with pytest.raises(SpecError, match=rf"^param '{param}': expected {_re(expected)}, got "):
            MixleEstimator(**{param: low})
        with pytest.raises(TypeError, match=rf"param '{param}': expected {_re(expected)}, got "):
            MixleEstimator(**{param: wrong})
    for param, control in (("numPartitions", "num_chunks"), ("aggregationDepth", "depth")):
        expected = CONTROL_CHECKS[control].expected.removeprefix("None or ")
        with pytest.raises(SpecError, match=rf"^param '{param}': expected {_re(expected)}, got 0$"):
            MixleEstimator(**{param: 0})
        assert _job_error({"num_chunks": "--partitions", "depth": "--depth"}[control], "0").endswith(
            f"expected {expected}, got 0 (see --help)"
        )
    assert MixleEstimator(maxIter=0, initFraction=1, initMode="kmeans||").getInitMode() == "k-means||"


def _re(text: str) -> str:
    return re.escape(text)


def test_the_backends_check_their_controls_by_the_declaration() -> None:
    from mixle_spark.parallel import encoded_data

    with pytest.raises(SpecError, match=r"^num_workers must be None or an integer >= 1, got 0$"):
        encoded_data([1.0, 2.0], backend="mp", estimator=_gaussian(), num_workers=0)


def _gaussian() -> Any:
    from mixle_spark.stats import GaussianEstimator

    return GaussianEstimator()


@pytest.mark.parametrize(
    ("check", "good", "bad"),
    [
        (integer(1), [1, 2.0, 10**20], [0, -1, 1.5, True, "2", None]),
        (integer(0, optional=True), [None, 0, 3], [-1, False, "0"]),
        (number(0), [0, 0.5, 7], [-1e-300, float("inf"), float("nan"), "1", None, True]),
        (number(0, 1, low_open=True), [1e-9, 1, 1.0], [0, 1.0000001, -0.1]),
        (one_of(("a", "b")), ["a", "b"], ["c", 1, None]),
    ],
)
def test_a_check_takes_what_it_says_and_refuses_the_rest(check: Check, good: list, bad: list) -> None:
    for value in good:
        assert check.fault(value) is None, value
    for value in bad:
        assert check.fault(value) is not None, value
        with pytest.raises(ValueError, match=rf"^x must be {_re(check.expected)}, got "):
            check(value, "x")
        if not isinstance(value, str):  # a word such as "2" is a valid integer on a command line
            with pytest.raises(argparse.ArgumentTypeError):
                check.argument()(str(value))
