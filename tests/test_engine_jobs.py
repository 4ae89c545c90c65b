"""``em_fit`` / ``em_score --backend dask|ray``: the bundled sample on a local Dask cluster / Ray
runtime writes the model the local backend writes (to round-off: the engines merge partial sums);
scores written as Parquet equal the model's own; an input these backends cannot read, a bad value,
an existing output or a flag of another backend is one error line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from mixle_spark.spec import load_model, save_model
from mixle_spark.stats import CategoricalDistribution, GaussianDistribution, MixtureDistribution
from tests._paths import snapshot, users_folder
from tests.unit._cases import assert_models_close

ROOT = Path(__file__).resolve().parents[1]

ENGINES = [
    pytest.param("dask", "distributed", marks=pytest.mark.dask, id="dask"),
    pytest.param("ray", "ray.data", marks=pytest.mark.ray, id="ray"),
]
DESCRIBED = {"dask": {"workers": 2}, "ray": {"address": "local", "nodes": 1, "cpus": 2}}
"""What summary.json says of the engine a 2-worker sample fit ran on."""


def _job(
    *args: str, job: str = "em_fit", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    quiet = ["--quiet"] if job == "em_fit" else []
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / f"{job}.py"), *quiet, *args],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        env=None if env is None else {**os.environ, **env},
    )


@pytest.mark.parametrize(("engine", "library"), ENGINES)
def test_the_sample_fit_writes_the_local_model(tmp_path: Path, engine: str, library: str) -> None:
    pytest.importorskip(library)
    home = tmp_path / "home"
    home.mkdir()
    scratch = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))  # short: Ray's Unix socket paths are in it
    try:
        env = {"HOME": str(home), "RAY_TMPDIR": str(scratch)}
        run = _job("--backend", engine, "--num-workers", "2", "--output", str(tmp_path / engine), env=env)
        assert run.returncode == 0, run.stderr
        # no credential written for others to read (Ray's ~/.ray/auth_token), no runtime files left
        assert not (home / ".ray").exists() and list(scratch.iterdir()) == []
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    local_run = _job("--backend", "local", "--output", str(tmp_path / "local"))
    assert local_run.returncode == 0, local_run.stderr
    got = load_model(tmp_path / engine / "model.json")
    assert_models_close(got, load_model(tmp_path / "local" / "model.json"), rtol=1e-9)
    summary = json.loads((tmp_path / engine / "summary.json").read_text())
    local_summary = json.loads((tmp_path / "local" / "summary.json").read_text())
    assert summary["rows"] == 5000 and summary["iterations"] == local_summary["iterations"]
    assert summary["log_likelihood"] == pytest.approx(local_summary["log_likelihood"], rel=1e-12)
    assert {key: summary[engine][key] for key in DESCRIBED[engine]} == DESCRIBED[engine]


@pytest.mark.parametrize(("engine", "library"), ENGINES)
def test_a_csv_input_is_refused_in_one_line(tmp_path: Path, engine: str, library: str) -> None:
    pytest.importorskip(library)
    csv = tmp_path / "x.csv"
    csv.write_text("x\n1.0\n2.0\n")
    spec = tmp_path / "model.json"
    spec.write_text(json.dumps({"type": "gaussian"}))
    run = _job(
        "--backend", engine, "--input", str(csv), "--model", str(spec), "--output", str(tmp_path / "out")
    )
    assert run.returncode == 2  # bad input, as for every other backend
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--backend {engine} reads Parquet" in lines[0], run.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("flag", "owner"), [("--dask-scheduler", "dask"), ("--ray-address", "ray")])
def test_an_engine_address_without_its_backend_is_a_usage_error(
    tmp_path: Path, flag: str, owner: str
) -> None:
    run = _job("--backend", "local", flag, "localhost:1", "--output", str(tmp_path / "out"))
    assert run.returncode == 2
    assert f"{flag} only applies to --backend {owner}" in run.stderr


MODEL = MixtureDistribution([GaussianDistribution(-2.0, 1.0), GaussianDistribution(3.0, 0.5)], [0.3, 0.7])


def _scoring_input(tmp_path: Path, bad_row: int | None = None) -> tuple[Path, Path, np.ndarray]:
    """Three Parquet files of 100 rows of ``x`` each (unique values) and the model's JSON."""
    x = np.asarray(MODEL.sampler(3).sample(300), dtype=np.float64)
    if bad_row is not None:
        x[bad_row] = np.nan
    data = tmp_path / "data"
    data.mkdir()
    for part in range(3):
        pq.write_table(pa.table({"x": x[100 * part : 100 * (part + 1)]}), data / f"part-{part}.parquet")
    return data, save_model(MODEL, tmp_path / "model.json"), x


