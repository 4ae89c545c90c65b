"""em_fit --update-from with --backend local (no Spark): a fitted model folds new rows in, as
``mixle_spark.em.incremental.update`` does in Python; drift fails (exit code 3) or refits; refusals."""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from mixle_spark.cli._arguments import build_parser, resolve_args
from mixle_spark.cli._update_arguments import REFIT_OPTIONS, update_options
from mixle_spark.em.incremental import DriftError, update
from mixle_spark.em.observability import EMTrace
from mixle_spark.errors import ConvergenceWarning
from mixle_spark.spec import load_model, model_to_json
from tests.unit.test_jobs import FAST, SAMPLE, SPEC, _run

TRUTH = SAMPLE.with_suffix(".truth.json")  # a model file without statistics


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sample split in two halves; the first fitted by the job (statistics kept by default)."""
    where = tmp_path_factory.mktemp("update")
    table = pq.read_table(SAMPLE)
    old, new = where / "old.parquet", where / "new.parquet"
    pq.write_table(table.slice(0, 2500), old)
    pq.write_table(table.slice(2500), new)
    shifted = where / "shifted.parquet"  # every amount x 1000: a huge drop in log-likelihood
    column = table.schema.get_field_index("amount")
    moved = table.slice(2500).set_column(column, "amount", pc.multiply(table["amount"].slice(2500), 1000.0))
    pq.write_table(moved, shifted)
    done = _run("--input", str(old), "--model", str(SPEC), "--output", str(where / "fit"), *FAST, "--quiet")
    assert done.returncode == 0, done.stderr
    return {"dir": where, "fit": where / "fit", "new": new, "shifted": shifted}


def _model_json(path: Path) -> dict[str, Any]:
    """model.json without the update's wall times (the only entries two runs of an update differ in)."""
    return _timeless(json.loads(path.read_text()))


def _timeless(found: dict[str, Any]) -> dict[str, Any]:
    for name in ("seconds", "pass_seconds"):
        found.get("update", {}).pop(name, None)
    return found


def _python_update(fit: Path, data: Path, **options: Any) -> Any:
    return update(load_model(fit / "model.json"), pq.read_table(data), backend="local", **options)


def _as_json(model: Any) -> dict[str, Any]:
    return _timeless(json.loads(model_to_json(model)))


def test_the_fit_keeps_its_statistics_in_model_json(fitted: dict[str, Path]) -> None:
    summary = json.loads((fitted["fit"] / "summary.json").read_text())
    assert summary["statistics"] == {"rows": 2500, "updates": 0, "weight": 2500, "last_batch": None}
    kept = load_model(fitted["fit"] / "model.json").statistics
    assert kept is not None and kept.rows == 2500 and kept.weight == 2500.0
    assert sorted(p.name for p in fitted["fit"].iterdir()) == ["model.json", "summary.json", "trace.jsonl"]


