"""Paths a Databricks user gives and every writer's ownership rule (issue 51, reproductions 2, 4, 5, 6).

- A URI is never a local folder: ``dbfs:/``, ``s3://`` and the rest go through a filesystem that
  serves them, or are refused in one line naming the scheme, before any work; ``file:`` URIs and
  ``dbfs:/`` on a driver with the ``/dbfs`` mount are local.
- Every single-file writer (models, reports, saved resources, the sample data) replaces only its own
  file, never through a link, from a temporary name nobody can predict.
- em_fit checks all its outputs before the fit: nested outputs of the same run are allowed (and kept
  when the output is replaced); a parent that is a file is refused before any data is read.
(The same writers through a real non-local Hadoop filesystem: tests/spark/test_remote_paths.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mixle_spark import _locations
from mixle_spark._locations import resolve
from mixle_spark._outputs import write_file
from mixle_spark.cli.fit import main as fit_main
from mixle_spark.errors import UnsafePathError, UnsupportedLocationError
from mixle_spark.parallel import Resources
from mixle_spark.report import write_report
from mixle_spark.spec import load_model, save_model
from mixle_spark.stats import GaussianDistribution
from tests._paths import snapshot

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "customers_sample.parquet"
SPEC = ROOT / "conf" / "models" / "sample.json"
FIT = ("--input", str(SAMPLE), "--model", str(SPEC), "--trials", "1", "--seed", "7", "--max-its", "2")
MODEL = GaussianDistribution(1.0, 2.0)


def _fit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = fit_main(["--backend", "local", *FIT, "--quiet", *args])
    return code, capsys.readouterr().err.strip().splitlines()


# -- the resolver -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "local"),
    [
        ("out/model.json", "out/model.json"),
        ("file:///tmp/a b/m.json", "/tmp/a b/m.json"),
        ("file:/tmp/m.json", "/tmp/m.json"),
        ("file://localhost/tmp/m.json", "/tmp/m.json"),
        ("/dbfs/mnt/m.json", "/dbfs/mnt/m.json"),
        ("/Volumes/main/default/v/m.json", "/Volumes/main/default/v/m.json"),
    ],
)
def test_local_paths_and_file_uris_are_local(text: str, local: str) -> None:
    assert resolve(text).local == Path(local)


def test_dbfs_is_its_mount_where_the_driver_has_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_locations, "DBFS_MOUNT", str(tmp_path))
    assert resolve("dbfs:/mnt/models/a2").local == tmp_path / "mnt" / "models" / "a2"
    save_model(MODEL, "dbfs:/mnt/models/m.json")
    assert load_model("dbfs:/mnt/models/m.json") == MODEL
    assert load_model(tmp_path / "mnt" / "models" / "m.json") == MODEL


@pytest.mark.parametrize(
    ("text", "scheme"), [("dbfs:/mnt/models/a2", "dbfs"), ("adl://store.azuredatalakestore.net/x", "adl")]
)
def test_a_uri_no_filesystem_here_serves_is_one_line_naming_its_scheme(
    text: str, scheme: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        UnsupportedLocationError, match=rf"^--output {text}: no filesystem here writes '{scheme}:'"
    ):
        resolve(text, "--output")
    with pytest.raises(UnsupportedLocationError, match=rf"model file {text}: no filesystem here writes"):
        save_model(MODEL, text)
    assert list(tmp_path.iterdir()) == []  # never a folder named after the scheme


def test_a_file_uri_naming_another_host_is_refused() -> None:
    with pytest.raises(UnsupportedLocationError, match="expected a local file URI"):
        resolve("file://otherhost/tmp/x", "--output")


def test_em_fit_refuses_an_unreachable_uri_before_reading_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reproduction 2: ``--output dbfs:/...`` once wrote ./dbfs:/mnt/... on the driver's disk."""
    monkeypatch.chdir(tmp_path)
    for flag in ("--output", "--checkpoint-dir", "--trace"):
        args = ["--output", str(tmp_path / "out")] if flag != "--output" else []
        code, lines = _fit(capsys, *args, flag, "dbfs:/mnt/x")
        assert code == 2 and len(lines) == 1, lines
        assert (
            lines[0].startswith("em_fit: error: ")
            and "dbfs:/mnt/x: no filesystem here writes 'dbfs:'" in lines[0]
        )
    assert list(tmp_path.iterdir()) == []


