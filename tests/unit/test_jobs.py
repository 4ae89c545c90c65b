"""jobs/em_fit.py with --backend local (no Spark): fits the sample, writes model + summary, fails cleanly."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from mixle_spark.em.observability import EMTrace
from mixle_spark.estimation import optimize
from mixle_spark.spec import load_model
from mixle_spark.stats._covariance import FORMS

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "customers_sample.parquet"
SPEC = ROOT / "conf" / "models" / "sample.json"
FAST = ("--trials", "1", "--seed", "7")  # seed 7 reaches the true segments in 9 iterations


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "em_fit.py"), "--backend", "local", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("em_fit: error:")]


def test_em_fit_local_recovers_the_sample_and_writes_a_summary(tmp_path: Path) -> None:
    out = tmp_path / "fit"
    proc = _run(
        "--input", str(SAMPLE), "--model", str(SPEC), "--output", str(out), *FAST, "--print-iter", "5"
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["model.json", "summary.json", "trace.jsonl"]
    assert [p.name for p in tmp_path.iterdir()] == ["fit"]  # no staging directory left behind
    progress = [line for line in proc.stderr.splitlines() if line.startswith("iteration")]
    assert progress[0].startswith("iteration    0  log-likelihood")
    assert all(
        re.search(r"rows 5000  \d+\.\d{3}s  [\d.]+[KMGT]? rows/s  skew [\d.]+  stats \d", line)
        for line in progress
    )
    assert all(line.count("rows/s") == 1 for line in progress)
    assert "EM trace: 10 iterations (0-9)" in proc.stderr

    model = load_model(out / "model.json")
    truth = load_model(SAMPLE.with_suffix(".truth.json"))
    got = sorted((c.fields["amount"].mu, w) for c, w in zip(model.components, model.w, strict=True))
    want = sorted((c.fields["amount"].mu, w) for c, w in zip(truth.components, truth.w, strict=True))
    np.testing.assert_allclose([g[0] for g in got], [t[0] for t in want], atol=0.1)
    np.testing.assert_allclose([g[1] for g in got], [t[1] for t in want], atol=0.03)

    summary = json.loads((out / "summary.json").read_text())
    assert summary["rows"] == 5000 and summary["backend"] == "local"
    assert summary["converged"] is True and summary["seed"] == 7
    assert summary["iterations"] == len(summary["history"]) - 1 == 9  # tol 1e-6 per row: gain < 5e-3
    ll, k = summary["log_likelihood"], summary["free_parameters"]
    assert ll == pytest.approx(summary["history"][-1]["log_likelihood"], rel=1e-12)
    assert summary["bic"] == pytest.approx(k * math.log(5000) - 2 * ll)
    assert summary["aic"] == pytest.approx(2 * k - 2 * ll)
    # 3 components x (amount 2 + channel 2 + n_items 1 + tags 5 + tag count 1) + 2 weights
    assert k == 35
    assert summary["fit_options"] == {
        "max_its": 200,
        "tol": 1e-06,
        "init_p": 0.1,
        "init": "kmeans||",
        "seed": 7,
        "print_iter": 5,
        "trials": 1,
    }
    assert list(summary["timings"]) == ["read", "encode", "seeding", "em", "total"]  # no Spark: no start-up
    assert "wrote" in proc.stdout and "component 0" in proc.stdout

    trace = EMTrace.from_jsonl(out / "trace.jsonl")
    assert [r.iteration for r in trace.records] == [h["iteration"] for h in summary["history"]]
    assert [r.log_likelihood for r in trace.records] == [h["log_likelihood"] for h in summary["history"]]
    assert all(r.rows == 5000 for r in trace.records)
    # every EM pass merges statistics, and so does the last record, the final model's scoring pass:
    # em_fit keeps the statistics (by default), and they are that pass's
    assert all(r.stat_bytes > 0 and r.partitions >= 1 for r in trace.records)
    assert trace.records[-1].stat_bytes == trace.records[-2].stat_bytes
    long_fit = summary["long_fit"]
    assert long_fit["checkpoint_dir"] is None and long_fit["resumed_from_iteration"] is None
    assert long_fit["on_degenerate"] == "stop" and long_fit["audit"] is None
    assert long_fit["trace"]["iterations"] == 10
    assert long_fit["trace"]["stat_bytes_per_iteration"] == max(r.stat_bytes for r in trace.records)


def test_em_fit_refuses_an_existing_output_and_overwrites_on_request(tmp_path: Path) -> None:
    """Its own earlier output: kept without --overwrite, replaced with it. (Someone else's folder is
    never replaced: tests/unit/test_output_ownership.py.)"""
    out = tmp_path / "fit"
    args = ("--input", str(SAMPLE), "--model", str(SPEC), "--output", str(out), *FAST, "--quiet")
    assert _run(*args, "--max-its", "2").returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    proc = _run(*args)
    assert proc.returncode == 2
    assert _error_lines(proc.stderr) == [
        f"em_fit: error: output {out} exists; pass --overwrite to replace it"
    ]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before

    proc = _run(*args, "--overwrite", "--max-its", "3", "--delta", "0")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["model.json", "summary.json", "trace.jsonl"]
    assert json.loads((out / "summary.json").read_text())["iterations"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fit"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--input", "nope.parquet"), "no such file or directory: 'nope.parquet'"),
        (("--model", "nope.json"), "model spec file not found: nope.json"),
    ],
)
def test_em_fit_bad_paths(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    base = {"--input": str(SAMPLE), "--model": str(SPEC), "--output": str(tmp_path / "fit")}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    proc = _run(*[x for kv in base.items() for x in kv])
    assert proc.returncode == 2
    assert _error_lines(proc.stderr) == [f"em_fit: error: {message}"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("job", ["em_fit", "em_score"])
def test_a_missing_input_path_fails_before_spark_starts(tmp_path: Path, job: str) -> None:
    """The default backend (spark): the local path is checked before a JVM is launched."""
    model = SPEC if job == "em_fit" else SAMPLE.with_suffix(".truth.json")
    args = ("--input", "/nope/x.parquet", "--model", str(model), "--output", str(tmp_path / "out"))
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / f"{job}.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    seconds = time.perf_counter() - started
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"{job}: error: no such file or directory: '/nope/x.parquet'"]
    assert seconds < 2.0, f"{job} took {seconds:.1f}s to refuse a missing input"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--input", "x.parquet"), "--input and --model go together"),
        (("--input", "x", "--model", "y"), "--output is required with --input"),
        (("--depth", "2", "--conf", "a=b"), "--depth, --conf only apply to --backend spark"),
        (("--no-resident",), "--no-resident only applies to --backend spark"),
        (("--max-its", "-1"), "argument --max-its: expected an integer >= 0, got -1"),
        (("--delta", "-1"), "argument --delta: expected a finite number >= 0, got -1"),
        (("--backend", "hadoop"), "argument --backend: invalid choice: 'hadoop' (choose from"),
        (
            ("--backend", "sprak"),
            "argument --backend: invalid choice: 'sprak' (did you mean 'spark'?) (choose",
        ),
        (("--on-degenerate", "ignore"), "argument --on-degenerate: invalid choice: 'ignore'"),
        (("--audit-fraction", "0"), "argument --audit-fraction: expected a number in (0, 1], got 0"),
        (("--audit-every", "0"), "argument --audit-every: expected an integer >= 1, got 0"),
        (("--checkpoint-every", "x"), "argument --checkpoint-every: expected an integer >= 1, got x"),
        (
            ("--init", "kmeans"),
            "argument --init: invalid choice: 'kmeans' (did you mean 'kmeans||'?) (choose from 'kmeans||', "
            "'random')",
        ),
        (("--init-steps", "0"), "argument --init-steps: expected an integer >= 1, got 0"),
        (("--k", "0:3"), "--k: ks: every k must be an integer >= 1, got 0 in '0:3'"),
        (("--k", "two"), "--k: ks: expected 'LOW:HIGH' or a comma-separated list of integers, got 'two'"),
        (("--k", "2:4", "--criterion", "icl"), "argument --criterion: invalid choice: 'icl'"),
        (
            ("--k", "2:4", "--checkpoint-dir", "c"),
            "--k fits several models; --checkpoint-dir apply to a single fit",
        ),
        (("--checkpoint-key-file", "k"), "--checkpoint-key-file needs --checkpoint-dir"),
        (
            ("--forms", "tied,banded"),
            "--forms: forms: every form must be one of EII, VII, EEI, VEI, EVI, VVI, EEE, VVV or full, tied, "
            "diag, spherical, tied_diag, tied_spherical, got 'banded'",
        ),
        (
            ("--forms", "all", "--trace", "t.jsonl"),
            "--forms fits several models; --trace apply to a single fit",
        ),
    ],
)
def test_em_fit_bad_arguments_exit_2_with_one_line(args: tuple[str, ...], message: str) -> None:
    proc = _run(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("em_fit: error: ") and message in lines[0]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"amount": "lognormal", "channel": "categorical"},
            "unknown estimator family 'lognormal' (did you mean 'log_gaussian'?); expected one of: ",
        ),
        (
            {"amount": "log_gaussian", "chanel": "categorical"},
            "column 'chanel': not found (did you mean 'channel'?); "
            "available columns: amount, channel, n_items, tags",
        ),
    ],
)
def test_em_fit_suggests_the_family_or_column_meant(
    tmp_path: Path, fields: dict[str, str], message: str
) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps({"type": "mixture", "k": 2, "component": {"type": "record", "fields": fields}})
    )
    proc = _run("--input", str(SAMPLE), "--model", str(spec), "--output", str(tmp_path / "fit"))
    assert proc.returncode == 2
    [line] = _error_lines(proc.stderr)
    assert line.startswith(f"em_fit: error: {message}")


def test_em_score_suggests_the_option_meant() -> None:
    args = ("--input", "x", "--model", "m", "--output", "o", "--on-unseeen", "null")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "em_score.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "em_score: error: unrecognized arguments: --on-unseeen null (did you mean '--on-unseen'?) "
        "(see --help)"
    ]


def test_em_fit_bad_data_exits_2_naming_the_column(tmp_path: Path) -> None:
    data = tmp_path / "bad.csv"
    data.write_text("amount,channel,n_items\n12.5,web,1\n12.5x,app,2\n")
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "type": "record",
                "fields": {"amount": "gaussian", "channel": "categorical", "n_items": "poisson"},
            }
        )
    )
    proc = _run("--input", str(data), "--model", str(spec), "--output", str(tmp_path / "fit"))
    assert proc.returncode == 2
    [line] = _error_lines(proc.stderr)
    assert "column 'amount': expected a finite number" in line and "got string" in line
    assert not (tmp_path / "fit").exists()


def test_em_fit_checkpoints_resumes_audits_and_traces_live(tmp_path: Path) -> None:
    """A run stopped at iteration 5 and re-run resumes from its checkpoint to the estimates of one
    uninterrupted run; the audit and the live trace do not change the fit."""
    base = ("--input", str(SAMPLE), "--model", str(SPEC), *FAST, "--delta", "0", "--quiet")
    whole = _run(*base, "--output", str(tmp_path / "whole"), "--max-its", "8")
    assert whole.returncode == 0, whole.stderr

    ckpt, live = tmp_path / "ckpt", tmp_path / "live.jsonl"
    extra = ("--checkpoint-dir", str(ckpt), "--checkpoint-every", "2", "--on-degenerate", "floor")
    first = _run(*base, *extra, "--output", str(tmp_path / "first"), "--max-its", "5")
    assert first.returncode == 0, first.stderr
    # every 2nd iteration and the final one (the newest three are kept)
    assert sorted(p.name for p in ckpt.iterdir()) == [f"em-checkpoint-00000000{i}.json" for i in (2, 4, 5)]
    resumed = _run(
        *base, *extra, "--output", str(tmp_path / "resumed"), "--max-its", "8",
        "--audit-every", "3", "--audit-fraction", "1", "--trace", str(live),
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr

    want = json.loads((tmp_path / "whole" / "model.json").read_text())
    assert json.loads((tmp_path / "resumed" / "model.json").read_text()) == want
    summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert summary["long_fit"]["resumed_from_iteration"] == 5
    assert summary["long_fit"]["checkpoint_dir"] == str(ckpt)
    assert summary["long_fit"]["checkpoint_every"] == 2
    assert summary["long_fit"]["on_degenerate"] == "floor"
    assert summary["long_fit"]["audit"] == {"every": 3, "fraction": 1.0}
    whole_history = json.loads((tmp_path / "whole" / "summary.json").read_text())["history"]
    assert [h["log_likelihood"] for h in summary["history"]] == [h["log_likelihood"] for h in whole_history]
    written = EMTrace.from_jsonl(tmp_path / "resumed" / "trace.jsonl")
    assert [r.iteration for r in EMTrace.from_jsonl(live).records] == list(range(9))
    assert [r.iteration for r in written.records] == list(range(9))

    fresh = _run(*base, *extra, "--no-resume", "--output", str(tmp_path / "fresh"), "--max-its", "8")
    assert fresh.returncode == 0, fresh.stderr
    fresh_summary = json.loads((tmp_path / "fresh" / "summary.json").read_text())
    assert fresh_summary["long_fit"]["resumed_from_iteration"] is None
    assert json.loads((tmp_path / "fresh" / "model.json").read_text()) == want


def test_em_fit_fits_a_hidden_markov_model_from_a_sequence_column(tmp_path: Path) -> None:
    """A list column and an HMM spec (the k + emission shorthand) through the job, end to end."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mixle_spark.stats import GaussianDistribution, HiddenMarkovDistribution, PoissonDistribution

    truth = HiddenMarkovDistribution(
        [GaussianDistribution(-2.0, 0.5), GaussianDistribution(2.0, 0.5)],
        [0.6, 0.4],
        [[0.9, 0.1], [0.2, 0.8]],
        len_dist=PoissonDistribution(15.0),
    )
    pq.write_table(pa.table({"events": truth.sampler(3).sample(3000)}), tmp_path / "seqs.parquet")
    spec = {
        "estimator": {"type": "hidden_markov", "k": 2, "emission": "gaussian", "len_estimator": "poisson"},
        "fit": {"max_its": 60, "seed": 1},
    }
    (tmp_path / "hmm.json").write_text(json.dumps(spec))
    out = tmp_path / "fit"
    proc = _run(
        "--input", str(tmp_path / "seqs.parquet"), "--model", str(tmp_path / "hmm.json"), "--output", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    model = load_model(out / "model.json")
    assert isinstance(model, HiddenMarkovDistribution)
    order = np.argsort([e.mu for e in model.emissions])
    np.testing.assert_allclose([model.emissions[i].mu for i in order], [-2.0, 2.0], atol=0.05)
    np.testing.assert_allclose(
        np.asarray(model.transitions)[np.ix_(order, order)], truth.transitions, atol=0.03
    )
    assert model.len_dist is not None and abs(model.len_dist.lam - 15.0) < 0.3


def test_em_fit_chooses_k_by_bic_and_reports_the_curve(tmp_path: Path) -> None:
    out = tmp_path / "fit"
    proc = _run(
        "--input",
        str(SAMPLE),
        "--model",
        str(SPEC),
        "--output",
        str(out),
        *FAST,
        "--k",
        "1:4",
        "--quiet",
        "--report",
    )
    assert proc.returncode == 0, proc.stderr
    assert "select_k by bic: best k = 3" in proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    found = summary["model_selection"]
    assert found["criterion"] == "bic" and found["best_k"] == 3
    assert [row["k"] for row in found["table"]] == [1, 2, 3, 4]
    bics = [row["bic"] for row in found["table"]]
    assert min(bics) == bics[2] and summary["bic"] == pytest.approx(bics[2])
    assert len(load_model(out / "model.json").components) == 3
    page = (out / "report.html").read_text()
    assert '<section id="model-selection">' in page and "k = 3 by BIC" in page


def test_em_fit_chooses_the_covariance_form_and_k_by_bic(tmp_path: Path) -> None:
    # three tied (EEE: one shared, correlated covariance) clusters: --forms all --k 1:4 finds form and k
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(2026)
    shared = np.array([[1.0, 0.8], [0.8, 1.0]])
    x = np.concatenate([rng.multivariate_normal(m, shared, 300) for m in ([0, 0], [6, 0], [0, 6])])
    pq.write_table(pa.table({"x": list(rng.permutation(x))}), tmp_path / "x.parquet")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"type": "mixture", "k": 2, "component": "multivariate_gaussian"}))
    out = tmp_path / "fit"
    proc = _run(
        "--input", str(tmp_path / "x.parquet"), "--model", str(spec), "--output", str(out), *FAST,
        "--k", "1:4", "--forms", "all", "--quiet", "--report",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "select_k by bic: best k = 3, form EEE" in proc.stderr
    found = json.loads((out / "summary.json").read_text())["model_selection"]
    assert found["best_k"] == 3 and found["best_form"] == "EEE"
    assert len(found["table"]) == 4 * 8 and {r["form"] for r in found["table"]} == set(FORMS)
    model = load_model(out / "model.json")
    assert model.covariance == "EEE" and len(model.components) == 3
    page = (out / "report.html").read_text()
    assert "k = 3, covariance EEE by BIC" in page
    assert "BIC per components (k), one line per EII, VII, EEI, VEI, EVI, VVI, EEE, VVV" in page
    # the form alone, at the spec's k
    alone = _run(
        "--input", str(tmp_path / "x.parquet"), "--model", str(spec), "--output", str(tmp_path / "two"),
        *FAST, "--forms", "VVV,tied", "--quiet",
    )  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    table = json.loads((tmp_path / "two" / "summary.json").read_text())["model_selection"]["table"]
    assert [(r["k"], r["form"]) for r in table] == [(2, "EEE"), (2, "VVV")]


def test_em_fit_k_records_every_unconverged_candidate_in_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "fit"
    proc = _run(
        "--input", str(SAMPLE), "--model", str(SPEC), "--output", str(out), *FAST,
        "--k", "2:3", "--max-its", "2", "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert [(r["k"], r["converged"]) for r in summary["model_selection"]["table"]] == [(2, False), (3, False)]
    assert [w.split(" (tol=")[0] for w in summary["warnings"]] == [
        "k=2: EM did not converge in 2 iterations",
        "k=3: EM did not converge in 2 iterations",
    ]
    said = [line for line in proc.stderr.splitlines() if line.startswith("em_fit: warning: k=")]
    assert said == [f"em_fit: warning: {w}" for w in summary["warnings"]]


def test_em_fit_checkpoint_of_another_fit_names_the_no_resume_flag(tmp_path: Path) -> None:
    base = ("--input", str(SAMPLE), "--model", str(SPEC), *FAST, "--quiet", "--max-its", "2")
    ckpt = ("--checkpoint-dir", str(tmp_path / "ckpt"))
    assert _run(*base, *ckpt, "--seed", "1", "--output", str(tmp_path / "a")).returncode == 0
    other = _run(*base, *ckpt, "--seed", "2", "--output", str(tmp_path / "b"))
    assert other.returncode == 2
    assert _error_lines(other.stderr) == [
        f"em_fit: error: checkpoint_dir {tmp_path / 'ckpt'} holds checkpoints of a different fit "
        "(the seed: checkpoint 1, now 2); use another checkpoint_dir, or --no-resume to start afresh "
        "and replace them"
    ]
    assert not (tmp_path / "b").exists()


def test_em_fit_local_names_the_bad_cell_not_the_first_one(tmp_path: Path) -> None:
    """A CSV column with one bad cell is read as text; the error names that cell and its row."""
    rng = np.random.default_rng(0)
    cells = [f"{x:.3f}" for x in rng.normal(50, 10, 500)]
    cells[41] = "12.5x"
    cells[7] = "nan"  # reads as a number (not finite, but not the cell to blame first)
    data = tmp_path / "bad.csv"
    data.write_text("amount\n" + "\n".join(cells) + "\n")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"type": "mixture", "k": 2, "component": "gaussian"}))
    proc = _run(
        "--backend", "local", "--input", str(data), "--model", str(spec), "--output", str(tmp_path / "f")
    )
    assert proc.returncode == 2
    assert _error_lines(proc.stderr) == [
        "em_fit: error: column 'amount': expected a finite number for GaussianEstimator (Arrow type string), "
        "got string '12.5x' (row 42 of 500)"
    ]


