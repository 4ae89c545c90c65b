"""Fit reports: one self-contained HTML page describing a fitted model.

The page has an overview (rows, iterations, convergence, log-likelihood, BIC / AIC, timings), the
segment profiles (:mod:`mixle_spark.profile`: each component's fields in the data's units side by side,
its size by hard assignment and how sure the assignments are), the log-likelihood per EM iteration, the
component weights, every field's parameters per component (read from ``model.to_dict()``, so any family
works) and a 2-D projection of a sample coloured by the most probable component. With matplotlib (the
``plot`` extra) the figures are PNGs inlined as base64; without it the page has tables, a small inline
SVG chart of the log-likelihood and a note on how to get the figures (the segment profiles are HTML
either way). The page loads nothing from elsewhere and needs no script.

>>> from mixle_spark.stats import GaussianDistribution
>>> page = report_html(GaussianDistribution(0.0, 1.0), title="<one Gaussian>")
>>> "<title>&lt;one Gaussian&gt;</title>" in page and 'id="parameters"' in page
True
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from mixle_spark import _report_figures as figures
from mixle_spark._version import __version__
from mixle_spark.profile import CERTAINTY_BINS, assignment_summary, segment_profile
from mixle_spark.stats.base import Distribution
from mixle_spark.summary import TIMINGS, count_free_parameters, information_criteria

__all__ = ["PLOT_HINT", "SECTIONS", "describe_parameters", "report_html", "write_report"]

SECTIONS = ("overview", "segments", "log-likelihood", "weights", "parameters", "projection")
"""The ``id`` of every ``<section>`` of a report, in page order; a fit that chose its number of
components (``em_fit --k``: the summary's ``model_selection``) has ``model-selection`` after ``overview``."""

PLOT_HINT = "Figures need matplotlib: install mixle-spark[plot]."

_CSS = """
body { font-family: sans-serif; margin: 2em auto; max-width: 70em; color: #222; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.bar { background: #1f77b4; height: 0.8em; }
.note { color: #555; font-style: italic; }
.scroll { max-height: 24em; overflow-y: auto; display: inline-block; }
.labels { border-collapse: collapse; margin: 0; font-size: 1em; }
.labels td { border: none; padding: 0 0.4em 0 0; white-space: nowrap; }
.track { position: relative; width: 9em; height: 0.9em; background: #eee; margin-top: 0.2em; }
.box { position: absolute; top: 0; height: 0.9em; background: #9ecae1; }
.tick { position: absolute; top: -0.1em; width: 2px; height: 1.1em; background: #08306b; }
.hist { display: flex; align-items: flex-end; gap: 1px; height: 6em; width: 30em; }
.hist { border-bottom: 1px solid #333; }
.hist div { flex: 1; background: #1f77b4; min-height: 1px; }
.axis { display: flex; justify-content: space-between; width: 30em; color: #555; }
.axis span { font-size: 0.8em; }
img.figure, svg.figure { display: block; margin: 0.5em 0; max-width: 100%; height: auto; }
"""


class _Html(str):
    """Markup put into the page as it is; every other string is escaped."""


def _esc(value: Any) -> str:
    return value if isinstance(value, _Html) else html.escape(str(value))


def _num(value: Any, digits: int = 6) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.{digits}g}"
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], numeric: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{' class=num' if j in numeric else ''}>{_esc(cell)}</td>" for j, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _note(text: str) -> str:
    return f'<p class="note">{_esc(text)}</p>'


def _section(section_id: str, heading: str, body: str) -> str:
    return f'<section id="{section_id}">\n<h2>{_esc(heading)}</h2>\n{body}\n</section>'


def write_report(
    model: Distribution,
    path: str | os.PathLike[str],
    *,
    sample: Any = None,
    title: str | None = None,
    summary: Mapping[str, Any] | None = None,
) -> Path:
    """Write the fit report of ``model`` to ``path`` (an HTML file) and return the path.

    The file is written beside ``path`` under a temporary name and renamed into place, so a reader
    never sees half a page. The arguments are those of :func:`report_html`.
    """
    target = Path(path)
    text = report_html(model, sample=sample, title=title, summary=summary)
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, target)
    finally:
        if partial.exists():
            partial.unlink()
    return target


