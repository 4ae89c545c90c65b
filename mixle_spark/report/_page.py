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

import math
import os
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

import mixle_spark.report._figures as figures
from mixle_spark._locations import scheme_of
from mixle_spark._outputs import write_file
from mixle_spark._version import __version__
from mixle_spark.report._html import PLOT_HINT, _esc, _Html, _note, _num, _posteriors, _section, _table
from mixle_spark.report._projection import _projection
from mixle_spark.report._segments import _segments
from mixle_spark.report.parameters import flatten_parameters
from mixle_spark.stats.base import Distribution
from mixle_spark.summary import count_free_parameters, information_criteria, labelled_timings

__all__ = ["GENERATOR", "SECTIONS", "report_html", "write_report"]

SECTIONS = ("overview", "segments", "log-likelihood", "weights", "parameters", "projection")
"""The ``id`` of every ``<section>`` of a report, in page order; a fit that chose its number of
components (``em_fit --k``: the summary's ``model_selection``) has ``model-selection`` after ``overview``."""


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


GENERATOR = '<meta name="generator" content="mixle_spark report">'
"""The line every report carries: how :func:`write_report` knows a page it may replace."""


def _is_report(head: bytes) -> bool:
    """Whether a file starting with ``head`` is a report this package wrote (before the generator
    line existed, a report began with its fixed head and named mixle_spark in its first lines)."""
    if GENERATOR.encode() in head:
        return True
    legacy = b'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>'
    return head.startswith(legacy) and b'<p class="note">mixle_spark ' in head


def write_report(
    model: Distribution,
    path: str | os.PathLike[str],
    *,
    sample: Any = None,
    title: str | None = None,
    summary: Mapping[str, Any] | None = None,
) -> Path | str:
    """Write the fit report of ``model`` to ``path`` (an HTML file; a local path or a URI) and return
    the path (a :class:`~pathlib.Path` when local).

    The page is written beside ``path`` under a temporary name created exclusively and renamed into
    place, so a reader never sees half a page. An existing file is replaced only when it is a report
    this package wrote; another file, a directory or a symbolic link is refused and kept. The
    arguments are those of :func:`report_html`.
    """
    text = report_html(model, sample=sample, title=title, summary=summary)
    shown = write_file(path, text, what="report", ours=_is_report, claim="is not a mixle_spark report")
    return Path(path) if isinstance(path, Path) or scheme_of(shown) in (None, "file") else shown


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
    proba = _posteriors(model, sample)
    body = "\n".join(
        [
            _overview(model, spec, history, info),
            _model_selection(info, figure_class),
            _segments(model, proba, info),
            _log_likelihood(history, figure_class),
            _weights(spec, figure_class),
            _parameters(spec),
            _projection(model, sample, proba, figure_class),
        ]
    )
    hint = "" if figure_class is not None else _note(PLOT_HINT)
    shown = [*SECTIONS[:1], *(["model-selection"] if info.get("model_selection") else []), *SECTIONS[1:]]
    nav = " · ".join(f'<a href="#{s}">{s}</a>' for s in shown)
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n{GENERATOR}\n'
        f"<title>{_esc(title)}</title>\n"
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
    facts += [(f"time: {label}", f"{_num(seconds, 4)} s") for label, seconds in labelled_timings(timings)]
    facts += [("warning", w) for w in info.get("warnings") or []]
    return _section("overview", "Overview", _table(["", "value"], facts))


def _model_selection(info: Mapping[str, Any], figure_class: Any) -> str:
    """The criterion per number of components (``select_k``; em_fit ``--k``), when there was a choice:
    one curve, or one per covariance form (``--forms``) as mclust plots BIC."""
    found = info.get("model_selection")
    if not found:
        return ""
    criterion, table = str(found["criterion"]), list(found["table"])
    key = "validation_log_likelihood" if criterion == "validation" else criterion
    label = "validation log-likelihood" if criterion == "validation" else criterion.upper()
    forms = any(row.get("form") for row in table)
    curves: dict[str, tuple[list[int], list[float]]] = {}
    for row in table:
        if row.get(key) is not None:
            xs, ys = curves.setdefault(str(row.get("form") or label), ([], []))
            xs.append(row["k"])
            ys.append(row[key])
    if not curves:
        chart = ""
    elif figure_class is not None:
        chart = figures.curves_png(figure_class, curves, xlabel="components (k)", ylabel=label)
    else:
        chart = figures.curves_svg(curves, xlabel="components (k)", ylabel=label)
    chosen = (found["best_k"], found.get("best_form"))
    rows = [
        [
            *([row.get("form")] if forms else []),
            f"{row['k']}{' (chosen)' if (row['k'], row.get('form')) == chosen else ''}",
            _num(row["log_likelihood"]),
            row["free_parameters"],
            _num(row["bic"]),
            _num(row["aic"]),
            row["iterations"],
            "yes" if row["converged"] else "no",
        ]
        for row in table
    ]
    header = [*(["form"] if forms else []), "k", "log-likelihood", "free parameters", "BIC", "AIC"]
    header += ["iterations", "converged"]
    body = _table(header, rows, numeric=range(1 + forms, 6 + forms))
    best = f"k = {found['best_k']}" + (f", covariance {found['best_form']}" if found.get("best_form") else "")
    heading = f"Model selection: {best} by {label}"
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


# -- parameters ----------------------------------------------------------------------------------


def _parameters(spec: Mapping[str, Any]) -> str:
    if spec.get("type") == "mixture":
        columns = [f"component {k} (w {float(w):.3f})" for k, w in enumerate(spec["w"])]
        parts = list(spec["components"])
    else:
        columns, parts = ["model"], [spec]
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for k, part in enumerate(parts):
        for path, family, key, text in flatten_parameters(part):
            row = table.setdefault((path, key), {"family": family, "cells": [""] * len(parts)})
            row["cells"][k] = text
    rows = [[path or "(top level)", row["family"], key, *row["cells"]] for (path, key), row in table.items()]
    body = _table(["field", "family", "parameter", *columns], rows)
    note = _note("Categorical fields show their five most probable labels; matrices their diagonal.")
    return _section("parameters", "Parameters per component", note + body)