def test_em_fit_resumed_runs_say_so_and_a_finished_fit_needs_no_pass_over_the_data(tmp_path: Path) -> None:
    # --no-statistics: kept statistics are one pass over the data (the next test)
    base = ("--input", str(SAMPLE), "--model", str(SPEC), *FAST, "--delta", "1e-12", "--print-iter", "50",
            "--no-statistics")  # fmt: skip
    ckpt = ("--checkpoint-dir", str(tmp_path / "ckpt"))
    first = _run(*base, *ckpt, "--max-its", "3", "--output", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    stopped = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert stopped["warnings"] and "did not converge in 3 iterations" in stopped["warnings"][0]

    again = _run(*base, *ckpt, "--max-its", "3", "--output", str(tmp_path / "b"))
    assert again.returncode == 0, again.stderr
    assert f"the fit in {tmp_path / 'ckpt'} had finished; returning its model" in again.stderr
    assert "encoded" not in again.stderr  # no pass over the data
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["warnings"] == stopped["warnings"]  # the result's warning is kept
    assert summary["timings"]["encode"] == 0.0
    assert (tmp_path / "b" / "model.json").read_text() == (tmp_path / "a" / "model.json").read_text()

    more = _run(*base, *ckpt, "--max-its", "5", "--output", str(tmp_path / "c"))
    assert more.returncode == 0, more.stderr
    assert f"resuming from checkpoint {tmp_path / 'ckpt'} at iteration 3" in more.stderr

    # --quiet drops the progress stream, not this: one line says where the fit came from
    quiet = _run(*base, *ckpt, "--max-its", "5", "--quiet", "--output", str(tmp_path / "d"))
    assert quiet.returncode == 0, quiet.stderr
    notes = [line for line in quiet.stderr.splitlines() if "checkpoint" in line]
    assert notes == [f"em_fit: resumed from checkpoint {tmp_path / 'ckpt'} at iteration 5"], quiet.stderr


def test_em_fit_keeps_statistics_by_default_even_from_a_finished_checkpoint(tmp_path: Path) -> None:
    """Statistics are the final model's E-step over the data: a fit returned from its final checkpoint
    makes that one pass (and no EM iteration), and writes the model.json of the run it resumes."""
    base = ("--input", str(SAMPLE), "--model", str(SPEC), *FAST, "--max-its", "3", "--delta", "0",
            "--print-iter", "50", "--checkpoint-dir", str(tmp_path / "ckpt"))  # fmt: skip
    first = _run(*base, "--output", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    written = json.loads((tmp_path / "a" / "model.json").read_text())
    kept = load_model(tmp_path / "a" / "model.json").statistics
    assert kept is not None and (kept.rows, kept.updates, kept.weight) == (5000, 0, 5000.0)
    assert written["statistics"]["format"] == "mixle_spark.statistics"
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["statistics"] == {"rows": 5000, "updates": 0, "weight": 5000, "last_batch": None}

    again = _run(*base, "--output", str(tmp_path / "b"))
    assert again.returncode == 0, again.stderr
    assert "encoded 5000 rows" in again.stderr  # the statistics' pass
    assert not [line for line in again.stderr.splitlines() if line.startswith("iteration ")]
    assert json.loads((tmp_path / "b" / "model.json").read_text()) == written


@pytest.mark.parametrize(
    ("text", "line", "row"),
    [
        ("amount,n_items\n12.5,1\n80.0,7,x\n15.0,2\n", 3, "80.0,7,x"),
        ("amount,n_items\n12.5,1\n80.0,7\n15.0\n60.0,5\n", 4, "15.0"),
    ],
    ids=["extra-field", "short-row"],
)
def test_em_fit_local_refuses_a_malformed_csv_row_naming_its_line(
    tmp_path: Path, text: str, line: int, row: str
) -> None:
    data = tmp_path / "bad.csv"
    data.write_text(text)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"type": "record", "fields": {"amount": "gaussian", "n_items": "poisson"}}))
    proc = _run(
        "--backend", "local", "--input", str(data), "--model", str(spec), "--output", str(tmp_path / "f")
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"em_fit: error: malformed CSV row in {data} (line {line}): {row!r} has not the header's "
        "number of fields"
    ]
    assert not (tmp_path / "f").exists()


