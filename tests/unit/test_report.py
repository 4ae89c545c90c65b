"""mixle_spark.report: the fit report's HTML (sections, escaping, figures with and without matplotlib,
parameters for any family, the projection) and em_fit --report."""

from __future__ import annotations

import base64
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mixle_spark import report
from mixle_spark.estimation import optimize
from mixle_spark.report import PLOT_HINT, SECTIONS, _page, report_html, write_report
from mixle_spark.report._projection import _numeric_columns
from mixle_spark.stats import (
    CategoricalDistribution,
    CategoricalEstimator,
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
    MultivariateGaussianDistribution,
    MultivariateGaussianEstimator,
    PoissonDistribution,
    RecordDistribution,
    RecordEstimator,
)
from mixle_spark.summary import TIMINGS, count_free_parameters, information_criteria, timings_line
from tests._paths import job_module

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "customers_sample.parquet"
SPEC = ROOT / "conf" / "models" / "sample.json"
PNG = re.compile(r'<img class="figure" alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)">')
EVIL = '<img src=x onerror="alert(1)">'


def _fit(data: Any, estimator: Any, its: int = 200) -> Any:
    return optimize(data, estimator, max_its=its, delta=1e-6, seed=3, backend="local")


@pytest.fixture(scope="module")
def records() -> tuple[Any, list[dict[str, Any]]]:
    """A 2-component record mixture (gaussian, categorical, poisson) fitted to 400 sampled rows."""
    truth = MixtureDistribution(
        [
            RecordDistribution(
                {
                    "spend": GaussianDistribution(-3.0, 1.0),
                    "channel": CategoricalDistribution({"web": 0.8, "app": 0.15, "store": 0.05}),
                    "items": PoissonDistribution(2.0),
                }
            ),
            RecordDistribution(
                {
                    "spend": GaussianDistribution(3.0, 1.0),
                    "channel": CategoricalDistribution({"web": 0.1, "app": 0.3, "store": 0.6}),
                    "items": PoissonDistribution(9.0),
                }
            ),
        ],
        [0.4, 0.6],
    )
    rows = truth.sampler(5).sample(400)
    fields = {"spend": GaussianEstimator(), "channel": CategoricalEstimator(), "items": _poisson()}
    return _fit(rows, MixtureEstimator([RecordEstimator(fields)] * 2)), rows


def _poisson() -> Any:
    from mixle_spark.stats import PoissonEstimator

    return PoissonEstimator()


@pytest.fixture(scope="module")
def vectors() -> tuple[Any, np.ndarray]:
    """A 2-component 3-D Gaussian mixture fitted to 500 sampled rows (numpy)."""
    covar = np.array([[1.0, 0.6, 0.0], [0.6, 1.0, 0.0], [0.0, 0.0, 0.5]])
    truth = MixtureDistribution(
        [
            MultivariateGaussianDistribution([0.0, 0.0, 0.0], covar),
            MultivariateGaussianDistribution([5.0, 2.0, -3.0], np.eye(3)),
        ],
        [0.5, 0.5],
    )
    x = np.asarray(truth.sampler(2).sample(500))
    return _fit(x, MixtureEstimator([MultivariateGaussianEstimator(3)] * 2)), x


@pytest.fixture(scope="module")
def gaussian() -> tuple[Any, np.ndarray]:
    x = np.random.default_rng(1).normal(2.0, 3.0, 300)
    return _fit(x, GaussianEstimator(), its=5), x


@pytest.fixture
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import matplotlib`` fail, as when the plot extra is not installed."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)


def _section(page: str, name: str) -> str:
    match = re.search(rf'<section id="{name}">(.*?)</section>', page, re.S)
    assert match, f"no section {name}"
    return match.group(1)


