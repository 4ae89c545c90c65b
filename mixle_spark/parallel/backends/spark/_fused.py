"""The encoding pass run inside the first resident session (``SparkEncodedData(defer_encoding=True)``).

A handle that serves a few passes at once (an update folding new rows into a model, a streaming
micro-batch) pays two Spark jobs before its first pass: the encoding pass (:mod:`._encoding`)
and the start of its resident session. When the encoding is one pass they can be one job: the
barrier tasks of the resident session read the input partition and run the one-pass encoding on it
themselves, in the same Python worker, keeping its chunks (still pickled) and the partition's report.
(Reading the persisted output of the encoding instead costs a second Python worker per task and a
cache build before the resident task starts: about 0.3 s of a 0.5 s start on ``local[2]``.)

The driver asks for the reports (:data:`REPORT`), settles them as the encoding pass would
(:func:`~._encoding.settle`: a bad value raises, located; the merged scan; the partitions'
offsets), and sends what the chunks are read with (:class:`Settle`: the merged encoder, the offsets
that make input row ids global, the chunks to rebase as they are read); each task then decodes its
chunks as a resident task of the encoded data would (:func:`~._chunks.decode_chunks`), and the
session serves E-steps.

The persisted output of the encoding is computed only if a job needs the chunks later (a lost task, a
later fit's session): from the input, read a second time. Each task reports a digest of the chunk
cells it encoded (:class:`FusedChunks`), and the first job over the persisted output compares its
partitions' digests (:func:`chunk_digests`) before anything reads it, so an input that gives other
rows when read again (an unseeded ``rand()`` or ``sample``) raises instead of mixing two datasets.

:class:`FusedChunks` holds what a task read between those requests; its ``decode`` and ``compute``
travel in one closure, so each task's copy shares one holder.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.parallel.backends.spark._chunks import Rebase, decode_chunks, stored_chunks

__all__ = ["REPORT", "FusedChunks", "Settle", "chunk_digests"]


class _Report:
    """The request for a partition's encoding report: ``(report, [(first, rows) per chunk])``."""


REPORT = _Report()


class Settle:
    """The request that decodes the chunks a task holds: with the merged ``encoder``, the settled
    ``offsets`` and the chunks to ``rebase`` as they are read (None: none)."""

    def __init__(self, encoder: Any, offsets: np.ndarray, rebase: Rebase | None) -> None:
        self.encoder, self.offsets, self.rebase = encoder, offsets, rebase


class FusedChunks:
    """What a task encoded of its input partition: its chunks (pickled, until :class:`Settle` decodes
    them), the partition's report and the digest of its chunk cells.

    ``decode(batches)`` runs ``write`` (the one-pass encoding, :func:`~._encoding.one_pass_writer`)
    over the input batches and yields ``(pickled chunk, range(rows), first row id)`` per chunk (the
    session counts rows by the second item), keeping the report row aside; ``compute(chunks,
    request, part)`` answers :data:`REPORT` with ``(report, [(first, rows) per chunk], digest)``, then
    :class:`Settle` (the chunks decoded in place), then E-step requests (``fold(chunks, request,
    part)``: the executors' fold).
    """

    def __init__(
        self,
        write: Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]],
        fold: Callable[[list[Any], Any, int], Any],
    ) -> None:
        self.write, self.fold = write, fold
        self.report: Any = None
        self.layout: list[tuple[int, int]] = []
        self.digest = b""

    def decode(self, batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[bytes, range, int]]:
        digest = _digest()
        for batch in self.write(batches):
            if batch.num_rows == 0:
                continue
            columns = (batch.column(name).to_pylist() for name in ("first", "rows", "chunk"))
            for first, rows, blob in zip(*columns, strict=True):
                if rows < 0:
                    self.report = pickle.loads(blob)
                    continue
                self.layout.append((int(first), int(rows)))
                digest.update(blob)
                yield blob, range(rows), int(first)
        self.digest = digest.digest()

    def compute(self, chunks: list[Any], request: Any, part: int) -> Any:
        if isinstance(request, _Report):
            return self.report, self.layout, self.digest
        if isinstance(request, Settle):
            stored = [(first, len(rows), blob) for blob, rows, first in chunks]
            chunks[:] = decode_chunks(stored, request.encoder, request.offsets, request.rebase)
            return None
        return self.fold(chunks, request, part)


def _digest() -> Any:
    return hashlib.blake2b(digest_size=16)


DIGEST_SCHEMA = "part int, digest binary"


def chunk_digests(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` over the one-pass encoding's output: one row per partition, its id and the
    digest of its chunk cells in order (what :class:`FusedChunks` reports for the same partition)."""
    from pyspark import TaskContext

    digest = _digest()
    for batch in batches:
        for _first, _rows, blob in stored_chunks(batch):
            digest.update(blob)
    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else -1
    yield pa.RecordBatch.from_pydict({"part": pa.array([part], pa.int32()), "digest": [digest.digest()]})
