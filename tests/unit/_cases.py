"""The family case format the contract suite (tests/unit/test_contracts.py) runs over.

Every family module contributes cases in a ``tests/unit/cases_<group>.py`` file exposing
``CASES: list[FamilyCase]``; the contract suite collects all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.stats.base import Distribution, Estimator


@dataclass
class FamilyCase:
    """One family configuration to check.

    Parameters
    ----------
    id : str
        Test id, e.g. ``"gaussian"`` or ``"record-mixed"``.
    dist : Distribution
        A true model to sample records from.
    estimator : Estimator
        An estimator of the same shape (fitted to the samples in recovery checks).
    n : int
        Sample size for recovery checks.
    to_arrow : callable, optional
        records -> Arrow Array / Table that the encoder's ``from_arrow`` reads; default
        ``pa.array(records)``.
    recovery_tol : float
        Allowed gap between mean held-out log-likelihood of the fitted and the true model
        (one M-step from the samples; latent families use EM, see ``em_its``).
    em_its : int
        EM iterations for recovery (0 = a single M-step, for families without latent variables).
    """

    id: str
    dist: Distribution
    estimator: Estimator
    n: int = 5000
    to_arrow: Callable[[list[Any]], Any] | None = None
    recovery_tol: float = 0.02
    em_its: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def case_table(case: Any, n: int, seed: int) -> pa.Table:
    """``n`` records sampled from the case's model as the Arrow table a backend reads (a Record model
    reads top-level columns; any other model one column, ``value``)."""
    records = list(case.dist.sampler(seed).sample(n))
    arrow = case.to_arrow(records) if case.to_arrow is not None else pa.array(records)
    if isinstance(arrow, pa.RecordBatch):
        arrow = pa.Table.from_batches([arrow])
    if isinstance(arrow, pa.StructArray) and case.estimator.encoder().column_names() is not None:
        arrow = pa.Table.from_struct_array(arrow)  # a Record reads top-level columns
    if not isinstance(arrow, pa.Table):
        arrow = pa.table({"value": arrow})
    return arrow


def model_numbers(model: Any) -> np.ndarray:
    out: list[float] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for key in sorted(v, key=str):
                walk(v[key])
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(float(v))

    walk(model.to_dict())
    return np.array(out)


def assert_models_close(a: Any, b: Any, rtol: float = 1e-9) -> None:
    """Every number of two models' JSON agrees to ``rtol`` (relative to the largest)."""
    x, y = model_numbers(a), model_numbers(b)
    assert x.shape == y.shape
    np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * max(1.0, float(np.abs(y).max(initial=0))))
