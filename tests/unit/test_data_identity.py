"""A checkpoint knows its data: other data with the same row count is never resumed from it.

Issue 51's first reproduction: yesterday's checkpoint folder, today's table of the same size, and
yesterday's model published as today's with exit code 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mixle_spark._identity import content_digest, path_digest
from mixle_spark.em._checkpoint_store import CheckpointStore
from mixle_spark.errors import CheckpointMismatchError
from mixle_spark.estimation import best_of, optimize
from mixle_spark.parallel import encoded_data
from mixle_spark.parallel.backends.registry import data_identity
from mixle_spark.spec import load_model
from mixle_spark.stats import GaussianEstimator, MixtureEstimator, RecordEstimator

ROOT = Path(__file__).resolve().parents[2]


def _day(centres: tuple[float, float], seed: int = 0, n: int = 3000) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    half = n // 2
    return pd.DataFrame({"x": np.r_[rng.normal(centres[0], 1, half), rng.normal(centres[1], 1, n - half)]})


def _estimator() -> MixtureEstimator:
    return MixtureEstimator([RecordEstimator({"x": GaussianEstimator()})] * 2)


def _means(model) -> list[float]:
    return sorted(round(c.fields["x"].mu) for c in model.components)


# -- the digests ------------------------------------------------------------------------------------


def test_content_digest_sees_every_value_and_no_order() -> None:
    frame = _day((8.0, 0.0))
    digest = content_digest(frame)
    assert content_digest(frame.sample(frac=1.0, random_state=3)) == digest  # the same rows, shuffled
    assert content_digest(pa.Table.from_pandas(frame, preserve_index=False)) == digest  # pandas = arrow
    changed = frame.copy()
    changed.loc[1234, "x"] = np.nextafter(changed.loc[1234, "x"], np.inf)  # one ulp in one row
    assert content_digest(changed) != digest
    duplicated = pd.concat([frame.iloc[:-2], frame.iloc[:2]])  # two rows swapped for copies of others
    assert len(duplicated) == len(frame) and content_digest(duplicated) != digest
    assert content_digest(frame.rename(columns={"x": "y"})) != digest  # a record model reads by name
    assert content_digest(frame.astype({"x": "float32"})) != digest
    assert content_digest(frame, weights=np.ones(len(frame))) != content_digest(
        frame, weights=np.full(3000, 2.0)
    )


def test_content_digest_of_arrays_lists_and_nested_cells() -> None:
    x = np.arange(12.0).reshape(6, 2)
    assert content_digest(x) == content_digest(x[::-1].copy())
    assert content_digest(x) != content_digest(x.reshape(3, 4))
    records = [{"a": 1.0, "b": "u"}, {"a": 2.0, "b": "v"}]
    assert content_digest(records) == content_digest([dict(r) for r in records])
    assert content_digest(records) != content_digest([records[0], {"a": 2.0, "b": "w"}])
    lists = pa.table({"seq": [[1, 2], [3], []], "v": [[0.5, 1.5], [2.0], [1.0, 1.0]]})
    other = pa.table({"seq": [[1, 2], [3], [4]], "v": [[0.5, 1.5], [2.0], [1.0, 1.0]]})
    assert content_digest(lists) != content_digest(other)


def test_path_digest_follows_the_files(tmp_path: Path) -> None:
    table = tmp_path / "t"
    table.mkdir()
    pq.write_table(pa.table({"x": [1.0, 2.0]}), table / "part-0.parquet")
    first = path_digest(table)
    assert path_digest(table) == first
    time.sleep(0.01)
    pq.write_table(pa.table({"x": [1.0, 3.0]}), table / "part-0.parquet")  # same size, rewritten
    second = path_digest(table)
    assert second != first
    (table / "_delta_log").mkdir()
    (table / "_delta_log" / "00000000000000000001.json").write_text("{}")  # a new commit
    assert path_digest(table) != second


def test_a_handle_is_known_by_the_data_it_was_encoded_from() -> None:
    frame = _day((8.0, 0.0))
    handle = encoded_data(frame, _estimator())
    try:
        assert data_identity(handle) == content_digest(frame) == data_identity(frame)
    finally:
        handle.close()


# -- checkpoints ------------------------------------------------------------------------------------


def test_same_size_other_data_is_refused_by_default_and_refitted_on_request(tmp_path: Path) -> None:
    day1, day2 = _day((8.0, 0.0)), _day((100.0, 300.0), seed=1)
    ckpt = tmp_path / "ck"
    first = optimize(day1, _estimator(), max_its=30, seed=1, checkpoint_dir=ckpt)
    assert _means(first) == [0, 8]
    with pytest.raises(
        CheckpointMismatchError, match=r"different fit \(the data differs \(its content digest\)\)"
    ):
        optimize(day2, _estimator(), max_its=30, seed=1, checkpoint_dir=ckpt)
    refit = optimize(day2, _estimator(), max_its=30, seed=1, checkpoint_dir=ckpt, on_other_data="refit")
    fresh = optimize(day2, _estimator(), max_its=30, seed=1)
    assert _means(refit) == [100, 300] and refit.to_dict() == fresh.to_dict()
    assert refit.fit_result.resumed_from is None
    assert refit.fit_result.checkpoint_refit == "the data differs (its content digest)"
    saved = CheckpointStore(ckpt).latest()[1]
    assert saved["fingerprint"]["data"] == content_digest(day2)  # day 2's checkpoints replaced day 1's
    again = optimize(day2, _estimator(), max_its=30, seed=1, checkpoint_dir=ckpt, on_other_data="refit")
    assert again.fit_result.resumed_from is not None and again.fit_result.checkpoint_refit is None
    assert again.fit_result.resumed_written_at == saved["written_at"]
    assert again.to_dict() == refit.to_dict()


def test_an_array_changed_in_place_with_its_length_kept_is_other_data(tmp_path: Path) -> None:
    data = np.random.default_rng(4).normal(size=2000)
    est = MixtureEstimator([GaussianEstimator()] * 2)
    ckpt = tmp_path / "ck"
    optimize(data, est, max_its=5, delta=None, seed=1, checkpoint_dir=ckpt)
    data[:1000] += 50.0  # the same array object, the same length
    with pytest.raises(CheckpointMismatchError, match="the data differs"):
        optimize(data, est, max_its=5, delta=None, seed=1, checkpoint_dir=ckpt)


def test_settings_that_differ_still_raise_with_refit(tmp_path: Path) -> None:
    """Refitting is for other data only: a checkpoint of another fit's settings is still an error."""
    day1 = _day((8.0, 0.0))
    ckpt = tmp_path / "ck"
    optimize(day1, _estimator(), max_its=3, delta=None, seed=1, checkpoint_dir=ckpt)
    with pytest.raises(CheckpointMismatchError, match=r"the seed: checkpoint 1, now 2"):
        optimize(
            day1, _estimator(), max_its=3, delta=None, seed=2, checkpoint_dir=ckpt, on_other_data="refit"
        )


