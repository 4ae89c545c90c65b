"""Decoded partitions kept in a reused Python worker between job-path passes (the spark backend's
``_spark_chunks.cached_chunks``): hits drain the input without decoding it, other frames never hit, the budget
holds, and only a partition read whole is kept."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from mixle_spark.parallel.backends import _spark_chunks as chunks


@pytest.fixture(autouse=True)
def _empty_cache() -> Iterator[None]:
    chunks.clear_worker_cache()
    yield
    chunks.clear_worker_cache()


def _batch(values: list[float], first: int) -> pa.RecordBatch:
    out = io.BytesIO()
    ids = np.arange(first, first + len(values), dtype=np.int64)
    chunks._ChunkPickler(out, []).dump((np.asarray(values), None, ids))
    return pa.RecordBatch.from_pydict(
        {"first": [first], "rows": [len(values)], "chunk": [out.getvalue()]},
        schema=pa.schema([("first", pa.int64()), ("rows", pa.int32()), ("chunk", pa.binary())]),
    )


class _Drained:
    """Input batches that count how many were taken (a hit drains them without decoding)."""

    def __init__(self) -> None:
        self.taken = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in [pa.RecordBatch.from_pydict({"chunk": [b"not a pickle"]})] * 2:
            self.taken += 1
            yield batch


def _values(found: Any) -> list[list[float]]:
    return [enc.tolist() for enc, _w, _ids in found]


PART = [_batch([1.0, 2.0, 3.0], 0), _batch([4.0], 3)]
SIZE = sum(len(b.column("chunk")[0].as_py()) for b in PART)


def test_a_partition_read_whole_is_served_from_memory_the_next_time() -> None:
    first, hit = chunks.cached_chunks(None, "frame-a", 0, iter(PART), budget=10 * SIZE)
    assert not hit and _values(first) == [[1.0, 2.0, 3.0], [4.0]]
    drained = _Drained()
    again, hit = chunks.cached_chunks(None, "frame-a", 0, drained, budget=10 * SIZE)
    got = list(again)
    assert drained.taken == 2  # read to its end (Spark reuses the worker), not decoded
    assert hit and _values(got) == [[1.0, 2.0, 3.0], [4.0]]
    assert [ids.tolist() for _e, _w, ids in got] == [[0, 1, 2], [3]]
    assert all(np.array_equal(w, np.ones(len(ids))) for _e, w, ids in got)


def test_another_frame_or_partition_reads_its_own_input() -> None:
    list(chunks.cached_chunks(None, "frame-a", 0, iter(PART), budget=10 * SIZE)[0])
    for token, part in (("frame-b", 0), ("frame-a", 1)):
        other, hit = chunks.cached_chunks(None, token, part, iter([_batch([9.0], 0)]), budget=10 * SIZE)
        assert not hit and _values(other) == [[9.0]]


def test_a_partition_larger_than_the_budget_is_not_kept() -> None:
    list(chunks.cached_chunks(None, "frame-a", 0, iter(PART), budget=SIZE - 1)[0])
    _again, hit = chunks.cached_chunks(None, "frame-a", 0, iter(PART), budget=SIZE - 1)
    assert not hit


def test_a_new_frame_evicts_older_frames_first_and_the_budget_holds() -> None:
    budget = 2 * SIZE
    list(chunks.cached_chunks(None, "old", 0, iter(PART), budget=budget)[0])
    list(chunks.cached_chunks(None, "new", 0, iter(PART), budget=budget)[0])
    list(chunks.cached_chunks(None, "new", 1, iter(PART), budget=budget)[0])  # "old" makes room
    assert chunks._cache_bytes <= budget
    assert sorted(chunks._cache) == [("new", 0), ("new", 1)]
    assert chunks.cached_chunks(None, "new", 0, _Drained(), budget=budget)[1]
    assert not chunks.cached_chunks(None, "old", 0, iter(PART), budget=budget)[1]


def test_a_partition_not_read_to_its_end_is_not_kept() -> None:
    found, _hit = chunks.cached_chunks(None, "frame-a", 0, iter(PART), budget=10 * SIZE)
    next(found)  # a task that failed after its first chunk
    found.close()
    assert not chunks.cached_chunks(None, "frame-a", 0, iter(PART), budget=10 * SIZE)[1]


@pytest.mark.parametrize(("setting", "expected"), [("12345", 12345), ("0", 0), ("lots", 0), ("-5", 0)])
def test_the_budget_setting(monkeypatch: pytest.MonkeyPatch, setting: str, expected: int) -> None:
    monkeypatch.setenv(chunks.WORKER_CACHE_ENV, setting)
    assert chunks.worker_cache_budget() == expected


def test_the_default_budget_follows_the_python_worker_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(chunks.WORKER_CACHE_ENV, raising=False)
    monkeypatch.setenv("PYSPARK_EXECUTOR_MEMORY_MB", "1024")
    assert chunks.worker_cache_budget() == 256 * 2**20
    monkeypatch.delenv("PYSPARK_EXECUTOR_MEMORY_MB")
    assert 0 < chunks.worker_cache_budget() < 2**40
