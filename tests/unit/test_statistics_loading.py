"""Kept statistics read from a model file are checked (issue 51): a negative count or weight, a NaN, a
batch id that is not one, or a value not laid out for its estimator or for the model, is refused as a
ModelFormatError naming the entry, the value and what was expected, instead of loading silently and
corrupting every later update."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle_spark.em.incremental import update
from mixle_spark.em.statistics import _clip
from mixle_spark.errors import ModelFormatError
from mixle_spark.estimation import optimize
from mixle_spark.spec import load_model, model_from_json, model_to_json, save_model
from mixle_spark.stats import GaussianEstimator, IntegerCategoricalEstimator, MixtureEstimator

ROWS = np.concatenate(
    [np.random.default_rng(0).normal(0, 1, 150), np.random.default_rng(1).normal(6, 1, 150)]
)
MODEL = optimize(
    ROWS, MixtureEstimator([GaussianEstimator()] * 2), seed=1, max_its=20, keep_statistics=True, print_iter=0
)
SAVED: dict[str, Any] = json.loads(model_to_json(MODEL))


def _load_with(change: Any) -> Any:
    """The saved model with ``change(statistics entry)`` applied, read back."""
    payload = copy.deepcopy(SAVED)
    change(payload["statistics"])
    return model_from_json(json.dumps(payload))


def test_the_saved_statistics_are_as_expected_and_load() -> None:
    kept = SAVED["statistics"]
    assert (kept["rows"], kept["weight"], kept["updates"], kept["last_batch"]) == (300, 300.0, 0, None)
    loaded = _load_with(lambda s: None)
    assert (loaded.statistics.rows, loaded.statistics.weight) == (300, 300.0)
    assert update(loaded, ROWS[:20]).statistics.rows == 320


@pytest.mark.parametrize(
    ("entry", "bad", "message"),
    [
        ("rows", -1, "rows must be an integer >= 0, got -1"),
        ("rows", 2.5, "rows must be an integer >= 0, got 2.5"),
        ("rows", "300", "rows must be an integer >= 0, got string '300'"),
        ("rows", True, "rows must be an integer >= 0, got boolean True"),
        ("weight", {"$f": "nan"}, "weight must be a finite number >= 0, got nan"),
        ("weight", {"$f": "inf"}, "weight must be a finite number >= 0, got inf"),
        ("weight", -300.0, "weight must be a finite number >= 0, got -300.0"),
        ("weight", None, "weight must be a finite number >= 0, got null"),
        ("updates", -2, "updates must be an integer >= 0, got -2"),
        ("last_batch", -1, "last_batch must be null or an integer >= 0, got -1"),
        ("last_batch", 3.5, "last_batch must be null or an integer >= 0, got 3.5"),
        ("last_batch", "7", "last_batch must be null or an integer >= 0, got string '7'"),
        ("log_likelihood", {"$f": "-inf"}, "log_likelihood must be null or a finite number, got -inf"),
        ("scored_weight", -1.0, "scored_weight must be null or a finite number >= 0, got -1.0"),
    ],
)
def test_a_bad_number_is_refused_naming_the_entry_and_the_value(entry: str, bad: Any, message: str) -> None:
    with pytest.raises(ModelFormatError, match=f"^statistics: {re.escape(message)}$"):
        _load_with(lambda s: s.update({entry: bad}))


@pytest.mark.parametrize("entry", ["rows", "weight"])
def test_a_missing_required_number_is_refused(entry: str) -> None:
    with pytest.raises(ModelFormatError, match=f"^statistics: no '{entry}' entry; expected "):
        _load_with(lambda s: s.pop(entry))


def test_absent_optional_entries_take_their_defaults() -> None:
    loaded = _load_with(lambda s: [s.pop(k) for k in ("updates", "last_batch", "log_likelihood")])
    kept = loaded.statistics
    assert (kept.updates, kept.last_batch, kept.log_likelihood, kept.scored_weight) == (0, None, None, 300.0)


# the estimator as the fit bound it to the data (each Gaussian's scale: the column's variance), cut short
MIXTURE = f"MixtureEstimator {_clip(MODEL.statistics.estimator.to_dict())}"


def _components(statistics: dict[str, Any]) -> list[Any]:
    return statistics["value"]["$t"][1]["$t"]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda s: s.update(value=5.0), "value: expected a tuple of 2 entries, got 5.0"),
        (lambda s: s["value"]["$t"].pop(), "value: expected a tuple of 2 entries, got 1"),
        (
            lambda s: _components(s).append(_components(s)[0]),
            "value[1]: expected a tuple of 2 entries, got 3",
        ),
        (lambda s: _components(s)[1]["$t"].pop(), "value[1][1]: expected a tuple of 4 entries, got 3"),
        (
            lambda s: _components(s)[0]["$t"].__setitem__(2, "12.5"),
            "value[1][0][2]: expected a number, got string '12.5'",
        ),
        (
            lambda s: s["value"]["$t"].__setitem__(0, {"$a": "", "dtype": "<f8", "shape": [0]}),
            "value[0]: expected an array of shape (2,), got one of shape (0,)",
        ),
    ],
    ids=["not-a-tuple", "short", "a-component-too-many", "short-component", "text", "array-shape"],
)
def test_a_value_not_laid_out_for_its_estimator_is_refused(change: Any, problem: str) -> None:
    message = f"statistics: {problem}: the value does not fit their estimator, {MIXTURE}"
    with pytest.raises(ModelFormatError, match=f"^{re.escape(message)}$"):
        _load_with(change)


def test_a_value_its_accumulator_refuses_is_refused_naming_the_statistics() -> None:
    """Laid out right (a number, an array), but the accumulator cannot take it: the smallest count of
    an integer categorical's range as NaN."""
    model = optimize([1, 2, 2, 3], IntegerCategoricalEstimator(), keep_statistics=True, print_iter=0)
    payload = json.loads(model_to_json(model))
    assert payload["statistics"]["value"]["$t"][0] == 1
    payload["statistics"]["value"]["$t"][0] = {"$f": "nan"}
    with pytest.raises(
        ModelFormatError,
        match=r"^statistics: value: ValueError: cannot convert float NaN to integer: the value does not fit "
        r"their estimator, IntegerCategoricalEstimator \{",
    ):
        model_from_json(json.dumps(payload))


