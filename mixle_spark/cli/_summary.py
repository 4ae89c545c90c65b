"""``summary.json``: the one schema every fit entry point writes (``mixle_spark.fit_summary`` v1).

Rows, iterations, convergence, log-likelihood (total and per row), free parameters, BIC / AIC, the
seed and fit options, the log-likelihood history, the long-fit settings (checkpoints, degenerate
policy, audit) with the resume point and a summary of the EM trace, and what the backend adds
(``spark``: master and version; ``ranks``: the processes of an SPMD run). The job adds ``timings``,
``started_at`` and ``finished_at`` as it writes.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from mixle_spark._version import __version__
from mixle_spark.summary import count_free_parameters, information_criteria

__all__ = ["SUMMARY_FORMAT", "build_summary", "long_fit_summary", "trace_summary"]

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
    """Checkpointing, degenerate-component policy and audit settings of the run, and the resume point."""
    return {
        "checkpoint_dir": args.checkpoint_dir,
        "checkpoint_every": args.checkpoint_every if args.checkpoint_dir else None,
        "resumed_from_iteration": result.resumed_from,
        "on_degenerate": args.on_degenerate,
        "audit": ({"every": args.audit_every, "fraction": args.audit_fraction} if args.audit_every else None),
        "trace": trace_summary(result.trace),
    }
