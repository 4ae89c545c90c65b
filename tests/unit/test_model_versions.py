"""Model versions: published by several writers at once without a number handed out twice or a file
replaced, killed writers' temporary files swept; which batches a stream folds into whose versions."""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle_spark.em import _store_files
from mixle_spark.em.model_versions import ModelVersions
from mixle_spark.em.statistics import Statistics, StreamIdentity
from mixle_spark.errors import CheckpointStoreError, ModelFormatError
from mixle_spark.estimation import optimize
from mixle_spark.spec import model_from_json, model_to_json
from mixle_spark.stats import GaussianDistribution, GaussianEstimator
from mixle_spark.streaming import _BatchSink, _describe_source, _query_id_of, fold_batch

ROOT = Path(__file__).resolve().parents[2]
HOST = socket.gethostname().replace("-", "_") or "host"

# One writer: waits for the go file, publishes `count` models whose mean encodes (writer, counter),
# prints the version numbers publish returned.
WRITER = r"""
import json, os, sys, time
from mixle_spark.em.model_versions import ModelVersions
from mixle_spark.stats import GaussianDistribution
directory, writer, count, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
versions = ModelVersions(directory)
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.001)
got = [versions.publish(GaussianDistribution(float(writer * 1_000_000 + i), 1.0)) for i in range(count)]
print(json.dumps(got), flush=True)
"""


def _dead_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(proc.stdout)


def _temp(version: int, host: str, pid: int) -> str:
    return f".tmp-model-v{version:09d}-{host}-{pid}-{uuid.uuid4().hex}.json"


# -- publishing ---------------------------------------------------------------------------------------
def test_two_processes_publishing_at_once_get_distinct_versions_and_keep_their_own_files(
    tmp_path: Path,
) -> None:
    directory, go, count = tmp_path / "models", tmp_path / "go", 1000
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(directory), str(w), str(count), str(go)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in (1, 2)
    ]
    for proc in writers:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    go.touch()  # both start publishing at the same moment
    returned = {}
    for w, proc in zip((1, 2), writers, strict=True):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        returned[w] = json.loads(out)
    versions = ModelVersions(directory)
    assert versions.versions() == list(range(1, 2 * count + 1))  # none reused, none lost, no gap
    assert sorted(os.listdir(directory)) == [f"model-v{v:09d}.json" for v in range(1, 2 * count + 1)]
    for w in (1, 2):
        assert returned[w] == sorted(returned[w]) and len(set(returned[w])) == count
        for i, version in enumerate(returned[w]):  # the file holds the model that writer published
            assert versions.load(version).mu == w * 1_000_000 + i
    # the two really raced: each published versions before and after the other's
    assert min(returned[1]) < max(returned[2]) and min(returned[2]) < max(returned[1])


def test_publishing_after_a_version_another_writer_took_is_refused(tmp_path: Path) -> None:
    versions = ModelVersions(tmp_path)
    assert versions.publish(GaussianDistribution(1.0, 1.0)) == 1
    assert versions.publish(GaussianDistribution(2.0, 1.0), after=1) == 2
    with pytest.raises(
        CheckpointStoreError,
        match=r"model version .*model-v000000002\.json was published by another writer after version 1",
    ):
        versions.publish(GaussianDistribution(3.0, 1.0), after=1)
    assert sorted(os.listdir(tmp_path)) == ["model-v000000001.json", "model-v000000002.json"]
    assert versions.load(2).mu == 2.0  # not replaced
    with pytest.raises(TypeError, match="after must be a version number >= 0 or None, got True"):
        versions.publish(GaussianDistribution(3.0, 1.0), after=True)  # type: ignore[arg-type]


def test_a_name_taken_by_a_link_is_skipped_not_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    directory = tmp_path / "models"
    directory.mkdir()
    (directory / "model-v000000001.json").symlink_to(outside)  # not a version (links are not listed)
    versions = ModelVersions(directory)
    assert versions.versions() == []
    assert versions.publish(GaussianDistribution(1.0, 1.0)) == 2  # the link holds the name: the next one
    assert outside.read_text() == "keep me"
    assert versions.versions() == [2]


def test_without_hard_links_a_version_is_created_exclusively(monkeypatch: Any, tmp_path: Path) -> None:
    def no_links(src: str, dst: str) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(_store_files.os, "link", no_links)
    versions = ModelVersions(tmp_path)
    assert versions.publish(GaussianDistribution(1.0, 1.0)) == 1
    (tmp_path / "model-v000000002.json").write_text("another writer's")
    assert versions.publish(GaussianDistribution(3.0, 1.0)) == 3
    assert (tmp_path / "model-v000000002.json").read_text() == "another writer's"
    assert [versions.load(v).mu for v in (1, 3)] == [1.0, 3.0]
    assert sorted(os.listdir(tmp_path)) == [f"model-v00000000{v}.json" for v in (1, 2, 3)]


def test_another_link_error_is_raised_and_leaves_no_temporary_file(monkeypatch: Any, tmp_path: Path) -> None:
    def broken(src: str, dst: str) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(_store_files.os, "link", broken)
    with pytest.raises(OSError, match="Input/output error"):
        ModelVersions(tmp_path).publish(GaussianDistribution(1.0, 1.0))
    assert os.listdir(tmp_path) == []


