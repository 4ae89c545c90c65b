"""One weighted initialization and one weighted EM step give the same model on every in-process
backend (local, model_parallel, mp); Spark and MPI check the same in their suites."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.estimation import initialize, optimize
from mixle_spark.spec import model_to_dict
from mixle_spark.stats import GaussianEstimator, MixtureEstimator

EST = MixtureEstimator([GaussianEstimator()] * 3)


def weighted_table() -> pa.Table:
    """100 rows weighing 0.05 each: a random start keeps ~30 rows, which weigh less than the 3 rows
    the mixture needs, so every backend must fall back to all rows alike."""
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.normal(-4, 1, 40), rng.normal(0, 1, 30), rng.normal(5, 1, 30)])
    return pa.table({"x": x, "w": np.full(100, 0.05)})


def flat(model: Any) -> np.ndarray:
    spec = model_to_dict(model)["model"]
    return np.array([[w, c["mu"], c["sigma2"]] for w, c in zip(spec["w"], spec["components"], strict=True)])


@pytest.mark.parametrize("init", ["random", "kmeans||"])
def test_weighted_initialization_and_step_agree_on_local_and_mp(init: str) -> None:
    table = weighted_table()
    fits = {}
    for backend in ("local", "model_parallel", "mp"):
        options = {"backend": backend, "weights": "w", "column": "x"}
        if backend != "local":
            options["num_workers"] = 2
        start = initialize(table, EST, seed=3, init=init, **options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step = optimize(table, EST, max_its=1, delta=None, seed=3, init=init, **options)
        fits[backend] = (flat(start), flat(step))
    for backend in ("model_parallel", "mp"):
        np.testing.assert_allclose(fits[backend][0], fits["local"][0], rtol=1e-12)
        np.testing.assert_allclose(fits[backend][1], fits["local"][1], rtol=1e-12)
