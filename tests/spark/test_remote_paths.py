"""Outputs on a filesystem that is not the driver's disk, through the Spark session's Hadoop
filesystem, as ``dbfs:/``, ``s3a://`` or ``abfss://`` are on a cluster (issue 51, reproduction 2).

Hadoop's ``viewfs://`` stands in for them: a real non-local scheme served only by the session's Hadoop
configuration (a mount table linking ``viewfs://mixle/lake`` to a temporary folder), so every byte goes
through Hadoop's ``FileSystem`` calls, and the folder shows what a remote store would hold.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mixle_spark._locations import resolve
from mixle_spark.cli.fit import main as fit_main
from mixle_spark.em._checkpoint_store import CheckpointStore
from mixle_spark.em.model_versions import ModelVersions
from mixle_spark.estimation import optimize
from mixle_spark.parallel import Resources
from mixle_spark.report import write_report
from mixle_spark.spec import load_model, save_model
from mixle_spark.stats import GaussianDistribution, GaussianEstimator, MixtureEstimator
from tests._paths import job_module

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "customers_sample.parquet"
SPEC = ROOT / "conf" / "models" / "sample.json"


@pytest.fixture
def lake(spark: Any, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``(URI, folder)``: ``viewfs://mixle/lake`` mounted on a new folder for this test."""
    folder = tmp_path / "lake"
    folder.mkdir()
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set("fs.viewfs.impl.disable.cache", "true")  # each test its own mount table
    conf.set("fs.viewfs.mounttable.mixle.link./lake", folder.as_uri())
    yield "viewfs://mixle/lake", folder
    conf.unset("fs.viewfs.mounttable.mixle.link./lake")


def _sample_job() -> Any:
    return job_module("make_sample_data")


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.name.endswith(".crc"))


def test_models_and_checkpoints_go_through_the_sessions_filesystem(lake: tuple[str, Path]) -> None:
    uri, folder = lake
    assert resolve(f"{uri}/m.json").files is not None and resolve(f"{uri}/m.json").local is None
    model = GaussianDistribution(1.5, 2.0)
    save_model(model, f"{uri}/models/m.json")
    assert load_model(f"{uri}/models/m.json") == model == load_model(folder / "models" / "m.json")
    (folder / "notes.json").write_text("{}")
    with pytest.raises(
        FileExistsError, match=rf"model file {uri}/notes.json exists and is not a mixle_spark"
    ):
        save_model(model, f"{uri}/notes.json", overwrite=True)
    assert (folder / "notes.json").read_text() == "{}"

    data = list(GaussianDistribution(0.0, 1.0).sampler(1).sample(400)) + [5.0 + v for v in range(100)]
    est = MixtureEstimator([GaussianEstimator()] * 2)
    first = optimize(data, est, max_its=4, delta=None, seed=2, checkpoint_dir=f"{uri}/ck", print_iter=0)
    saved = _files(folder / "ck")
    assert saved[-1] == "em-checkpoint-000000004.json" and all(f.startswith("em-checkpoint-") for f in saved)
    again = optimize(data, est, max_its=4, delta=None, seed=2, checkpoint_dir=f"{uri}/ck", print_iter=0)
    assert again.fit_result.resumed_from == 4 and again.to_dict() == first.to_dict()
    CheckpointStore(f"{uri}/ck").clear()
    assert _files(folder / "ck") == []

    write_report(model, f"{uri}/report.html", title="remote")
    assert "<title>remote</title>" in (folder / "report.html").read_text()
    Resources.single_cpu().save(f"{uri}/resources.json")
    assert Resources.from_json((folder / "resources.json").read_text()) == Resources.single_cpu()
    sample = _sample_job()
    assert sample.write_sample(f"{uri}/data/s.parquet", 30, 1).startswith(
        f"wrote 30 rows to {uri}/data/s.parquet"
    )
    assert _files(folder / "data") == ["s.parquet", "s.truth.json"]

    versions = ModelVersions(f"{uri}/versions")
    assert [versions.publish(GaussianDistribution(float(i), 1.0)) for i in range(3)] == [1, 2, 3]
    assert versions.latest()[1].mu == 2.0
    assert _files(folder / "versions") == [f"model-v00000000{i}.json" for i in (1, 2, 3)]


def test_the_fit_job_writes_its_output_checkpoints_and_trace_there(
    lake: tuple[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--output``, a nested ``--checkpoint-dir`` and ``--trace`` as URIs: the files land on that
    filesystem (never in ./viewfs:/...), a re-run replaces the output and keeps the checkpoints, and a
    foreign file there is refused before the fit."""
    uri, folder = lake
    monkeypatch.chdir(folder.parent)  # a URI taken for a local path would land here: ./viewfs:/...
    args = ["--input", str(SAMPLE), "--model", str(SPEC), "--backend", "spark", "--trials", "1",
            "--seed", "7", "--max-its", "2", "--no-statistics", "--quiet", "--output", f"{uri}/out",
            "--checkpoint-dir", f"{uri}/out/_ck", "--trace", f"{uri}/live.jsonl"]  # fmt: skip
    capsys.readouterr()
    assert fit_main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"wrote {uri}/out/model.json, {uri}/out/summary.json and {uri}/out/trace.jsonl" in out
    files = _files(folder)
    assert {"out/model.json", "out/summary.json", "out/trace.jsonl", "live.jsonl"} <= set(files)
    checkpoints = [f for f in files if f.startswith("out/_ck/")]
    assert checkpoints[-1] == "out/_ck/em-checkpoint-000000002.json"
    assert all(f.startswith("out/_ck/em-checkpoint-") for f in checkpoints)
    assert not [f for f in files if "/." in f or f.startswith(".")]  # no staging left behind
    summary = json.loads((folder / "out" / "summary.json").read_text())
    assert summary["format"] == "mixle_spark.fit_summary" and summary["iterations"] == 2
    trace = (folder / "live.jsonl").read_text().splitlines()
    assert json.loads(trace[0])["metadata"]["backend"] == "SparkEncodedData" and len(trace) == 1 + 3

    assert fit_main([*args, "--overwrite"]) == 0  # its own output: replaced; the checkpoints kept
    err = capsys.readouterr().err
    assert f"em_fit: resumed from checkpoint {uri}/out/_ck at iteration 2" in err
    assert _files(folder) == files
    resumed = (folder / "live.jsonl").read_text().splitlines()  # rewritten from the checkpoint there
    assert json.loads(resumed[0]) == json.loads(trace[0]) and len(resumed) == len(trace)
    assert sorted(p.name for p in folder.parent.iterdir()) == ["lake"]  # nothing in ./viewfs:/...
    (folder / "out" / "notes.txt").write_text("mine")
    assert fit_main([*args, "--overwrite"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"em_fit: error: output {uri}/out exists and was not written by em_fit (it holds notes.txt); "
        "choose another --output or remove it yourself"
    ]
    assert (folder / "out" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize(
    "uri", ["dbfs:/mnt/models/a2", "adl://store.azuredatalakestore.net/x"], ids=["no-filesystem", "no-jar"]
)
def test_a_scheme_the_sessions_hadoop_cannot_serve_is_one_line(spark: Any, uri: str) -> None:
    """With a session up: a scheme Hadoop has no filesystem for (dbfs: off Databricks), or one whose
    filesystem's jar is not on the classpath (adl:), is refused like one without a session."""
    from mixle_spark.errors import UnsupportedLocationError

    with pytest.raises(UnsupportedLocationError, match=rf"^--output {uri}: no filesystem here writes"):
        resolve(uri, "--output")
