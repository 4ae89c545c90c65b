"""Sizing for the planner: a strict byte sizer, data sampling and the row-splitting arithmetic.

:func:`estimate_nbytes` adds up the payload bytes of an object graph: array buffers, Arrow buffers,
8 bytes per Python number, the length of strings. It never guesses: anything it cannot size (a
function, a module, a lock, an open file) raises :class:`UnknownMemoryFootprintError` naming the type
and the attribute path, instead of silently counting 0.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import itertools
import math
import numbers
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

from mixle_spark._frames import frame_engine
from mixle_spark.engines import narrow_encoded
from mixle_spark.errors import MixleError, SchemaError, did_you_mean

if TYPE_CHECKING:
    from mixle_spark.parallel.planning._devices import DeviceSpec, Resources

__all__ = [
    "MemorySized",
    "UnknownMemoryFootprintError",
    "apportion",
    "cap_range",
    "encoded_sample",
    "encoder_for",
    "estimate_nbytes",
    "even_edges",
    "measure_rows",
    "num_components",
    "row_ranges",
    "rows_and_sample",
    "select_columns",
    "shard_bytes",
    "statistic_nbytes",
]

_ARROW_TYPES = (pa.Array, pa.ChunkedArray, pa.Table, pa.RecordBatch, pa.Buffer)
_OPAQUE_TYPES: tuple[type, ...] = (
    types.ModuleType,
    types.GeneratorType,
    types.CoroutineType,
    types.FrameType,
    types.TracebackType,
    io.IOBase,
    type,
)


class UnknownMemoryFootprintError(MixleError, ValueError):
    """An object whose memory footprint cannot be estimated (a callable or an opaque handle)."""


@runtime_checkable
class MemorySized(Protocol):
    """An object that reports its own footprint: :func:`estimate_nbytes` counts
    ``mixle_memory_nbytes()`` (a non-negative int) for it instead of walking its attributes."""

    def mixle_memory_nbytes(self) -> int:
        """The bytes the object holds."""
        ...


def estimate_nbytes(obj: Any) -> int:
    """Estimated payload bytes of ``obj``: what it costs to hold it (or ship it) as data.

    Counts ``ndarray.nbytes`` (object arrays: their elements), Arrow ``nbytes``, 8 bytes per Python
    ``int`` / ``float`` / ``bool`` (16 per ``complex``), ``len`` of ``str`` / ``bytes``, and recurses
    into tuples, lists, sets, dicts (keys and values), NamedTuples, dataclasses and the ``__dict__`` /
    ``__slots__`` of other objects. Containers, arrays and objects are counted once each (by ``id``),
    so shared sub-objects are not double-counted; scalars are counted per occurrence because CPython
    shares equal small numbers between unrelated places. An object may report its own size through a
    ``mixle_memory_nbytes()`` method. Class attributes are not counted.

    Raises
    ------
    UnknownMemoryFootprintError
        For callables (functions, methods, classes, objects defining ``__call__``) and opaque objects
        (modules, locks, files, generators, ...); the message names the type and the attribute path.

    Examples
    --------
    >>> import numpy as np
    >>> estimate_nbytes({"mu": np.zeros(4), "n": 3, "name": "ab"})
    49
    """
    return _Sizer().size(obj, "obj")


class _Sizer:
    def __init__(self) -> None:
        self.seen: set[int] = set()

    def _first_visit(self, obj: Any) -> bool:
        key = id(obj)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def size(self, obj: Any, path: str) -> int:
        scalar = _scalar_nbytes(obj)
        if scalar is not None:
            return scalar
        if not self._first_visit(obj):
            return 0
        custom = getattr(obj, "mixle_memory_nbytes", None)
        if custom is not None and not isinstance(obj, type) and callable(custom):
            return _checked_custom(custom(), obj, path)
        if isinstance(obj, np.ndarray):
            if obj.dtype == object:
                return sum(self.size(v, f"{path}[{i}]") for i, v in enumerate(obj.ravel()))
            return int(obj.nbytes)
        if isinstance(obj, _ARROW_TYPES):
            return int(obj.nbytes) if not isinstance(obj, pa.Buffer) else int(obj.size)
        if isinstance(obj, (bytes, bytearray)):
            return len(obj)
        if isinstance(obj, memoryview):
            return int(obj.nbytes)
        if isinstance(obj, Mapping):
            return sum(self.size(k, f"{path}.<key>") + self.size(v, f"{path}[{k!r}]") for k, v in obj.items())
        if isinstance(obj, (list, tuple, set, frozenset)):
            return sum(self.size(v, f"{path}[{i}]") for i, v in enumerate(obj))
        if isinstance(obj, enum.Enum):
            return self.size(obj.value, f"{path}.value")
        foreign = _foreign_nbytes(obj)
        if foreign is not None:
            return foreign
        if isinstance(obj, _OPAQUE_TYPES) or callable(obj):
            raise _unknown(obj, path, "callables and handles have no data footprint")
        return self._object_nbytes(obj, path)

    def _object_nbytes(self, obj: Any, path: str) -> int:
        names: list[str] = []
        if dataclasses.is_dataclass(obj):
            names = [f.name for f in dataclasses.fields(obj)]
        else:
            names = list(getattr(obj, "__dict__", {}) or {})
            for klass in type(obj).__mro__:
                slots = klass.__dict__.get("__slots__", ())
                names += [slots] if isinstance(slots, str) else [s for s in slots if s not in names]
            names = [n for n in dict.fromkeys(names) if n not in ("__dict__", "__weakref__")]
        if not names and not hasattr(obj, "__dict__"):
            raise _unknown(obj, path, "it exposes neither __dict__ nor __slots__")
        total = 0
        for name in names:
            try:
                value = getattr(obj, name)
            except AttributeError:  # an unset slot holds nothing
                continue
            total += self.size(value, f"{path}.{name}")
        return total


def _scalar_nbytes(obj: Any) -> int | None:
    if obj is None:
        return 0
    if isinstance(obj, np.generic):
        return int(obj.nbytes)
    if isinstance(obj, (bool, int, float)):
        return 8
    if isinstance(obj, complex):
        return 16
    if isinstance(obj, str):
        return len(obj)
    if isinstance(obj, numbers.Number):
        return 8
    return None


def _foreign_nbytes(obj: Any) -> int | None:
    """Sizes of common array types of optional libraries (pandas, torch), read without importing them."""
    module = type(obj).__module__ or ""
    if module.startswith("pandas"):
        usage = getattr(obj, "memory_usage", None)
        if callable(usage):
            used = usage(deep=True)
            return int(used.sum()) if hasattr(used, "sum") else int(used)
    nbytes = getattr(type(obj), "nbytes", None)
    if nbytes is not None and not callable(nbytes):
        value = obj.nbytes
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return int(value)
    return None


def _checked_custom(value: Any, obj: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise UnknownMemoryFootprintError(
            f"{path} ({type(obj).__name__}).mixle_memory_nbytes() must return a non-negative int, "
            f"got {value!r}"
        )
    return int(value)


def _unknown(obj: Any, path: str, why: str) -> UnknownMemoryFootprintError:
    kind = type(obj)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return UnknownMemoryFootprintError(
        f"cannot estimate the memory footprint of {path} (type {name}): {why}; "
        "give it a mixle_memory_nbytes() method or leave it out of the model"
    )


# -- sampling data for plan() -------------------------------------------------------------------


def _as_table(data: Any) -> pa.Table | None:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if (type(data).__module__ or "").startswith("pandas") and type(data).__name__ == "DataFrame":
        return pa.Table.from_pandas(data, preserve_index=False)
    return None


def _vectors_as_arrays(df: Any) -> Any:
    """ML Vector columns as array<double>, as the Spark backend encodes them."""
    try:
        from pyspark.ml.functions import vector_to_array
        from pyspark.ml.linalg import VectorUDT
    except ImportError:  # pragma: no cover - pyspark.ml needs numpy, which we require
        return df
    for field in getattr(getattr(df, "schema", None), "fields", ()):
        if isinstance(field.dataType, VectorUDT):
            df = df.withColumn(field.name, vector_to_array(df[field.name]))
    return df


def rows_and_sample(data: Any, sample_size: int) -> tuple[int, Any, str]:
    """(number of rows, the first ``min(sample_size, n)`` rows, backend name) of ``data``.

    The sample is an Arrow table / array for tabular data (pyspark, pandas, Arrow) and a slice of the
    data otherwise (a list of records, a numpy array).
    """
    engine = frame_engine(data)  # no engine is imported here
    if engine == "spark":
        n = int(data.count())
        head = _vectors_as_arrays(data).limit(sample_size)
        to_arrow = getattr(head, "toArrow", None)
        if callable(to_arrow):
            return n, to_arrow(), "spark"
        return n, pa.Table.from_pandas(head.toPandas(), preserve_index=False), "spark"
    if engine == "dask":  # counted on its cluster; only the sample reaches this process
        n = int(data.map_partitions(len).compute().sum())
        head = data.head(sample_size, npartitions=-1)
        return n, pa.Table.from_pandas(head, preserve_index=False), "dask"
    if engine == "ray":  # counted by Ray (from metadata when it can); only the sample reaches here
        n = int(data.count())
        if n == 0:
            return 0, data.schema().base_schema.empty_table(), "ray"
        return n, data.take_batch(min(sample_size, n), batch_format="pyarrow"), "ray"
    table = _as_table(data)
    if table is not None:
        return table.num_rows, table.slice(0, sample_size), "local"
    if isinstance(data, (pa.Array, pa.ChunkedArray)):
        return len(data), data.slice(0, sample_size), "local"
    try:
        n = len(data)
        return n, data[:sample_size], "local"
    except TypeError:
        raise TypeError(
            "plan data must be a list of records, a numpy array, a pandas DataFrame, a pyarrow Table / "
            "RecordBatch / Array, a pyspark or Dask DataFrame or a Ray Dataset, "
            f"got {type(data).__name__}"
        ) from None


def select_columns(sample: Any, column_names: list[str] | None) -> Any:
    """The part of an Arrow ``sample`` an encoder reads: the named columns of a Record, else the
    single column of a one-column table."""
    if not isinstance(sample, pa.Table):
        return sample
    if column_names is not None:
        missing = [c for c in column_names if c not in sample.column_names]
        if missing:
            hint = did_you_mean(missing, sample.column_names)
            raise SchemaError(
                f"columns {missing} not found{hint}; the data has columns {sample.column_names}"
            )
        return sample.select(column_names)
    if sample.num_columns != 1:
        raise SchemaError(
            f"the model reads one column but the data has {sample.num_columns}: {sample.column_names}; "
            "use a Record model / RecordEstimator to read several columns"
        )
    return sample.column(0)


# -- integer apportionment ----------------------------------------------------------------------


def apportion(weights: np.ndarray, total: int) -> list[int]:
    """Split ``total`` into integer counts proportional to ``weights`` (floor, then top-up by largest
    shortfall ``w - count/total``; the first wins ties)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    counts = np.floor(w * total).astype(np.int64)
    while counts.sum() < total:
        counts[int(np.argmax(w - counts / max(total, 1)))] += 1
    while counts.sum() > total:
        counts[int(np.argmax(counts))] -= 1
    return [int(c) for c in counts]


