"""Helpers of the ``spark`` backend that run on executors or are shared by its modules: payload
framing, column selection and schema checks, row ids and weights, the DataFrame-only payload merge
(Spark Connect), and what a session can run (its task slots, whether it runs resident tasks)."""

from __future__ import annotations

import math
import operator
import pickle
import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from mixle_spark.errors import FieldError, SchemaError
from mixle_spark.parallel._slots import task_slots
from mixle_spark.parallel.backends._scoring import reader
from mixle_spark.parallel.fold import Payload, merge_payloads
from mixle_spark.stats._validate import unreadable_cells
from mixle_spark.stats.base import Encoder

ROW_ID_COLUMN = "__mixle_mid"
WEIGHT_COLUMN = "__mixle_weight"
_PAYLOAD_SCHEMA = "payload binary"
_SCAN_SCHEMA = "payload binary"
_LOW_BITS = (1 << 33) - 1  # monotonically_increasing_id = (partition index << 33) + offset


def is_spark_connect(df: Any) -> bool:
    """True for a Spark Connect DataFrame (no RDDs, broadcasts or SparkContext)."""
    return type(df).__module__.startswith("pyspark.sql.connect")


def _dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=5)


def _payload_batch(value: Any) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"payload": pa.array([_dumps(value)], pa.binary())})


def _vector_columns_to_arrays(df: DataFrame, columns: list[str]) -> DataFrame:
    """ML Vector columns become array<double> once, at encoding (Arrow cannot carry the UDT cheaply)."""
    try:
        from pyspark.ml.functions import vector_to_array
        from pyspark.ml.linalg import VectorUDT
    except ImportError:  # pragma: no cover - pyspark.ml needs numpy, which we require
        return df
    for name in columns:
        if isinstance(df.schema[name].dataType, VectorUDT):
            df = df.withColumn(name, vector_to_array(F.col(name)))
    return df