def test_a_checkpoint_without_a_data_digest_is_never_resumed_on_faith(tmp_path: Path) -> None:
    day1 = _day((8.0, 0.0))
    ckpt = tmp_path / "ck"
    optimize(day1, _estimator(), max_its=3, delta=None, seed=1, checkpoint_dir=ckpt)
    store = CheckpointStore(ckpt)
    iteration, state = store.latest()
    del state["fingerprint"]["data"]  # as an earlier release wrote it
    store.save(iteration, state)
    with pytest.raises(
        CheckpointMismatchError, match=r"does not record which \(written before data digests\)"
    ):
        optimize(day1, _estimator(), max_its=3, delta=None, seed=1, checkpoint_dir=ckpt)
    refit = optimize(
        day1, _estimator(), max_its=3, delta=None, seed=1, checkpoint_dir=ckpt, on_other_data="refit"
    )
    assert refit.fit_result.checkpoint_refit is not None and refit.fit_result.resumed_from is None


def test_best_of_trials_know_their_data(tmp_path: Path) -> None:
    day1, day2 = _day((8.0, 0.0)), _day((100.0, 300.0), seed=1)
    ckpt = tmp_path / "ck"
    best_of(day1, _estimator(), trials=2, max_its=10, seed=1, checkpoint_dir=ckpt)
    _ll, model = best_of(
        day2, _estimator(), trials=2, max_its=10, seed=1, checkpoint_dir=ckpt, on_other_data="refit"
    )
    assert _means(model) == [100, 300] and model.fit_result.checkpoint_refit is not None