def test_em_fit_counts_a_fixed_student_t_dof_out_of_bic(tmp_path: Path) -> None:
    t = {"type": "student_t", "dof": 3.0}
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps({"type": "mixture", "k": 2, "component": {"type": "record", "fields": {"amount": t}}})
    )
    done = _run(
        "--input", str(SAMPLE), "--model", str(spec), "--output", str(tmp_path / "out"), *FAST, "--quiet"
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["free_parameters"] == 2 * 2 + 1  # mu and sigma per component, one weight; no dof
    ll, n = summary["log_likelihood"], summary["rows"]
    assert summary["bic"] == pytest.approx(5 * math.log(n) - 2 * ll, rel=1e-12)


def test_em_fit_authenticates_its_checkpoints_with_a_key_file(tmp_path: Path) -> None:
    base = ("--input", str(SAMPLE), "--model", str(SPEC), *FAST, "--max-its", "3", "--quiet")
    ckpt, key = tmp_path / "ckpt", tmp_path / "key"
    key.write_text("0123456789abcdef0123456789abcdef\n")
    key.chmod(0o644)
    open_key = _run(*base, "--checkpoint-dir", str(ckpt), "--checkpoint-key-file", str(key), "--output",
                    str(tmp_path / "refused"))  # fmt: skip
    assert open_key.returncode == 2
    assert _error_lines(open_key.stderr) == [
        f"em_fit: error: --checkpoint-key-file {key}: readable by other users (mode 0644); chmod 600 it"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key"]  # nothing written
    key.chmod(0o600)
    keyed = _run(*base, "--checkpoint-dir", str(ckpt), "--checkpoint-key-file", str(key), "--output",
                 str(tmp_path / "fit"))  # fmt: skip
    assert keyed.returncode == 0, keyed.stderr
    files = sorted(ckpt.glob("em-checkpoint-*.json"))
    assert files and all(
        re.fullmatch(r"[0-9a-f]{64}", json.loads(f.read_text())["hmac_sha256"]) for f in files
    )
    assert "0123456789abcdef" not in (tmp_path / "fit" / "summary.json").read_text()  # the key is nowhere


def test_em_score_imputed_col_of_a_model_without_vectors_fails_before_spark(tmp_path: Path) -> None:
    from mixle_spark.spec import save_model
    from mixle_spark.stats import GaussianDistribution, MixtureDistribution

    model = tmp_path / "model.json"
    save_model(MixtureDistribution([GaussianDistribution(0.0, 1.0)] * 2, [0.5, 0.5]), model)
    args = ("--input", str(tmp_path / "none"), "--model", str(model), "--output", str(tmp_path / "o"))
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "em_score.py"), *args, "--imputed-col", "filled"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "em_score: error: imputed_col='filled': imputing missing coordinates needs a vector Gaussian or a "
        "mixture of them, not a mixture of GaussianDistribution"
    ]
    assert time.monotonic() - started < 30 and not (tmp_path / "o").exists()


