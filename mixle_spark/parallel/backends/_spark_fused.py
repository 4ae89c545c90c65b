"""The encoding pass run inside the first resident session (``SparkEncodedData(defer_encoding=True)``).

A handle that serves a few passes at once (an update folding new rows into a model, a streaming
micro-batch) pays two Spark jobs before its first pass: the encoding pass (:mod:`._spark_encoding`)
and the start of its resident session. When the encoding is one pass they can be one job: the
barrier tasks of the resident session read the persisted (not yet computed) output of the one-pass
encoding, which computes it (and fills the cache, so the job path finds it there), and keep its
chunks, still pickled, with the partition's report.

The driver asks for the reports (:data:`REPORT`), settles them as the encoding pass would
(:func:`~._spark_encoding.settle`: a bad value raises, located; the merged scan; the partitions'
offsets), and sends what the chunks are read with (:class:`Settle`: the merged encoder, the offsets
that make input row ids global, the chunks to rebase as they are read); each task then decodes its
chunks as a resident task of the encoded data would (:func:`~._spark_chunks.decode_chunks`), and the
session serves E-steps.

:class:`FusedChunks` holds what a task read between those requests; its ``decode`` and ``compute``
travel in one closure, so each task's copy shares one holder.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.parallel.backends._spark_chunks import Rebase, decode_chunks

__all__ = ["REPORT", "FusedChunks", "Settle"]


class _Report:
    """The request for a partition's encoding report: ``(report, [(first, rows) per chunk])``."""


REPORT = _Report()


class Settle:
    """The request that decodes the chunks a task holds: with the merged ``encoder``, the settled
    ``offsets`` and the chunks to ``rebase`` as they are read (None: none)."""

    def __init__(self, encoder: Any, offsets: np.ndarray, rebase: Rebase | None) -> None:
        self.encoder, self.offsets, self.rebase = encoder, offsets, rebase


class FusedChunks:
    """What a task read of the one-pass encoding's output: its chunks (pickled, until :class:`Settle`
    decodes them) and the partition's report.

    ``decode(batches)`` yields ``(pickled chunk, range(rows), first row id)`` per chunk (the session
    counts rows by the second item) and keeps the report row aside; ``compute(chunks, request,
    part)`` answers :data:`REPORT`, then :class:`Settle` (the chunks decoded in place), then E-step
    requests (``fold(chunks, request, part)``: the executors' fold).
    """

    def __init__(self, fold: Callable[[list[Any], Any, int], Any]) -> None:
        self.fold = fold
        self.report: Any = None
        self.layout: list[tuple[int, int]] = []

    def decode(self, batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[bytes, range, int]]:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            columns = (batch.column(name).to_pylist() for name in ("first", "rows", "chunk"))
            for first, rows, blob in zip(*columns, strict=True):
                if rows < 0:
                    self.report = pickle.loads(blob)
                    continue
                self.layout.append((int(first), int(rows)))
                yield blob, range(rows), int(first)

    def compute(self, chunks: list[Any], request: Any, part: int) -> Any:
        if isinstance(request, _Report):
            return self.report, self.layout
        if isinstance(request, Settle):
            stored = [(first, len(rows), blob) for blob, rows, first in chunks]
            chunks[:] = decode_chunks(stored, request.encoder, request.offsets, request.rebase)
            return None
        return self.fold(chunks, request, part)