def test_through_a_pyarrow_filesystem_a_taken_name_is_checked_before_and_after(
    monkeypatch: Any, tmp_path: Path
) -> None:
    from pyarrow.fs import LocalFileSystem

    versions = ModelVersions(str(tmp_path), filesystem=LocalFileSystem())
    assert versions.publish(GaussianDistribution(1.0, 1.0)) == 1
    (tmp_path / "model-v000000002.json").write_text("another writer's")
    assert versions.publish(GaussianDistribution(3.0, 1.0)) == 3  # seen before the write
    real_read = _store_files.ArrowFiles.read
    raced: list[str] = []

    def read_after_a_race(self: Any, name: str) -> bytes:
        if not raced:  # another writer's file replaced ours between the write and the read-back
            raced.append(name)
            return b"another writer's"
        return real_read(self, name)

    monkeypatch.setattr(_store_files.ArrowFiles, "read", read_after_a_race)
    assert versions.publish(GaussianDistribution(5.0, 1.0)) == 5
    assert raced == ["model-v000000004.json"]
    assert versions.load(5).mu == 5.0
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".tmp-")]


# -- stale temporary files ----------------------------------------------------------------------------
def test_a_killed_writers_temporary_file_is_swept_and_nothing_else(tmp_path: Path) -> None:
    dead = _dead_pid()
    outside = tmp_path / "target.json"
    outside.write_text("not a temporary file")
    directory = tmp_path / "models"
    directory.mkdir()
    stale = _temp(3, HOST, dead)
    live = _temp(3, HOST, os.getpid())
    other_host = _temp(3, "elsewhere", dead)
    old_style = f".tmp-model-v000000003-{dead}-{uuid.uuid4().hex}.json"  # no host: whose is unknown
    link = _temp(4, HOST, dead)
    for name in (stale, live, other_host, old_style):
        (directory / name).write_text("{")
    (directory / link).symlink_to(outside)
    versions = ModelVersions(directory)
    assert versions.publish(GaussianDistribution(1.0, 1.0)) == 1
    left = set(os.listdir(directory))
    assert left == {live, other_host, old_style, link, "model-v000000001.json"}
    assert (directory / link).is_symlink() and outside.read_text() == "not a temporary file"


# -- the query a batch belongs to ---------------------------------------------------------------------
QUERY_A = StreamIdentity("11111111-1111-1111-1111-111111111111", "/ck/a", "FileSource[/in/a]")
QUERY_B = StreamIdentity("22222222-2222-2222-2222-222222222222", "/ck/b", "FileSource[/in/b]")


def _rows(seed: int, n: int = 300) -> list[float]:
    return list(np.random.default_rng(seed).normal(2.0 + seed, 1.5, n))


def _fold(versions: ModelVersions, rows: list[float], batch_id: int, stream: Any, **kw: Any) -> Any:
    lines: list[str] = []
    version = fold_batch(rows, batch_id, versions, GaussianEstimator(), stream=stream, out=lines.append, **kw)
    return version, lines


def _check_all_rows_once(model: Any, *batches: list[float]) -> None:
    """A Gaussian's update is its fit on all the rows: each row folded once, and only once."""
    rows = np.concatenate(batches)
    assert model.statistics.rows == len(rows) and model.statistics.weight == pytest.approx(len(rows))
    assert model.mu == pytest.approx(rows.mean(), rel=1e-12)
    assert model.sigma2 == pytest.approx(rows.var(), rel=1e-10)


def test_a_query_skips_its_own_replayed_batch_and_a_new_query_continues(tmp_path: Path) -> None:
    versions = ModelVersions(tmp_path)
    assert _fold(versions, _rows(0), 0, QUERY_A)[0] == 1
    assert _fold(versions, _rows(1), 1, QUERY_A)[0] == 2
    assert _fold(versions, _rows(1), 1, QUERY_A) == (None, ["batch 1: folded already (version 2), skipped"])
    # a new checkpoint: batch ids start again at 0, and are not the same batches
    version, lines = _fold(versions, _rows(2), 0, QUERY_B)
    assert version == 3
    assert lines[0] == (
        f"continuing from version 2 of query {QUERY_A.query_id} (checkpoint /ck/a, last batch 1): "
        f"query {QUERY_B.query_id} (checkpoint /ck/b) folds its batches into it from batch 0"
    )
    assert lines[1].startswith("batch 0: ") and lines[1].endswith("; published version 3")
    assert _fold(versions, _rows(3), 1, QUERY_B)[1][0].startswith("batch 1: ")  # no second notice
    _version, model = versions.latest()
    assert (model.statistics.last_batch, model.statistics.stream, model.statistics.updates) == (1, QUERY_B, 3)
    _check_all_rows_once(model, _rows(0), _rows(1), _rows(2), _rows(3))
    assert versions.load(2).statistics.stream == QUERY_A  # each version records its query


