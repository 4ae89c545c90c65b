"""The job path's executor-local copies of the encoded chunks: E-steps fold them and equal the local
backend; a missing or damaged copy falls back to the cached cells with the same result; the copies
go when the handle closes, and nothing else does."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.parallel import LocalEncodedData, encoded_data
from mixle_spark.parallel.backends.spark._chunks import COPIES_ENV, remove_copies
from mixle_spark.stats import (
    CategoricalEstimator,
    GaussianEstimator,
    MixtureEstimator,
    RecordEstimator,
)
from tests.unit._cases import assert_models_close

pytestmark = pytest.mark.spark

EST = MixtureEstimator([RecordEstimator({"x": GaussianEstimator(), "c": CategoricalEstimator()})] * 2)


def _table(n: int = 900) -> pa.Table:
    rng = np.random.default_rng(5)
    z = rng.random(n) < 0.4
    return pa.table(
        {
            "x": np.where(z, rng.normal(-2.0, 1.0, n), rng.normal(3.0, 0.7, n)),
            "c": np.where(z, rng.choice(["a", "b"], n), rng.choice(["b", "c", "d"], n)),
            "w": rng.uniform(0.5, 2.0, n),
        }
    )


def _folder(handle: Any) -> Path:
    (place,) = handle._copies.places  # one local executor
    return Path(place[1]) / f"mixle-chunks-{handle._token}"


@pytest.fixture(scope="module")
def frame(spark: Any) -> Any:
    return spark.createDataFrame(_table()).repartition(3)


@pytest.fixture(scope="module")
def want() -> Any:
    table = _table()
    local = LocalEncodedData(table.select(["x", "c"]), estimator=EST, weights=table.column("w").to_numpy())
    start = local.pysp_seq_initialize(EST, np.random.default_rng(2), 0.5)
    return start, local.pysp_em_step(EST, start)


def _step_equals(handle: Any, want: Any) -> None:
    start, (want_n, want_ll, want_model) = want
    n, ll, model = handle.pysp_em_step(EST, start)
    assert n == pytest.approx(want_n, rel=1e-12)
    assert ll == pytest.approx(want_ll, rel=1e-10)
    assert_models_close(model, want_model)


def test_job_path_folds_the_copies_and_equals_local(frame: Any, want: Any) -> None:
    with encoded_data(frame, EST, weights="w", resident=False, num_chunks=3) as handle:
        assert handle.copies
        files = sorted(_folder(handle).glob("*.chunk"))
        assert len(files) == sum(len(c) for c in handle.chunks.layout.values()) == 3
        assert oct(_folder(handle).stat().st_mode & 0o777) == "0o700"
        _step_equals(handle, want)
        _step_equals(handle, want)
        assert handle.copy_parts == 6  # every partition of both passes came from its copy
        assert [r.part for r in handle.last_parts] == [0, 1, 2]


def test_a_missing_or_damaged_copy_falls_back_to_the_cached_chunks(frame: Any, want: Any) -> None:
    with encoded_data(frame, EST, weights="w", resident=False, num_chunks=3) as handle:
        files = sorted(_folder(handle).glob("*.chunk"))
        files[0].unlink()  # absent
        with open(files[1], "r+b") as f:  # not whole: shorter than its header says
            f.truncate(f.seek(0, os.SEEK_END) - 10)
        _step_equals(handle, want)
        assert handle.copy_parts == 1
        assert [r.part for r in handle.last_parts] == [0, 1, 2]
        # the next passes run where the cached partitions are, and still fall back for those two
        _step_equals(handle, want)
        assert handle.copies and handle.copy_parts == 2
        # a partial pass (the audit's) folds only what it asks for, from copies or cells alike
        start = want[0]
        kept = handle.pysp_partition_payloads(EST, start, [1, 2])
        assert sorted(kept) == [1, 2]
        for f in files:
            f.unlink(missing_ok=True)
        _step_equals(handle, want)  # none found: copies off for this handle, said in the trace
        assert not handle.copies
        assert any("no executor-local copies" in e for e in handle.take_events())
        _step_equals(handle, want)


class _Planted:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (Path(self.marker).write_text, ("unpickled",))  # what an attacker's pickle would run


def test_a_planted_copy_is_never_unpickled(frame: Any, want: Any, tmp_path: Path) -> None:
    from mixle_spark.parallel.backends.spark._chunks import _copy_parts

    marker = tmp_path / "marker"
    with encoded_data(frame, EST, weights="w", resident=False, num_chunks=3) as handle:
        target = sorted(_folder(handle).glob("*.chunk"))[0]
        # the right format and layout, MACs made without the handle's key
        target.write_bytes(b"".join(bytes(p) for p in _copy_parts(bytes(32), _Planted(str(marker)), [])))
        _step_equals(handle, want)  # that partition read from the cached cells instead
        assert handle.copy_parts == 2
    assert not marker.exists()


def _copy_file(tmp_path: Path, key: bytes) -> tuple[Path, Any]:
    from mixle_spark.parallel.backends.spark._chunks import _copy_parts

    chunk = ({"x": np.arange(5.0), "c": np.arange(3, dtype=np.int32)}, None, np.arange(10, 15))
    path = tmp_path / "10.chunk"
    path.write_bytes(b"".join(bytes(p) for p in _copy_parts(key, chunk, [])))
    return path, chunk


def test_a_copy_maps_its_arrays_and_checks_both_macs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from mixle_spark.parallel.backends.spark import _chunks as C

    key = bytes(range(32))
    path, chunk = _copy_file(tmp_path, key)
    got = C._load_copy(str(path), key, [])
    np.testing.assert_array_equal(got[0]["x"], chunk[0]["x"])
    np.testing.assert_array_equal(got[0]["c"], chunk[0]["c"])
    assert got[1] is None and got[0]["c"].dtype == np.int32
    assert not got[0]["x"].flags.writeable  # mapped from the file, not copied
    assert got[0]["x"].ctypes.data % 64 == 0
    with pytest.raises(C.MissingCopy):
        C._load_copy(str(path), bytes(32), [])  # another handle's key
    # a changed number (the pickle stream intact) is caught by the arrays' MAC
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(C.MissingCopy):
        C._load_copy(str(path), key, [])
    # once checked (and older than a second), a later read skips hashing the arrays...
    path, chunk = _copy_file(tmp_path, key)
    later = time.time_ns() + 2_000_000_000
    monkeypatch.setattr(C.time, "time_ns", lambda: later)
    C._load_copy(str(path), key, [])
    assert str(path) in C._VERIFIED
    # ...until the file changes: a write changes its ctime, and the arrays are hashed again
    time.sleep(0.05)  # past the file system's timestamp tick
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    with pytest.raises(C.MissingCopy):
        C._load_copy(str(path), key, [])
    # a truncated file is missing, never read past its end
    path, _chunk = _copy_file(tmp_path, key)
    with open(path, "r+b") as f:
        f.truncate(f.seek(0, os.SEEK_END) - 10)
    with pytest.raises(C.MissingCopy):
        C._load_copy(str(path), key, [])


def test_close_removes_the_copies_and_nothing_else(frame: Any) -> None:
    handle = encoded_data(frame, EST, weights="w", resident=False)
    folder = _folder(handle)
    neighbour = folder.parent / "not-ours.txt"
    neighbour.write_text("keep me")
    try:
        assert folder.is_dir()
        handle.close()
        assert not folder.exists()
        assert neighbour.read_text() == "keep me"
        assert folder.parent.is_dir()  # Spark's own directory stays
    finally:
        neighbour.unlink()


def test_remove_copies_never_follows_a_symlink_or_a_bad_token(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "precious").write_text("x")
    (tmp_path / "mixle-chunks-abc123").symlink_to(target)
    assert remove_copies(str(tmp_path), "abc123") is False
    assert (target / "precious").read_text() == "x"
    with pytest.raises(ValueError, match="token"):
        remove_copies(str(tmp_path), "../elsewhere")


def test_copies_can_be_turned_off(frame: Any, want: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(COPIES_ENV, "0")
    with encoded_data(frame, EST, weights="w", resident=False, num_chunks=3) as handle:
        assert not handle.copies
        assert handle._copies.places  # the places are known, and none holds a copy
        assert not any(
            (Path(root) / f"mixle-chunks-{handle._token}").exists() for _h, root in handle._copies.places
        )
        _step_equals(handle, want)
        assert handle.copy_parts == 0
    monkeypatch.setenv(COPIES_ENV, "1")
    with encoded_data(frame, EST, weights="w", num_chunks=3) as handle:  # resident path: none written
        assert not handle.copies


def test_unbalanced_layouts_are_spread() -> None:
    from mixle_spark.parallel.backends.spark._encoding import unbalanced

    assert unbalanced({0: [(0, 65536), (65536, 65536)], 1: []}, 2)  # one slot would idle
    assert unbalanced({0: [(0, 65536)] * 4, 1: [(9, 100)]}, 2)  # 2x its share
    assert not unbalanced({0: [(0, 65536)] * 2, 1: [(9, 65536)]}, 2)  # within 1.5x
    assert not unbalanced({0: [(0, 100)]}, 2)  # one chunk: nothing to move
    assert not unbalanced({0: [(0, 65536)] * 3}, 0)  # the user's num_chunks: kept


def test_rows_in_one_of_two_partitions_are_spread_over_the_slots(spark: Any) -> None:
    from pyspark.sql import functions as F

    rng = np.random.default_rng(3)
    n = 70_000  # two chunks
    x = np.where(rng.random(n) < 0.5, rng.normal(-2.0, 1.0, n), rng.normal(2.0, 1.0, n))
    est = MixtureEstimator([GaussianEstimator()] * 2)
    df = spark.createDataFrame(pa.table({"x": x})).repartition(2, F.lit(0))  # every row in one partition
    assert sorted(len(p) for p in df.rdd.glom().collect()) == [0, n]
    local = LocalEncodedData(pa.table({"x": x}), estimator=est)
    start = local.pysp_seq_initialize(est, np.random.default_rng(1), 0.2)
    want = local.pysp_em_step(est, start)
    with encoded_data(df, est, resident=False) as handle:
        rows = sorted(sum(r for _f, r in chunks) for chunks in handle.chunks.layout.values())
        assert len(rows) == 2 and rows[0] > 0 and sum(rows) == n
        n_got, ll, model = handle.pysp_em_step(est, start)
        assert sorted(r.rows for r in handle.last_parts) == rows
    assert n_got == want[0]
    assert ll == pytest.approx(want[1], rel=1e-10)
    assert_models_close(model, want[2])


def test_copies_kept_on_another_host_are_removed_by_a_job(frame: Any) -> None:
    handle = encoded_data(frame, EST, weights="w", resident=False)
    folder = _folder(handle)
    (place,) = handle._copies.places
    handle._copies.places = {("another-host", place[1])}  # as if the executor ran elsewhere
    assert folder.is_dir()
    handle.close()  # the driver cannot reach it: a small job over the chunk frame removes it
    assert not folder.exists()


def test_closing_a_handle_without_copies_runs_no_job(frame: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from mixle_spark.parallel.backends.spark._encoding import ChunkFrame

    handle = encoded_data(frame, EST, weights="w", num_chunks=3)  # the resident path keeps no copies
    handle._copies.places = {("another-host", "/nonexistent")}
    monkeypatch.setattr(ChunkFrame, "index", property(lambda self: pytest.fail("close ran a clean-up job")))
    handle.close()


@pytest.mark.parametrize("on_read", [True, False], ids=["rebased-on-read", "rebased-by-a-pass"])
def test_one_pass_encoding_rebases_chunks_of_partial_vocabularies(
    spark: Any, want: Any, on_read: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each input partition holds a range of labels: no partition sees the whole vocabulary, so the
    # chunks written in the encoding pass are re-expressed under the merged one, as they are read
    # (small scans) or by a pass that rewrites them and their copies under a new key; E-steps from
    # the copies and from the cells equal local either way
    from mixle_spark.parallel.backends.spark import _handle as backend

    if not on_read:
        monkeypatch.setattr(backend, "REBASE_ON_READ_BYTES", 0)
    ranged = spark.createDataFrame(_table()).repartitionByRange(3, "c")
    with encoded_data(ranged, EST, weights="w", resident=False) as handle:
        assert handle.one_pass and handle.rebased_chunks >= 2
        assert (handle._rebase_on_read is not None) == on_read
        assert (
            handle.encoder == EST.with_scan(EST.encoder().scan_arrow(_table().select(["x", "c"]))).encoder()
        )
        assert handle.frame.where("rows < 0").count() == 0  # the partitions' reports are not chunks
        _step_equals(handle, want)
        assert handle.copy_parts == handle.num_partitions  # every copy is read (and checks)
        handle.copies = False
        _step_equals(handle, want)
        chunks = list(handle._chunk_reader()(handle.frame.toArrow().to_batches()))
        assert np.sort(np.concatenate([c[2] for c in chunks])).tolist() == list(range(900))  # global ids
        codes = [field for c in chunks for field in c[0] if hasattr(field, "labels")]
        assert len(codes) == len(chunks) and {f.labels for f in codes} == {("a", "b", "c", "d")}


def test_two_handles_over_one_dataframe_keep_their_own_caches(frame: Any, want: Any) -> None:
    # equal plans share one Spark cache entry: without a plan of its own, closing one handle would
    # drop the other's cached chunks, and every later pass of the other would encode again
    from pyspark import StorageLevel

    for resident in (False, None):
        with encoded_data(frame, EST, weights="w", resident=resident) as kept:
            with encoded_data(frame, EST, weights="w", resident=resident) as other:
                assert other.n == kept.n == 900
            cached = kept.chunks.held if kept.chunks.held is not None else kept.frame
            assert cached.storageLevel != StorageLevel(False, False, False, False)
            _step_equals(kept, want)


@pytest.mark.parametrize("fails", [False, True], ids=["check-passes", "check-fails"])
def test_chunk_frame_readers_wait_for_the_one_check(fails: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # the frame's first readers race: the check runs once, and no reader gets the frame before it ends
    import sys
    import threading
    import time

    from mixle_spark.parallel.backends.spark._encoding import ChunkFrame

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(20):
            runs: list[int] = []
            done = threading.Event()

            def check(runs: list[int] = runs, done: threading.Event = done) -> None:
                runs.append(1)
                time.sleep(0.005)  # the job that verifies the chunks
                done.set()
                if fails:
                    raise RuntimeError("partition 1 gave other rows")

            chunks = ChunkFrame("the frame", 2, {}, None, check=check)
            got: list[object] = []

            def read(
                chunks: ChunkFrame = chunks, got: list[object] = got, done: threading.Event = done
            ) -> None:
                try:
                    frame = chunks.frame
                    got.append(frame if done.is_set() else "read before the check ended")
                except RuntimeError as err:
                    got.append(str(err) if done.is_set() else "raised before the check ended")

            readers = [threading.Thread(target=read) for _ in range(4)]
            for t in readers:
                t.start()
            for t in readers:
                t.join()
            assert runs == [1]
            assert got == ["partition 1 gave other rows" if fails else "the frame"] * 4
    finally:
        sys.setswitchinterval(old)
