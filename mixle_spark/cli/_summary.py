"""``summary.json``: the one schema every fit entry point writes (``mixle_spark.fit_summary`` v1).

Rows, iterations, convergence, log-likelihood (total and per row), free parameters, BIC / AIC, the
seed and fit options, the log-likelihood history, the long-fit settings (checkpoints, degenerate
policy, audit) with the resume point and a summary of the EM trace, the statistics kept in model.json
(``statistics``: rows, updates, weight; None without them), and what the backend adds (``spark``:
master and version; ``ranks``: the processes of an SPMD run). The job adds ``timings``,
``started_at`` and ``finished_at`` as it writes.

An update (``em_fit --update-from``) writes the same format with what applies to it
(:func:`build_update_summary`): ``updated_from``, ``rows`` (the new rows), ``iterations`` (passes over
them), ``free_parameters``, ``statistics`` and an ``update`` section (:func:`update_section`).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from mixle_spark._version import __version__
from mixle_spark.summary import count_free_parameters, information_criteria

__all__ = [
    "SUMMARY_FORMAT",
    "build_summary",
    "build_update_summary",
    "long_fit_summary",
    "statistics_summary",
    "trace_summary",
    "update_section",
]

SUMMARY_FORMAT = "mixle_spark.fit_summary"


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _count(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def build_summary(
    args: argparse.Namespace,
    model: Any,
    log_likelihood: float,
    options: dict[str, Any],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The run summary written as summary.json."""
    result = model.fit_result
    rows = result.history[-1].nobs
    n_params = count_free_parameters(model)
    return {
        "format": SUMMARY_FORMAT,
        "format_version": 1,
        "mixle_spark_version": __version__,
        "input": args.input,
        "model_spec": args.model,
        "backend": args.backend,
        "rows": _count(rows),
        "iterations": result.n_iter,
        "converged": result.converged,
        "stopped_because": result.stopped_because,
        "log_likelihood": log_likelihood,
        "log_likelihood_per_row": log_likelihood / rows,
        "free_parameters": n_params,
        **information_criteria(log_likelihood, n_params, rows),
        "seed": result.seed,
        "fit_options": options,
        "history": [
            {
                "iteration": rec.iteration,
                "log_likelihood": _finite(rec.log_likelihood),
                "gain": _finite(rec.gain),
                "rows": _count(rec.nobs),
                "seconds": rec.seconds,
            }
            for rec in result.history
        ],
        **extra,
    }


def trace_summary(trace: Any) -> dict[str, Any]:
    """The EM trace in a few numbers for summary.json (the per-iteration records are in trace.jsonl)."""
    records = trace.records
    seconds = sum(r.seconds for r in records)
    skews = [r.skew for r in records if math.isfinite(r.skew)]
    return {
        "iterations": len(records),
        "seconds": seconds,
        "rows_per_second": _finite(sum(r.rows for r in records) / seconds) if seconds > 0 else None,
        "stat_bytes_per_iteration": max((r.stat_bytes for r in records), default=0),
        "partitions": max((r.partitions for r in records), default=0),
        "max_skew": max(skews) if skews else None,
        "straggler_iterations": [r.iteration for r in records if r.stragglers],
        "events": [f"iteration {r.iteration}: {e}" for r in records for e in r.events],
    }


def long_fit_summary(args: argparse.Namespace, result: Any) -> dict[str, Any]:
    """Checkpointing, degenerate-component policy and audit settings of the run, and the resume point:
    the iteration resumed from and when that checkpoint was written, or why the checkpoints found
    were replaced by a fit from scratch (they were of other data)."""
    return {
        "checkpoint_dir": args.checkpoint_dir,
        "checkpoint_every": args.checkpoint_every if args.checkpoint_dir else None,
        "resumed_from_iteration": result.resumed_from,
        "resumed_checkpoint_written_at": getattr(result, "resumed_written_at", None),
        "checkpoint_refit": getattr(result, "checkpoint_refit", None),
        "on_degenerate": args.on_degenerate,
        "audit": ({"every": args.audit_every, "fraction": args.audit_fraction} if args.audit_every else None),
        "trace": trace_summary(result.trace),
    }


def statistics_summary(statistics: Any) -> dict[str, Any] | None:
    """The statistics a model keeps (:class:`~mixle_spark.em.statistics.Statistics`) in a few numbers:
    ``rows`` folded in (not decayed), ``updates`` since the fit, their ``weight`` (decayed) and the
    ``last_batch`` a stream folded; None for a model without them."""
    if statistics is None:
        return None
    return {
        "rows": statistics.rows,
        "updates": statistics.updates,
        "weight": _count(statistics.weight),
        "last_batch": statistics.last_batch,
    }


def update_section(result: Any, args: argparse.Namespace) -> dict[str, Any]:
    """What one update did (its :class:`~mixle_spark.em.incremental.UpdateResult`) and was asked
    (``args``: the job's flags), as summary.json's ``update``: ``rows``, ``weight``,
    ``method``, ``passes``, ``decay`` (the factor applied; ``half_life`` and ``time_unit`` as given),
    ``mean_log_likelihood_before`` (the new rows' under the model before the update), ``reference``
    (the model's own rows'), ``drift`` (reference - before, nats per row), ``max_drop`` /
    ``on_drift``, ``weight_shift`` and ``weights_before`` / ``weights_after``, ``unseen_rows``,
    ``refitted``, ``log_likelihood_per_pass`` (the new rows' under the model each pass started
    from) and ``seconds``."""
    return {
        "rows": result.rows,
        "weight": _count(result.weight),
        "method": result.method,
        "passes": result.passes,
        "decay": result.decay,
        "half_life": args.half_life,
        "time_unit": args.time_unit,
        "mean_log_likelihood_before": _finite(result.mean_log_likelihood_before),
        "reference": _finite(result.reference_mean_log_likelihood),
        "drift": _finite(result.drift),
        "max_drop": args.max_drop,
        "on_drift": args.on_drift,
        "weight_shift": result.weight_shift,
        "weights_before": result.weights_before,
        "weights_after": result.weights_after,
        "unseen_rows": _count(result.unseen_rows),
        "refitted": result.refitted,
        "log_likelihood_per_pass": [_finite(ll) for ll in result.history],
        "seconds": result.seconds,
    }


def build_update_summary(
    args: argparse.Namespace, source: str, model: Any, extra: dict[str, Any]
) -> dict[str, Any]:
    """The summary.json of ``em_fit --update-from``: the fit summary's format, with what applies to
    an update (``source``: the model file updated). A refit
    (``--on-drift refit``) adds ``refit``: the fresh fit's iterations, convergence and log-likelihood."""
    result = model.update_result
    summary = {
        "format": SUMMARY_FORMAT,
        "format_version": 1,
        "mixle_spark_version": __version__,
        "input": args.input,
        "updated_from": source,
        "backend": args.backend,
        "rows": result.rows,
        "iterations": result.passes,
        "free_parameters": count_free_parameters(model),
        "statistics": statistics_summary(model.statistics),
        "update": update_section(result, args),
    }
    fitted = getattr(model, "fit_result", None)
    if result.refitted and fitted is not None:
        summary["refit"] = {
            "iterations": fitted.n_iter,
            "converged": fitted.converged,
            "stopped_because": fitted.stopped_because,
            "log_likelihood": _finite(fitted.log_likelihood),
        }
    return {**summary, **extra}