def test_an_update_writes_what_update_gives_in_python(fitted: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "day1"
    done = _run("--update-from", str(fitted["fit"]), "--input", str(fitted["new"]), "--output", str(out))
    assert done.returncode == 0, done.stderr
    want = _python_update(fitted["fit"], fitted["new"])
    assert done.stderr.splitlines() == [f"em_fit: {want.update_result.summary()}"]
    assert f"wrote {out / 'model.json'}, {out / 'summary.json'} and {out / 'trace.jsonl'}" in done.stdout
    assert _model_json(out / "model.json") == _as_json(want)
    assert sorted(p.name for p in out.iterdir()) == ["model.json", "summary.json", "trace.jsonl"]
    trace = EMTrace.from_jsonl(out / "trace.jsonl")  # the drift in the header, a line per pass
    assert trace.metadata["kind"] == "update" and trace.metadata["drift"] == want.update_result.drift
    assert trace.metadata["weights_after"] == want.update_result.weights_after
    assert [r.log_likelihood for r in trace] == want.update_result.history
    assert len(trace) == want.update_result.passes
    assert trace[0].delta is None
    assert trace[1].delta == pytest.approx(trace[1].log_likelihood - trace[0].log_likelihood)
    assert trace[0].events == (want.update_result.summary(),) and trace[-1].component_weights == tuple(
        want.update_result.weights_after
    )
    assert [p.name for p in tmp_path.iterdir()] == ["day1"]  # no staging directory left behind

    summary = json.loads((out / "summary.json").read_text())
    assert summary["format"] == "mixle_spark.fit_summary" and summary["backend"] == "local"
    assert summary["updated_from"] == str(fitted["fit"] / "model.json")
    assert summary["rows"] == 2500 and summary["iterations"] == want.update_result.passes
    assert summary["statistics"] == {"rows": 5000, "updates": 1, "weight": 5000, "last_batch": None}
    section, result = summary["update"], want.update_result
    assert section["method"] == "incremental" and section["rows"] == 2500 and section["decay"] == 1.0
    assert section["passes"] == result.passes <= 5
    assert section["mean_log_likelihood_before"] == result.mean_log_likelihood_before
    assert section["reference"] == result.reference_mean_log_likelihood
    assert section["drift"] == pytest.approx(0.0702, abs=1e-3)  # the two halves of one sample
    assert section["weights_before"] == result.weights_before
    assert section["weights_after"] == result.weights_after
    assert section["weight_shift"] == result.weight_shift and section["unseen_rows"] == 0
    assert section["refitted"] is False and section["log_likelihood_per_pass"] == result.history
    assert list(summary["timings"]) == ["read", "encode", "em", "total"]

    # the next day: a stepwise update of the update, in place (--overwrite), quietly
    first = load_model(out / "model.json")
    again = _run(
        "--update-from", str(out), "--input", str(fitted["new"]), "--output", str(out), "--overwrite",
        "--method", "stepwise", "--alpha", "0.6", "--half-life", "4", "--quiet",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert again.stderr == ""
    step = update(
        first, pq.read_table(fitted["new"]), backend="local", method="stepwise", alpha=0.6, half_life=4
    )
    assert _model_json(out / "model.json") == _as_json(step)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["statistics"]["updates"] == 2 and summary["statistics"]["rows"] == 7500
    assert summary["update"]["decay"] == pytest.approx(0.5**0.25, rel=1e-15)
    assert (summary["update"]["method"], summary["update"]["half_life"]) == ("stepwise", 4.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["day1"]


def test_drift_past_max_drop_fails_with_exit_code_3_and_writes_nothing(
    fitted: dict[str, Path], tmp_path: Path
) -> None:
    base = ("--update-from", str(fitted["fit"]), "--input", str(fitted["shifted"]), "--max-drop", "1")
    with pytest.raises(DriftError) as raised:
        _python_update(fitted["fit"], fitted["shifted"], max_drop=1.0, on_drift="raise")
    r = raised.value.result
    assert r.drift > 40  # nats per row: the amounts are 1000 times larger
    failed = _run(*base, "--on-drift", "fail", "--output", str(tmp_path / "failed"))
    assert failed.returncode == 3
    assert failed.stderr.splitlines() == [
        f"em_fit: error: drift: the new rows' mean log-likelihood {r.mean_log_likelihood_before:.6g} is "
        f"{r.drift:.4g} nats/row below the model's {r.reference_mean_log_likelihood:.6g}, more than "
        "--max-drop 1 (--on-drift fail); nothing was written"
    ]
    assert failed.stdout == "" and list(tmp_path.iterdir()) == []

    warned = _run(*base, "--output", str(tmp_path / "warned"), "--quiet")  # --on-drift warn: the default
    assert warned.returncode == 0, warned.stderr
    line = f"drift {r.drift:.4g} nats/row exceeds --max-drop 1: updated anyway"
    assert warned.stderr.splitlines() == [f"em_fit: warning: {line}"]  # --quiet keeps the warning
    summary = json.loads((tmp_path / "warned" / "summary.json").read_text())
    assert summary["warnings"] == [line] and summary["update"]["refitted"] is False
    assert (summary["update"]["max_drop"], summary["update"]["on_drift"]) == (1.0, "warn")


def test_drift_with_on_drift_refit_fits_the_new_rows_from_scratch(
    fitted: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "refit"
    done = _run(
        "--update-from", str(fitted["fit"]), "--input", str(fitted["shifted"]), "--output", str(out),
        "--max-drop", "1", "--on-drift", "refit",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        want = _python_update(
            fitted["fit"], fitted["shifted"], max_drop=1.0, on_drift="refit", refit_options=REFIT_OPTIONS
        )
    assert want.update_result.refitted
    found = _model_json(out / "model.json")
    assert found["model"] == _as_json(want)["model"]
    assert found["statistics"] == _as_json(want)["statistics"]
    kept = load_model(out / "model.json").statistics
    assert kept.rows == 2500 and kept.updates == 0  # the old rows are gone: a fit of the new ones
    amounts = sorted(c.fields["amount"].mu for c in want.components)
    assert amounts[0] > 2.4 + 6.5  # log(1000) ~ 6.9 above the sample's segments
    trace = EMTrace.from_jsonl(out / "trace.jsonl")  # the fresh fit's
    assert len(trace) == want.fit_result.n_iter + 1 and trace.metadata["rows"] == 2500
    summary = json.loads((out / "summary.json").read_text())
    assert summary["update"]["refitted"] is True and summary["update"]["on_drift"] == "refit"
    assert summary["refit"]["iterations"] == want.fit_result.n_iter
    assert summary["refit"]["log_likelihood"] == pytest.approx(want.fit_result.log_likelihood, rel=1e-12)
    drift = f"drift {want.update_result.drift:.4g} nats/row exceeds --max-drop 1: refitted the new rows "
    assert summary["warnings"] == [
        *(str(w.message) for w in caught),  # the refit's own (until converged: REFIT_OPTIONS)
        drift + "from scratch (--on-drift refit)",
    ]
    fresh = want.fit_result
    assert done.stderr.splitlines() == [
        *(f"em_fit: warning: {w}" for w in summary["warnings"]),
        f"em_fit: refit from scratch ({fresh.n_iter} EM iterations, converged=True): 2500 rows, mean "
        f"log-likelihood {fresh.log_likelihood / 2500:.6g} (before, under the old model: "
        f"{want.update_result.mean_log_likelihood_before:.6g})",
    ]


def test_a_model_without_statistics_is_refused_saying_to_refit(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    fit = _run(
        "--input", str(SAMPLE), "--model", str(SPEC), "--output", str(plain), *FAST, "--max-its", "2",
        "--quiet", "--no-statistics",
    )  # fmt: skip
    assert fit.returncode == 0, fit.stderr
    assert "statistics" not in json.loads((plain / "model.json").read_text())
    assert json.loads((plain / "summary.json").read_text())["statistics"] is None
    for source, path in ((plain, plain / "model.json"), (TRUTH, TRUTH)):
        done = _run("--update-from", str(source), "--input", str(SAMPLE), "--output", str(tmp_path / "u"))
        assert done.returncode == 2
        assert done.stderr.splitlines() == [
            f"em_fit: error: {path} keeps no statistics to update: refit it with em_fit without "
            "--no-statistics (statistics are kept by default)"
        ]
    missing = _run(
        "--update-from", str(tmp_path / "nope"), "--input", str(SAMPLE), "--output", str(tmp_path / "u")
    )
    assert missing.returncode == 2
    assert missing.stderr.splitlines() == [f"em_fit: error: model file not found: {tmp_path / 'nope'}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"]


def test_a_bad_decay_is_refused_by_the_declared_check() -> None:
    done = _run("--update-from", "x", "--input", str(SAMPLE), "--output", "o", "--decay", "1.5")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "em_fit: error: argument --decay: expected a number in (0, 1], got 1.5 (see --help)"
    ]


UPDATE = ("--update-from", "fit", "--input", str(SAMPLE), "--output", "out")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            (*UPDATE, "--k", "2:4"),
            "--update-from takes the model and its spec from fit; --k applies to a fit",
        ),
        (
            (*UPDATE, "--model", str(SPEC), "--trials", "2", "--checkpoint-dir", "c"),
            "--update-from takes the model and its spec from fit; --model, --trials, --checkpoint-dir "
            "apply to a fit",
        ),
        ((*UPDATE, "--criterion", "bic"), "from fit; --criterion applies to a fit"),  # the default, given
        ((*UPDATE, "--no-statistics", "--report"), "from fit; --report, --no-statistics apply to a fit"),
        (
            (*UPDATE, "--on-degenerate", "stop", "--no-resume"),
            "; --no-resume, --on-degenerate apply to a fit",
        ),
        (
            ("--input", str(SAMPLE), "--model", str(SPEC), "--output", "o", "--decay", "0.5"),
            "--decay applies with --update-from",
        ),
        (("--method", "stepwise", "--max-drop", "2"), "--method, --max-drop apply with --update-from"),
        (
            ("--update-from", "fit", "--output", "o"),
            "--update-from needs --input (the new rows) and --output",
        ),
        ((*UPDATE, "--decay", "0.5", "--half-life", "3"), "give --decay or --half-life, not both"),
        ((*UPDATE, "--time-unit", "points"), "--time-unit needs --decay or --half-life"),
        ((*UPDATE, "--on-drift", "fail"), "--on-drift needs --max-drop"),
        ((*UPDATE, "--alpha", "0.6"), "--alpha applies to --method stepwise"),
        (
            (*UPDATE, "--method", "stepwise", "--max-its", "3"),
            "--method stepwise makes one pass over the new rows; --max-its applies to --method incremental",
        ),
        (
            (*UPDATE, "--max-its", "0"),
            "argument --max-its: with --update-from, expected an integer >= 1 (update passes), got 0",
        ),
        ((*UPDATE, "--decay", "0"), "argument --decay: expected a number in (0, 1], got 0"),
        ((*UPDATE, "--half-life", "-2"), "argument --half-life: expected a finite number > 0, got -2"),
        ((*UPDATE, "--alpha", "0.5"), "argument --alpha: expected a number in (0.5, 1], got 0.5"),
        ((*UPDATE, "--max-drop", "-1"), "argument --max-drop: expected a finite number >= 0, got -1"),
        ((*UPDATE, "--on-drift", "raise"), "argument --on-drift: invalid choice: 'raise' (choose from"),
        ((*UPDATE, "--method", "online"), "argument --method: invalid choice: 'online' (choose from"),
    ],
)
def test_update_arguments_are_refused_with_one_line(argv: tuple[str, ...], message: str) -> None:
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), pytest.raises(SystemExit) as stopped:
        resolve_args(build_parser(), list(argv))
    assert stopped.value.code == 2
    [line] = stderr.getvalue().splitlines()
    assert line.startswith("em_fit: error: ") and message in line, line


def test_update_flags_take_their_defaults_and_become_update_keywords() -> None:
    args = resolve_args(build_parser(), list(UPDATE))
    assert update_options(args) == {
        "method": "incremental",
        "time_unit": "batches",
        "on_drift": "warn",
        "refit_options": REFIT_OPTIONS,  # --on-drift refit fits until converged
    }
    args = resolve_args(
        build_parser(),
        [*UPDATE, "--decay", "0.9", "--time-unit", "points", "--max-its", "3", "--delta", "0",
         "--max-drop", "2.5", "--on-drift", "fail"],
    )  # fmt: skip
    assert update_options(args) == {
        "method": "incremental",
        "time_unit": "points",
        "on_drift": "raise",
        "decay": 0.9,
        "max_its": 3,
        "delta": 0.0,
        "max_drop": 2.5,
        "refit_options": REFIT_OPTIONS,
    }
    assert update_options(
        resolve_args(build_parser(), [*UPDATE, "--method", "stepwise", "--alpha", "1"])
    ) == {
        "method": "stepwise",
        "time_unit": "batches",
        "on_drift": "warn",
        "alpha": 1.0,
        "refit_options": REFIT_OPTIONS,
    }
