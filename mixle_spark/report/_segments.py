"""The report's segment-profile section (:mod:`mixle_spark.report`): each component's fields in the
data's units side by side (:func:`mixle_spark.profile.segment_profile`), its size by hard assignment,
and how sure the assignments are, drawn in HTML (bars, ranges on a shared scale, a histogram), the
same with or without matplotlib."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# the module, not its names: importing mixle_spark.profile first runs this package (profile reads its
# parameter text from mixle_spark.report.parameters) while profile is still half-initialised
from mixle_spark import profile as profiles
from mixle_spark.report._html import _bar, _esc, _Html, _note, _section, _table
from mixle_spark.report.separation import SAME_THRESHOLD
from mixle_spark.stats.base import Distribution

_LABELS_SHOWN = 12
"""Labels a categorical cell lists before the rest fold under "show all"."""


def _segments(model: Distribution, proba: np.ndarray | None, info: Mapping[str, Any]) -> str:
    """Each component's fields in the data's units, side by side, ranked by how much they separate the
    components, with sizes and certainty (over the whole table when ``info`` has them, else over the
    sample whose posteriors ``proba`` are); fields the same in all components on one line."""
    heading = "Segment profiles"
    profile = info.get("segments")
    if profile is None or profile.get("assignments") is None:  # sizes from the sample, said so
        assignments = None
        if proba is not None and len(proba) > 0:
            assignments = profiles.assignment_summary(proba, f"a sample of {len(proba):,} rows")
        profile = profiles.segment_profile(model, assignments)
    elif any("separation" not in row for row in profile["fields"]):  # a summary written before ranking
        profile = {**profile, "fields": profiles.segment_profile(model)["fields"]}
    comps = profile["components"]
    ranked, same, unscored = rank_fields(profile["fields"])
    parts = [_sizes(comps, profile.get("assignments"))]
    scored = bool(ranked or same)
    header = ["field", *(["separation"] if scored else []), *(f"component {c['component']}" for c in comps)]
    table_rows = []
    for row in [*ranked, *unscored]:
        cells = [_cell(row, cell, _span(row)) for cell in row["cells"]]
        score = [_score(row.get("separation"))] if scored else []
        field = _Html(f"{_esc(row['field'])}<br><small>{_esc(row['family'])}</small>")
        table_rows.append([field, *score, *cells])
    if table_rows:
        parts.append(_table(header, table_rows, numeric=(1,) if scored else ()))
    if same:
        parts.append(_same_line(same, comps))
    if table_rows:
        parts.append(
            _note(
                "Numbers: the median and quartiles where the family has them (log-normal, Gaussian, "
                "exponential, Rayleigh, half-normal, inverse Gaussian), else the mean and standard "
                "deviation; the bar spans the quartiles (or one standard deviation each side) on a scale "
                "shared across the row, the tick marks the median (or mean). Labels: every label's "
                "probability within the component."
            )
        )
    if scored:
        parts.append(_note(_SEPARATION_NOTE))
    parts.append(_certainty(profile.get("assignments")))
    return _section("segments", heading, "\n".join(p for p in parts if p))


_SEPARATION_NOTE = (
    "Fields are ranked by separation: the information a field's value gives about a row's component, as "
    "a share of the components' entropy (0: the same distribution in every component; 1: the field "
    "alone tells the component). Fields below "
    f"{SAME_THRESHOLD} are the same in all segments and listed on one line; n/a: a family with no "
    "measure here whose parameters differ, listed last."
)


def rank_fields(
    rows: Sequence[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """A profile's field rows as ``(ranked, same, unscored)``: the rows whose separation is at least
    :data:`~mixle_spark.report.separation.SAME_THRESHOLD`, most separating first; the rows below it
    (the same in all segments), in the model's order; the rows without a separation, in the model's
    order."""
    scored = [r for r in rows if r.get("separation") is not None]
    same = [r for r in scored if r["separation"] < SAME_THRESHOLD]
    ranked = sorted((r for r in scored if r["separation"] >= SAME_THRESHOLD), key=lambda r: -r["separation"])
    return ranked, same, [r for r in rows if r.get("separation") is None]


def _score(value: float | None) -> Any:
    if value is None:
        return "n/a"
    return _Html(f"{value:.3f}{_bar(100 * value)}")


def _same_line(rows: Sequence[Mapping[str, Any]], comps: Sequence[Mapping[str, Any]]) -> str:
    """One line for the fields the same in all segments, each with its value in the largest component."""
    big = max(range(len(comps)), key=lambda k: float(comps[k]["weight"]))
    items = " · ".join(f"{row['field']}: {row['cells'][big]['text']}" for row in rows)
    return f'<p class="same"><strong>Same in all segments:</strong> {_esc(items)}</p>'


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


def _span(row: Mapping[str, Any]) -> tuple[float, float]:
    """The shared scale of a number row: the lowest low and the highest high of its cells."""
    if row["kind"] != "number":
        return 0.0, 1.0
    lows, highs, _ = zip(*(_range(c) for c in row["cells"]), strict=True)
    finite = [v for v in (*lows, *highs) if math.isfinite(v)]
    return (min(finite), max(finite)) if finite else (0.0, 1.0)


def _range(cell: Mapping[str, Any]) -> tuple[float, float, float]:
    if {"q1", "median", "q3"} <= set(cell):
        return cell["q1"], cell["q3"], cell["median"]
    mean = cell.get("mean", math.nan)
    sd = cell.get("sd", 0.0)
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
    if kind == "number" and all(math.isfinite(v) for v in _range(cell)):
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
        f'<div title="{j / profiles.CERTAINTY_BINS:.2f}-{(j + 1) / profiles.CERTAINTY_BINS:.2f}: {v:,} rows" '
        f'style="height:{100 * v / top:.1f}%"></div>'
        for j, v in enumerate(hist)
    )
    sure = sum(hist[int(0.9 * profiles.CERTAINTY_BINS) :]) / total
    unsure = sum(hist[: profiles.CERTAINTY_BINS // 2 + profiles.CERTAINTY_BINS // 10]) / total
    bins = profiles.CERTAINTY_BINS
    text = (
        f"How sure the assignments are: rows by their largest posterior probability (0 to 1, in "
        f"{bins} bins). {100 * sure:.1f}% of rows are assigned with probability 0.9 or more; "
        f"{100 * unsure:.1f}% with less than 0.6."
    )
    axis = '<div class="axis"><span>0</span><span>0.5</span><span>1</span></div>'
    return f'<h3>Assignment certainty</h3>{_note(text)}<div class="hist">{bars}</div>{axis}'