def test_bad_on_other_data_is_refused() -> None:
    with pytest.raises(ValueError, match=r"on_other_data must be one of .*'refit'.*got 'resume'"):
        optimize(_day((0.0, 1.0)), _estimator(), on_other_data="resume")


# -- the job ----------------------------------------------------------------------------------------


def _job(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "em_fit.py"), "--backend", "local", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_the_daily_job_fits_todays_data_and_says_so(tmp_path: Path) -> None:
    """day 1 then day 2 (same size) into one checkpoint folder: day 2's model, one line saying why;
    day 2 again: resumed from its finished checkpoint, and the summary says when that was written."""
    spec = tmp_path / "g2.json"
    component = {"type": "record", "fields": {"x": {"type": "gaussian"}}}
    spec.write_text(
        json.dumps({"estimator": {"type": "mixture", "k": 2, "component": component}, "fit": {"seed": 1}})
    )
    for name, centres in (("day1", (8.0, 0.0)), ("day2", (100.0, 300.0))):
        pq.write_table(
            pa.Table.from_pandas(_day(centres, seed=len(name)), preserve_index=False),
            tmp_path / f"{name}.parquet",
        )
    base = ("--model", str(spec), "--checkpoint-dir", str(tmp_path / "ck"), "--quiet")
    one = _job(*base, "--input", str(tmp_path / "day1.parquet"), "--output", str(tmp_path / "o1"))
    assert one.returncode == 0, one.stderr
    two = _job(*base, "--input", str(tmp_path / "day2.parquet"), "--output", str(tmp_path / "o2"))
    assert two.returncode == 0, two.stderr
    assert _means(load_model(tmp_path / "o2" / "model.json")) == [100, 300]
    notes = [line for line in two.stderr.splitlines() if "checkpoint" in line]
    assert notes == [
        f"em_fit: checkpoint {tmp_path / 'ck'} held this fit on other data (the data differs (its content "
        "digest)): fitted afresh"
    ]
    long_fit = json.loads((tmp_path / "o2" / "summary.json").read_text())["long_fit"]
    assert long_fit["checkpoint_refit"] == "the data differs (its content digest)"
    assert long_fit["resumed_from_iteration"] is None
    three = _job(*base, "--input", str(tmp_path / "day2.parquet"), "--output", str(tmp_path / "o3"))
    assert three.returncode == 0, three.stderr
    long_fit = json.loads((tmp_path / "o3" / "summary.json").read_text())["long_fit"]
    assert long_fit["resumed_from_iteration"] is not None and long_fit["checkpoint_refit"] is None
    assert long_fit["resumed_checkpoint_written_at"].startswith(time.strftime("%Y-", time.gmtime()))
    assert (tmp_path / "o3" / "model.json").read_text() == (tmp_path / "o2" / "model.json").read_text()
    loud = _job(*base[:-1], "--input", str(tmp_path / "day2.parquet"), "--output", str(tmp_path / "o4"))
    written = long_fit["resumed_checkpoint_written_at"]
    assert f"em_fit: the checkpoint resumed from was written {written}" in loud.stderr.splitlines(), (
        loud.stderr
    )
