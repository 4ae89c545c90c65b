"""Scoring a Spark DataFrame with a fitted model: :func:`add_scores` adds the scorer's columns lazily
through ``mapInArrow`` (what :func:`mixle_spark.scoring.score` calls for a Spark DataFrame); and
:func:`first_nonfinite`, the first row of a handle's encoded data a model cannot score."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame

from mixle_spark.errors import SchemaError
from mixle_spark.parallel.backends._scoring import BatchScorer
from mixle_spark.parallel.backends.spark._common import (
    _check_schema,
    _payload_batch,
    _vector_columns_to_arrays,
    unreadable_cell,
)

__all__ = ["add_scores", "first_nonfinite"]


def add_scores(df: DataFrame, scorer: BatchScorer, column: str | None) -> DataFrame:
    """``df`` with ``scorer``'s columns added lazily through ``mapInArrow``, keeping every input
    column (:func:`mixle_spark.scoring.score`); ML Vector input columns are read as array<double>
    (and returned as such). A bad cell raises naming its partition and its row there."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import ArrayType, DoubleType, IntegerType, StructField, StructType

    encoder = scorer.encoder
    columns = scorer.read_columns(df.columns, column)
    df = _vector_columns_to_arrays(df, columns)
    try:
        _check_schema(df, encoder, columns)
    except SchemaError as err:  # name the first cell that does not read, where there is one
        raise unreadable_cell(df, encoder, columns) or err from None
    spark_types = {pa.float64(): DoubleType(), pa.int32(): IntegerType()}
    added = [
        StructField(
            name,
            spark_types[typ] if typ in spark_types else ArrayType(spark_types[typ.value_type], False),
            scorer.nulls,
        )
        for name, typ in scorer.added
    ]
    out_schema = StructType(list(df.schema.fields) + added)
    arrow_schema = to_arrow_schema(out_schema)

    def partition() -> str:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return "the input" if ctx is None else f"partition {ctx.partitionId()}"

    def score_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        first = 0  # rows of this partition before the batch, so errors name the partition's row
        for batch in batches:
            if batch.num_rows == 0:
                yield pa.RecordBatch.from_pylist([], schema=arrow_schema)
                continue
            enc = scorer.encode(batch, first, partition)
            first += batch.num_rows
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, *scorer.scores(batch, enc)], schema=arrow_schema
            )

    return df.mapInArrow(score_partition, out_schema)


def first_nonfinite(
    read_chunks: Callable[[Iterable[pa.RecordBatch]], Iterator[Any]],
    estimate: Any,
    collect: Callable[[Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]], list[Any]],
) -> tuple[int, float] | None:
    """(global row index, value) of the first row of the encoded data whose log-density under
    ``estimate`` is NaN or infinite (None when there is none): each partition's chunks, decoded by
    ``read_chunks``, are scored by one job (``collect``), which returns each partition's first."""

    def find(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        best: tuple[int, float] | None = None
        for enc, weights, row_ids in read_chunks(batches):
            ll = estimate.seq_log_density(enc)
            bad = ~np.isfinite(ll) & (weights > 0)
            if bad.any():
                ids = row_ids[bad]
                i = int(np.argmin(ids))
                if best is None or int(ids[i]) < best[0]:
                    best = (int(ids[i]), float(ll[bad][i]))
        yield _payload_batch(best)

    found = [f for f in collect(find) if f is not None]
    return min(found) if found else None
