"""infer_spec over a Spark DataFrame: the same choice as over the pandas table it was made from, in
one Spark job (the profiles and samples of the partitions merged by treeAggregate); em_fit
--infer-spec on Spark segments a table nobody wrote a spec for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import adjusted_rand_score

from mixle_spark import infer_spec
from mixle_spark.cli.fit import main
from mixle_spark.spec import load_model
from tests.unit.test_infer_spec import chosen, known_table
from tests.unit.test_infer_spec_job import SEGMENTS, segment_table

pytestmark = pytest.mark.spark


def test_a_spark_dataframe_gets_the_pandas_choice_in_one_job(spark: Any) -> None:
    table, truth = known_table(seed=424242)
    local = infer_spec(table)
    # cached, so that the jobs counted are infer_spec's alone (a repartition's shuffle would be a job
    # of its own under adaptive query execution)
    frame = spark.createDataFrame(table).repartition(5).cache()
    frame.count()
    sc = spark.sparkContext
    sc.setJobGroup("infer-spec", "infer_spec's one pass")
    try:
        remote = infer_spec(frame)
        jobs = sc.statusTracker().getJobIdsForGroup("infer-spec")
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        frame.unpersist()
    assert len(jobs) == 1
    assert chosen(remote) == chosen(local)
    assert remote.spec == local.spec
    assert remote.rows == local.rows == len(table) and remote.sample_rows == len(table)
    assert remote.profile["revenue"] == local.profile["revenue"]
    assert sum(chosen(remote)[name] == want for name, want in truth.items()) >= 9


def test_the_sample_is_bounded_and_the_profile_exact_past_it(spark: Any) -> None:
    table, _ = known_table(seed=99)
    frame = spark.createDataFrame(table).repartition(3)
    remote = infer_spec(frame, sample_rows=2000, seed=5)
    local = infer_spec(table, sample_rows=2000, seed=5)
    assert remote.sample_rows == 2000 and remote.rows == len(table)
    for name in ("visits", "pages", "rating", "member", "channel"):
        assert remote.profile[name] == local.profile[name], name
    assert remote.profile["wait"]["mean"] == pytest.approx(local.profile["wait"]["mean"], rel=1e-12)


def test_em_fit_infer_spec_on_spark_finds_the_segments(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The job's Spark path: the spec inferred in the session's one job, then the mixture fitted."""
    table, segment = segment_table(seed=8231)
    data = tmp_path / "table.parquet"
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), data)
    out = tmp_path / "fit"
    code = main(
        ["--input", str(data), "--infer-spec", "--k", "3:5", "--output", str(out), "--seed", "2", "--quiet"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"] == "spark" and summary["model_selection"]["best_k"] == SEGMENTS
    local = infer_spec(table, seed=2)
    assert summary["inferred_spec"]["spec"] == local.spec
    assert summary["inferred_spec"]["reasons"][-1] == local.reasons[-1]
    model = load_model(out / "model.json")
    assert adjusted_rand_score(segment, model.predict(table)) >= 0.9