def test_em_fit_writes_a_file_uri_where_it_points(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _fit(capsys, "--output", (tmp_path / "out").as_uri())
    assert code == 0, lines
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "model.json",
        "summary.json",
        "trace.jsonl",
    ]


# -- one file, one owner ----------------------------------------------------------------------------


def test_save_model_replaces_a_model_and_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "m.json"
    save_model(MODEL, target)
    save_model(GaussianDistribution(5.0, 1.0), target, overwrite=True)
    assert load_model(target).mu == 5.0
    thesis = tmp_path / "thesis.txt"
    thesis.write_text("years of work")
    with pytest.raises(
        FileExistsError, match=rf"model file {thesis} exists and is not a mixle_spark model file"
    ):
        save_model(MODEL, thesis, overwrite=True)
    link = tmp_path / "link.json"
    link.symlink_to(thesis)
    with pytest.raises(UnsafePathError, match=r"is a symbolic link"):
        save_model(MODEL, link, overwrite=True)
    assert thesis.read_text() == "years of work"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "m.json", "thesis.txt"]


def test_a_report_replaces_a_report_and_never_writes_through_a_planted_temporary_name(tmp_path: Path) -> None:
    """Reproduction 5: the report's temporary name was ``.NAME.partial-PID``: a link planted there
    redirected the page into a victim file."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    page = tmp_path / "r3.html"
    (tmp_path / f".r3.html.partial-{os.getpid()}").symlink_to(victim)
    write_report(MODEL, page, title="first")
    write_report(MODEL, page, title="second")  # its own earlier report: replaced
    assert "<title>second</title>" in page.read_text() and victim.read_text() == "keep me"
    other = tmp_path / "page.html"
    other.write_text("<html>someone's page</html>")
    before = snapshot(tmp_path)
    with pytest.raises(FileExistsError, match=rf"report {other} exists and is not a mixle_spark report"):
        write_report(MODEL, other)
    assert snapshot(tmp_path) == before


def test_resources_save_replaces_only_saved_resources(tmp_path: Path) -> None:
    path = tmp_path / "resources.json"
    Resources.single_cpu().save(path)
    Resources.single_cpu().save(path, indent=2)
    assert Resources.load(path) == Resources.single_cpu()
    notes = tmp_path / "notes.json"
    notes.write_text('{"todo": []}')
    with pytest.raises(FileExistsError, match=r"does not hold resources saved by mixle_spark"):
        Resources.single_cpu().save(notes)
    assert notes.read_text() == '{"todo": []}'


def test_write_file_refuses_a_directory_and_a_parent_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(FileExistsError, match=r"output .*/d exists and is not a regular file"):
        write_file(tmp_path / "d", "x")
    (tmp_path / "f").write_text("a file")
    with pytest.raises(NotADirectoryError, match=r"output .*/f/sub/x: .*/f is a file, not a directory"):
        write_file(tmp_path / "f" / "sub" / "x", "x")


def _sample_job(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "make_sample_data.py"), "--rows", "40", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_the_sample_data_job_writes_its_own_files_only(tmp_path: Path) -> None:
    """Reproduction 5: ``--output thesis.txt`` overwrote the thesis (also through a link) and wrote
    thesis.truth.json; an existing folder gave a 16-line traceback."""
    (tmp_path / "thesis.txt").write_text("years of work")
    (tmp_path / "link.parquet").symlink_to(tmp_path / "thesis.txt")
    (tmp_path / "folder.parquet").mkdir()
    before = snapshot(tmp_path)
    for name, why in (
        ("thesis.txt", "exists and is not a sample data file written by make_sample_data"),
        ("link.parquet", "is a symbolic link"),
        ("folder.parquet", "exists and is not a regular file"),
    ):
        proc = _sample_job("--output", name, cwd=tmp_path)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith(f"make_sample_data: error: --output {name} ") and why in proc.stderr
    assert snapshot(tmp_path) == before
    first = _sample_job("--output", "s.parquet", cwd=tmp_path)
    again = _sample_job("--output", "s.parquet", cwd=tmp_path)  # its own files: replaced
    assert first.returncode == again.returncode == 0, again.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("s.")) == [
        "s.parquet",
        "s.truth.json",
    ]


# -- em_fit's outputs, checked before the fit -------------------------------------------------------


def test_nested_checkpoints_and_trace_are_the_runs_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reproduction 6: ``--output X --checkpoint-dir X/_checkpoints`` fitted, then refused X."""
    out = tmp_path / "x"
    nested = ("--checkpoint-dir", str(out / "_checkpoints"), "--trace", str(out / "live.jsonl"))
    code, lines = _fit(capsys, "--output", str(out), *nested)
    assert code == 0, lines
    names = sorted(p.name for p in out.iterdir())
    assert names == ["_checkpoints", "live.jsonl", "model.json", "summary.json", "trace.jsonl"]
    checkpoints = sorted(p.name for p in (out / "_checkpoints").iterdir())
    code, lines = _fit(capsys, "--output", str(out), *nested, "--overwrite")  # resumes, replaces, keeps
    assert code == 0 and f"em_fit: resumed from checkpoint {out / '_checkpoints'} at iteration 2" in lines
    assert sorted(p.name for p in out.iterdir()) == names
    assert sorted(p.name for p in (out / "_checkpoints").iterdir()) == checkpoints
    (out / "notes.txt").write_text("mine")
    code, lines = _fit(capsys, "--output", str(out), *nested, "--overwrite")
    assert code == 2 and lines == [
        f"em_fit: error: output {out} exists and was not written by em_fit (it holds notes.txt); "
        "choose another --output or remove it yourself"
    ]


