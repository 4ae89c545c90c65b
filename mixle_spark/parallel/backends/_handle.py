"""Pieces the encoded-data backends share beyond the fold (:mod:`mixle_spark.parallel.fold`): binding
an estimator to the scanned vocabularies, the memory a worker may use, scanning and encoding one
partition of a distributed frame (the numpy-only engine check is the registry's ``take_controls``)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from mixle_spark.engines import Compute, narrow_encoded
from mixle_spark.stats._tables import TableRows, chunk_bounds, located
from mixle_spark.stats.base import Encoder, Estimator

__all__ = [
    "bind_estimator",
    "encode_part",
    "machine_memory",
    "scan_part",
]


def machine_memory() -> int | None:
    """Bytes of memory this process may use: the machine's physical memory, or its container's limit
    (cgroup v2 ``memory.max``, v1 ``memory.limit_in_bytes``) when lower; None where neither reads."""
    try:
        total: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        total = None
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit_file) as fh:
                limit = int(fh.read().strip())
        except (OSError, ValueError):  # absent, or "max" (no limit)
            continue
        total = limit if total is None else min(total, limit)
    return total


def reads(bound: Encoder, encoder: Encoder) -> bool:
    """Whether an estimator with encoder ``bound`` reads data encoded by ``encoder``: the same encoder,
    or one whose vocabularies hold more labels (an update's, after new labels arrived; batches are
    re-aligned by label)."""
    if bound == encoder:
        return True
    try:
        return bound.union(encoder) == bound
    except TypeError:  # another structure: nothing to unite
        return False


def bind_estimator(
    estimator: Estimator, scan: Any, encoder: Encoder, num_workers: int | None = None
) -> Estimator:
    """``estimator`` with the data's scanned vocabularies / ranges fixed; it must read what ``encoder``
    encoded (:func:`reads`).

    With ``num_workers``, its E-step is threaded over that many threads
    (:class:`~mixle_spark.parallel.backends.model_parallel.ModelParallelEstimator`, bit-identical results).
    """
    bound = estimator.with_scan(scan) if scan is not None else estimator
    if not reads(bound.encoder(), encoder):
        raise ValueError(
            f"{type(estimator).__name__} encodes data differently from the estimator this handle "
            "was built for; build a new handle with encoded_data(data, estimator)"
        )
    if num_workers is None:
        return bound
    from mixle_spark.parallel.backends.model_parallel import ModelParallelEstimator  # it imports the backends

    return bound if isinstance(bound, ModelParallelEstimator) else ModelParallelEstimator(bound, num_workers)


def scan_part(frame: Any, encoder: Encoder, weights: Any, column: str | None, start: int, n: int) -> Any:
    """The scan (vocabularies / ranges) of one partition of a distributed frame, rows ``start`` on of
    ``n``; None for an empty partition. A bad value is reported at its row in the whole data set."""
    if len(frame) == 0:
        return None
    rows = TableRows(frame, weights, column)
    source = rows.source(encoder)
    scan = encoder.scan_arrow if rows.arrow else encoder.scan
    return located(scan, source, start, start + rows.n, n, rows.read_column)


def encode_part(
    frame: Any,
    encoder: Encoder,
    weights: Any,
    column: str | None,
    start: int,
    n: int,
    num_chunks: int | None,
    compute: Compute | None = None,
) -> list[tuple[Any, np.ndarray, np.ndarray]]:
    """One partition of a distributed frame (rows ``start`` on of ``n``) as the chunks ``(encoded,
    weights, global row ids)`` :func:`accumulate_chunks` folds, stored at ``compute``'s precision; a
    bad value is reported at its row in the whole data set."""
    if len(frame) == 0:
        return []
    rows = TableRows(frame, weights, column)
    source = rows.source(encoder)
    encode = encoder.from_arrow if rows.arrow else encoder.encode
    out = []
    for a, b in chunk_bounds(rows.n, None, num_chunks):
        enc = located(encode, rows.piece(source, a, b), start + a, start + b, n, rows.read_column)
        enc = narrow_encoded(encoder, enc, compute)
        out.append((enc, rows.weights[a:b], np.arange(start + a, start + b, dtype=np.uint64)))
    return out
