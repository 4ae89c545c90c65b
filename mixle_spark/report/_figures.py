"""Figures for ``mixle_spark.report``: matplotlib PNGs inlined as base64 ``<img>`` tags, and a
hand-drawn inline SVG line chart for when matplotlib (the ``plot`` extra) is not installed.

matplotlib is imported lazily and used through ``matplotlib.figure.Figure`` (rendered by Agg), never
through ``pyplot``, so making a report neither opens windows nor changes the caller's backend.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "curves_png",
    "curves_svg",
    "load_matplotlib",
    "log_likelihood_png",
    "log_likelihood_svg",
    "projection_png",
    "weights_png",
]

_SIZE = (7.0, 3.6)  # inches at 100 dpi: 700 x 360 pixels, readable on a laptop screen


def load_matplotlib() -> Any:
    """``matplotlib.figure.Figure``, or None when matplotlib is not installed."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure


def _img(fig: Any, alt: str) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img class="figure" alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def log_likelihood_png(
    figure_class: Any,
    iterations: Sequence[int],
    values: Sequence[float],
    xlabel: str = "iteration",
    ylabel: str = "log-likelihood",
) -> str:
    """The log-likelihood per EM iteration (or any curve over integers, e.g. a model-selection
    criterion per number of components) as an inline PNG ``<img>`` tag."""
    fig = figure_class(figsize=_SIZE)
    ax = fig.add_subplot()
    ax.plot(iterations, values, marker="o", markersize=3, linewidth=1.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    return _img(fig, f"{ylabel} per {xlabel}")


def curves_png(
    figure_class: Any, curves: Mapping[str, tuple[Sequence[int], Sequence[float]]], xlabel: str, ylabel: str
) -> str:
    """Several curves over integers, one line and legend entry each (e.g. BIC per number of
    components, one line per covariance form, as mclust plots it), as an inline PNG ``<img>`` tag."""
    fig = figure_class(figsize=_SIZE)
    ax = fig.add_subplot()
    for name, (xs, ys) in curves.items():
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.5, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small", ncols=2 if len(curves) > 4 else 1)
    return _img(fig, f"{ylabel} per {xlabel}, one line per {', '.join(curves)}")


def weights_png(figure_class: Any, weights: Sequence[float]) -> str:
    """Mixture weights as a bar chart, an inline PNG ``<img>`` tag."""
    fig = figure_class(figsize=(_SIZE[0], min(_SIZE[1], 1.2 + 0.3 * len(weights))))
    ax = fig.add_subplot()
    colors = _colors(len(weights))
    ax.barh(range(len(weights)), weights, color=colors)
    ax.set_yticks(range(len(weights)), [f"component {k}" for k in range(len(weights))])
    ax.invert_yaxis()
    ax.set_xlabel("weight")
    ax.set_xlim(0, max(1e-12, float(max(weights))) * 1.1)
    return _img(fig, "component weights")


def projection_png(
    figure_class: Any,
    coords: np.ndarray,
    labels: np.ndarray,
    n_labels: int,
    axis_labels: Sequence[str],
) -> str:
    """A scatter of ``coords`` (shape (n, 2)) coloured by ``labels`` (shape (n,), ints < ``n_labels``)."""
    fig = figure_class(figsize=(_SIZE[0], _SIZE[0] * 0.7))
    ax = fig.add_subplot()
    colors = _colors(n_labels)
    for k in range(n_labels):
        mine = labels == k
        if mine.any() or n_labels > 1:
            name = f"component {k} ({int(mine.sum())})" if n_labels > 1 else f"rows ({int(mine.sum())})"
            ax.scatter(coords[mine, 0], coords[mine, 1], s=8, alpha=0.6, color=colors[k], label=name)
    ax.set_xlabel(axis_labels[0])
    ax.set_ylabel(axis_labels[1])
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small", markerscale=2)
    return _img(fig, "2-D projection of the sample coloured by component")


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(k % cmap.N) for k in range(n)]


def log_likelihood_svg(
    iterations: Sequence[int],
    values: Sequence[float],
    xlabel: str = "iteration",
    ylabel: str = "log-likelihood",
) -> str:
    """The log-likelihood per iteration (or any curve over integers) as a plain inline ``<svg>`` line
    chart (no matplotlib).

    >>> log_likelihood_svg([0, 1, 2], [-10.0, -5.0, -4.5]).startswith('<svg')
    True
    """
    return curves_svg({"": (iterations, values)}, xlabel, ylabel)


_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def curves_svg(curves: Mapping[str, tuple[Sequence[int], Sequence[float]]], xlabel: str, ylabel: str) -> str:
    """Curves over integers as a plain inline ``<svg>`` line chart (no matplotlib), one colour each,
    with a legend of their names when there is more than one.

    >>> svg = curves_svg({"EII": ([1, 2], [10.0, 8.0]), "VVV": ([1, 2], [12.0, 7.0])}, "k", "BIC")
    >>> svg.count("<polyline"), ">VVV<" in svg
    (2, True)
    """
    width, height, left, right, top, bottom = 640, 260, 90, 20, 15, 40
    named = len(curves) > 1
    if named:
        right = 90  # the legend
    xs_all = np.concatenate([np.asarray(xs, dtype=float) for xs, _ys in curves.values()])
    ys_all = np.concatenate([np.asarray(ys, dtype=float) for _xs, ys in curves.values()])
    x_lo, x_hi = float(xs_all.min()), float(xs_all.max())
    y_lo, y_hi = float(ys_all.min()), float(ys_all.max())
    x_span, y_span = (x_hi - x_lo) or 1.0, (y_hi - y_lo) or 1.0
    base, edge = height - bottom, width - right
    text = 'font-size="12" font-family="sans-serif" fill="#333"'
    lines = []
    for i, (name, (xs, ys)) in enumerate(curves.items()):
        px = left + (np.asarray(xs, dtype=float) - x_lo) / x_span * (width - left - right)
        py = top + (y_hi - np.asarray(ys, dtype=float)) / y_span * (height - top - bottom)
        points = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px, py, strict=True))
        color = _PALETTE[i % len(_PALETTE)]
        lines.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="2"/>')
        if named:
            y = top + 10 + 16 * i
            lines.append(
                f'<line x1="{edge + 10}" y1="{y - 4}" x2="{edge + 28}" y2="{y - 4}" stroke="{color}" '
                f'stroke-width="2"/><text x="{edge + 32}" y="{y}" {text}>{html.escape(name)}</text>'
            )
    xname, yname = html.escape(xlabel), html.escape(ylabel)
    return (
        f'<svg class="figure" role="img" aria-label="{yname} per {xname}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">'
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>'
        f'<line x1="{left}" y1="{base}" x2="{edge}" y2="{base}" stroke="#333"/>'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{base}" stroke="#333"/>'
        + "".join(lines)
        + f'<text x="{left - 6}" y="{top + 10}" text-anchor="end" {text}>{y_hi:.6g}</text>'
        f'<text x="{left - 6}" y="{base}" text-anchor="end" {text}>{y_lo:.6g}</text>'
        f'<text x="{left}" y="{base + 16}" text-anchor="middle" {text}>{x_lo:g}</text>'
        f'<text x="{edge}" y="{base + 16}" text-anchor="middle" {text}>{x_hi:g}</text>'
        f'<text x="{(left + edge) / 2}" y="{height - 6}" text-anchor="middle" {text}>{xname}</text>'
        f'<text x="14" y="{(top + base) / 2}" text-anchor="middle" {text} '
        f'transform="rotate(-90 14 {(top + base) / 2})">{yname}</text>'
        "</svg>"
    )
