"""The family case format the contract suite (tests/unit/test_contracts.py) runs over.

Every family module contributes cases in a ``tests/unit/cases_<group>.py`` file exposing
``CASES: list[FamilyCase]``; the contract suite collects all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
