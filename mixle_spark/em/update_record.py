"""What one :func:`~mixle_spark.em.incremental.update` did: :class:`UpdateResult`, a record that a model
file carries beside the model's statistics (:mod:`mixle_spark.model_file`), kept apart from the update
itself so that reading a model file needs no EM driver.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from mixle_spark.em.statistics import value_from_json, value_to_json

if TYPE_CHECKING:
    from mixle_spark.em.observability import EMTrace

__all__ = ["UpdateResult"]


@dataclass(frozen=True)
class UpdateResult:
    """What one :func:`~mixle_spark.em.incremental.update` did; attached to the returned model as
    ``model.update_result``.

    Attributes
    ----------
    rows, weight : the new rows and their total weight.
    method : "incremental" or "stepwise"; ``passes`` over the new rows it made.
    decay : the factor the kept statistics were multiplied by.
    mean_log_likelihood_before : the new rows' mean log-likelihood under the model before the update.
    reference_mean_log_likelihood : the kept statistics' rows' mean log-likelihood (under the models
        that folded them): what ``before`` is compared with; None when unknown.
    drift : ``reference - before`` in nats per row (positive: the new rows fit worse); None when
        the reference is unknown.
    weights_before, weights_after : mixture weights (None for a model that is not a mixture).
    weight_shift : total-variation distance between them (half the L1 distance; 0..1).
    unseen_rows : weight of new rows that scored -inf under the old model (a label it had not seen);
        they count in the statistics, not in ``before``.
    seconds : wall time of the update.
    refitted : True when ``on_drift="refit"`` fitted the new rows from scratch.
    history : the new rows' log-likelihood under the model each pass started from.
    pass_seconds : each pass's wall time (E-step, merge, M-step).
    """

    rows: int
    weight: float
    method: str
    passes: int
    decay: float
    mean_log_likelihood_before: float
    reference_mean_log_likelihood: float | None
    drift: float | None
    weights_before: list[float] | None
    weights_after: list[float] | None
    weight_shift: float | None
    unseen_rows: float
    seconds: float
    refitted: bool = False
    history: list[float] = field(default_factory=list)
    pass_seconds: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Strict-JSON data (saved in the model file beside the statistics)."""
        return {name: value_to_json(value) for name, value in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UpdateResult:
        known = {f.name for f in fields(cls)}
        return cls(**{name: value_from_json(value) for name, value in data.items() if name in known})

    def trace(self) -> EMTrace:
        """The update as an EM trace (what ``em_fit --update-from`` writes to ``trace.jsonl``): the
        header's metadata holds ``"kind": "update"`` and the drift fields, then one record per pass
        (the new rows' log-likelihood under the model the pass started from, its gain, its time; the
        last carries the weights after the update). A refit's trace is the fresh fit's
        (``model.fit_result.trace``)."""
        from mixle_spark.em.observability import EMTrace, IterationTrace

        meta = {k: v for k, v in self.to_dict().items() if k not in ("history", "pass_seconds")}
        trace = EMTrace(metadata={"kind": "update", **meta})
        after = None if self.weights_after is None else tuple(self.weights_after)
        for i, ll in enumerate(self.history):
            secs = self.pass_seconds[i] if i < len(self.pass_seconds) else 0.0
            gain = None if i == 0 or not math.isfinite(self.history[i - 1]) else ll - self.history[i - 1]
            events = [self.summary()] if i == 0 else []
            trace.append(
                IterationTrace(
                    iteration=i,
                    log_likelihood=ll,
                    delta=gain,
                    rows=self.rows,
                    weight=self.weight,
                    seconds=secs,
                    rows_per_second=self.rows / secs if secs > 0 else 0.0,
                    stat_bytes=0,
                    partitions=0,
                    partition_seconds=(0.0, 0.0, 0.0),
                    skew=1.0,
                    stragglers=(),
                    component_weights=after if i == len(self.history) - 1 else None,
                    events=tuple(events),
                )
            )
        return trace

    def summary(self) -> str:
        """One line for a log or stderr."""
        parts = [
            f"update ({self.method}, {self.passes} pass{'es' if self.passes != 1 else ''}): "
            f"{self.rows} rows, decay {self.decay:.6g}",
            f"mean log-likelihood before {self.mean_log_likelihood_before:.6g}",
        ]
        if self.drift is not None:
            parts.append(f"drift {self.drift:+.4g} nats/row")
        if self.weight_shift is not None:
            parts.append(f"weights moved {self.weight_shift:.4g} (total variation)")
        if self.unseen_rows:
            parts.append(f"{self.unseen_rows:g} rows with labels the model had not seen")
        return ", ".join(parts)
