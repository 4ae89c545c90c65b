"""The HTML pieces every section of a fit report is built from (:mod:`mixle_spark.report`): escaping,
numbers, tables, notes, sections and bars. Every text from a model, sample or summary goes through
:func:`_esc` unless it is :class:`_Html` built here."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["PLOT_HINT"]

PLOT_HINT = "Figures need matplotlib: install mixle-spark[plot]."


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


def _bar(percent: float) -> str:
    return f'<div class="bar" style="width:{max(0.0, min(percent, 100.0)):.1f}px"></div>'


def _length(sample: Any) -> int:
    return int(sample.num_rows) if hasattr(sample, "num_rows") else len(sample)


def _numeric_array(value: Any) -> np.ndarray | None:
    if not isinstance(value, list) or not value:
        return None
    try:
        array = np.asarray(value)
    except ValueError:  # ragged nesting: not a vector or matrix
        return None
    return array if array.dtype.kind in "iuf" and array.ndim in (1, 2) else None


def _posteriors(model: Any, sample: Any) -> np.ndarray | None:
    """The sample rows' posterior probabilities over the components (rows x components), computed
    once for every section that shows them; None without a sample or for a model that is not a mixture."""
    predict_proba = getattr(model, "predict_proba", None)
    if sample is None or predict_proba is None:
        return None
    return np.asarray(predict_proba(sample))