def test_a_version_that_records_no_query_is_continued_never_skipped(tmp_path: Path) -> None:
    fitted = optimize(_rows(0), GaussianEstimator(), keep_statistics=True, print_iter=0)
    stats = fitted.statistics
    fitted.statistics = stats.with_value(stats.value, stats.weight, stats.rows, last_batch=5)  # as before
    versions = ModelVersions(tmp_path)
    legacy = json.loads(model_to_json(fitted))
    assert "stream" not in legacy["statistics"]  # what versions written before queries were recorded hold
    versions.publish(model_from_json(json.dumps(legacy)))
    version, lines = _fold(versions, _rows(1), 0, QUERY_A)
    assert version == 2
    assert lines[0] == (
        f"continuing from version 1 (its query not recorded, last batch 5): query {QUERY_A.query_id} "
        "(checkpoint /ck/a) folds its batches into it from batch 0"
    )
    _check_all_rows_once(versions.load(2), _rows(0), _rows(1))


def test_a_stream_started_from_another_streams_model_folds_its_batches(tmp_path: Path) -> None:
    first = ModelVersions(tmp_path / "a")
    for batch_id in (0, 1, 2):
        _fold(first, _rows(batch_id), batch_id, QUERY_A)
    _version, start = first.latest()
    assert start.statistics.last_batch == 2
    second = ModelVersions(tmp_path / "b")
    version, lines = _fold(second, _rows(3), 0, QUERY_B, model=start)
    assert version == 1
    assert lines[0].startswith(f"continuing from the starting model of query {QUERY_A.query_id} ")
    _check_all_rows_once(second.load(1), _rows(0), _rows(1), _rows(2), _rows(3))
    assert start.statistics.last_batch == 2 and start.statistics.stream == QUERY_A  # the model is untouched
    # without a query nothing is skipped (batch 0 again), and nothing is said about whose versions these are
    version, lines = _fold(second, _rows(4), 0, None)
    assert version == 2 and len(lines) == 1 and lines[0].startswith("batch 0: ")
    _check_all_rows_once(second.load(2), *(_rows(seed) for seed in range(5)))


def test_the_stream_identity_round_trips_and_a_bad_one_is_refused() -> None:
    fitted = optimize(_rows(0), GaussianEstimator(), keep_statistics=True, print_iter=0)
    stats = fitted.statistics.with_value(
        fitted.statistics.value,
        fitted.statistics.weight,
        fitted.statistics.rows,
        last_batch=3,
        stream=QUERY_A,
    )
    data = stats.to_dict()
    assert data["stream"] == {
        "query_id": QUERY_A.query_id,
        "checkpoint": "/ck/a",
        "source": "FileSource[/in/a]",
    }
    back = Statistics.from_dict(json.loads(json.dumps(data)))
    assert (back.stream, back.last_batch) == (QUERY_A, 3)
    data["stream"] = {"query_id": 7, "checkpoint": "/ck/a", "source": "x"}
    with pytest.raises(
        ModelFormatError, match=r"statistics: 'stream' must be an object of strings .* got \{'query_id': 7"
    ):
        Statistics.from_dict(data)


def test_the_query_id_is_read_from_sparks_checkpoint_metadata() -> None:
    assert _query_id_of('{"id":"3bc03580-5cb5-490b-b973-7ca0a4091599"}', "/ck") == (
        "3bc03580-5cb5-490b-b973-7ca0a4091599"
    )
    for text in ("{}", "not json", '{"id": "not-a-uuid"}', "[1]"):
        expected = f"streaming checkpoint /ck: its metadata file holds {text!r}, expected Spark's"
        with pytest.raises(CheckpointStoreError, match=re.escape(expected)):
            _query_id_of(text, "/ck")


def test_the_source_is_described_as_sparks_plan_names_it() -> None:
    class Plan:
        def __init__(self, text: str) -> None:
            self.text = text

        def explain(self) -> None:
            print(self.text)

    plan = "== Physical Plan ==\n*(1) Filter (x#0 > 1.0)\n+- StreamingRelation FileSource[/data/in], [x#0]\n"
    assert _describe_source(Plan(plan)) == "FileSource[/data/in]"
    assert _describe_source(Plan("== Physical Plan ==\nSomethingElse x\n")) == "SomethingElse x"


def test_a_damaged_newest_version_stops_the_sink_with_one_line(capsys: Any, tmp_path: Path) -> None:
    versions = ModelVersions(tmp_path)
    versions.publish(GaussianDistribution(1.0, 1.0))
    path = tmp_path / "model-v000000001.json"
    path.write_bytes(path.read_bytes()[:20])  # truncated
    sink = _BatchSink(
        versions,
        GaussianEstimator(),
        checkpoint="/ck/a",
        source="FileSource[/in/a]",
        model=None,
        fit_options=None,
        update_options={},
        quiet=True,
    )
    sink.stream = QUERY_A  # as learnt from the first batch
    with pytest.raises(ModelFormatError, match="restore or remove it"):
        sink(_rows(0), 0)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"mixle_spark stream: error: model version {path} is not valid JSON"
    )
    assert err[0].endswith("(the stream's newest model: restore or remove it)")