def test_statistics_of_another_model_are_refused() -> None:
    """Statistics laid out for three components in the file of a two-component mixture."""
    three = optimize(
        ROWS,
        MixtureEstimator([GaussianEstimator()] * 3),
        seed=1,
        max_its=2,
        delta=None,
        keep_statistics=True,
        print_iter=0,
    )
    payload = copy.deepcopy(SAVED)
    payload["statistics"] = json.loads(model_to_json(three))["statistics"]
    assert str(three.statistics.estimator.to_dict()).startswith("{'type': 'mixture', 'components': [{")
    message = (
        f"statistics: their estimator, MixtureEstimator {_clip(three.statistics.estimator.to_dict())}, "
        "does not fit the model, a MixtureDistribution "
        f"estimated by {_clip(MODEL.estimator().to_dict())}: a model file keeps the statistics the model was "
        "estimated from"
    )
    with pytest.raises(ModelFormatError, match=f"^{re.escape(message)}$"):
        model_from_json(json.dumps(payload))


def test_load_model_refuses_the_file_before_an_update_could_use_it(tmp_path: Path) -> None:
    path = save_model(MODEL, tmp_path / "model.json")
    payload = json.loads(path.read_text())
    payload["statistics"]["rows"] = -300
    path.write_text(json.dumps(payload))
    with pytest.raises(ModelFormatError, match=r"^statistics: rows must be an integer >= 0, got -300$"):
        load_model(path)
