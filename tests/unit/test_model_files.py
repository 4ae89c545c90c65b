"""Model files written by a release load unchanged: for every family, every file under
``tests/data/models/<release>/`` (written by ``tests/data/models/write.py``, one per contract case)
loads, writes back to the same JSON, and scores its records as the release did.

This is what keeps a refactoring of the families (their parameters, serialization, validation)
honest about the format users have on disk.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle_spark._version import __version__
from mixle_spark.spec import load_model, model_to_dict
from tests.unit.test_contracts import CASES

ROOT = Path(__file__).resolve().parents[1] / "data" / "models"
FILES = sorted(p for p in ROOT.glob("*/*.json") if p.name != "scores.json")


def test_the_current_release_wrote_a_file_for_every_contract_case() -> None:
    written = {p.stem for p in (ROOT / __version__).glob("*.json")} - {"scores"}
    missing = sorted({c.id for c in CASES} - written)
    assert not missing, f"run python tests/data/models/write.py (no file for {missing})"


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.stem}" for p in FILES])
def test_a_model_file_loads_writes_back_and_scores_unchanged(path: Path) -> None:
    stored: dict[str, Any] = json.loads(path.read_text())
    model = load_model(path)
    again = model_to_dict(model)
    assert again["model"] == stored["model"]  # the same parameters, to the last bit
    assert again["format_version"] == stored["format_version"]
    scores = json.loads((path.parent / "scores.json").read_text())[path.stem]
    got = [model.log_density(r) for r in scores["records"]]
    np.testing.assert_allclose(got, scores["log_density"], rtol=1e-12, atol=0)
