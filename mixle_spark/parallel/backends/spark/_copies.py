"""The executor-local copies one spark handle keeps of its chunks (the job path; the files themselves
are :mod:`._chunks`'): the key that authenticates them, where the encoding pass wrote them, the
reader E-step jobs fold them with, and their deletion when the handle closes."""

from __future__ import annotations

import functools
import logging
import os
import socket
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from mixle_spark.parallel.backends.spark._chunks import (
    CopyKey,
    Layout,
    copy_place,
    copy_reader,
    remove_copies,
)
from mixle_spark.parallel.backends.spark._common import _PAYLOAD_SCHEMA, _payload_batch
from mixle_spark.parallel.backends.spark._encoding import ChunkFrame

__all__ = ["ChunkCopies"]

logger = logging.getLogger("mixle_spark.parallel.backends.spark")


class ChunkCopies:
    """The executor-local copies of the chunks of handle ``token``.

    ``written`` says whether the encoding pass keeps them (the job path: ``resident=False``, Spark
    Connect, dynamic allocation); ``places`` are the ``(host, Spark local directory)`` pairs where
    it wrote them.
    """

    def __init__(self, token: str, written: bool) -> None:
        self.token, self.written = token, written
        self.key = os.urandom(32)  # authenticates the copies' contents (see ._chunks)
        self.places: set[tuple[str, str]] = set()
        self.moved = False  # written again by a pass whose tasks' places are unknown

    @property
    def pair(self) -> CopyKey | None:
        """What a writing task needs to keep a copy (token and key); None when none are kept."""
        return (self.token, self.key) if self.written else None

    def renew(self) -> CopyKey | None:
        """A new key for a pass that writes the copies again (a copy of the first pass is then
        never read: its key no longer checks); None when none are kept."""
        if self.written:
            self.key, self.moved = os.urandom(32), True
        return self.pair

    def reader(
        self, encoder: Any, offsets: Any, rebase: Any
    ) -> Callable[[Layout | None], Callable[[Iterable[pa.RecordBatch], int], Iterator[Any]]] | None:
        """``read_copies(layout)``: :func:`~._chunks.copy_reader` of these copies for the chunks
        ``encoder`` wrote (``rebase``: the chunks it re-expresses as they are read); None when none
        are kept."""
        if not self.written:
            return None
        return functools.partial(copy_reader, encoder, (self.token, self.key), offsets, rebase=rebase)

    def drop(self, chunks: ChunkFrame) -> None:
        """Delete the copies: directly where the executor's directory is on this machine (a local
        master, a local Connect server), else by a small job over the small columns of ``chunks``
        (its tasks run where the cached partitions are; Spark deletes the directories of executors
        it stops in any case). Best effort: a session already stopped leaves them to Spark."""
        if not self.written:
            return
        here = socket.gethostname()
        elsewhere = False
        for host, root in self.places:
            if host == here:
                remove_copies(root, self.token)
            else:
                elsewhere = True
        if not elsewhere and not self.moved:
            return
        token = self.token

        def remove(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for _batch in batches:
                pass
            root = copy_place()
            yield _payload_batch(root is not None and remove_copies(root, token))

        try:
            chunks.index.mapInArrow(remove, _PAYLOAD_SCHEMA).collect()
        except Exception as err:  # the session may be gone: Spark removes its local directories
            logger.info("executor-local chunk copies left to Spark's clean-up: %s", err)
