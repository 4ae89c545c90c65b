"""Structured Streaming: every micro-batch folded into the model once, versions published atomically,
the same model after the driver is killed mid-stream and restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mixle_spark.em.incremental import update
from mixle_spark.em.model_versions import ModelVersions
from mixle_spark.estimation import optimize
from mixle_spark.stats import GaussianEstimator, MixtureEstimator, RecordEstimator

pytestmark = pytest.mark.spark

SCHEMA = "x double, y double"
ESTIMATOR = MixtureEstimator([RecordEstimator({"x": GaussianEstimator(), "y": GaussianEstimator()})] * 3)
FIT_OPTIONS: dict[str, Any] = {"seed": 3, "max_its": 15, "delta": None}
UPDATE_OPTIONS: dict[str, Any] = {"max_its": 3, "decay": 0.9}
FILES, ROWS = 4, 1000
ROOT = Path(__file__).resolve().parents[2]


def _write_batches(directory: Path) -> list[pa.Table]:
    directory.mkdir()
    rng = np.random.default_rng(17)
    centres = np.array([[0.0, 0.0], [5.0, 1.0], [1.0, 6.0]])
    tables = []
    for i in range(FILES):
        points = centres[rng.integers(0, 3, ROWS)] + rng.normal(size=(ROWS, 2)) + 0.1 * i
        table = pa.table({"x": points[:, 0], "y": points[:, 1]})
        path = directory / f"part-{i:03d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # the file source orders by mtime
        tables.append(table)
    return tables


def _by_hand(tables: list[pa.Table]) -> Any:
    """The model the stream should end with: the first batch fitted, each later one folded in."""
    model = optimize(tables[0], ESTIMATOR, keep_statistics=True, print_iter=0, **FIT_OPTIONS)
    for table in tables[1:]:
        model = update(model, table, **UPDATE_OPTIONS)
    return model


def _run(source: Path, output: Path, checkpoint: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("_stream_fit.py")),
            str(source),
            str(output),
            str(checkpoint),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a kill of its group takes the JVM with it, as a driver crash does
    )


def _start(spark: Any, source: Path, output: Path, checkpoint: Path, **options: Any) -> Any:
    """fit_stream over the Parquet files in ``source`` (one a micro-batch), until every one is read."""
    from mixle_spark.streaming import fit_stream

    return fit_stream(
        spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source)),
        ESTIMATOR,
        output=output,
        checkpoint=str(checkpoint),
        fit_options=FIT_OPTIONS,
        trigger={"availableNow": True},
        **{"quiet": True, **UPDATE_OPTIONS, **options},
    )


def _stream_all(spark: Any, root: Path) -> ModelVersions:
    """fit_stream over the Parquet files in ``root/in`` (one a micro-batch) until every one is folded
    in; the versions it published in ``root/models``."""
    _start(spark, root / "in", root / "models", root / "ckpt").awaitTermination()
    return ModelVersions(root / "models")


def test_a_stream_folds_every_batch_once_into_published_versions(spark: Any, tmp_path: Path) -> None:
    from mixle_spark.streaming import fit_stream

    tables = _write_batches(tmp_path / "in")
    versions = _stream_all(spark, tmp_path)
    assert versions.versions() == list(range(1, FILES + 1))
    _version, model = versions.latest()
    stats = model.statistics
    assert (stats.rows, stats.updates, stats.last_batch) == (FILES * ROWS, FILES - 1, FILES - 1)
    _assert_close(model, _by_hand(tables))  # the local backend batch by batch: the same model
    # started again on the same checkpoint: nothing new, nothing folded twice
    again = fit_stream(
        spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(tmp_path / "in")),
        ESTIMATOR,
        output=tmp_path / "models",
        checkpoint=str(tmp_path / "ckpt"),
        trigger={"availableNow": True},
        quiet=True,
        **UPDATE_OPTIONS,
    )
    again.awaitTermination()
    assert versions.versions() == list(range(1, FILES + 1))


def test_a_driver_killed_mid_stream_and_restarted_ends_with_the_same_model(tmp_path: Path) -> None:
    tables = _write_batches(tmp_path / "in")
    want = _by_hand(tables)
    output, checkpoint = tmp_path / "models", tmp_path / "ckpt"
    versions = ModelVersions(output)
    proc = _run(tmp_path / "in", output, checkpoint)
    deadline = time.monotonic() + 300
    while len(versions.versions()) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM, mid-way through the stream
    proc.wait(timeout=60)
    killed_at = versions.versions()
    assert 2 <= len(killed_at) < FILES
    restarted = _run(tmp_path / "in", output, checkpoint)
    _out, err = restarted.communicate(timeout=600)
    assert restarted.returncode == 0, err[-3000:]
    assert versions.versions() == list(range(1, FILES + 1))  # no batch folded twice: one version each
    _version, model = versions.latest()
    assert (model.statistics.rows, model.statistics.updates) == (FILES * ROWS, FILES - 1)
    _assert_close(model, want)


# -- several queries into one versions folder ---------------------------------------------------------
@pytest.fixture(scope="module")
def first_query(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Query A folds files 0 and 1 into ``models`` (two versions); files 2 and 3 wait in ``later`` for
    other queries; ``want`` is the model all four give batch by batch."""
    root = tmp_path_factory.mktemp("queries")
    tables = _write_batches(root / "all")
    (root / "first").mkdir()
    (root / "later").mkdir()
    for i in range(FILES):  # os.replace keeps the times the file source orders by
        os.replace(
            root / "all" / f"part-{i:03d}.parquet",
            root / ("first" if i < 2 else "later") / f"part-{i:03d}.parquet",
        )
    query = _start(spark, root / "first", root / "models", root / "ckpt-a")
    query.awaitTermination()
    return {"root": root, "query_id": str(query.id), "want": _by_hand(tables)}