@pytest.fixture
def engine_flags(request: pytest.FixtureRequest, engine: str) -> tuple[str, ...]:
    """How the scoring jobs reach their engine: Dask, a cluster of their own (2 workers); Ray, the
    test session's runtime through ``--ray-address`` (joining a running cluster, as on a real one:
    its token is in this process's environment, which the job inherits), which spares each job
    starting a runtime of its own (5-8 s each; the sample fit above starts one)."""
    if engine == "ray":
        ray = request.getfixturevalue("ray_runtime")
        return ("--backend", "ray", "--ray-address", ray.get_runtime_context().gcs_address)
    return ("--backend", engine, "--num-workers", "2")


def _score(
    flags: tuple[str, ...], data: Path, model: Path, out: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    args = (*flags, "--input", str(data), "--model", str(model))
    return _job(*args, "--output", str(out), *extra, job="em_score")


@pytest.mark.parametrize(("engine", "library"), ENGINES)
def test_em_score_writes_the_models_scores_as_parquet_and_keeps_an_existing_output(
    tmp_path: Path, engine: str, library: str, engine_flags: tuple[str, ...]
) -> None:
    pytest.importorskip(library)
    data, model, x = _scoring_input(tmp_path)
    out = tmp_path / "scores"
    run = _score(engine_flags, data, model, out)
    assert run.returncode == 0, run.stderr
    assert f"wrote 300 rows as Parquet to {out}" in run.stdout
    got = pads.dataset(out, format="parquet").to_table()
    assert got.column_names == ["x", "log_likelihood", "prediction", "probability"]
    got = got.sort_by("x")  # Ray writes its blocks' files in no set order
    order = np.argsort(x)
    np.testing.assert_array_equal(got["x"].to_numpy(), x[order])
    want = MODEL.score_samples(x[order])
    np.testing.assert_allclose(got["log_likelihood"].to_numpy(), want, rtol=1e-12)
    np.testing.assert_array_equal(got["prediction"].to_numpy(), MODEL.predict(x[order]))
    probability = np.stack(got["probability"].to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(probability, MODEL.predict_proba(x[order]), rtol=1e-12, atol=1e-300)
    files = sorted(p.name for p in out.iterdir())
    listed = json.loads((out / "_mixle_spark_files.json").read_text())[
        "files"
    ]  # what --mode overwrite may replace
    assert sorted([*listed, "_mixle_spark_files.json"]) == files
    again = _score(engine_flags, data, model, out)
    assert again.returncode == 2 and again.stderr.strip().splitlines() == [
        f"em_score: error: output {out} exists; pass --mode overwrite to replace it"
    ]
    assert sorted(p.name for p in out.iterdir()) == files  # untouched
    replaced = _score(engine_flags, data, model, out, "--mode", "overwrite")
    assert replaced.returncode == 0, replaced.stderr
    assert pads.dataset(out, format="parquet").count_rows() == 300
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".scores")] == []  # no staging left


