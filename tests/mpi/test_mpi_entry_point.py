"""``python -m mixle_spark.cli.fit --backend mpi`` under ``mpiexec -n 2`` (launched from a plain pytest run),
and the error a missing mpi4py gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mixle_spark.estimation import optimize
from mixle_spark.spec import load_model, load_spec
from tests.mpi._launch import launcher, mpiexec

ROOT = Path(__file__).resolve().parents[2]
SPEC = {
    "estimator": {
        "type": "mixture",
        "k": 2,
        "component": {
            "type": "record",
            "fields": {
                "amount": {"type": "log_gaussian"},
                "channel": {"type": "categorical", "pseudo_count": 0.5},
                "n_items": {"type": "poisson"},
            },
        },
    },
    "fit": {"max_its": 30, "delta": 1e-8, "seed": 1},
}


def _table(n: int = 800) -> pa.Table:
    rng = np.random.default_rng(3)
    z = rng.integers(0, 2, n)
    return pa.table(
        {
            "amount": np.exp(rng.normal(np.where(z == 0, 1.0, 3.0), 0.4)),
            "channel": np.where(z == 0, rng.choice(["web", "app"], n), rng.choice(["store", "app"], n)),
            "n_items": rng.poisson(np.where(z == 0, 2.0, 6.0)),
        }
    )


def _run(tmp_path: Path, *args: str, ranks: int = 2) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = [
        str(mpiexec()),
        "-n",
        str(ranks),
        sys.executable,
        "-m",
        "mixle_spark.cli.fit",
        "--backend",
        "mpi",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)


@pytest.mark.mpi
@launcher
def test_entry_point_fits_like_the_local_backend(tmp_path: Path) -> None:
    table = _table()
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    pq.write_table(table.slice(0, 300), data_dir / "a.parquet", row_group_size=100)
    pq.write_table(table.slice(300), data_dir / "b.parquet")
    (tmp_path / "spec.json").write_text(json.dumps(SPEC))
    out = tmp_path / "fit"
    done = _run(
        tmp_path, "--input", str(data_dir), "--model", "spec.json", "--output", str(out), "--max-its", "20"
    )
    assert done.returncode == 0, done.stderr
    assert "iteration" in done.stderr and done.stderr.count("rows over 2 ranks") == 1  # root only
    model = load_model(out / "model.json")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rows"] == 800 and summary["ranks"] == 2 and summary["backend"] == "mpi"
    spec = load_spec(tmp_path / "spec.json")
    import warnings

    from mixle_spark.errors import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        local = optimize(table, spec.estimator, max_its=20, delta=1e-8, seed=1)
    assert summary["log_likelihood"] == pytest.approx(local.fit_result.log_likelihood, rel=1e-9)
    np.testing.assert_allclose(model.w, local.w, rtol=1e-9)


@pytest.mark.mpi
@launcher
def test_entry_point_checkpoints_traces_audits_and_resumes_like_em_fit(tmp_path: Path) -> None:
    """The long-fit flags of em_fit work under MPI: the root alone writes the checkpoints and the
    live trace, a re-run resumes from the final checkpoint, and the summary has em_fit's schema."""
    pq.write_table(_table(), tmp_path / "x.parquet")
    (tmp_path / "spec.json").write_text(json.dumps(SPEC))
    flags = ("--checkpoint-dir", "ck", "--on-degenerate", "floor", "--audit-every", "2", "--max-its", "12")
    args = ("--input", "x.parquet", "--model", "spec.json", "--output", "fit", *flags)
    first = _run(tmp_path, *args, "--trace", "live.jsonl")
    assert first.returncode == 0, first.stderr
    summary = json.loads((tmp_path / "fit" / "summary.json").read_text())
    iterations = summary["iterations"]
    checkpoints = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert checkpoints and checkpoints[-1] == f"em-checkpoint-{iterations:09d}.json"
    live = [json.loads(line) for line in (tmp_path / "live.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in live if "iteration" in r] == list(range(iterations + 1))  # one writer
    assert summary["long_fit"]["on_degenerate"] == "floor"
    assert summary["long_fit"]["audit"] == {"every": 2, "fraction": 0.1}
    assert {"timings", "history", "bic", "log_likelihood_per_row", "started_at"} <= set(summary)

    again = _run(tmp_path, *args, "--overwrite")
    assert again.returncode == 0, again.stderr
    resumed = json.loads((tmp_path / "fit" / "summary.json").read_text())
    assert resumed["long_fit"]["resumed_from_iteration"] == iterations
    assert resumed["log_likelihood"] == summary["log_likelihood"]
    local = optimize(_table(), load_spec(tmp_path / "spec.json").estimator, max_its=12, delta=1e-8, seed=1)
    assert summary["log_likelihood"] == pytest.approx(local.fit_result.log_likelihood, rel=1e-9)


@pytest.mark.mpi
@launcher
def test_entry_point_bad_value_on_one_rank_exits_2_with_the_error(tmp_path: Path) -> None:
    table = _table(200)
    counts = table.column("n_items").to_numpy().copy()
    counts[-1] = -4  # in the last rank's share only
    table = table.set_column(2, "n_items", pa.array(counts))
    pq.write_table(table, tmp_path / "bad.parquet")
    (tmp_path / "spec.json").write_text(json.dumps(SPEC))
    done = _run(tmp_path, "--input", "bad.parquet", "--model", "spec.json", "--output", "fit")
    assert done.returncode == 2, done.stderr
    assert "column 'n_items'" in done.stderr and "-4" in done.stderr and "row 200 of 200" in done.stderr
    assert not (tmp_path / "fit").exists()


@pytest.mark.mpi
@launcher
def test_entry_point_overwrite_replaces_only_its_own_output(tmp_path: Path) -> None:
    """Under MPI as on every backend: a folder of someone's files, or a link to one, is refused in
    one line (printed once) and left as it was."""
    from tests._paths import snapshot, users_folder

    pq.write_table(_table(), tmp_path / "x.parquet")
    (tmp_path / "spec.json").write_text(json.dumps(SPEC))
    users_folder(tmp_path / "thesis")
    (tmp_path / "latest").symlink_to("thesis")
    before = snapshot(tmp_path)
    refused = {
        "thesis": "exists and was not written by em_fit (it holds notes.txt and sub/); choose another "
        "--output or remove it yourself",
        "latest": "is a symbolic link (to thesis); mixle_spark never writes or deletes through a link: "
        "name the real path",
    }
    for out, why in refused.items():
        args = ("--input", "x.parquet", "--model", "spec.json", "--output", out, "--overwrite")
        done = _run(tmp_path, *args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [f"em_fit: error: output {out} {why}"]
        assert snapshot(tmp_path) == before, out


@pytest.mark.mpi
@launcher
def test_entry_point_missing_input_exits_2(tmp_path: Path) -> None:
    (tmp_path / "spec.json").write_text(json.dumps(SPEC))
    done = _run(tmp_path, "--input", "nowhere", "--model", "spec.json", "--output", "fit")
    assert done.returncode == 2
    assert "no such file or directory: 'nowhere'" in done.stderr


def test_missing_mpi4py_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from mixle_spark.parallel.backends.mpi import MPIEncodedData
    from mixle_spark.stats import GaussianEstimator

    monkeypatch.setitem(sys.modules, "mpi4py", None)
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", None)
    with pytest.raises(ImportError, match=r"pip install 'mixle-spark\[mpi\]'"):
        MPIEncodedData([1.0, 2.0], GaussianEstimator())


@pytest.mark.mpi
@launcher
def test_an_error_only_one_rank_sees_aborts_the_job_instead_of_hanging(tmp_path: Path) -> None:
    script = tmp_path / "broken.py"
    script.write_text(
        "import sys\n"
        "from mixle_spark.cli import fit\n"
        "def broken(args, sample, coord):\n"
        "    comm = coord.comm\n"
        "    if comm.Get_rank() == 1:\n"
        "        raise RuntimeError('unexpected failure on rank 1')\n"
        "    comm.bcast(None, root=1)  # rank 0 waits for rank 1 forever without the abort\n"
        "fit.run = broken\n"
        "sys.exit(fit.main(['--backend', 'mpi', '--input', 'x', '--model', 'y', '--output', 'z']))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MIXLE_SPARK_MPI_ABORT_SECONDS": "2"}
    done = subprocess.run(
        [str(mpiexec()), "-n", "2", sys.executable, str(script)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode != 0
    assert "error on rank 1: RuntimeError: unexpected failure on rank 1" in done.stderr
    assert "Traceback" in done.stderr