def test_a_new_query_into_the_versions_of_another_continues_them(
    spark: Any, first_query: dict[str, Any], capfd: pytest.CaptureFixture[str]
) -> None:
    root = first_query["root"]
    versions = ModelVersions(root / "models")
    first = versions.load(2).statistics
    assert (first.last_batch, first.stream.query_id, first.stream.checkpoint) == (
        1,
        first_query["query_id"],
        str(root / "ckpt-a"),
    )
    assert first.stream.source == f"FileSource[{root / 'first'}]"
    capfd.readouterr()
    query = _start(spark, root / "later", root / "models", root / "ckpt-b", quiet=False)
    query.awaitTermination()
    assert versions.versions() == [1, 2, 3, 4]  # its batches 0 and 1 are new rows, not replays
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("mixle_spark stream: ")]
    assert said[0] == (
        f"mixle_spark stream: continuing from version 2 of query {first_query['query_id']} "
        f"(checkpoint {root / 'ckpt-a'}, last batch 1): query {query.id} (checkpoint {root / 'ckpt-b'}) "
        "folds its batches into it from batch 0"
    )
    assert [line.rsplit("; ", 1)[-1] for line in said[1:]] == ["published version 3", "published version 4"]
    stats = versions.load(4).statistics
    assert (stats.rows, stats.updates, stats.last_batch) == (FILES * ROWS, FILES - 1, 1)
    assert (stats.stream.query_id, stats.stream.checkpoint) == (str(query.id), str(root / "ckpt-b"))
    assert stats.weight == pytest.approx(first_query["want"].statistics.weight, rel=1e-12)
    _assert_close(versions.load(4), first_query["want"])  # every row once: as one stream of all four


def test_a_stream_started_from_another_streams_model_folds_its_batches(
    spark: Any, first_query: dict[str, Any]
) -> None:
    root = first_query["root"]
    start = ModelVersions(root / "models").load(2)  # query A's: its last batch is 1
    query = _start(spark, root / "later", root / "models-c", root / "ckpt-c", model=start)
    query.awaitTermination()
    versions = ModelVersions(root / "models-c")
    assert versions.versions() == [1, 2]
    stats = versions.load(2).statistics
    assert (stats.rows, stats.updates, stats.last_batch, stats.stream.query_id) == (
        FILES * ROWS,
        FILES - 1,
        1,
        str(query.id),
    )
    _assert_close(versions.load(2), first_query["want"])


def test_a_damaged_newest_version_stops_the_stream_with_one_line(
    spark: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from pyspark.errors import StreamingQueryException

    (tmp_path / "in").mkdir()
    pq.write_table(
        pa.table({"x": [0.0, 1.0, 5.0], "y": [0.0, 1.0, 5.0]}), tmp_path / "in" / "part-000.parquet"
    )
    (tmp_path / "models").mkdir()
    damaged = tmp_path / "models" / "model-v000000001.json"
    damaged.write_text('{"type": "mixture", "w": [0.5')  # a version cut short
    capfd.readouterr()
    query = _start(spark, tmp_path / "in", tmp_path / "models", tmp_path / "ckpt")
    with pytest.raises(StreamingQueryException, match="restore or remove it"):
        query.awaitTermination()
    errors = [line for line in capfd.readouterr().err.splitlines() if "mixle_spark stream: error:" in line]
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"mixle_spark stream: error: model version {damaged} is not valid JSON: ")
    assert errors[0].endswith("(the stream's newest model: restore or remove it)")
    assert ModelVersions(tmp_path / "models").versions() == [1]  # nothing published over it


def _assert_close(model: Any, want: Any) -> None:
    np.testing.assert_allclose(model.w, want.w, rtol=1e-9)
    for got, exp in zip(model.components, want.components, strict=True):
        for name in ("x", "y"):
            assert got.fields[name].mu == pytest.approx(exp.fields[name].mu, rel=1e-9)
            assert got.fields[name].sigma2 == pytest.approx(exp.fields[name].sigma2, rel=1e-9)


def connect_stream(spark: Any) -> dict[str, Any]:
    """In the Spark Connect child (tests/spark/_connect_fit.py): the stream of
    :func:`test_a_stream_folds_every_batch_once_into_published_versions` through a Connect session,
    whose ``foreachBatch`` runs in a Python process of the server (the model is passed on through the
    versions directory, not the client's memory); the last version as JSON-able data."""
    import shutil
    import tempfile

    from mixle_spark.spec import model_to_dict

    root = Path(tempfile.mkdtemp(prefix="mixle-connect-stream-"))
    try:
        _write_batches(root / "in")
        query = _start(spark, root / "in", root / "models", root / "ckpt")
        query.awaitTermination()
        versions = ModelVersions(root / "models")
        _version, model = versions.latest()
        return {
            "versions": versions.versions(),
            "model": model_to_dict(model),
            "rows": model.statistics.rows,
            "query_id": str(query.id),
            "recorded_query_id": model.statistics.stream.query_id,  # learnt by the server's worker
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def check_connect_stream(out: dict[str, Any], tmp_path: Path) -> None:
    """What :func:`connect_stream` printed equals the local backend batch by batch."""
    from mixle_spark.spec import model_from_dict

    assert out["versions"] == list(range(1, FILES + 1)) and out["rows"] == FILES * ROWS
    assert out["recorded_query_id"] == out["query_id"]
    _assert_close(model_from_dict(out["model"]), _by_hand(_write_batches(tmp_path / "stream")))