def test_em_fit_label_column_keeps_the_labelled_rows_components(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from tests.unit.test_partial_labels import LABELLED, stripes

    _x, _z, table = stripes(2)
    pq.write_table(table, tmp_path / "x.parquet")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"type": "mixture", "k": 3, "component": "multivariate_gaussian"}))
    out = tmp_path / "fit"
    proc = _run(
        "--input", str(tmp_path / "x.parquet"), "--model", str(spec), "--output", str(out),
        "--label-column", "segment", "--seed", "6", "--max-its", "8", "--delta", "0", "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = optimize(table, LABELLED, max_its=8, delta=0.0, seed=6)
    got = load_model(out / "model.json")
    np.testing.assert_allclose(got.w, want.w, rtol=1e-12)
    bad = _run(
        "--input", str(tmp_path / "x.parquet"), "--model", str(spec), "--output", str(tmp_path / "bad"),
        "--label-column", "segmnt", "--quiet",
    )  # fmt: skip
    assert bad.returncode == 2
    assert _error_lines(bad.stderr) == [
        "em_fit: error: --label-column segmnt: column 'segmnt' not found; the input has columns "
        "['x', 'segment']"
    ]


def test_em_fit_init_model_starts_from_a_fitted_model(tmp_path: Path) -> None:
    first = tmp_path / "first"
    base = ("--input", str(SAMPLE), "--model", str(SPEC), "--quiet", "--seed", "7")
    proc = _run(*base, "--output", str(first), "--max-its", "3", "--delta", "0")
    assert proc.returncode == 0, proc.stderr
    # three more iterations from the first fit's model: the model six iterations from the start give
    again = _run(*base, "--output", str(tmp_path / "again"), "--init-model", str(first / "model.json"),
                 "--max-its", "3", "--delta", "0")  # fmt: skip
    assert again.returncode == 0, again.stderr
    six = _run(*base, "--output", str(tmp_path / "six"), "--max-its", "6", "--delta", "0")
    assert six.returncode == 0, six.stderr
    continued, straight = (
        load_model(tmp_path / "again" / "model.json"),
        load_model(tmp_path / "six" / "model.json"),
    )
    np.testing.assert_allclose(continued.w, straight.w, rtol=1e-9)
    summary = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert summary["iterations"] == 3
    clash = _run(
        *base, "--output", str(tmp_path / "x"), "--init-model", str(first / "model.json"), "--k", "2:3"
    )
    assert clash.returncode == 2
    assert _error_lines(clash.stderr) == [
        "em_fit: error: --init-model starts one fit from that model; --k would start several (see --help)"
    ]
    spec = tmp_path / "two.json"
    spec.write_text(json.dumps({"estimator": {**json.loads(SPEC.read_text())["estimator"], "k": 2}}))
    other = _run("--input", str(SAMPLE), "--model", str(spec), "--quiet", "--output", str(tmp_path / "y"),
                 "--init-model", str(first / "model.json"))  # fmt: skip
    assert other.returncode == 2
    [line] = _error_lines(other.stderr)
    assert line.startswith("em_fit: error: --init-model ") and line.endswith(
        "model.json: a mixture of 3 components, but the spec's has 2"
    )
