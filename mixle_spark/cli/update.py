"""The update job: fold new rows into a fitted model without reading the rows it was fitted to.

::

    python jobs/em_fit.py --update-from output/year --input day.parquet --output output/year+day
    python jobs/em_fit.py --update-from output/year --input day.parquet --output output/year \\
        --overwrite --half-life 30 --max-drop 2 --on-drift fail

``--update-from DIR`` reads ``DIR/model.json`` (an em_fit output; a model file works too), which must
keep the sufficient statistics of its fit (em_fit keeps them unless ``--no-statistics``; a model
without them is refused, exit code 2). The rows of ``--input`` are read as a fit reads them (the same
formats and ``--backend``) and folded in by :func:`mixle_spark.em.incremental.update`: ``--method
incremental`` (up to ``--max-its`` passes, default 5, the kept statistics fixed) or ``stepwise`` (one
pass), the kept statistics first decayed by ``--decay`` or ``--half-life`` (per update, or per new
row with ``--time-unit points``). ``--output`` gets ``model.json`` (the updated model with its new
statistics: the next update's ``--update-from``), ``summary.json`` (the fit summary's format with
an ``update`` section: :func:`~mixle_spark.cli._summary.build_update_summary`) and ``trace.jsonl``
(:meth:`~mixle_spark.em.incremental.UpdateResult.trace`: a header with the drift, a line per pass;
a refit's is the fresh fit's trace), written as a fit
writes them: staged and renamed into place, replacing only an em_fit output and only with
``--overwrite`` (``--output`` may be ``DIR`` itself: the model is read before anything is written).

Drift: with ``--max-drop NATS``, new rows whose mean log-likelihood under the model is more than NATS
per row below that of the rows the model holds are drift; ``--on-drift warn`` (default) says so and
updates, ``fail`` writes nothing and exits with code 3 (one line naming the drift and the limit), and
``refit`` fits the new rows from scratch (with statistics) instead.

stderr gets one line, the update's summary (``--quiet`` drops it), and a warning line for drift;
stdout the updated model's description and what was written.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mixle_spark._locations import resolve, shown_inside
from mixle_spark._outputs import check_location_free, publish_directory
from mixle_spark.cli._arguments import PROG, backend_options
from mixle_spark.cli._common import FIT_OUTPUT, UpdateDriftError
from mixle_spark.cli._compute import compute_summary
from mixle_spark.cli._inputs import open_input, report_warnings
from mixle_spark.cli._spmd import Coordination, solo
from mixle_spark.cli._summary import build_update_summary
from mixle_spark.cli._update_arguments import update_options
from mixle_spark.em.incremental import DriftError, update
from mixle_spark.errors import ConvergenceWarning, FitQualityWarning, SpecError
from mixle_spark.parallel.backends.contract import EncodedData
from mixle_spark.parallel.backends.registry import encoded_data
from mixle_spark.profile import segment_profile
from mixle_spark.spec import load_model, save_model
from mixle_spark.stats.base import Distribution
from mixle_spark.summary import describe_model

__all__ = ["load_updatable", "model_file", "run_update"]


def model_file(update_from: str) -> Path:
    """The model file ``--update-from`` names: ``DIR/model.json`` for a directory, else the file."""
    path = Path(update_from)
    return path / "model.json" if path.is_dir() else path


def load_updatable(path: Path) -> Distribution:
    """The model in ``path``, which must keep the statistics of its fit (else a SpecError, exit code 2,
    saying to refit with them)."""
    model = load_model(path)
    if model.statistics is None:
        raise SpecError(
            f"{path} keeps no statistics to update: refit it with em_fit without --no-statistics "
            "(statistics are kept by default)"
        )
    return model


def run_update(args: argparse.Namespace, coord: Coordination = solo) -> dict[str, Any]:
    """Update, write and report; returns the summary. Under SPMD every process runs this; the root
    writes and prints."""
    t_start = time.perf_counter()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    coord.on_root(lambda: check_location_free(resolve(args.output, "--output"), args.overwrite, FIT_OUTPUT))
    source = model_file(args.update_from)
    model = coord.agree(lambda: load_updatable(source))  # before any Spark or cluster starts
    extra: dict[str, Any] = coord.summary()
    timings: dict[str, float] = {}
    data, session, owned = open_input(args, extra, None, timings)
    try:
        options = update_options(args)
        updated, caught = _update(model, data, options, args, coord, timings)
        extra["warnings"] = caught
        extra["compute"] = compute_summary(vars(args))  # --engine / --precision (no spec here)
        summary = build_update_summary(args, str(source), updated, extra)
        coord.on_root(lambda: _write(args, updated, summary, timings, started_at, t_start))
    finally:
        if session is not None and owned:
            session.stop()
    if coord.is_root:
        print(describe_model(updated))
        stats = updated.statistics
        print(
            f"folded {summary['rows']} rows into {source}: its statistics now hold {stats.rows} rows "
            f"and {stats.updates} update{'s' if stats.updates != 1 else ''}, {timings['total']:.1f}s"
        )
        files = [shown_inside(args.output, n) for n in ("model.json", "summary.json", "trace.jsonl")]
        print(f"wrote {files[0]}, {files[1]} and {files[2]}")
    return summary


def _update(
    model: Distribution,
    data: Any,
    options: dict[str, Any],
    args: argparse.Namespace,
    coord: Coordination,
    timings: dict[str, float],
) -> tuple[Distribution, list[str]]:
    """``(updated model, warnings)``: the new rows encoded as ``update`` reads them (with the
    estimator the fit was given, so that new labels extend the vocabularies), then folded in.
    ``timings`` gets ``encode`` and ``em`` (the update's passes, or the refit). On classic Spark
    the rows are encoded by the job that starts the first pass's resident tasks
    (``defer_encoding``): ``encode`` is then the planning only, and ``em`` includes the encoding."""
    kept = model.statistics
    t0 = time.perf_counter()
    handle = encoded_data(
        data,
        kept.template or kept.estimator,
        defer_encoding=True,
        **backend_options(args),
        **coord.handle_options(),
    )
    timings["encode"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            warnings.simplefilter("always", FitQualityWarning)
            updated = coord.agree(lambda: _fold(model, handle, options))
    finally:
        handle.close()
    timings["em"] = time.perf_counter() - t1
    said = report_warnings(caught, coord)
    result = updated.update_result
    drift = _drift_line(result, options)
    if drift is not None:
        said.append(drift)
        coord.say(f"{PROG}: warning: {drift}")
    if not args.quiet:
        coord.say(f"{PROG}: {_summary_line(updated)}")
    return updated, said


def _summary_line(model: Distribution) -> str:
    """The update's one line (:meth:`UpdateResult.summary`); a refit's says what the fresh fit did."""
    result = model.update_result
    if not result.refitted:
        return str(result.summary())
    fit = model.fit_result
    return (
        f"refit from scratch ({fit.n_iter} EM iterations, converged={fit.converged}): {result.rows} rows, "
        f"mean log-likelihood {fit.log_likelihood / result.weight:.6g} (before, under the old model: "
        f"{result.mean_log_likelihood_before:.6g})"
    )


def _fold(model: Distribution, handle: EncodedData, options: dict[str, Any]) -> Distribution:
    """``update(model, handle)``; drift past ``--max-drop`` with ``--on-drift fail`` is the job's
    :class:`UpdateDriftError` (exit code 3), its one line naming the drift and the limit."""
    try:
        return update(model, handle, **options)
    except DriftError as err:
        r = err.result
        raise UpdateDriftError(
            f"drift: the new rows' mean log-likelihood {r.mean_log_likelihood_before:.6g} is "
            f"{r.drift:.4g} nats/row below the model's {r.reference_mean_log_likelihood:.6g}, more than "
            f"--max-drop {options['max_drop']:g} (--on-drift fail); nothing was written"
        ) from None


def _drift_line(result: Any, options: dict[str, Any]) -> str | None:
    """The warning for drift past ``--max-drop`` that was updated anyway or refitted; else None."""
    limit = options.get("max_drop")
    if limit is None or result.drift is None or result.drift <= limit:
        return None
    done = "refitted the new rows from scratch (--on-drift refit)" if result.refitted else "updated anyway"
    return f"drift {result.drift:.4g} nats/row exceeds --max-drop {limit:g}: {done}"


def _write(
    args: argparse.Namespace,
    model: Distribution,
    summary: dict[str, Any],
    timings: dict[str, float],
    started_at: str,
    t_start: float,
) -> None:
    """model.json and summary.json into a staging directory renamed into ``args.output`` (as a fit's)."""
    summary["segments"] = segment_profile(model)
    summary["timings"] = timings
    with publish_directory(resolve(args.output, "--output"), args.overwrite, FIT_OUTPUT) as staging:
        save_model(model, staging / "model.json")
        timings["total"] = time.perf_counter() - t_start
        summary["started_at"] = started_at
        summary["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        (staging / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
        result = model.update_result
        trace = model.fit_result.trace if result.refitted else result.trace()
        trace.to_jsonl(staging / "trace.jsonl")
