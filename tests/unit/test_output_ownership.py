"""Nothing lost: ``em_fit --overwrite``, the checkpoint directory, the live trace and the staging sweep
replace or delete only what mixle_spark itself wrote, never through a symbolic link or a ``..`` that
leads out of the named path. Every refusal is one line on stderr, exit code 2, and leaves every file
as it was, byte for byte."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mixle_spark.cli import _common as _cli
from mixle_spark.cli.fit import main as fit_main
from tests._paths import dead_pid, snapshot, users_folder

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "customers_sample.parquet"
SPEC = ROOT / "conf" / "models" / "sample.json"
FIT = ("--input", str(SAMPLE), "--model", str(SPEC), "--trials", "1", "--seed", "7", "--max-its", "2")
FIT_FILES = ["model.json", "summary.json", "trace.jsonl"]
ADVICE = "choose another --output or remove it yourself"


def _fit(capsys: pytest.CaptureFixture[str], *args: str, backend: str = "local") -> tuple[int, list[str]]:
    """Run the fit job in this process: its exit code and its stderr lines."""
    capsys.readouterr()
    code = fit_main(["--backend", backend, *FIT, "--quiet", *args])
    return code, capsys.readouterr().err.strip().splitlines()


def _refused(capsys: pytest.CaptureFixture[str], root: Path, *args: str, backend: str = "local") -> str:
    """Run the fit job expecting a refusal: exit code 2, one line on stderr (returned), and every file
    under ``root`` as it was."""
    before = snapshot(root)
    code, lines = _fit(capsys, *args, backend=backend)
    assert code == 2 and len(lines) == 1, lines
    assert snapshot(root) == before
    return lines[0]


def previous_fit(path: Path) -> Path:
    """An output directory as em_fit writes it (the layout and summary.json's format)."""
    path.mkdir(parents=True)
    (path / "model.json").write_text('{"type": "gaussian", "mu": 0.0, "sigma2": 1.0}\n')
    (path / "summary.json").write_text(json.dumps({"format": "mixle_spark.fit_summary", "iterations": 1}))
    (path / "trace.jsonl").write_text('{"metadata": {}}\n')
    return path


# -- em_fit --overwrite -------------------------------------------------------------------------


def test_overwrite_refuses_a_folder_of_other_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = users_folder(tmp_path / "thesis")
    line = _refused(capsys, tmp_path, "--output", str(out), "--overwrite")
    assert line == (
        f"em_fit: error: output {out} exists and was not written by em_fit (it holds notes.txt and sub/); "
        f"{ADVICE}"
    )


def test_overwrite_refuses_a_fit_output_someone_added_a_file_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = previous_fit(tmp_path / "fit")
    (out / "notes.txt").write_text("what I learnt from this fit\n")
    line = _refused(capsys, tmp_path, "--output", str(out), "--overwrite")
    assert line == (
        f"em_fit: error: output {out} exists and was not written by em_fit (it holds notes.txt); {ADVICE}"
    )


def test_overwrite_refuses_a_model_and_summary_of_another_program(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "other"
    out.mkdir()
    (out / "model.json").write_text("{}\n")
    (out / "summary.json").write_text('{"accuracy": 0.93}\n')
    line = _refused(capsys, tmp_path, "--output", str(out), "--overwrite")
    assert line == (
        f"em_fit: error: output {out} exists and was not written by em_fit (its summary.json is not an "
        f"em_fit summary); {ADVICE}"
    )


def test_overwrite_refuses_a_regular_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "thesis.tex"
    out.write_text("\\documentclass{book}\n")
    line = _refused(capsys, tmp_path, "--output", str(out), "--overwrite")
    assert line == (
        f"em_fit: error: output {out} exists and was not written by em_fit (it is a file, not a "
        f"directory); {ADVICE}"
    )


def test_a_symlink_as_the_output_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    thesis = users_folder(tmp_path / "thesis")
    link = tmp_path / "link-to-my-thesis"
    link.symlink_to(thesis)
    before = snapshot(tmp_path)
    for extra in (("--overwrite",), ()):
        code, lines = _fit(capsys, "--output", str(link), *extra)
        assert code == 2
        assert lines == [
            f"em_fit: error: output {link} is a symbolic link (to {thesis}); mixle_spark never writes or "
            "deletes through a link: name the real path"
        ]
        assert snapshot(tmp_path) == before


def test_a_symlink_to_a_previous_fit_is_refused_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fit = previous_fit(tmp_path / "fit")
    link = tmp_path / "latest"
    link.symlink_to(fit)
    before = snapshot(tmp_path)
    code, lines = _fit(capsys, "--output", str(link), "--overwrite")
    assert code == 2 and len(lines) == 1 and f"output {link} is a symbolic link (to {fit})" in lines[0]
    assert snapshot(tmp_path) == before


def test_dot_dot_reaching_the_parent_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = users_folder(tmp_path / "home")
    previous_fit(home / "fit")
    out = home / "fit" / ".."
    line = _refused(capsys, tmp_path, "--output", str(out), "--overwrite")
    assert line == (
        f"em_fit: error: output {out} exists and was not written by em_fit (it holds fit/, notes.txt "
        f"and sub/); {ADVICE}"
    )


def test_dot_dot_after_a_symlink_leading_elsewhere_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    thesis = users_folder(tmp_path / "thesis")
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(thesis / "sub")
    out = work / "link" / ".." / "fit"  # reads as work/fit; the system goes to thesis/fit
    line = _refused(capsys, tmp_path, "--output", str(out), "--overwrite")
    assert line == (
        f"em_fit: error: output {out} leads to {thesis / 'fit'}, not to {work / 'fit'}: a '..' after a "
        "symbolic link leaves the named path; name the real path"
    )


def test_without_overwrite_a_folder_of_other_files_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not "pass --overwrite": passing it would not replace someone's folder either."""
    out = users_folder(tmp_path / "thesis")
    line = _refused(capsys, tmp_path, "--output", str(out))
    assert line == (
        f"em_fit: error: output {out} exists and was not written by em_fit (it holds notes.txt and sub/); "
        f"{ADVICE}"
    )


@pytest.mark.parametrize("backend", ["local", "spark", "dask", "ray"])  # mpi: tests/mpi
def test_every_backend_refuses_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    out = users_folder(tmp_path / "thesis")
    line = _refused(capsys, tmp_path, "--output", str(out), "--overwrite", backend=backend)
    assert line == (
        f"em_fit: error: output {out} exists and was not written by em_fit (it holds notes.txt and sub/); "
        f"{ADVICE}"
    )


def test_a_previous_fit_is_replaced_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fit"
    code, lines = _fit(capsys, "--output", str(out), "--report")
    assert code == 0, lines
    assert sorted(p.name for p in out.iterdir()) == sorted([*FIT_FILES, "report.html"])
    code, lines = _fit(capsys, "--output", str(out), "--overwrite", "--max-its", "3")
    assert code == 0, lines
    assert sorted(p.name for p in out.iterdir()) == FIT_FILES  # the old report went with the old fit
    assert json.loads((out / "summary.json").read_text())["iterations"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["fit"]  # no staging or retired directory left


def test_a_symlinked_parent_directory_is_where_the_output_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A link among the parents (a home on another disk, macOS's /tmp) is followed: the job writes
    and replaces only its own directory inside it."""
    disk = tmp_path / "disk"
    disk.mkdir()
    (tmp_path / "mounted").symlink_to(disk)
    code, lines = _fit(capsys, "--output", str(tmp_path / "mounted" / "fit"))
    assert code == 0, lines
    code, lines = _fit(capsys, "--output", str(tmp_path / "mounted" / "fit"), "--overwrite")
    assert code == 0, lines
    assert sorted(p.name for p in (disk / "fit").iterdir()) == FIT_FILES


# -- --checkpoint-dir ----------------------------------------------------------------------------


def test_a_symlink_as_the_checkpoint_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    thesis = users_folder(tmp_path / "thesis")
    link = tmp_path / "ckpt"
    link.symlink_to(thesis)
    before = snapshot(tmp_path)
    for resume in ((), ("--no-resume",)):
        code, lines = _fit(capsys, "--output", str(tmp_path / "fit"), "--checkpoint-dir", str(link), *resume)
        assert code == 2
        assert lines == [
            f"em_fit: error: checkpoint directory {link} is a symbolic link (to {thesis}); mixle_spark "
            "never writes or deletes through a link: name the real path"
        ]
        assert snapshot(tmp_path) == before


def test_a_checkpoint_directory_reached_through_a_symlink_and_dot_dot_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    thesis = users_folder(tmp_path / "thesis")
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(thesis / "sub")
    ckpt = work / "link" / ".."
    line = _refused(capsys, tmp_path, "--output", str(tmp_path / "fit"), "--checkpoint-dir", str(ckpt))
    assert line == (
        f"em_fit: error: checkpoint directory {ckpt} leads to {thesis}, not to {work}: a '..' after a "
        "symbolic link leaves the named path; name the real path"
    )


def test_checkpoints_touch_only_their_own_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Another file, and a link named like a checkpoint, survive a fit that discards old checkpoints."""
    thesis = users_folder(tmp_path / "thesis")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "README").write_text("checkpoints of the big fit\n")
    (ckpt / "em-checkpoint-000000009.json").symlink_to(thesis / "notes.txt")
    code, lines = _fit(
        capsys, "--output", str(tmp_path / "fit"), "--checkpoint-dir", str(ckpt), "--no-resume"
    )
    assert code == 0, lines
    assert (ckpt / "README").read_text() == "checkpoints of the big fit\n"
    assert os.readlink(ckpt / "em-checkpoint-000000009.json") == str(thesis / "notes.txt")
    assert (thesis / "notes.txt").read_text() == "my thesis, chapter 3\n"
    written = sorted(p.name for p in ckpt.iterdir() if not p.is_symlink() and p.name != "README")
    assert written and all(name.startswith("em-checkpoint-") for name in written)


# -- --trace -------------------------------------------------------------------------------------


def test_trace_refuses_to_replace_a_file_that_is_not_a_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = users_folder(tmp_path / "thesis") / "notes.txt"
    line = _refused(capsys, tmp_path, "--output", str(tmp_path / "fit"), "--trace", str(notes))
    assert line == (
        f"em_fit: error: trace file {notes} exists and was not written by mixle_spark (its first line is "
        "not an EM trace header); choose another --trace or remove it yourself"
    )


def test_trace_refuses_a_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    thesis = users_folder(tmp_path / "thesis")
    link = tmp_path / "trace.jsonl"
    link.symlink_to(thesis / "notes.txt")
    line = _refused(capsys, tmp_path, "--output", str(tmp_path / "fit"), "--trace", str(link))
    assert line == (
        f"em_fit: error: trace file {link} is a symbolic link (to {thesis / 'notes.txt'}); mixle_spark "
        "never writes or deletes through a link: name the real path"
    )


def test_trace_refuses_a_directory_reached_through_a_symlink_and_dot_dot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    thesis = users_folder(tmp_path / "thesis")
    (thesis / "trace.jsonl").write_text('{"metadata": {"mine": true}}\n')
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(thesis / "sub")
    trace = work / "link" / ".." / "trace.jsonl"
    line = _refused(capsys, tmp_path, "--output", str(tmp_path / "fit"), "--trace", str(trace))
    assert line == (
        f"em_fit: error: trace file {trace} leads to {thesis / 'trace.jsonl'}, not to "
        f"{work / 'trace.jsonl'}: a '..' after a symbolic link leaves the named path; name the real path"
    )


def test_a_previous_trace_is_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "live.jsonl"
    for its in ("2", "3"):
        code, lines = _fit(
            capsys, "--output", str(tmp_path / f"fit{its}"), "--trace", str(trace), "--max-its", its
        )
        assert code == 0, lines
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    history = json.loads((tmp_path / "fit3" / "summary.json").read_text())["history"]
    assert "metadata" in records[0]
    assert [r["iteration"] for r in records[1:]] == [h["iteration"] for h in history]  # the last fit's


# -- the staging sweep ---------------------------------------------------------------------------


def _staging(target: Path, kind: str, pid: int) -> Path:
    import socket
    import uuid

    host = socket.gethostname().replace("-", "_") or "host"
    return target.with_name(f".{target.name}.{kind}-{host}-{pid}-{uuid.uuid4().hex}")


@pytest.mark.parametrize("kind", ["tmp", "old"])
def test_the_sweep_never_follows_a_link_named_like_staging(tmp_path: Path, kind: str) -> None:
    thesis = users_folder(tmp_path / "thesis")
    target = tmp_path / "out"
    _staging(target, kind, dead_pid()).symlink_to(thesis)
    before = snapshot(tmp_path)
    assert _cli.sweep_stale(target) == []
    assert snapshot(tmp_path) == before
    assert not target.exists()


def test_the_sweep_leaves_names_that_are_not_its_own(tmp_path: Path) -> None:
    target = tmp_path / "out"
    dead = dead_pid()
    host = _staging(target, "tmp", dead).name.split("-")[1]
    mine = [
        tmp_path / f".out.tmp-{host}-{dead}-notahexid",  # not a staging name
        tmp_path / f".out.new-{host}-{dead}-{'0' * 32}",  # not a kind the jobs use
        tmp_path / f".outx.tmp-{host}-{dead}-{'0' * 32}",  # another output's
        tmp_path / f"out.tmp-{host}-{dead}-{'0' * 32}",  # not hidden
    ]
    for path in mine:
        users_folder(path)
    before = snapshot(tmp_path)
    assert _cli.sweep_stale(target) == []
    assert snapshot(tmp_path) == before


# -- what a table of files is (em_score --backend dask / ray, write_table's Parquet / CSV / JSON) -----


def _directory(path: Path, *names: str) -> Path:
    path.mkdir()
    for name in names:
        (path / name).write_bytes(b"PAR1")
    return path


def test_a_table_mixle_spark_wrote_is_what_its_marker_lists(tmp_path: Path) -> None:
    from mixle_spark._files import TABLE_MARKER, atomic_directory, table_layout

    layout = table_layout("em_score")
    out = tmp_path / "scores"
    with atomic_directory(out, False, layout) as staging:
        (staging / "mine.parquet").write_bytes(b"PAR1")
    marker = json.loads((out / TABLE_MARKER).read_text())
    assert marker["files"] == ["mine.parquet"] and marker["writer"] == "em_score"
    assert layout.foreign(out) is None
    (out / "notes.txt").write_text("mine\n")
    assert layout.foreign(out) == "it holds notes.txt"


@pytest.mark.parametrize(
    "names",
    [
        (  # Spark
            "part-00000-4c1cbd9c-8b7a-4d8c-9a53-1f2e3d4c5b6a-c000.snappy.parquet",
            ".part-00000-4c1cbd9c-8b7a-4d8c-9a53-1f2e3d4c5b6a-c000.snappy.parquet.crc",
            "part-00001-4c1cbd9c-8b7a-4d8c-9a53-1f2e3d4c5b6a-c000.csv.gz",
            "_SUCCESS",
            "._SUCCESS.crc",
        ),
        ("part.0.parquet", "part.1.parquet", "_metadata", "_common_metadata"),  # Dask
        ("0f1e2d3c4b5a69788796a5b4c3d2e1f0_000000_000000-0.parquet",),  # Ray
    ],
    ids=["spark", "dask", "ray"],
)
def test_a_table_an_engine_wrote_before_markers_is_a_table(tmp_path: Path, names: tuple[str, ...]) -> None:
    from mixle_spark._files import table_layout

    assert table_layout("em_score").foreign(_directory(tmp_path / "scores", *names)) is None


@pytest.mark.parametrize(
    ("names", "why"),
    [
        (("part-0.parquet", "part-1.parquet"), "it holds part-0.parquet and part-1.parquet"),  # by hand
        (("part.0.parquet", "customers.parquet"), "it holds customers.parquet"),
        (("part.0.parquet", "a.txt", "b.txt", "c.txt", "d.txt"), "it holds a.txt, b.txt, c.txt and 1 more"),
    ],
)
def test_files_people_named_are_not_a_table(tmp_path: Path, names: tuple[str, ...], why: str) -> None:
    from mixle_spark._files import table_layout

    assert table_layout("em_score").foreign(_directory(tmp_path / "data", *names)) == why


def test_a_subdirectory_or_a_link_is_not_part_of_a_table(tmp_path: Path) -> None:
    from mixle_spark._files import table_layout

    layout = table_layout("em_score")
    table = _directory(tmp_path / "scores", "part.0.parquet")
    (table / "part.1.parquet").symlink_to(users_folder(tmp_path / "thesis") / "notes.txt")
    assert layout.foreign(table) == "it holds part.1.parquet"
    (table / "part.1.parquet").unlink()
    (table / "year=2024").mkdir()
    assert layout.foreign(table) == "it holds year=2024/"


def test_a_delta_table_is_a_directory_with_a_delta_log(tmp_path: Path) -> None:
    from mixle_spark._files import delta_layout

    layout = delta_layout()
    table = _directory(tmp_path / "table", "part-0.parquet", "notes.txt")
    assert layout.foreign(table) == "it holds notes.txt and part-0.parquet"
    (table / "_delta_log").mkdir()
    assert layout.foreign(table) is None
