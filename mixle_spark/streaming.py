"""Structured Streaming: a model that learns from every micro-batch, written as versions, exactly once.

:func:`fit_stream` starts a streaming query whose ``foreachBatch`` sink folds each micro-batch into the
model (:func:`~mixle_spark.em.incremental.update`; the first batch is fitted from scratch when no
starting model is given) and publishes the result as the next version of a
:class:`~mixle_spark.em.model_versions.ModelVersions` directory.

Each version's statistics record the last batch id folded in **and the query it belongs to**
(:class:`~mixle_spark.em.statistics.StreamIdentity`: Spark's ``StreamingQuery.id``, the checkpoint
location, the source). Batch ids count from 0 in every query, so a batch is skipped only when the
newest version was written by this same query with a batch id at or above it: a query killed and
restarted from its checkpoint gets back the batch it had not committed, and a replayed id is skipped
(a batch killed before its version was published is folded again from the previous version, with the
same result). A new query (a new checkpoint) into a directory that holds versions, or started from
another stream's model, goes on from the newest of them: its batches are folded in and published
after it, and it says so in one line ("continuing from version 6 of query ..."). A version written
before queries were recorded counts as another query's (folded into, never skipped): restart an
upgraded query only after it stopped cleanly (``query.stop()``), else the one batch in flight at the
kill may be folded twice.

The query id is read from the checkpoint's ``metadata`` file (where Spark keeps it; one small read by
the batch's own session when the query's first batch arrives), so the sink needs nothing from the
client after ``start()``: it runs the same in a classic driver and in a Spark Connect server's
Python worker.

>>> query = fit_stream(spark.readStream.format("delta").load(path), estimator,     # doctest: +SKIP
...                    output="/models/segments", checkpoint="/checkpoints/segments")
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import re
import sys
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from mixle_spark.em.incremental import update
from mixle_spark.em.model_versions import ModelVersions
from mixle_spark.em.statistics import Statistics, StreamIdentity
from mixle_spark.errors import CheckpointStoreError, MixleError, SpecError
from mixle_spark.stats.base import Distribution, Estimator

__all__ = ["fit_stream", "fold_batch"]

logger = logging.getLogger("mixle_spark.streaming")

_SOURCE = re.compile(r"StreamingRelation(?:V2)? (.+?), \[")


def _stderr(line: str) -> None:
    print(f"mixle_spark stream: {line}", file=sys.stderr, flush=True)


def fold_batch(
    batch: Any,
    batch_id: int,
    versions: ModelVersions,
    estimator: Estimator,
    *,
    stream: StreamIdentity | None = None,
    model: Distribution | None = None,
    fit_options: Mapping[str, Any] | None = None,
    update_options: Mapping[str, Any] | None = None,
    out: Callable[[str], None] | None = None,
) -> int | None:
    """Fold micro-batch ``batch`` (a DataFrame, or anything ``optimize`` reads) with id ``batch_id``
    into the newest version under ``versions`` (else ``model``, else a fit of the batch from scratch)
    and publish the result; the version written, or None when the batch was folded already or empty.
    What :func:`fit_stream`'s ``foreachBatch`` runs.

    ``stream`` is the query the batch belongs to, recorded with the version: the batch is skipped only
    when the newest version (or ``model``) records this same query with a ``last_batch`` at or above
    ``batch_id``. Without it (None) nothing is ever skipped. A basis written by another query (or by
    no recorded query) is continued, and ``out`` gets one line saying so. The version is published as the
    one after its basis; a :class:`~mixle_spark.errors.CheckpointStoreError` when another writer
    published that number meanwhile.
    """
    from mixle_spark.estimation import optimize

    latest = versions.latest()
    basis = latest[0] if latest is not None else 0
    current = latest[1] if latest is not None else model
    kept = None if current is None else current.statistics
    if kept is not None and _folded_already(kept, stream, batch_id):
        if out is not None:
            out(f"batch {batch_id}: folded already (version {latest[0] if latest else '-'}), skipped")
        return None
    if _is_empty(batch):
        return None
    continuing = None if kept is None else _continuing(kept, stream, batch_id, basis)
    if continuing is not None:
        logger.info("%s", continuing)
        if out is not None:
            out(continuing)
    if current is None:
        fitted = optimize(batch, estimator, keep_statistics=True, **{"print_iter": 0, **(fit_options or {})})
        fitted.statistics = fitted.statistics.with_value(
            fitted.statistics.value,
            fitted.statistics.weight,
            fitted.statistics.rows,
            last_batch=batch_id,
            stream=stream,
        )
        line = f"batch {batch_id}: fitted from scratch on {fitted.statistics.rows} rows"
    else:
        # update skips a batch id at or below last_batch; that was decided above, with the query
        fresh = None if kept is None else dataclasses.replace(kept, last_batch=None)
        fitted = update(current, batch, statistics=fresh, batch_id=batch_id, **(update_options or {}))
        fitted.statistics = dataclasses.replace(fitted.statistics, stream=stream)
        line = f"batch {batch_id}: {fitted.update_result.summary()}"
    version = versions.publish(fitted, after=basis)
    if out is not None:
        out(f"{line}; published version {version}")
    logger.info("%s; published version %d", line, version)
    return version


def _folded_already(kept: Statistics, stream: StreamIdentity | None, batch_id: int) -> bool:
    """Whether ``kept`` holds batch ``batch_id`` of the query ``stream`` already."""
    same_query = stream is not None and kept.stream is not None and kept.stream.query_id == stream.query_id
    return same_query and kept.last_batch is not None and batch_id <= kept.last_batch


def _continuing(kept: Statistics, stream: StreamIdentity | None, batch_id: int, version: int) -> str | None:
    """The line saying that ``stream`` goes on from a basis another query wrote (None: its own, or a
    starting model no stream wrote)."""
    if stream is None or (kept.stream is not None and kept.stream.query_id == stream.query_id):
        return None  # no query to tell apart, or its own
    if version == 0 and kept.stream is None and kept.last_batch is None:
        return None  # a starting model from a fit: the usual start, not another query's work
    basis = f"version {version}" if version else "the starting model"
    if kept.stream is not None:
        basis += f" of query {kept.stream.query_id} (checkpoint {kept.stream.checkpoint}, "
        basis += f"last batch {kept.last_batch})"
    elif kept.last_batch is not None:
        basis += f" (its query not recorded, last batch {kept.last_batch})"
    else:
        basis += " (not written by a stream)"
    this = f"query {stream.query_id} (checkpoint {stream.checkpoint})"
    return f"continuing from {basis}: {this} folds its batches into it from batch {batch_id}"


def _is_empty(batch: Any) -> bool:
    if hasattr(batch, "isEmpty"):
        return bool(batch.isEmpty())
    return hasattr(batch, "__len__") and len(batch) == 0


def _query_id_of(metadata: str, checkpoint: str) -> str:
    """The query id in the text of a streaming checkpoint's ``metadata`` file (``{"id": "<uuid>"}``,
    written by Spark when the query is first started from that checkpoint)."""
    try:
        found = json.loads(metadata).get("id")
        return str(uuid.UUID(found))
    except (ValueError, TypeError, AttributeError):
        raise CheckpointStoreError(
            f"streaming checkpoint {checkpoint}: its metadata file holds {metadata[:200]!r}, expected "
            'Spark\'s {"id": "<query uuid>"}; is it the checkpoint of a streaming query?'
        ) from None


def _read_query_id(batch: Any, checkpoint: str) -> str:
    """The id of the query ``batch`` belongs to, read by the batch's own session from its checkpoint
    (a path that Spark resolves as it did when writing it: a relative path, the default filesystem)."""
    rows = batch.sparkSession.read.text(f"{checkpoint.rstrip('/')}/metadata").collect()
    return _query_id_of("\n".join(row[0] for row in rows), checkpoint)


def _describe_source(stream: Any) -> str:
    """A streaming DataFrame's source(s) as Spark's plan names them (``FileSource[/data/in]``,
    ``rate``, ...), for the record a version keeps; the first plan line when none is named."""
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        stream.explain()
    found = [name[:200] for name in _SOURCE.findall(text.getvalue())]
    if found:
        return "; ".join(dict.fromkeys(found))
    lines = [ln.strip() for ln in text.getvalue().splitlines() if ln.strip() and not ln.startswith("==")]
    return lines[0][:200] if lines else "a streaming DataFrame"


class _BatchSink:
    """What :func:`fit_stream`'s ``foreachBatch`` runs. Plain data and this module's functions only:
    Spark Connect pickles it when the query is defined and calls it in a Python worker of the server,
    which learns the query id from the checkpoint like a classic driver does."""

    def __init__(
        self,
        versions: ModelVersions,
        estimator: Estimator,
        *,
        checkpoint: str,
        source: str,
        model: Distribution | None,
        fit_options: Mapping[str, Any] | None,
        update_options: Mapping[str, Any],
        quiet: bool,
    ) -> None:
        self.versions, self.estimator, self.model = versions, estimator, model
        self.checkpoint, self.source = checkpoint, source
        self.fit_options, self.update_options, self.quiet = fit_options, update_options, quiet
        self.stream: StreamIdentity | None = None  # learnt from the first batch

    def __call__(self, batch: Any, batch_id: int) -> None:
        try:
            if self.stream is None:
                query_id = _read_query_id(batch, self.checkpoint)
                self.stream = StreamIdentity(query_id, self.checkpoint, self.source)
            fold_batch(
                batch,
                int(batch_id),
                self.versions,
                self.estimator,
                stream=self.stream,
                model=self.model,
                fit_options=self.fit_options,
                update_options=self.update_options,
                out=None if self.quiet else _stderr,
            )
        except (MixleError, OSError) as err:
            # the sentence that says what to do, before Spark's own trace of the stopped query
            _stderr(f"error: {err}")
            raise


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
        on from the newest one there, whichever query wrote it (see the module docstring).
    checkpoint : str
        The query's ``checkpointLocation`` (Spark's offsets and commits): restart with the same one.
        A new checkpoint is a new query, whose batches are all folded in after the newest version.
    model : Distribution, optional
        A model with statistics to start from when ``output`` holds no version yet (from a fit, or
        another stream's version: its batches are not this query's, none is skipped).
    fit_options : mapping, optional
        ``optimize`` keywords for the first batch's fit (``max_its``, ``seed``, ``backend`` ...).
    trigger : mapping, optional
        ``DataStreamWriter.trigger`` keywords (``{"availableNow": True}``, ``{"processingTime": "1
        minute"}``); default: Spark's (each batch as soon as the previous one ends).
    query_name : str, optional
        The query's name (shown in the Spark UI and ``spark.streams``).
    quiet : bool
        No per-batch line on stderr, nor the line saying the query continues another's versions
        (they are logged at INFO either way). An error that stops the query is always one line,
        ``mixle_spark stream: error: ...``, before Spark's own exception.
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
    sink = _BatchSink(
        ModelVersions(output),
        estimator,
        checkpoint=checkpoint,
        source=_describe_source(stream),
        model=model,
        fit_options=fit_options,
        update_options=update_options,
        quiet=quiet,
    )
    writer = stream.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
    if query_name is not None:
        writer = writer.queryName(query_name)
    if trigger is not None:
        writer = writer.trigger(**trigger)
    return writer.start()