def _overview(page: str) -> dict[str, str]:
    return dict(re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td></tr>", _section(page, "overview")))


def _pngs(page: str) -> list[bytes]:
    return [base64.b64decode(data) for data in PNG.findall(page)]


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _assert_self_contained(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert re.findall(r'<section id="([^"]+)">', page) == list(SECTIONS)
    assert "<script" not in page.lower()
    links = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert links and all(link.startswith(("data:image/png;base64,", "#")) for link in links)
    assert "http://" not in page and "https://" not in page


# -- every family, with and without matplotlib ---------------------------------------------------


@pytest.mark.parametrize("plot", [True, False], ids=["matplotlib", "plain"])
@pytest.mark.parametrize("case", ["records", "vectors", "gaussian"])
def test_every_section_with_and_without_matplotlib(
    case: str, plot: bool, request: pytest.FixtureRequest
) -> None:
    if plot:
        pytest.importorskip("matplotlib")
    else:
        request.getfixturevalue("no_matplotlib")
    model, sample = request.getfixturevalue(case)
    page = report_html(model, sample=sample)
    _assert_self_contained(page)

    result = model.fit_result
    facts = _overview(page)
    ll, rows, k = result.log_likelihood, len(sample), count_free_parameters(model)
    assert facts["rows"] == str(rows) and facts["iterations"] == str(result.n_iter)
    assert facts["converged"] == ("yes" if result.converged else "no")
    assert float(facts["final log-likelihood"]) == pytest.approx(ll, rel=1e-9)
    assert float(facts["BIC"]) == pytest.approx(information_criteria(ll, k, rows)["bic"], rel=1e-9)
    assert float(facts["AIC"]) == pytest.approx(2 * k - 2 * ll, rel=1e-9)

    history = _section(page, "log-likelihood")
    assert history.count("<tr><td class=num>") == len(result.history) == result.n_iter + 1
    mixture = case != "gaussian"
    if plot:
        sizes = [_png_size(png) for png in _pngs(page)]
        assert len(sizes) == (3 if mixture else 2)  # history, weights (a mixture), projection
        assert all(w > 300 and h > 100 for w, h in sizes)
        assert "<svg" not in page and PLOT_HINT not in page
    else:
        assert "<img" not in page and history.count("<svg") == 1 and "<polyline" in history
        assert page.count(PLOT_HINT) == 2  # at the top and in the projection section
    projection = _section(page, "projection")
    assert f"{rows} rows with finite values" in projection


def test_weights_match_the_model(records: tuple[Any, Any]) -> None:
    model, rows = records
    weights = _section(report_html(model, sample=rows), "weights")
    shown = [float(w) for w in re.findall(r"<td>component \d+</td><td class=num>([\d.]+)</td>", weights)]
    np.testing.assert_allclose(shown, model.w, atol=5e-5)
    assert sorted(shown) == pytest.approx([0.4, 0.6], abs=0.06)  # the fit found the truth


def test_a_single_gaussian_has_no_weights_and_one_parameter_column(gaussian: tuple[Any, Any]) -> None:
    model, x = gaussian
    page = report_html(model, sample=x)
    assert "n/a: the model is a single gaussian, not a mixture." in _section(page, "weights")
    params = _section(page, "parameters")
    assert "<th>model</th>" in params and "<th>component" not in params
    assert f"<td>mu</td><td>{model.mu:.4g}</td>" in params
    assert f"<td>sigma2</td><td>{model.sigma2:.4g}</td>" in params
    assert "x (standardised)" in _section(page, "projection")  # one column: no PCA needed


# -- parameters: records, categorical pmaps, vectors and covariances -----------------------------


def test_record_parameters_show_each_field_per_component(records: tuple[Any, Any]) -> None:
    model, _ = records
    params = _section(report_html(model), "parameters")
    header = re.findall(r"<th>([^<]*)</th>", params)
    assert header == ["field", "family", "parameter"] + [
        f"component {k} (w {w:.3f})" for k, w in enumerate(model.w)
    ]
    body = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td>", params)
    assert body == [
        ("spend", "gaussian", "mu"),
        ("spend", "gaussian", "sigma2"),
        ("channel", "categorical", "pmap"),
        ("items", "poisson", "lam"),
    ]
    for comp in model.components:
        channel = comp.fields["channel"].pmap
        top = max(channel, key=channel.get)
        assert f"&#x27;{top}&#x27;: {channel[top]:.3f}" in params  # the top label leads, escaped
        assert f"<td>{comp.fields['items'].lam:.4g}</td>" in params


def test_vector_means_and_covariances_are_summarised(vectors: tuple[Any, Any]) -> None:
    model, _ = vectors
    params = _section(report_html(model), "parameters")
    for comp in model.components:
        mu = ", ".join(f"{v:.4g}" for v in comp.mu)
        assert f"<td>[{mu}]</td>" in params
        d = np.sqrt(np.diag(comp.covar))
        corr = comp.covar / np.outer(d, d)
        top = np.max(np.abs(corr[~np.eye(3, dtype=bool)]))
        diag = ", ".join(f"{v:.4g}" for v in np.diag(comp.covar))
        assert f"3×3, diagonal [{diag}], max |correlation| {top:.3f}" in params
    assert "<td>(top level)</td><td>multivariate_gaussian</td><td>covar</td>" in params


def test_long_vocabularies_and_vectors_are_cut_short() -> None:
    labels = {f"label{i:02d}": (i + 1) / 210 for i in range(20)}
    model = RecordDistribution(
        {
            "c": CategoricalDistribution(labels),
            "v": MultivariateGaussianDistribution(np.arange(10.0), np.eye(10)),
        }
    )
    params = _section(report_html(model), "parameters")
    top = ", ".join(f"&#x27;label{i:02d}&#x27;: {(i + 1) / 210:.3f}" for i in range(19, 14, -1))
    assert f"<td>{top}, … (15 more)</td>" in params
    assert "<td>[0, 1, 2, 3, 4, 5, … (10 values)]</td>" in params
    assert "10×10, diagonal [1, 1, 1, 1, 1, 1, … (10 values)], max |correlation| 0.000" in params


# -- escaping --------------------------------------------------------------------------------------


def test_names_labels_and_titles_are_escaped() -> None:
    comp = {EVIL: GaussianDistribution(0.0, 1.0), "c": CategoricalDistribution({"</td><b>x": 1.0})}
    model = MixtureDistribution([RecordDistribution(comp), RecordDistribution(comp)], [0.5, 0.5])
    sample = [{EVIL: 0.5, "c": "</td><b>x"}, {EVIL: -1.0, "c": "</td><b>x"}, {EVIL: 2.0, "c": "</td><b>x"}]
    page = report_html(model, sample=sample, title="<script>alert('t')</script>", summary={"input": EVIL})
    assert EVIL not in page and "<script" not in page and "<b>" not in page
    escaped = "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"
    assert _overview(page)["input"] == escaped
    assert f"<td>{escaped}</td><td>gaussian</td><td>mu</td>" in _section(page, "parameters")
    assert "&#x27;&lt;/td&gt;&lt;b&gt;x&#x27;: 1.000" in page
    assert "<title>&lt;script&gt;alert(&#x27;t&#x27;)&lt;/script&gt;</title>" in page
    assert f"numeric fields {escaped}," in _section(page, "projection")


# -- the projection --------------------------------------------------------------------------------


def test_projection_counts_components_and_reports_explained_variance(vectors: tuple[Any, Any]) -> None:
    model, x = vectors
    projection = _section(report_html(model, sample=x), "projection")
    counts = [int(c) for c in re.findall(r"<tr><td>\d+</td><td class=num>(\d+)</td>", projection)]
    assert counts == np.bincount(model.predict(x), minlength=2).tolist()
    z = (x - x.mean(axis=0)) / x.std(axis=0)
    eig = np.sort(np.linalg.eigvalsh(z.T @ z))[::-1]
    share = [f"{100 * e / eig.sum():.1f} %" for e in eig[:2]]
    assert f"mean PC1 ({share[0]} of variance)" in projection
    assert f"mean PC2 ({share[1]} of variance)" in projection
    assert "<td>x[0]</td>" in projection and "<td>x[2]</td>" in projection  # the loadings


def test_projection_reads_numeric_and_vector_columns_only() -> None:
    frame = pd.DataFrame(
        {
            "a": [1.0, 2.0, np.nan, 4.0],
            "flag": [True, False, True, True],
            "label": ["x", "y", "z", "x"],
            "v": [np.array([1.0, 2.0]), [3, 4], None, np.array([5.0, 7.0])],
            "tags": [["a"], ["b", "c"], [], ["a"]],
            "ragged": [[1.0], [1.0, 2.0], [3.0], [4.0]],
        }
    )
    matrix, names = _numeric_columns(frame)
    assert names == ["a", "v[0]", "v[1]"]
    np.testing.assert_array_equal(matrix, [[1, 1, 2], [2, 3, 4], [np.nan, np.nan, np.nan], [4, 5, 7]])
    assert _numeric_columns([[1, 2], [3, 4]])[1] == ["x[0]", "x[1]"]
    assert _numeric_columns([1.5, 2.5])[1] == ["x"]
    assert _numeric_columns(["a", "b"])[1] == []


@pytest.mark.parametrize(
    ("sample", "note"),
    [
        (None, "Skipped: no sample was given."),
        ([{"c": "web", "x": 1.0}, {"c": "app", "x": 2.0}], "Skipped: the model has no numeric fields."),
        ([{"c": "web", "x": 1.0}], "Skipped: fewer than 2 rows with finite numeric values."),
    ],
    ids=["no-sample", "no-numbers", "one-row"],
)
def test_projection_is_skipped_with_a_note(sample: Any, note: str) -> None:
    fields: dict[str, Any] = {"c": CategoricalDistribution({"web": 0.5, "app": 0.5})}
    if "fewer" in note:  # a numeric field, but a single row to show
        fields["x"] = GaussianDistribution(0.0, 1.0)
    comp = RecordDistribution(fields)
    model = MixtureDistribution([comp, comp], [0.5, 0.5])
    projection = _section(report_html(model, sample=sample), "projection")
    assert note in projection and "<img" not in projection and "<table" not in projection


# -- history from a summary, write_report ----------------------------------------------------------


def test_a_summary_supplies_history_rows_and_timings() -> None:
    model = GaussianDistribution(0.5, 2.0)  # built by hand: no fit_result
    assert "No iteration history" in _section(report_html(model), "log-likelihood")
    assert _overview(report_html(model))["BIC / AIC"] == "n/a (no row count)"
    history = [
        {"iteration": 0, "log_likelihood": -120.0, "gain": None, "rows": 50, "seconds": 0.1},
        {"iteration": 1, "log_likelihood": -100.0, "gain": 20.0, "rows": 50, "seconds": 0.1},
    ]
    summary = {"rows": 50, "log_likelihood": -100.0, "history": history, "timings": {"em": 1.25}}
    page = report_html(model, summary={**summary, "warnings": ["EM did not converge"]})
    facts = _overview(page)
    assert facts["rows"] == "50" and facts["time: EM iterations"] == "1.25 s"
    assert float(facts["BIC"]) == pytest.approx(2 * math.log(50) + 200.0)
    assert facts["warning"] == "EM did not converge"
    assert _section(page, "log-likelihood").count("<tr><td class=num>") == 2


def test_write_report_replaces_the_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "report.html"
    write_report(GaussianDistribution(1.0, 1.0), target, title="an earlier report")
    path = write_report(GaussianDistribution(0.0, 1.0), target, title="T")
    assert path == target and target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert "<title>T</title>" in target.read_text(encoding="utf-8")

    def fail(*_args: Any, **_kwargs: Any) -> str:
        raise RuntimeError("boom")

    monkeypatch.setattr(_page, "report_html", fail)
    with pytest.raises(RuntimeError, match="boom"):
        write_report(GaussianDistribution(0.0, 1.0), target)
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
    assert "<title>T</title>" in target.read_text(encoding="utf-8")


# -- em_fit --report -------------------------------------------------------------------------------


def _em_fit() -> ModuleType:
    return job_module("em_fit", "_report")


FIT_ARGS = (
    "--backend",
    "local",
    "--input",
    str(SAMPLE),
    "--model",
    str(SPEC),
    "--trials",
    "1",
    "--seed",
    "7",
)


def test_em_fit_report_is_written_with_the_model(tmp_path: Path) -> None:
    out = tmp_path / "fit"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "jobs" / "em_fit.py"),
            *FIT_ARGS,
            "--output",
            str(out),
            "--quiet",
            "--report",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "model.json",
        "report.html",
        "summary.json",
        "trace.jsonl",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["fit"]  # no staging directory left behind
    assert f"and {out / 'report.html'}" in proc.stdout
    page = (out / "report.html").read_text(encoding="utf-8")
    _assert_self_contained(page)
    summary = json.loads((out / "summary.json").read_text())
    facts = _overview(page)
    assert facts["rows"] == "5000" and facts["input"] == str(SAMPLE) and facts["backend"] == "local"
    assert float(facts["BIC"]) == pytest.approx(summary["bic"], rel=1e-9)
    projection = _section(page, "projection")
    assert (
        "2000 rows with finite values in the model&#x27;s numeric fields log(amount), n_items, " in projection
    )
    assert "<td>tags.dist</td><td>categorical</td><td>pmap</td>" in _section(page, "parameters")
    # one timing vocabulary: summary.json, the page and stderr say the same, each measured once
    timings = summary["timings"]
    assert list(timings) == [k for k in TIMINGS if k in timings]
    assert {"read", "encode", "seeding", "em", "scoring", "report", "total"} <= set(timings)
    shown = {k: v for k, v in facts.items() if k.startswith("time: ")}
    assert shown == {
        f"time: {TIMINGS[k]}": f"{float(f'{timings[k]:.4g}'):.4g} s"
        for k in timings
        if k not in ("report", "total")
    }
    assert "EM time" not in facts
    assert f"em_fit: timings: {timings_line(timings)}" in proc.stderr
    assert timings["total"] >= sum(v for k, v in timings.items() if k != "total") - 1e-6
    # the segment profile, its sizes over the whole table
    segments = summary["segments"]
    assert sum(c["rows"] for c in segments["components"]) == 5000
    assert segments["assignments"]["basis"] == "the whole table"
    assert sum(segments["assignments"]["certainty_histogram"]) == 5000
    model = json.loads((out / "model.json").read_text())["model"]
    amount = next(row for row in segments["fields"] if row["field"] == "amount")
    for cell, comp in zip(amount["cells"], model["components"], strict=True):
        assert cell["median"] == pytest.approx(math.exp(comp["fields"]["amount"]["mu"]), rel=1e-12)
    profile = _section(page, "segments")
    assert "rows (hard assignment)" in profile and "Assignment certainty" in profile


def test_em_fit_without_report_writes_no_page_and_a_failed_report_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _em_fit()
    out = tmp_path / "fit"
    assert job.main([*FIT_ARGS, "--output", str(out), "--quiet", "--max-its", "2"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["model.json", "summary.json", "trace.jsonl"]

    def fail(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("report failed")

    monkeypatch.setattr(report, "report_html", fail)
    code = job.main([*FIT_ARGS, "--output", str(out), "--quiet", "--max-its", "3", "--overwrite", "--report"])
    assert code == 1
    assert "em_fit: error: RuntimeError: report failed" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [
        "model.json",
        "summary.json",
        "trace.jsonl",
    ]  # the old fit, whole
    assert json.loads((out / "summary.json").read_text())["iterations"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["fit"]
