"""The report's 2-D projection section (:mod:`mixle_spark.report`): a sample's modelled numeric fields
(or, for a model that is not a record, its numeric columns), standardised and projected on their
first two principal components, coloured by the most probable component."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

import mixle_spark.report._figures as figures
from mixle_spark import profile as profiles  # the module: see _segments
from mixle_spark.report._html import PLOT_HINT, _length, _note, _num, _numeric_array, _section, _table
from mixle_spark.stats.base import Distribution


def _projection(model: Distribution, sample: Any, proba: np.ndarray | None, figure_class: Any) -> str:
    """The projection of ``sample`` coloured by the most probable component (``proba``: the sample's
    posteriors, None for a model that is not a mixture)."""
    heading = "2-D projection of the sample"
    if sample is None:
        return _section("projection", heading, _note("Skipped: no sample was given."))
    fields = _modelled_numeric(model)
    matrix, names = _numeric_columns(sample)
    labels, n_labels = _assignments(sample, proba)
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
    "rayleigh",
    "half_normal",
    "inverse_gaussian",
    "gamma",
    "beta",
    "student_t",
    "pareto",
    "inverse_gamma",
    "poisson",
    "geometric",
    "binomial",
    "negative_binomial",
    "point_mass",
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
        if family in _NUMERIC_FIELDS or profiles.is_number(family):
            means = np.array([[_field_mean(f)] for f in inner], dtype=np.float64)
            found.append((str(name), family, means))
        elif family in ("diagonal_gaussian", "multivariate_gaussian"):
            found.append((str(name), family, np.array([f["mu"] for f in inner], dtype=np.float64)))
    return found


def _field_mean(spec: Mapping[str, Any]) -> float:
    """A numeric field's mean in the projection's scale (a log-normal's: of the logarithm)."""
    if spec["type"] in ("gaussian", "log_gaussian", "student_t"):
        return float(spec["mu"])
    return float(profiles.field_cell(spec)["mean"])


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


def _assignments(sample: Any, proba: np.ndarray | None) -> tuple[np.ndarray, int]:
    """The most probable component of every sample row (zeros for a model that is not a mixture) and
    the number of components."""
    if proba is None:
        return np.zeros(_length(sample), dtype=np.int64), 1
    return np.argmax(proba, axis=1).astype(np.int64), int(proba.shape[1])


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
