"""Each column's family chosen by BIC among its candidates, fitted on the sample with the package's
own estimators (local EM: one M-step for the closed-form families, a few generalized-EM steps for
the others), and the one line saying why."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mixle_spark.errors import ConvergenceWarning, DataError, NonFiniteLikelihoodError, TooFewRowsError
from mixle_spark.estimation import optimize
from mixle_spark.infer._candidates import ColumnPlan, label_of, plan_column
from mixle_spark.infer._profile import ColumnProfile
from mixle_spark.parallel import encoded_data
from mixle_spark.stats.base import estimator_from_dict
from mixle_spark.stats.criteria import count_free_parameters, information_criteria

__all__ = ["CandidateFit", "ColumnChoice", "choose_column"]

_REFUSALS = (DataError, NonFiniteLikelihoodError, TooFewRowsError)
"""A candidate whose family refuses the column's values (a zero for gamma, a 0 for geometric) or
whose fit breaks down is left out of the comparison, and said so."""


@dataclass(frozen=True)
class CandidateFit:
    """One candidate fitted on the column's sampled values: its BIC (None when refused, ``note``
    then says why), log-likelihood and free parameters."""

    spec: dict[str, Any]
    bic: float | None
    log_likelihood: float | None = None
    free_parameters: int | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"candidate": label_of(self.spec), "bic": self.bic}
        if self.bic is not None:
            out.update(log_likelihood=self.log_likelihood, free_parameters=self.free_parameters)
        else:
            out["refused"] = self.note
        return out


@dataclass(frozen=True)
class ColumnChoice:
    """A column's chosen spec (None: left out of the record), why, and every candidate's fit."""

    name: str
    spec: dict[str, Any] | None
    reason: str
    fits: tuple[CandidateFit, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "column": self.name,
            "spec": self.spec,
            "reason": self.reason,
            "candidates": [f.to_dict() for f in self.fits],
        }


def _fit(spec: dict[str, Any], values: pa.Array, seed: int, max_its: int) -> CandidateFit:
    estimator = estimator_from_dict(spec)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # a few GEM steps suffice to rank
            with encoded_data(pa.table({"value": values}), estimator) as handle:
                model = optimize(handle, estimator, max_its=max_its, seed=seed, print_iter=0)
                n, ll = handle.pysp_seq_log_density_sum(model)
    except _REFUSALS as err:
        return CandidateFit(spec, None, note=str(err).replace("column 'value': ", ""))
    if not math.isfinite(ll):
        return CandidateFit(spec, None, note="non-finite log-likelihood")
    k = count_free_parameters(model, estimator)
    return CandidateFit(spec, information_criteria(ll, k, n)["bic"], ll, k)


def _present(values: pa.Array) -> pa.Array:
    """The values that are there: nulls (and a float column's NaNs) dropped."""
    values = pc.drop_null(values)
    if pa.types.is_floating(values.type):
        values = values.filter(pc.invert(pc.is_nan(values)))
    return values


def _as_counts(values: pa.Array, profile: ColumnProfile) -> pa.Array:
    """A float column of whole numbers (an integer column with nulls, once in pandas) as integers."""
    if profile.kind == "float" and profile.whole:
        return pa.array(values.to_numpy(zero_copy_only=False).astype(np.int64))
    return values


def _ranked(plan: ColumnPlan, values: pa.Array, seed: int, max_its: int) -> list[CandidateFit]:
    fits = [_fit(spec, values, seed, max_its) for spec in plan.specs]
    return sorted(fits, key=lambda f: (f.bic is None, f.bic if f.bic is not None else 0.0))


def _why(best: CandidateFit, fits: list[CandidateFit], plan: ColumnPlan) -> str:
    fitted = [f for f in fits if f.bic is not None]
    if len(fitted) > 1:
        runner = fitted[1]
        assert best.bic is not None and runner.bic is not None
        return f"BIC {runner.bic - best.bic:,.0f} below {label_of(runner.spec)}'s"
    return f"the only candidate for {plan.what}"


def choose_column(
    name: str, profile: ColumnProfile, values: pa.Array, registered: set[str], seed: int, max_its: int
) -> ColumnChoice:
    """The spec of column ``name`` (``values``: its sampled cells, nulls included) and the reason."""
    present = _present(values)
    nulls: list[str] = []
    if profile.nulls:
        nulls.append(f"{100.0 * profile.nulls / profile.rows:.1f}% nulls -> optional")
    if profile.kind == "list":
        return _choose_sequence(name, profile, present, registered, seed, max_its, nulls)
    distinct = len(pc.unique(present)) if profile.kind in ("string", "integer", "float") else 0
    plan = plan_column(profile, registered, len(present), distinct)
    if plan.ignored is not None:
        return ColumnChoice(name, None, f"{name}: ignored ({plan.ignored})")
    if not plan.specs:
        return ColumnChoice(name, None, f"{name}: ignored (no registered family reads {plan.what})")
    fits = _ranked(plan, _as_counts(present, profile), seed, max_its)
    best = fits[0]
    if best.bic is None:
        return ColumnChoice(
            name, None, f"{name}: ignored (every candidate refused it: {best.note})", tuple(fits)
        )
    spec = {"type": "optional", "estimator": best.spec} if profile.nulls else best.spec
    detail = "; ".join([_why(best, fits, plan), *plan.notes, *nulls])
    return ColumnChoice(name, spec, f"{name}: {label_of(spec)} ({detail})", tuple(fits))


def _choose_sequence(
    name: str,
    profile: ColumnProfile,
    present: pa.Array,
    registered: set[str],
    seed: int,
    max_its: int,
    nulls: list[str],
) -> ColumnChoice:
    """A list column: a sequence of the elements' choice, its length by the lengths' choice."""
    assert profile.elements is not None and profile.lengths is not None
    if "sequence" not in registered:
        return ColumnChoice(name, None, f"{name}: ignored (no sequence family registered)")
    element = choose_column("element", profile.elements, pc.list_flatten(present), registered, seed, max_its)
    length = choose_column(
        "length", profile.lengths, pc.list_value_length(present), registered, seed, max_its
    )
    if element.spec is None or length.spec is None:
        why = element.reason if element.spec is None else length.reason
        return ColumnChoice(name, None, f"{name}: ignored (lists whose {why})")
    spec: dict[str, Any] = {"type": "sequence", "estimator": element.spec, "len_estimator": length.spec}
    if profile.nulls:
        spec = {"type": "optional", "estimator": spec}
    detail = "; ".join([element.reason, length.reason, *nulls])
    return ColumnChoice(name, spec, f"{name}: {label_of(spec)} ({detail})", element.fits + length.fits)
