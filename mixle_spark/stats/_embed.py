"""Numeric embeddings of encoded batches, the space in which ``init="kmeans||"`` measures distance.

Every encoder can embed a batch as a float64 matrix of shape (n, m) (:meth:`Encoder.embed`), in the
spirit of k-prototypes: numbers as they are (the seeding standardizes them with the data's mean and
standard deviation, from a moments pass), categorical labels one-hot, counts on a log scale, vectors
per dimension, lists and bags of words as normalized label frequencies. ``NaN`` marks a missing value:
the seeding puts it at the column mean, so a missing field pulls towards no cluster.

Which columns are standardized is declared by :meth:`Encoder.embedding_scales` (True: a number whose
unit is arbitrary; False: already on a comparable scale, e.g. one-hot), and which are the coordinates
of one vector by :meth:`Encoder.embedding_groups` (they share one scale when their spreads are alike,
so that rotated clusters keep their shape). One-hot columns are scaled by
``1/sqrt(2)`` so two different labels are at squared distance 1, as two numbers one standard deviation
apart are. Vocabularies larger than :data:`MAX_LABEL_COLUMNS` are folded (code modulo the width).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "MAX_LABEL_COLUMNS",
    "label_frequencies",
    "label_width",
    "length_scales",
    "one_hot",
    "scales",
    "scatter_rows",
    "segment_mean",
    "with_length",
]

MAX_LABEL_COLUMNS = 256
"""Most columns one categorical field contributes; larger vocabularies share columns (code mod width)."""

_ONE_HOT_SCALE = 1.0 / np.sqrt(2.0)


def label_width(labels: Any) -> int:
    """Columns of a label field's embedding: its vocabulary size, at most :data:`MAX_LABEL_COLUMNS`."""
    return max(1, min(len(labels or ()), MAX_LABEL_COLUMNS))


def scales(standardize: bool, width: int) -> np.ndarray:
    """``width`` flags, all ``standardize``."""
    return np.full(width, bool(standardize))


def one_hot(codes: np.ndarray, width: int) -> np.ndarray:
    """Rows of shape (n, width): ``1/sqrt(2)`` at ``code mod width``; an unknown code (-1) gives zeros."""
    codes = np.asarray(codes, dtype=np.int64)
    out = np.zeros((len(codes), width))
    known = codes >= 0
    out[np.flatnonzero(known), codes[known] % width] = _ONE_HOT_SCALE
    return out


def label_frequencies(
    n: int, owner: np.ndarray, codes: np.ndarray, counts: np.ndarray | None, width: int
) -> np.ndarray:
    """Per row, the normalized frequencies of its labels (shape (n, width)); an empty row is NaN."""
    owner = np.asarray(owner, dtype=np.int64)
    codes = np.asarray(codes, dtype=np.int64)
    weight = np.ones(len(codes)) if counts is None else np.asarray(counts, dtype=np.float64)
    known = codes >= 0
    out = np.zeros((n, width))
    np.add.at(out, (owner[known], codes[known] % width), weight[known])
    totals = out.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, out / totals, np.nan)


def segment_mean(n: int, owner: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per row the mean of its elements' embeddings (``values`` (m, c), ``owner`` (m,) their rows),
    ignoring missing (NaN) entries; a row without elements is NaN."""
    owner = np.asarray(owner, dtype=np.int64)
    present = ~np.isnan(values)
    sums = np.zeros((n, values.shape[1]))
    counts = np.zeros((n, values.shape[1]))
    np.add.at(sums, owner, np.where(present, values, 0.0))
    np.add.at(counts, owner, present.astype(np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1.0), np.nan)


def scatter_rows(n: int, index: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """A (n, c) matrix of NaN with ``rows`` at ``index`` (the present rows of an optional field)."""
    out = np.full((n, rows.shape[1]), np.nan)
    out[np.asarray(index, dtype=np.int64)] = rows
    return out


def length_scales(flags: np.ndarray, has_length: bool) -> np.ndarray:
    """A list field's column flags: its values' ``flags``, then a standardized length column when the
    model has a length distribution."""
    return np.concatenate([flags, np.ones(1, dtype=bool)]) if has_length else flags


def with_length(values: np.ndarray, lengths: np.ndarray | None) -> np.ndarray:
    """A list field's embedding: its values' columns, then ``log1p(length)`` when ``lengths`` is given
    (the model has a length distribution)."""
    if lengths is None:
        return values
    return np.hstack([values, np.log1p(np.asarray(lengths, dtype=np.float64))[:, None]])
