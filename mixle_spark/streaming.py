"""Structured Streaming: a model that learns from every micro-batch, written as versions, exactly once.

:func:`fit_stream` starts a streaming query whose ``foreachBatch`` sink folds each micro-batch into the
model (:func:`~mixle_spark.em.incremental.update`; the first batch is fitted from scratch when no
starting model is given) and publishes the result as the next version of a
:class:`~mixle_spark.em.model_versions.ModelVersions` directory. Each version's statistics record the
last batch id folded in, so a batch is folded **once** even when the query is killed and restarted from
its checkpoint: Spark replays the batch it had not committed, and a replayed id at or below the newest
version's is skipped. A batch killed before its version was published is folded again from the
previous version, with the same result.

>>> query = fit_stream(spark.readStream.format("delta").load(path), estimator,     # doctest: +SKIP
...                    output="/models/segments", checkpoint="/checkpoints/segments")
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from mixle_spark.em.incremental import update
from mixle_spark.em.model_versions import ModelVersions
from mixle_spark.errors import SpecError
from mixle_spark.stats.base import Distribution, Estimator

__all__ = ["fit_stream", "fold_batch"]

logger = logging.getLogger("mixle_spark.streaming")


def _stderr(line: str) -> None:
    print(f"mixle_spark stream: {line}", file=sys.stderr, flush=True)


def fold_batch(
    batch: Any,
    batch_id: int,
    versions: ModelVersions,
    estimator: Estimator,
    *,
    model: Distribution | None = None,
    fit_options: Mapping[str, Any] | None = None,
    update_options: Mapping[str, Any] | None = None,
    out: Callable[[str], None] | None = None,
) -> int | None:
    """Fold micro-batch ``batch`` (a DataFrame, or anything ``optimize`` reads) with id ``batch_id``
    into the newest version under ``versions`` (else ``model``, else a fit of the batch from scratch)
    and publish the result; the version written, or None when the batch was folded already or empty.
    What :func:`fit_stream`'s ``foreachBatch`` runs."""
    from mixle_spark.estimation import optimize

    latest = versions.latest()
    current = latest[1] if latest is not None else model
    kept = None if current is None else current.statistics
    if kept is not None and kept.last_batch is not None and batch_id <= kept.last_batch:
        if out is not None:
            out(f"batch {batch_id}: folded already (version {latest[0] if latest else '-'}), skipped")
        return None
    if _is_empty(batch):
        return None
    if current is None:
        fitted = optimize(batch, estimator, keep_statistics=True, **{"print_iter": 0, **(fit_options or {})})
        fitted.statistics = fitted.statistics.with_value(
            fitted.statistics.value, fitted.statistics.weight, fitted.statistics.rows, last_batch=batch_id
        )
        line = f"batch {batch_id}: fitted from scratch on {fitted.statistics.rows} rows"
    else:
        fitted = update(current, batch, batch_id=batch_id, **(update_options or {}))
        line = f"batch {batch_id}: {fitted.update_result.summary()}"
    version = versions.publish(fitted)
    if out is not None:
        out(f"{line}; published version {version}")
    logger.info("%s; published version %d", line, version)
    return version


def _is_empty(batch: Any) -> bool:
    if hasattr(batch, "isEmpty"):
        return bool(batch.isEmpty())
    return hasattr(batch, "__len__") and len(batch) == 0


def fit_stream(
    stream: Any,
    estimator: Estimator,
    *,
    output: str | os.PathLike[str],
    checkpoint: str,
    model: Distribution | None = None,
    fit_options: Mapping[str, Any] | None = None,
    trigger: Mapping[str, Any] | None = None,
    query_name: str | None = None,
    quiet: bool = False,
    **update_options: Any,
) -> Any:
    """Start a streaming query that folds every micro-batch of ``stream`` into a model.

    Parameters
    ----------
    stream : pyspark.sql.DataFrame
        A streaming DataFrame (``spark.readStream...``) with the columns ``estimator`` reads.
    estimator : Estimator
        What the model is (the first batch is fitted with it when there is no model yet).
    output : path or URI
        The model versions (:class:`~mixle_spark.em.model_versions.ModelVersions`): the query goes
        on from the newest one there.
    checkpoint : str
        The query's ``checkpointLocation`` (Spark's offsets and commits): restart with the same one.
    model : Distribution, optional
        A model with statistics to start from when ``output`` holds no version yet.
    fit_options : mapping, optional
        ``optimize`` keywords for the first batch's fit (``max_its``, ``seed``, ``backend`` ...).
    trigger : mapping, optional
        ``DataStreamWriter.trigger`` keywords (``{"availableNow": True}``, ``{"processingTime": "1
        minute"}``); default: Spark's (each batch as soon as the previous one ends).
    query_name : str, optional
        The query's name (shown in the Spark UI and ``spark.streams``).
    quiet : bool
        No per-batch line on stderr (they are logged at INFO either way).
    **update_options
        :func:`~mixle_spark.em.incremental.update` keywords: ``method``, ``decay``, ``half_life``,
        ``time_unit``, ``max_its``, ``max_drop``, ``on_drift``, backend keywords.

    Returns
    -------
    pyspark.sql.streaming.StreamingQuery
        The running query (``awaitTermination()``, ``stop()``).
    """
    if not getattr(stream, "isStreaming", False):
        raise SpecError(
            "fit_stream needs a streaming DataFrame (spark.readStream...); use optimize for a table"
        )
    if model is not None and model.statistics is None:
        raise SpecError("fit_stream: the starting model has no statistics; fit it with keep_statistics=True")
    bad = sorted(set(update_options) & {"batch_id", "out", "statistics"})
    if bad:
        raise SpecError(f"fit_stream sets {', '.join(bad)} itself")
    versions = ModelVersions(output)
    out = None if quiet else _stderr

    def sink(batch: Any, batch_id: int) -> None:
        fold_batch(
            batch,
            int(batch_id),
            versions,
            estimator,
            model=model,
            fit_options=fit_options,
            update_options=update_options,
            out=out,
        )

    writer = stream.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
    if query_name is not None:
        writer = writer.queryName(query_name)
    if trigger is not None:
        writer = writer.trigger(**trigger)
    return writer.start()