def even_edges(start: int, stop: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` near-equal contiguous ranges covering ``[start, stop)`` (sizes differ by at most 1)."""
    size = stop - start
    cuts = [start + (i * size) // parts for i in range(parts + 1)]
    return list(itertools.pairwise(cuts))


# -- plan() building blocks ------------------------------------------------------------------


def encoder_for(encoder: Any, model: Any, estimator: Any) -> Any:
    """The explicit encoder, else the model's, else the estimator's (the package-wide order)."""
    if encoder is not None:
        return encoder
    if model is not None and callable(getattr(model, "encoder", None)):
        return model.encoder()
    if estimator is not None and callable(getattr(estimator, "encoder", None)):
        return estimator.encoder()
    return None


def num_components(model: Any, estimator: Any) -> int:
    k = getattr(model, "num_components", None)
    if isinstance(k, int) and not isinstance(k, bool):
        return k
    for attribute in ("estimators", "components"):
        parts = getattr(estimator, attribute, None)
        if isinstance(parts, (list, tuple)):
            return len(parts)
    return 1


def statistic_nbytes(estimator: Any, fallback: int) -> int:
    if estimator is None:
        return fallback
    return estimate_nbytes(estimator.accumulator_factory().make().value())


def measure_rows(
    data: Any, encoder: Any, estimator: Any, explicit: bool, sample_size: int, compute: Any = None
) -> tuple[int, float, str, Any]:
    """(rows, encoded bytes per row measured on a sample, backend, estimator) of ``data``.

    An encoder that needs a vocabulary scan is completed from a scan of the sample, and the returned
    estimator carries that scan (so its statistics are sized for the sample's vocabulary, a lower bound).
    The sample is measured as it is stored at ``compute``'s precision (a
    :class:`~mixle_spark.engines.Compute`; float32 and bfloat16 keep the values of the families that
    narrow in 4 bytes, :func:`~mixle_spark.engines.narrow_encoded`).
    """
    n, encoded, rows, backend, estimator = encoded_sample(
        data, encoder, estimator, explicit, sample_size, compute
    )
    if n == 0:
        return 0, 0.0, backend, estimator
    return n, max(1.0, estimate_nbytes(encoded) / rows), backend, estimator


def encoded_sample(
    data: Any, encoder: Any, estimator: Any, explicit: bool, sample_size: int, compute: Any = None
) -> tuple[int, Any, int, str, Any]:
    """(rows of ``data``, its first ``min(sample_size, n)`` rows encoded (stored at ``compute``'s
    precision), how many, backend, estimator).

    An encoder that needs a vocabulary scan is completed from a scan of the sample (unless it was
    given ``explicit``ly), and the returned estimator carries that scan. No rows: ``encoded`` is None.
    """
    n, sample, backend = rows_and_sample(data, sample_size)
    if n == 0:
        return 0, None, 0, backend, estimator
    arrow = not isinstance(sample, (list, tuple, np.ndarray))
    if arrow:
        sample = select_columns(sample, encoder.column_names())
    scanner = estimator.encoder() if estimator is not None else None
    if scanner is not None and scanner.needs_scan:
        estimator = estimator.with_scan(scanner.scan_arrow(sample) if arrow else scanner.scan(sample))
        if encoder.needs_scan and not explicit:
            encoder = estimator.encoder()
    encoded = encoder.from_arrow(sample) if arrow else encoder.encode(sample)
    return n, narrow_encoded(encoder, encoded, compute), len(sample), backend, estimator


def row_ranges(
    n: int, resources: Resources, num_chunks: int | None
) -> tuple[list[tuple[DeviceSpec, int, int]], str]:
    devices = resources.devices
    weights = np.array([d.throughput for d in devices])
    if n == 0:
        fastest = resources.fastest()
        return [(fastest, 0, 0)], f"no rows: one empty [0:0] shard on the fastest device {fastest.name}"
    if num_chunks is None:
        counts = apportion(weights, n)
        ranges, start = [], 0
        for device, count in zip(devices, counts, strict=True):
            if count:
                ranges.append((device, start, start + count))
                start += count
        shares = ", ".join(f"{d.name} {c}" for d, c in zip(devices, counts, strict=True))
        return ranges, f"{n} rows split across {len(devices)} device(s) in proportion to throughput: {shares}"
    chunks = min(num_chunks, n)
    cycle = [d for d, c in zip(devices, apportion(weights, chunks), strict=True) for _ in range(c)]
    edges = even_edges(0, n, chunks)
    ranges = [(d, a, b) for d, (a, b) in zip(cycle, edges, strict=True)]
    capped = f" (capped from {num_chunks} at one row per chunk)" if chunks < num_chunks else ""
    counts_text = ", ".join(f"{d.name} x{cycle.count(d)}" for d in devices if d in cycle)
    return (
        ranges,
        f"num_chunks={chunks}{capped}: near-equal chunks on the weighted device cycle {counts_text}",
    )


def shard_bytes(rows: int, encoded: float, transient: float, safety: float, fixed: int) -> tuple[int, int]:
    return math.ceil(rows * encoded * safety), math.ceil(rows * transient * safety + fixed)


def cap_range(
    device: DeviceSpec, start: int, stop: int, row_bytes: tuple[float, float], safety: float, fixed: int
) -> tuple[list[tuple[int, int]], str | None]:
    """Split ``[start, stop)`` so each piece fits ``device``; a reason when it split or cannot fit."""
    memory = device.memory_bytes
    size = stop - start
    if memory is None or size == 0:
        return [(start, stop)], None
    if fixed >= memory:
        return [(start, stop)], (
            f"does not fit: device {device.name} needs {fixed} bytes for the model and statistics alone "
            f"(safety factor {safety}) but has {memory}"
        )
    per_row = (row_bytes[0] + row_bytes[1]) * safety
    max_rows = int((memory - fixed) // per_row) if per_row > 0 else size
    while max_rows > 0 and sum(shard_bytes(max_rows, *row_bytes, safety, fixed)) > memory:
        max_rows -= 1
    if max_rows < 1:
        needed = sum(shard_bytes(1, *row_bytes, safety, fixed))
        return [
            (start, stop)
        ], f"does not fit: device {device.name} needs {needed} bytes for one row but has {memory}"
    if size <= max_rows:
        return [(start, stop)], None
    pieces = math.ceil(size / max_rows)
    needed = sum(shard_bytes(size, *row_bytes, safety, fixed))
    return even_edges(start, stop, pieces), (
        f"rows [{start}:{stop}] on {device.name} need {needed} bytes "
        f"> {memory} available: split into {pieces} shards of <= {max_rows} rows"
    )
