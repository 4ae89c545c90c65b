"""The profile pass over a Spark DataFrame: one Spark job, no rows collected.

Each task profiles its partition's Arrow batches and keeps its bottom-k sample (:mod:`._profile`),
the row keys drawn by Spark's ``rand(seed)`` in the same plan; its one payload (profile and sample,
pickled) merges with the others by ``treeAggregate``, so the driver receives a bounded number of
samples of at most ``capacity`` rows (the payloads of a few partitions, which ``treeAggregate`` would
merge on the driver at once, are collected instead). Spark Connect has no RDDs: there the payloads
(one per partition) are collected and merged on the driver, still in one job. pyspark is not imported here:
only the DataFrame's own methods are called.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from mixle_spark.infer._profile import TableProfile, profile_table

__all__ = ["KEY_COLUMN", "profile_spark"]

KEY_COLUMN = "__mixle_sample_key"
_PAYLOAD_SCHEMA = "payload binary"


def _merge(a: TableProfile | None, b: TableProfile | None) -> TableProfile | None:
    return b if a is None else a.merge(b)


def _partition_profiler(columns: list[str], capacity: int) -> Any:
    """The ``mapInArrow`` function: one payload (this partition's TableProfile, or None) per task."""

    def profile_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        merged: TableProfile | None = None
        for batch in batches:
            keys = batch.column(KEY_COLUMN).to_numpy(zero_copy_only=False)
            rows = batch.select(columns)
            merged = profile_table(rows, keys, capacity) if merged is None else merged.add(rows, keys)
        blob = pickle.dumps(merged, protocol=5)
        yield pa.RecordBatch.from_pydict({"payload": pa.array([blob], pa.binary())})

    return profile_partition


def _one_level(parts: int, depth: int) -> bool:
    """Whether ``treeAggregate(depth=depth)`` over ``parts`` partitions would merge them all on the
    driver at once (its own test): the payloads are then collected instead, sparing each task the
    second Python worker that ``DataFrame.rdd`` hands the payloads to."""
    scale = max(math.ceil(parts ** (1.0 / depth)), 2)
    return parts <= scale + parts / scale


def profile_spark(df: Any, capacity: int, seed: int, depth: int = 2) -> TableProfile | None:
    """Every column's profile and a uniform sample of at most ``capacity`` rows of the Spark
    DataFrame ``df``, in one Spark job (None for a DataFrame without rows)."""
    columns = list(df.columns)
    keyed = df.selectExpr(*[f"`{c}`" for c in columns], f"rand({int(seed)}) AS `{KEY_COLUMN}`")
    payloads = keyed.mapInArrow(_partition_profiler(columns, capacity), _PAYLOAD_SCHEMA)
    if type(df).__module__.startswith("pyspark.sql.connect") or _one_level(
        payloads.rdd.getNumPartitions(), depth
    ):
        merged: TableProfile | None = None
        for row in payloads.collect():
            merged = _merge(merged, pickle.loads(row[0]))
        return merged
    return payloads.rdd.map(lambda row: row[0]).treeAggregate(  # type: ignore[no-any-return]
        None,
        lambda acc, blob: _merge(acc, pickle.loads(blob)),
        _merge,
        depth=depth,
    )