@pytest.mark.parametrize(("engine", "library"), ENGINES)
def test_em_score_overwrite_replaces_nothing_em_score_did_not_write(
    tmp_path: Path, engine: str, library: str, engine_flags: tuple[str, ...]
) -> None:
    """A folder of someone's files, a regular file, a link, ``dir/..``, a ``..`` after a link and
    the input's own folder: one line each, exit code 2, every file as it was."""
    pytest.importorskip(library)
    data, model, _ = _scoring_input(tmp_path)
    thesis = users_folder(tmp_path / "thesis")
    link = tmp_path / "link-to-my-thesis"
    link.symlink_to(thesis)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "link").symlink_to(thesis / "sub")
    a_file = tmp_path / "scores.parquet"
    a_file.write_bytes(b"PAR1 not mine to replace")
    escape = tmp_path / "work" / "link" / ".." / "scores"
    advice = "choose another --output or remove it yourself"
    refused = {
        thesis: f"exists and was not written by em_score (it holds notes.txt and sub/); {advice}",
        a_file: f"exists and was not written by em_score (it is a file, not a directory); {advice}",
        link: f"is a symbolic link (to {thesis}); mixle_spark never writes or deletes through a link: "
        "name the real path",
        thesis
        / "sub"
        / "..": f"exists and was not written by em_score (it holds notes.txt and sub/); {advice}",
        escape: f"leads to {thesis / 'scores'}, not to {tmp_path / 'work' / 'scores'}: a '..' after a "
        "symbolic link leaves the named path; name the real path",
        data: "exists and was not written by em_score (it holds part-0.parquet, part-1.parquet and "
        f"part-2.parquet); {advice}",
    }
    before = snapshot(tmp_path)
    for out, why in refused.items():
        run = _score(engine_flags, data, model, out, "--mode", "overwrite")
        assert run.returncode == 2, run.stderr
        assert run.stderr.strip().splitlines() == [f"em_score: error: output {out} {why}"]
        assert snapshot(tmp_path) == before, out


@pytest.mark.parametrize(("engine", "library"), ENGINES)
def test_em_score_names_a_bad_value_in_one_line_and_writes_nothing(
    tmp_path: Path, engine: str, library: str, engine_flags: tuple[str, ...]
) -> None:
    pytest.importorskip(library)
    data, model, _ = _scoring_input(tmp_path, bad_row=150)
    out = tmp_path / "scores"
    run = _score(engine_flags, data, model, out)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "column 'x'" in lines[0] and "got nan" in lines[0], run.stderr
    # Dask: the row of the table. Ray: the row of its block; Ray packs the three 100-row files into
    # blocks in an order of its own, so the bad row (51 of the second file) is 51 + 100 * (files before it)
    where = r"\(row 151 of 300\)$" if engine == "dask" else r"\(row (51|151|251) of a block of the dataset\)$"
    assert re.search(where, lines[0]), lines[0]
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".scores")] == []


@pytest.mark.parametrize(("engine", "library"), ENGINES)
def test_em_score_on_unseen_null_counts_the_rows_it_scored_null(
    tmp_path: Path, engine: str, library: str, engine_flags: tuple[str, ...]
) -> None:
    pytest.importorskip(library)
    data = tmp_path / "labels.parquet"
    pq.write_table(pa.table({"c": ["a", "b", "z", "a", "y"]}), data)
    model = save_model(CategoricalDistribution({"a": 0.75, "b": 0.25}), tmp_path / "model.json")
    out = tmp_path / "scores"
    run = _score(engine_flags, data, model, out, "--on-unseen", "null")
    assert run.returncode == 0, run.stderr
    assert "wrote 5 rows as Parquet" in run.stdout
    assert "; 2 of them hold a label the model has not seen: scored null" in run.stdout
    got = pads.dataset(out, format="parquet").to_table().sort_by("c")
    assert got["c"].to_pylist() == ["a", "a", "b", "y", "z"]
    assert got["log_likelihood"].to_pylist()[3:] == [None, None]
    np.testing.assert_allclose(
        got["log_likelihood"].to_numpy(zero_copy_only=False)[:3], np.log([0.75, 0.75, 0.25])
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--num-workers", "2"), "--num-workers applies to --backend dask and ray"),
        (("--backend", "dask", "--master", "local[2]"), "--master and --conf only apply to --backend spark"),
        (("--backend", "dask", "--ray-address", "auto"), "--ray-address only applies to --backend ray"),
    ],
)
def test_em_score_flags_of_another_backend_are_usage_errors(
    tmp_path: Path, flags: tuple[str, ...], message: str
) -> None:
    run = _job(
        "--input", "x.parquet", "--model", "m.json", "--output", str(tmp_path / "o"), *flags, job="em_score"
    )
    assert run.returncode == 2 and message in run.stderr, run.stderr
