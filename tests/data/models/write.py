"""Write the model files ``tests/unit/test_model_files.py`` loads: one per contract case
(``tests/unit/cases_*.py``), as ``save_model`` writes them, with a few records and their
log-densities. Run it once per release that changes the model format; the files of earlier releases
stay, so the test proves that they still load and score the same:

    python tests/data/models/write.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from mixle_spark._version import __version__  # noqa: E402
from mixle_spark.spec import save_model  # noqa: E402
from tests.unit.test_contracts import CASES  # noqa: E402


def plain(value: Any) -> Any:
    """A sampled record as JSON values (numpy arrays and scalars to lists and numbers)."""
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict) and not all(isinstance(k, str) for k in value):
        # a bag of non-string tokens: JSON keys would turn them into strings; list the tokens
        return [plain(k) for k, n in value.items() for _ in range(int(n))]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def main() -> None:
    target = HERE / __version__
    target.mkdir(exist_ok=True)
    scores: dict[str, Any] = {}
    for case in CASES:
        save_model(case.dist, target / f"{case.id}.json", overwrite=True)
        records = json.loads(json.dumps([plain(r) for r in case.dist.sampler(1).sample(4)]))
        scores[case.id] = {"records": records, "log_density": [case.dist.log_density(r) for r in records]}
    (target / "scores.json").write_text(json.dumps(scores, indent=1) + "\n")
    print(f"wrote {len(CASES)} model files to {target}")


if __name__ == "__main__":
    main()
