"""``infer_spec(data)``: a record spec for a table nobody wrote one for, and one line per column saying why.

One pass over the table profiles every column exactly (rows, nulls, zeros, range, whether values are
whole, distinct values up to a cap, list lengths) and keeps a uniform sample of rows
(:mod:`._profile`; a Spark DataFrame in one Spark job, :mod:`._spark`). Each column's candidates,
allowed by its type (:mod:`._candidates`), are fitted on the sample and the one of least BIC
(``k ln n - 2 ll``, Schwarz, "Estimating the dimension of a model", Annals of Statistics 6(2), 1978)
is chosen (:mod:`._choose`). docs/infer-spec.md has the candidate table and the rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark._frames import frame_engine
from mixle_spark.errors import EmptyDataError
from mixle_spark.infer._choose import ColumnChoice, choose_column
from mixle_spark.infer._profile import TableProfile, profile_table
from mixle_spark.stats._registry import registered_estimators
from mixle_spark.stats.base import Estimator, estimator_from_dict

__all__ = ["GEM_ITERATIONS", "SAMPLE_ROWS", "InferredSpec", "infer_spec"]

SAMPLE_ROWS = 20_000
"""Rows of the uniform sample the candidates are fitted on (by default)."""
GEM_ITERATIONS = 5
"""Most EM iterations per candidate fit (a closed-form family converges in one or two)."""


@dataclass(frozen=True)
class InferredSpec:
    """What :func:`infer_spec` chose: the record estimator spec (``spec``; ``estimator`` builds it),
    each column's choice and the reason lines (``reasons``; ``print(inferred)`` shows them), the
    table's row count and the sample's."""

    spec: dict[str, Any]
    columns: tuple[ColumnChoice, ...]
    rows: int
    sample_rows: int
    profile: dict[str, Any]

    @property
    def estimator(self) -> Estimator:
        """The record estimator the spec describes."""
        return estimator_from_dict(self.spec)

    @property
    def reasons(self) -> list[str]:
        """One line per column: the family chosen (or why the column is left out) and why."""
        return [c.reason for c in self.columns]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the spec, the reasons, every candidate's BIC and each column's profile."""
        return {
            "spec": self.spec,
            "rows": self.rows,
            "sample_rows": self.sample_rows,
            "reasons": self.reasons,
            "columns": [c.to_dict() for c in self.columns],
            "profile": self.profile,
        }

    def __str__(self) -> str:
        return "\n".join(self.reasons)


def _as_arrow(data: Any) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if type(data).__module__.startswith("pandas") and type(data).__name__ == "DataFrame":
        return pa.Table.from_pandas(data, preserve_index=False)
    raise TypeError(
        "infer_spec reads a pandas DataFrame, a pyarrow Table or a Spark DataFrame, "
        f"got {type(data).__name__}"
    )


def profile_data(data: Any, sample_rows: int, seed: int) -> TableProfile | None:
    """The table's profile and sample: in one Spark job for a Spark DataFrame, else in this process."""
    if frame_engine(data) == "spark":
        from mixle_spark.infer._spark import profile_spark

        return profile_spark(data, sample_rows, seed)
    table = _as_arrow(data)
    if table.num_rows == 0:
        return None
    keys = np.random.default_rng(seed).random(table.num_rows)
    return profile_table(table, keys, sample_rows)


def infer_spec(
    data: Any, *, sample_rows: int = SAMPLE_ROWS, seed: int = 0, max_its: int = GEM_ITERATIONS
) -> InferredSpec:
    """Propose a record estimator spec for the table ``data``, one field per usable column.

    Parameters
    ----------
    data : pandas DataFrame, pyarrow Table or Spark DataFrame
        The table; a Spark DataFrame is read in one Spark job (no rows are collected but the sample).
    sample_rows : int
        Rows of the uniform sample the candidate families are fitted on.
    seed : int
        Seeds the sample and the candidates' fits.
    max_its : int
        Most EM iterations per candidate fit.

    Returns
    -------
    InferredSpec
        ``.spec`` (``{"type": "record", "fields": {...}}``), ``.estimator``, ``.reasons``.

    >>> import pandas as pd
    >>> inferred = infer_spec(pd.DataFrame({"flag": [True, False, True, True]}))
    >>> inferred.spec
    {'type': 'record', 'fields': {'flag': {'type': 'bernoulli'}}}
    >>> print(inferred)
    flag: bernoulli (the only candidate for booleans)
    """
    if sample_rows < 1:
        raise ValueError(f"sample_rows must be a positive integer, got {sample_rows!r}")
    profiled = profile_data(data, sample_rows, seed)
    if profiled is None or profiled.rows == 0:
        raise EmptyDataError("infer_spec needs a table with rows, got none")
    registered = set(registered_estimators())
    choices = tuple(
        choose_column(name, profile, profiled.sample.column(name).combine_chunks(), registered, seed, max_its)
        for name, profile in profiled.columns.items()
    )
    fields = {c.name: c.spec for c in choices if c.spec is not None}
    if not fields:
        lines = "; ".join(c.reason for c in choices)
        raise EmptyDataError(f"infer_spec found no column a family reads: {lines}")
    return InferredSpec(
        spec={"type": "record", "fields": fields},
        columns=choices,
        rows=profiled.rows,
        sample_rows=profiled.sample.num_rows,
        profile={name: p.to_dict() for name, p in profiled.columns.items()},
    )