def report_html(
    model: Distribution,
    *,
    sample: Any = None,
    title: str | None = None,
    summary: Mapping[str, Any] | None = None,
) -> str:
    """The fit report of ``model`` as one self-contained HTML page.

    Parameters
    ----------
    model : Distribution
        A fitted model; its ``fit_result`` (set by ``optimize``) gives the history and convergence.
    sample : numpy array, pandas DataFrame, pyarrow Table or list of records, optional
        A few thousand rows of the data for the projection; its numeric columns (and the entries
        of fixed-length numeric vector columns) are standardised and projected on their first two
        principal components. Without it, or without numeric columns, the projection is skipped.
    title : str, optional
        The page title (default: names the model's family).
    summary : mapping, optional
        A run summary such as em_fit's ``summary.json``: ``rows``, ``input``, ``backend``,
        ``timings`` (:data:`mixle_spark.summary.TIMINGS`), ``warnings``, ``segments`` (a
        :func:`mixle_spark.profile.segment_profile` with its assignments over the whole table; without
        it the profile's sizes come from ``sample``), and the ``history`` when the model has no
        ``fit_result``.

    Returns
    -------
    str
        The HTML page; every text from the model, sample or summary is escaped.
    """
    spec = model.to_dict()
    info = dict(summary or {})
    history = _history(model, info)
    figure_class = figures.load_matplotlib()
    title = title or f"mixle_spark fit report: {_family(spec)}"
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    body = "\n".join(
        [
            _overview(model, spec, history, info),
            _model_selection(info, figure_class),
            _segments(model, sample, info),
            _log_likelihood(history, figure_class),
            _weights(spec, figure_class),
            _parameters(spec),
            _projection(model, sample, figure_class),
        ]
    )
    hint = "" if figure_class is not None else _note(PLOT_HINT)
    shown = [*SECTIONS[:1], *(["model-selection"] if info.get("model_selection") else []), *SECTIONS[1:]]
    nav = " · ".join(f'<a href="#{s}">{s}</a>' for s in shown)
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{_esc(title)}</title>\n'
        f"<style>{_CSS}</style>\n</head>\n<body>\n<h1>{_esc(title)}</h1>\n"
        f'<p class="note">mixle_spark {_esc(__version__)}, {stamp}</p>\n<nav>{nav}</nav>\n{hint}\n'
        f"{body}\n</body>\n</html>\n"
    )


# -- overview and history ----------------------------------------------------------------------