@pytest.mark.parametrize("flag", ["--output", "--checkpoint-dir", "--trace"])
def test_a_parent_that_is_a_file_is_refused_before_the_fit(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("a file")
    bad = str(tmp_path / "file" / "sub")
    args = [flag, bad] if flag == "--output" else ["--output", str(tmp_path / "out"), flag, bad]
    code, lines = _fit(capsys, *args)
    assert code == 2 and len(lines) == 1, lines
    assert f"{tmp_path / 'file'}" in lines[0] and ("is a file" in lines[0] or "not usable" in lines[0]), lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing fitted, nothing written


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere: permissions cannot refuse it")
def test_a_read_only_parent_is_refused_before_the_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    code, lines = _fit(capsys, "--output", str(locked / "out"))
    assert code == 2 and lines == [
        f"em_fit: error: --output {locked / 'out'}: cannot write in {locked} (permission denied)"
    ]


def test_an_ml_stage_is_saved_only_into_an_empty_folder_or_over_a_stage(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from mixle_spark.ml._persistence import check_stage_path

    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "notes.txt").write_text("mine")
    with pytest.raises(
        FileExistsError, match=r"was not saved by a mixle_spark ML writer \(it holds notes.txt\)"
    ):
        check_stage_path(str(tmp_path / "v"))
    (tmp_path / "link").symlink_to(tmp_path / "v")
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        check_stage_path(str(tmp_path / "link"))
    stage = tmp_path / "stage"
    (stage / "metadata").mkdir(parents=True)
    (stage / "model").mkdir()
    check_stage_path(str(stage))  # a stage of ours: overwrite() may replace it
    check_stage_path(str(tmp_path / "new"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "stage", "v"]


@pytest.mark.parametrize("backend", ["dask", "ray"])
def test_em_score_on_an_engine_refuses_a_uri_it_cannot_write_before_any_engine_starts(
    backend: str, tmp_path: Path
) -> None:
    """``dbfs:/x`` (one slash) passed the engines' ``://`` test and became ./dbfs:/x on the driver."""
    save_model(GaussianDistribution(0.0, 1.0), tmp_path / "model.json")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "em_score.py"), "--backend", backend, "--input", str(SAMPLE),
         "--model", str(tmp_path / "model.json"), "--output", "dbfs:/mnt/scores"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode != 0 and proc.stderr.splitlines() == [
        f"em_score: error: ValueError: --output dbfs:/mnt/scores: --backend {backend} writes a directory of "
        "this machine (or a mounted one), moved into place when complete"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json"]


def test_best_of_names_each_trials_trace_beside_a_uri_without_folding_it() -> None:
    from mixle_spark.em.options import FitOptions

    def trial(path: str | Path) -> object:
        return FitOptions(trace_path=path).for_trial(2, 5).trace_path

    assert trial("viewfs://mixle/lake/t.jsonl") == "viewfs://mixle/lake/t.trial-2.jsonl"
    assert trial("dbfs:/runs/t") == "dbfs:/runs/t.trial-2.jsonl"
    assert trial(Path("runs/t.jsonl")) == Path("runs/t.trial-2.jsonl")