def _check_schema(df: DataFrame, encoder: Encoder, columns: list[str]) -> None:
    """Check the Arrow types the columns will arrive as before any job runs."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        schema = to_arrow_schema(df.select(*columns).schema)
    except Exception as err:  # a type Arrow cannot carry
        raise SchemaError(f"columns {columns}: cannot be read through Arrow: {err}") from None
    if encoder.column_names() is not None:
        encoder.check_arrow_type(schema)
        return
    try:
        encoder.check_arrow_type(schema.field(0).type)
    except SchemaError as err:
        raise SchemaError(f"column {columns[0]!r}: {err}") from None


def unreadable_cell(df: DataFrame, encoder: Encoder, columns: list[str]) -> FieldError | None:
    """After the schema check refused a text column where numbers are expected: the first cell of the
    table (in the DataFrame's order) that does not read as a number, located at its row of the table
    with the count of such cells; None when every cell reads (the column's type is then the error).

    One pass over ``columns``, run only on this failure path."""
    read = reader(columns, encoder.column_names() is not None)

    def probe(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        rows, cells, found = 0, 0, None
        for batch in batches:
            try:
                encoder.from_arrow(read(batch))
            except FieldError as err:
                bad = unreadable_cells(err)
                if bad:
                    cells += bad
                    if found is None and err.row is not None:
                        found = err.located(rows + err.row, None)
            rows += batch.num_rows
        ctx = TaskContext.get()
        yield _payload_batch((0 if ctx is None else ctx.partitionId(), rows, cells, found))

    parts = sorted(
        (pickle.loads(r[0]) for r in df.select(*columns).mapInArrow(probe, _PAYLOAD_SCHEMA).collect()),
        key=operator.itemgetter(0),
    )
    n, total = sum(p[1] for p in parts), sum(p[2] for p in parts)
    before = 0
    for _part, rows, _cells, found in parts:
        if found is not None:
            located = found.located(before + found.row, n, total)
            return located if located.path or len(columns) != 1 else located.at(columns[0])
        before += rows
    return None


def _global_ids(mid: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Global row ids (uint64) of input row ids ``mid``: the row's partition's offset plus its
    position there."""
    return (offsets[mid >> 33] + (mid & _LOW_BITS)).astype(np.uint64)


def _weights(batch: pa.RecordBatch, has_weights: bool) -> np.ndarray:
    if has_weights:
        return np.asarray(batch.column(WEIGHT_COLUMN).to_numpy(zero_copy_only=False), dtype=np.float64)
    return np.ones(batch.num_rows)


def _global_row(mid: int, offsets: np.ndarray) -> int:
    part = mid >> 33
    return int(offsets[part]) + (mid & _LOW_BITS) if part < len(offsets) else mid & _LOW_BITS


def _merge_with_dataframes(payloads: DataFrame, factory: Any, parts: int, depth: int) -> Payload | None:
    """Merge payload rows without RDDs: rounds of repartition + mapInArrow, the last rows collected."""

    def merge_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        merged = None
        for batch in batches:
            for blob in batch.column(0).to_pylist():
                merged = merge_payloads(factory, merged, pickle.loads(blob))
        yield _payload_batch(merged)

    scale = max(math.ceil(parts ** (1.0 / depth)), 2)
    frame = payloads
    while parts > scale:
        parts = math.ceil(parts / scale)
        frame = frame.repartition(parts).mapInArrow(merge_partition, _PAYLOAD_SCHEMA)
    merged: Payload | None = None
    for row in frame.collect():
        merged = merge_payloads(factory, merged, pickle.loads(row[0]))
    return merged


EXECUTOR_WAIT = 30.0
"""Seconds a new handle waits for a cluster's first executors before laying out its data."""


def resident_blocker(data: Any) -> str | None:
    """Why this DataFrame's session can never run resident tasks, or None."""
    if is_spark_connect(data):
        return "Spark Connect has no SparkContext for barrier jobs"
    # the session's conf holds the application's settings: one call (getConf() copies them all)
    if str(data.sparkSession.conf.get("spark.dynamicAllocation.enabled", "false")).lower() == "true":
        return "dynamic allocation is on (barrier stages need a fixed set of executors)"
    return None


def slots_for_layout(sc: Any) -> int:
    """Task slots to lay the data out for. A cluster application younger than :data:`EXECUTOR_WAIT`
    seconds may still be registering executors: wait for the first, then until the count has been
    steady for 2 s (at most until the application is EXECUTOR_WAIT old); 0 if none came."""
    slots = task_slots(sc)
    if sc.master.startswith("local"):
        return slots
    settle_by = sc.startTime / 1000.0 + EXECUTOR_WAIT
    steady_since = time.time()
    while time.time() < settle_by and (slots == 0 or time.time() - steady_since < 2.0):
        time.sleep(0.2)
        now = task_slots(sc)
        if now != slots:
            slots, steady_since = now, time.time()
    return slots


def session_parallelism(data: DataFrame) -> int:
    """Tasks the session of ``data`` runs at once: its task slots on a classic session (0 before any
    executor registered), Spark's default parallelism over Spark Connect (the partitions of a range
    without a partition count, counted by one small job: Connect has no SparkContext to ask)."""
    if not is_spark_connect(data):
        return task_slots(data.sparkSession.sparkContext)
    spread = data.sparkSession.range(0, _RANGE_ROWS)
    explain = getattr(spread, "_explain_string", None)  # pyspark's Connect client, no public API
    try:  # the physical plan names the range's splits: one analyze call (~20 ms) instead of a job
        splits = _RANGE_SPLITS.search(explain(mode="simple")) if callable(explain) else None
    except Exception:  # another client or plan: the job counts them
        splits = None
    if splits is not None:
        return int(splits.group(1))
    probe = spread.select(F.spark_partition_id().alias("p"))
    return int(probe.agg(F.countDistinct("p")).collect()[0][0])


_RANGE_ROWS = 1 << 16
_RANGE_SPLITS = re.compile(rf"\bRange \(0, {_RANGE_ROWS}, step=1, splits=(\d+)\)")


_SIZE_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50, "EiB": 2**60}
_COST_SIZE = re.compile(r"sizeInBytes=([0-9.E+]+) ?(B|KiB|MiB|GiB|TiB|PiB|EiB)")


def plan_bytes(frame: DataFrame) -> int | None:
    """The optimizer's estimate of ``frame``'s size in bytes (its plan statistics: a local relation's
    rows, a cached relation's measured size, a file source's bytes, ``spark.sql.defaultSizeInBytes``
    when unknown), or None when it cannot be read. A classic session asks the JVM; under Spark
    Connect the ``cost`` explain string carries it (one analyze call, no job)."""
    try:
        if not is_spark_connect(frame):
            return int(str(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
        explain = getattr(frame, "_explain_string", None)
        found = _COST_SIZE.search(explain(mode="cost")) if callable(explain) else None
        return None if found is None else int(float(found.group(1)) * _SIZE_UNITS[found.group(2)])
    except Exception:  # another client, a plan without statistics: unknown
        return None


def whole_table_task(
    fn: Callable[[pa.Table, dict[str, Any]], Any], options: dict[str, Any]
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``mapInArrow`` over one partition holding all the rows (the selected input columns, with
    their ids): ``fn(table, options)`` over them, the ids dropped, as one pickled payload row,
    ``("ok", result)`` or ``("failed", why)``."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = [b for b in batches if b.num_rows > 0]
        if not got:
            result: Any = ("failed", "no rows")
        else:
            table = pa.Table.from_batches(got).drop_columns([ROW_ID_COLUMN])
            try:
                result = ("ok", fn(table, options))
            except Exception as err:  # the caller runs its passes as usual and meets it there
                result = ("failed", f"{type(err).__name__}: {err}")
        yield _payload_batch(result)

    return run


def _hashable(column: Any, data_type: Any) -> Any:
    """``column`` as Spark's row hash takes it: a map (which ``xxhash64`` refuses) as its JSON."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    def has_map(t: Any) -> bool:
        if isinstance(t, MapType):
            return True
        if isinstance(t, ArrayType):
            return has_map(t.elementType)
        if isinstance(t, StructType):
            return any(has_map(f.dataType) for f in t.fields)
        return False

    return F.to_json(F.array(column)) if has_map(data_type) else column


def content_identity(df: DataFrame) -> str:
    """The digest of a Spark DataFrame's rows, computed by one aggregation where they live (classic
    or Connect): two 64-bit ``xxhash64`` row hashes summed (as a decimal, which cannot overflow) and
    xor-ed, and the row count, with the schema. Row order and partitioning do not change it; any
    changed, added or removed row does. Columns are taken by position (duplicated names work)."""
    import hashlib

    from pyspark.sql.types import DecimalType

    fields = df.schema.fields
    frame = df.toDF(*[f"c{i}" for i in range(len(fields))])
    columns = [_hashable(F.col(f"c{i}"), f.dataType) for i, f in enumerate(fields)] or [F.lit(0)]
    first = F.xxhash64(*columns)
    second = F.xxhash64(F.lit("mixle_spark"), *columns)
    row = frame.agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(first.cast(DecimalType(38, 0))).alias("s"),
        F.bit_xor(second).alias("x"),
    ).first()
    assert row is not None  # an aggregation without grouping has one row
    text = repr((df.schema.simpleString(), int(row["n"]), str(row["s"]), row["x"]))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def same_scan(a: Any, b: Any) -> bool:
    """Whether two scans are the same (so are the encoders made from them): arrays compared by
    value, sets as sets, containers item by item."""
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.shape == b.shape
            and bool(np.array_equal(a, b))
        )
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return type(a) is type(b) and len(a) == len(b) and all(map(same_scan, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_scan(a[k], b[k]) for k in a)
    try:
        return type(a) is type(b) and bool(a == b)
    except (TypeError, ValueError):
        return False