def _family(spec: Mapping[str, Any]) -> str:
    if spec.get("type") == "mixture":
        kinds = sorted({str(c.get("type")) for c in spec["components"]})
        return f"mixture of {len(spec['components'])} {' / '.join(kinds)} components"
    return str(spec.get("type"))


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _history(model: Distribution, info: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Iterations as dicts (iteration, log_likelihood, gain, rows, seconds), from the model's
    ``fit_result`` or else the summary's ``history``."""
    result = getattr(model, "fit_result", None)
    if result is not None:
        return [
            {
                "iteration": r.iteration,
                "log_likelihood": _finite(r.log_likelihood),
                "gain": _finite(r.gain),
                "rows": r.nobs,
                "seconds": r.seconds,
            }
            for r in result.history
        ]
    return [dict(r) for r in info.get("history", [])]


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _overview(
    model: Distribution, spec: Mapping[str, Any], history: list[dict[str, Any]], info: Mapping[str, Any]
) -> str:
    result = getattr(model, "fit_result", None)
    last = history[-1] if history else {}
    rows = _first(info.get("rows"), last.get("rows"))
    ll = _finite(
        _first(result and result.log_likelihood, info.get("log_likelihood"), last.get("log_likelihood"))
    )
    facts: list[tuple[str, Any]] = [("model", _family(spec))]
    facts += [
        (label, info[key]) for key, label in (("input", "input"), ("backend", "backend")) if key in info
    ]
    facts += [
        ("rows", _num(rows)),
        ("iterations", _num(_first(result and result.n_iter, info.get("iterations")))),
        ("converged", _num(_first(result and result.converged, info.get("converged")))),
        ("stopped because", _first(result and result.stopped_because, info.get("stopped_because")) or "n/a"),
        ("final log-likelihood", _num(ll, 10)),
    ]
    n_params = count_free_parameters(model)
    if ll is not None and isinstance(rows, (int, float, np.number)) and rows > 0:
        criteria = information_criteria(ll, n_params, float(rows))
        facts += [("log-likelihood per row", _num(ll / rows)), ("free parameters", n_params)]
        facts += [("BIC", _num(criteria["bic"], 10)), ("AIC", _num(criteria["aic"], 10))]
    else:
        facts += [("free parameters", n_params), ("BIC / AIC", "n/a (no row count)")]
    facts.append(("seed", _num(_first(result and result.seed, info.get("seed")))))
    timings = dict(info.get("timings") or {})
    if not timings and result is not None:
        timings = {"em": result.seconds}
    ordered = [key for key in TIMINGS if key in timings] + [key for key in timings if key not in TIMINGS]
    facts += [(f"time: {TIMINGS.get(key, key)}", f"{_num(timings[key], 4)} s") for key in ordered]
    facts += [("warning", w) for w in info.get("warnings") or []]
    return _section("overview", "Overview", _table(["", "value"], facts))


def _model_selection(info: Mapping[str, Any], figure_class: Any) -> str:
    """The criterion per number of components (``select_k``; em_fit ``--k``), when there was a choice."""
    found = info.get("model_selection")
    if not found:
        return ""
    criterion, table = str(found["criterion"]), list(found["table"])
    key = "validation_log_likelihood" if criterion == "validation" else criterion
    label = "validation log-likelihood" if criterion == "validation" else criterion.upper()
    points = [(row["k"], row[key]) for row in table if row.get(key) is not None]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    if not points:
        chart = ""
    elif figure_class is not None:
        chart = figures.log_likelihood_png(figure_class, xs, ys, xlabel="components (k)", ylabel=label)
    else:
        chart = figures.log_likelihood_svg(xs, ys, xlabel="components (k)", ylabel=label)
    rows = [
        [
            f"{row['k']}{' (chosen)' if row['k'] == found['best_k'] else ''}",
            _num(row["log_likelihood"]),
            row["free_parameters"],
            _num(row["bic"]),
            _num(row["aic"]),
            row["iterations"],
            "yes" if row["converged"] else "no",
        ]
        for row in table
    ]
    header = ["k", "log-likelihood", "free parameters", "BIC", "AIC", "iterations", "converged"]
    body = _table(header, rows, numeric=range(1, 6))
    heading = f"Model selection: k = {found['best_k']} by {label}"
    return _section("model-selection", heading, f'{chart}<div class="scroll">{body}</div>')


def _log_likelihood(history: list[dict[str, Any]], figure_class: Any) -> str:
    points = [(h["iteration"], h["log_likelihood"]) for h in history if h.get("log_likelihood") is not None]
    if not points:
        return _section(
            "log-likelihood",
            "Log-likelihood per iteration",
            _note("No iteration history: the model carries no fit_result and the summary no history."),
        )
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    if figure_class is not None:
        chart = figures.log_likelihood_png(figure_class, xs, ys)
    else:
        chart = figures.log_likelihood_svg(xs, ys)
    rows = [
        [
            h["iteration"],
            _num(h.get("log_likelihood")),
            _num(h.get("gain"), 4) if h.get("gain") is not None else "",
            _num(h.get("rows")),
            _num(h.get("seconds"), 3),
        ]
        for h in history
    ]
    table = _table(["iteration", "log-likelihood", "gain", "rows", "seconds"], rows, numeric=range(5))
    return _section(
        "log-likelihood", "Log-likelihood per iteration", f'{chart}<div class="scroll">{table}</div>'
    )


def _weights(spec: Mapping[str, Any], figure_class: Any) -> str:
    if spec.get("type") != "mixture":
        return _section(
            "weights",
            "Component weights",
            _note(f"n/a: the model is a single {spec.get('type')}, not a mixture."),
        )
    w = [float(v) for v in spec["w"]]
    top = max(w) or 1.0
    rows = [
        [f"component {k}", f"{v:.4f}", _Html(f'<div class="bar" style="width:{100 * v / top:.1f}px"></div>')]
        for k, v in enumerate(w)
    ]
    chart = figures.weights_png(figure_class, w) if figure_class is not None else ""
    return _section("weights", "Component weights", chart + _table(["component", "weight", ""], rows, [1]))


# -- segments --------------------------------------------------------------------------------------

_LABELS_SHOWN = 12
"""Labels a categorical cell lists before the rest fold under "show all"."""


def _segments(model: Distribution, sample: Any, info: Mapping[str, Any]) -> str:
    """Each component's fields in the data's units, side by side, with sizes and certainty."""
    heading = "Segment profiles"
    profile = info.get("segments")
    if profile is None or profile.get("assignments") is None:  # sizes from the sample, said so
        assignments = None
        if sample is not None and hasattr(model, "predict_proba") and _length(sample) > 0:
            n = _length(sample)
            assignments = assignment_summary(model.predict_proba(sample), f"a sample of {n:,} rows")
        profile = segment_profile(model, assignments)
    comps, rows = profile["components"], profile["fields"]
    parts = [_sizes(comps, profile.get("assignments"))]
    header = ["field", *(f"component {c['component']}" for c in comps)]
    table_rows = []
    for row in rows:
        cells = [_cell(row, cell, _span(row)) for cell in row["cells"]]
        table_rows.append([_Html(f"{_esc(row['field'])}<br><small>{_esc(row['family'])}</small>"), *cells])
    if table_rows:
        parts.append(_table(header, table_rows))
        parts.append(
            _note(
                "Numbers: the median and quartiles where the family has them (log-normal, Gaussian, "
                "exponential), else the mean and standard deviation; the bar spans the quartiles (or one "
                "standard deviation each side) on a scale shared across the row, the tick marks the "
                "median (or mean). Labels: every label's probability within the component."
            )
        )
    parts.append(_certainty(profile.get("assignments")))
    return _section("segments", heading, "\n".join(p for p in parts if p))


def _sizes(comps: Sequence[Mapping[str, Any]], assignments: Mapping[str, Any] | None) -> str:
    has_rows = assignments is not None and all("rows" in c for c in comps)
    header = ["component", "weight", ""]
    if has_rows:
        header += ["rows (hard assignment)", "share", "mean certainty"]
    top = max((float(c["weight"]) for c in comps), default=1.0) or 1.0
    rows = []
    for c in comps:
        w = float(c["weight"])
        row: list[Any] = [c["component"], f"{w:.4f}", _Html(_bar(100 * w / top))]
        if has_rows:
            sure = c.get("mean_certainty")
            row += [f"{c['rows']:,}", f"{100 * c['share']:.1f}%", "n/a" if sure is None else f"{sure:.3f}"]
        rows.append(row)
    caption = ""
    if has_rows:
        assert assignments is not None
        caption = _note(
            f"Rows over {assignments.get('basis') or 'the data'}, each to its most probable component; "
            "certainty is a row's largest posterior probability."
        )
    return caption + _table(header, rows, numeric=(1, 3, 4, 5))


def _bar(percent: float) -> str:
    return f'<div class="bar" style="width:{max(0.0, min(percent, 100.0)):.1f}px"></div>'


def _span(row: Mapping[str, Any]) -> tuple[float, float]:
    """The shared scale of a number row: the lowest low and the highest high of its cells."""
    if row["kind"] != "number":
        return 0.0, 1.0
    lows, highs, _ = zip(*(_range(c) for c in row["cells"]), strict=True)
    finite = [v for v in (*lows, *highs) if math.isfinite(v)]
    return (min(finite), max(finite)) if finite else (0.0, 1.0)


def _range(cell: Mapping[str, Any]) -> tuple[float, float, float]:
    if "median" in cell:
        return cell["q1"], cell["q3"], cell["median"]
    mean, sd = cell["mean"], cell.get("sd", 0.0)
    return mean - sd, mean + sd, mean


def _cell(row: Mapping[str, Any], cell: Mapping[str, Any], span: tuple[float, float]) -> Any:
    kind = row["kind"]
    if kind == "labels":
        labels = list(cell["labels"])

        def lines(items: Sequence[Any]) -> str:
            return "".join(
                f"<tr><td>{_esc(label)}</td><td>{_bar(100 * float(p))}</td>"
                f'<td class="num">{100 * float(p):.1f}%</td></tr>'
                for label, p in items
            )

        html_text = f'<table class="labels">{lines(labels[:_LABELS_SHOWN])}</table>'
        if len(labels) > _LABELS_SHOWN:
            rest = labels[_LABELS_SHOWN:]
            html_text += (
                f"<details><summary>show all {len(labels)} labels</summary>"
                f'<table class="labels">{lines(rest)}</table></details>'
            )
        return _Html(html_text)
    if kind == "share":
        return _Html(f"{_esc(cell['text'])}{_bar(100 * float(cell['share']))}")
    if kind == "number" and "mean" in cell and math.isfinite(cell.get("sd", 0.0)):
        lo, hi, mid = _range(cell)
        low, high = span
        width = (high - low) or 1.0

        def at(v: float) -> float:
            return 100 * (v - low) / width

        box = f'<div class="box" style="left:{at(lo):.1f}%;width:{at(hi) - at(lo):.1f}%"></div>'
        track = f'<div class="track">{box}<div class="tick" style="left:{at(mid):.1f}%"></div></div>'
        return _Html(f"{_esc(cell['text'])}{track}")
    return cell["text"]


def _certainty(assignments: Mapping[str, Any] | None) -> str:
    """The distribution of the rows' largest posterior probability, as bars."""
    if not assignments:
        return ""
    hist = [int(v) for v in assignments["certainty_histogram"]]
    total = sum(hist)
    if total == 0:
        return ""
    top = max(hist)
    bars = "".join(
        f'<div title="{j / CERTAINTY_BINS:.2f}-{(j + 1) / CERTAINTY_BINS:.2f}: {v:,} rows" '
        f'style="height:{100 * v / top:.1f}%"></div>'
        for j, v in enumerate(hist)
    )
    sure = sum(hist[int(0.9 * CERTAINTY_BINS) :]) / total
    unsure = sum(hist[: CERTAINTY_BINS // 2 + CERTAINTY_BINS // 10]) / total
    text = (
        f"How sure the assignments are: rows by their largest posterior probability (0 to 1, in "
        f"{CERTAINTY_BINS} bins). {100 * sure:.1f}% of rows are assigned with probability 0.9 or more; "
        f"{100 * unsure:.1f}% with less than 0.6."
    )
    axis = '<div class="axis"><span>0</span><span>0.5</span><span>1</span></div>'
    return f'<h3>Assignment certainty</h3>{_note(text)}<div class="hist">{bars}</div>{axis}'


def describe_parameters(spec: Mapping[str, Any]) -> str:
    """A model's (or field's) parameters as one short text: ``"mu 0.5; sigma2 2"``."""
    return "; ".join(f"{path + ' ' if path else ''}{key} {text}" for path, _, key, text in _flatten(spec, ""))


# -- parameters ----------------------------------------------------------------------------------


def _parameters(spec: Mapping[str, Any]) -> str:
    if spec.get("type") == "mixture":
        columns = [f"component {k} (w {float(w):.3f})" for k, w in enumerate(spec["w"])]
        parts = list(spec["components"])
    else:
        columns, parts = ["model"], [spec]
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for k, part in enumerate(parts):
        for path, family, key, text in _flatten(part, ""):
            row = table.setdefault((path, key), {"family": family, "cells": [""] * len(parts)})
            row["cells"][k] = text
    rows = [[path or "(top level)", row["family"], key, *row["cells"]] for (path, key), row in table.items()]
    body = _table(["field", "family", "parameter", *columns], rows)
    note = _note("Categorical fields show their five most probable labels; matrices their diagonal.")
    return _section("parameters", "Parameters per component", note + body)


def _flatten(spec: Mapping[str, Any], path: str) -> Iterator[tuple[str, str, str, str]]:
    """``(field path, family, parameter, value text)`` for every leaf parameter of ``spec``."""
    family = str(spec.get("type", "?"))
    for key, value in spec.items():
        if key == "type":
            continue
        if key == "fields" and isinstance(value, Mapping):
            for name, child in value.items():
                yield from _flatten(child, f"{path}.{name}" if path else str(name))
        elif isinstance(value, Mapping) and "type" in value:
            yield from _flatten(value, f"{path}.{key}" if path else key)
        elif isinstance(value, list) and value and all(isinstance(c, Mapping) and "type" in c for c in value):
            for i, child in enumerate(value):
                yield from _flatten(child, f"{path}.{key}[{i}]" if path else f"{key}[{i}]")
        else:
            yield path, family, key, _summarise(key, value)


def _numeric_array(value: Any) -> np.ndarray | None:
    if not isinstance(value, list) or not value:
        return None
    try:
        array = np.asarray(value)
    except ValueError:  # ragged nesting: not a vector or matrix
        return None
    return array if array.dtype.kind in "iuf" and array.ndim in (1, 2) else None


def _vector(values: np.ndarray, limit: int = 8) -> str:
    shown = ", ".join(_num(v, 4) for v in values[: limit if len(values) <= limit else 6])
    return f"[{shown}]" if len(values) <= limit else f"[{shown}, … ({len(values)} values)]"


def _summarise(key: str, value: Any) -> str:
    """A short text for one parameter value (pmaps: top labels; matrices: shape and diagonal)."""
    if (
        key == "pmap"
        and isinstance(value, list)
        and all(isinstance(kv, list) and len(kv) == 2 for kv in value)
    ):
        top = sorted(value, key=lambda kv: -float(kv[1]))[:5]
        more = f", … ({len(value) - 5} more)" if len(value) > 5 else ""
        return ", ".join(f"{label!r}: {float(p):.3f}" for label, p in top) + more
    array = _numeric_array(value)
    if array is not None and array.ndim == 1:
        return _vector(array)
    if array is not None:
        rows, cols = array.shape
        if rows != cols:
            return f"{rows}×{cols} matrix"
        text = f"{rows}×{cols}, diagonal {_vector(np.diag(array))}"
        diag = np.sqrt(np.abs(np.diag(array)))
        if rows > 1 and "cov" in key and np.all(diag > 0):
            corr = array / np.outer(diag, diag)
            text += f", max |correlation| {np.max(np.abs(corr[~np.eye(rows, dtype=bool)])):.3f}"
        return text
    if isinstance(value, (bool, int, float, np.number)) or value is None:
        return _num(value, 4)
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 120 else text[:117] + "…"


# -- projection ------------------------------------------------------------------------------------


def _projection(model: Distribution, sample: Any, figure_class: Any) -> str:
    heading = "2-D projection of the sample"
    if sample is None:
        return _section("projection", heading, _note("Skipped: no sample was given."))
    fields = _modelled_numeric(model)
    matrix, names = _numeric_columns(sample)
    labels, n_labels, proba = _assignments(model, sample)
    filled = 0
    if fields is not None:  # a record: the model's numeric fields, in the model's own scale
        if not fields:
            return _section("projection", heading, _note("Skipped: the model has no numeric fields."))
        matrix, names, means = _modelled_columns(matrix, names, fields)
        missing = ~np.isfinite(matrix)
        if missing.any() and proba is not None:  # each gap at its expected value given the row
            filled = int(missing.any(axis=1).sum())
            matrix = np.where(missing, proba @ means, matrix)
        source = "the model's numeric fields"
    elif not names:
        return _section("projection", heading, _note("Skipped: the sample has no numeric fields."))
    else:
        source = "the numeric columns"
    keep = np.isfinite(matrix).all(axis=1)
    dropped = int((~keep).sum())
    matrix, labels = matrix[keep], labels[keep]
    if len(matrix) < 2:
        return _section(
            "projection", heading, _note("Skipped: fewer than 2 rows with finite numeric values.")
        )
    coords, explained, loadings = _pca(matrix)
    axes = [f"PC{j + 1} ({100 * e:.1f} % of variance)" for j, e in enumerate(explained)]
    if coords.shape[1] == 1:  # one numeric column: spread the rows out by component instead
        jitter = np.random.default_rng(0).uniform(-0.3, 0.3, len(labels))
        coords = np.column_stack([coords[:, 0], labels + jitter])
        axes = [f"{names[0]} (standardised)", "component (jittered)"]
    shown = ", ".join(names[:8]) + (f", … ({len(names)} columns)" if len(names) > 8 else "")
    colour = "the most probable component (predict_proba)" if n_labels > 1 else "one colour (not a mixture)"
    text = (
        f"{len(matrix)} rows with finite values in {source} {shown}, standardised and projected "
        f"on their principal components; colour: {colour}."
    )
    if filled:
        text += (
            f" {filled} rows with a missing value are shown at its expected value given the row (the "
            "components' means weighted by the row's posterior probabilities)."
        )
    if dropped:
        share = 100 * dropped / (dropped + len(matrix))
        text += f" {dropped} rows ({share:.1f}%) had no finite value to show and are left out."
    caption = _note(text)
    counts = [int((labels == k).sum()) for k in range(n_labels)]
    if figure_class is not None:
        chart = figures.projection_png(figure_class, coords, labels, n_labels, axes)
    else:
        chart = _note(f"{PLOT_HINT} Rows per component and their mean position:")
    n_axes = len(explained)  # the jittered component axis of a single column has no mean worth showing
    mean_rows = [
        [
            k,
            counts[k],
            f"{100 * counts[k] / len(labels):.1f}%",
            *(_num(coords[labels == k, j].mean(), 4) if counts[k] else "" for j in range(n_axes)),
        ]
        for k in range(n_labels)
    ]
    header = ["component", "rows", "share", *(f"mean {a}" for a in axes[:n_axes])]
    body = caption + chart + _table(header, mean_rows, numeric=(1, 2, 3, 4))
    if loadings.shape[1] == 2:
        load_rows = [[name, _num(a, 3), _num(b, 3)] for name, (a, b) in zip(names, loadings, strict=True)]
        body += _table(["column", "PC1 loading", "PC2 loading"], load_rows, numeric=(1, 2))
    return _section("projection", heading, body)


_NUMERIC_FIELDS = (
    "gaussian",
    "log_gaussian",
    "exponential",
    "gamma",
    "beta",
    "student_t",
    "poisson",
    "geometric",
    "binomial",
    "negative_binomial",
)


def _modelled_numeric(model: Distribution) -> list[tuple[str, str, np.ndarray]] | None:
    """For a record model (or a mixture of records): ``(column, family, per-component means in the
    projection's scale, shape (k, width))`` for every numeric field (optional ones too: their present
    values); a log-normal field is projected as its logarithm. None when the model is not a record."""
    spec = model.to_dict()
    parts = list(spec["components"]) if spec.get("type") == "mixture" else [spec]
    if any(p.get("type") != "record" for p in parts):
        return None
    found: list[tuple[str, str, np.ndarray]] = []
    for name in parts[0]["fields"]:
        inner = [p["fields"][name] for p in parts]
        inner = [f["dist"] if f.get("type") == "optional" else f for f in inner]
        family = str(inner[0].get("type"))
        if any(f.get("type") != family for f in inner):
            continue
        if family in _NUMERIC_FIELDS:
            means = np.array([[_field_mean(f)] for f in inner], dtype=np.float64)
            found.append((str(name), family, means))
        elif family in ("diagonal_gaussian", "multivariate_gaussian"):
            found.append((str(name), family, np.array([f["mu"] for f in inner], dtype=np.float64)))
    return found


def _field_mean(spec: Mapping[str, Any]) -> float:
    """A numeric field's mean in the projection's scale (a log-normal's: of the logarithm)."""
    if spec["type"] in ("gaussian", "log_gaussian", "student_t"):
        return float(spec["mu"])
    from mixle_spark.profile import field_cell

    return float(field_cell(spec)["mean"])


def _modelled_columns(
    matrix: np.ndarray, names: list[str], fields: list[tuple[str, str, np.ndarray]]
) -> tuple[np.ndarray, list[str], np.ndarray]:
    """``(matrix, names, means)`` of the modelled fields: the sample's columns for them (missing as
    NaN, log-normal ones as logarithms) and each component's means there, shape (k, columns)."""
    index = {n: j for j, n in enumerate(names)}
    blocks, shown, means = [], [], []
    for name, family, centre in fields:
        if family in ("diagonal_gaussian", "multivariate_gaussian"):
            labels = [f"{name}[{j}]" for j in range(centre.shape[1])]
        else:
            labels = [f"log({name})" if family == "log_gaussian" else name]
        where = [index.get(label if family != "log_gaussian" else name) for label in labels]
        cols = [c for c in where if c is not None]
        if len(cols) != len(where):
            continue  # not in the sample (or not numeric there)
        block = matrix[:, cols].astype(np.float64)
        if family == "log_gaussian":
            with np.errstate(divide="ignore", invalid="ignore"):
                block = np.where(block > 0, np.log(np.where(block > 0, block, 1.0)), np.nan)
        blocks.append(block)
        shown += labels
        means.append(centre)
    if not blocks:
        return np.zeros((len(matrix), 0)), [], np.zeros((1, 0))
    return np.hstack(blocks), shown, np.hstack(means)


def _assignments(model: Distribution, sample: Any) -> tuple[np.ndarray, int, np.ndarray | None]:
    """The most probable component of every sample row (zeros for a model that is not a mixture),
    the number of components and the posterior probabilities (None for a model that is not a mixture)."""
    predict_proba = getattr(model, "predict_proba", None)
    if predict_proba is None:
        return np.zeros(_length(sample), dtype=np.int64), 1, None
    proba = np.asarray(predict_proba(sample))
    return np.argmax(proba, axis=1).astype(np.int64), int(proba.shape[1]), proba


def _length(sample: Any) -> int:
    return int(sample.num_rows) if hasattr(sample, "num_rows") else len(sample)


def _numeric_columns(sample: Any) -> tuple[np.ndarray, list[str]]:
    """``(matrix of shape (n, d), column names)``: numeric columns and fixed-length numeric vector
    columns (one column per entry, ``name[i]``) of ``sample``; missing values are NaN."""
    import pandas as pd

    n = _length(sample)
    if hasattr(sample, "to_pandas"):  # pyarrow Table / RecordBatch
        sample = sample.to_pandas()
    if isinstance(sample, np.ndarray) and sample.dtype.kind in "iuf" and sample.ndim in (1, 2):
        return _array_columns(sample)
    if not isinstance(sample, pd.DataFrame):
        rows = list(sample)
        if rows and isinstance(rows[0], Mapping):
            sample = pd.DataFrame.from_records(rows)
        else:
            array = _numeric_array(rows)  # numbers, or equal-length vectors of numbers
            if array is not None:
                return _array_columns(array)
            sample = pd.DataFrame({"x": pd.Series(rows, dtype=object)})
    blocks, names = [], []
    for name in sample.columns:
        found = _column_block(sample[name], str(name))
        if found is not None:
            blocks.append(found[0])
            names += found[1]
    return (np.hstack(blocks) if blocks else np.zeros((n, 0))), names


def _array_columns(array: np.ndarray) -> tuple[np.ndarray, list[str]]:
    matrix = array.reshape(len(array), -1).astype(np.float64)
    return matrix, ["x"] if array.ndim == 1 else [f"x[{j}]" for j in range(matrix.shape[1])]


def _column_block(column: Any, name: str) -> tuple[np.ndarray, list[str]] | None:
    """``(float block of shape (n, m), names)`` for a numeric column (m = 1) or a column of
    fixed-length numeric vectors (``name[j]``); None for any other column."""
    import pandas as pd

    if pd.api.types.is_bool_dtype(column.dtype):
        return None
    if pd.api.types.is_numeric_dtype(column.dtype):
        return column.to_numpy(dtype=np.float64, na_value=np.nan).reshape(-1, 1), [name]
    if column.dtype != object:
        return None
    values = [None if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in column]
    present = [np.asarray(v) for v in values if v is not None]
    if not present or not all(a.ndim == 1 and a.dtype.kind in "iuf" for a in present):
        return None  # strings, labels, lists of labels, nested records
    width = len(present[0])
    if width == 0 or any(len(a) != width for a in present):
        return None  # variable-length sequences have no fixed coordinates
    gap = np.full(width, np.nan)
    block = np.array([gap if v is None else np.asarray(v, dtype=np.float64) for v in values])
    return block, [f"{name}[{j}]" for j in range(width)]


def _pca(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(coordinates (n, k), explained variance ratios (k,), loadings (d, k))`` with ``k = min(2, d)``
    of the standardised columns, via the SVD; each axis points towards its largest loading."""
    scale = matrix.std(axis=0)
    scale[scale == 0] = 1.0  # a constant column stays at zero instead of becoming NaN
    z = (matrix - matrix.mean(axis=0)) / scale
    _, s, vt = np.linalg.svd(z, full_matrices=False)
    k = min(2, vt.shape[0])
    axes = vt[:k]
    signs = np.sign(axes[np.arange(k), np.argmax(np.abs(axes), axis=1)])
    axes = axes * np.where(signs == 0, 1.0, signs)[:, None]
    variance = s**2
    explained = variance[:k] / variance.sum() if variance.sum() > 0 else np.zeros(k)
    return z @ axes.T, explained, axes.T
