"""Per-row scores of a fitted model over Arrow batches, shared by every backend's ``add_scores``
(reached through :func:`mixle_spark.scoring.score`).

:class:`BatchScorer` holds what ``score`` adds (the log-likelihood; for a mixture the prediction and
the posterior; for hidden Markov models the Viterbi paths; on request, vectors with their missing
coordinates imputed) and how a row holding a label the model
has not seen is scored (``on_unseen``: an error naming the label, or nulls in every added column).
Engines differ only in how batches reach it (Spark's ``mapInArrow``, Dask's ``map_partitions``, Ray's
``map_batches``) and in how they name the row of an error.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.errors import FieldError, SchemaError, SpecError, did_you_mean
from mixle_spark.stats._tables import one_column_error, repeated_columns
from mixle_spark.stats.base import Distribution, Encoder
from mixle_spark.stats.record import RecordDistribution

__all__ = ["ON_UNSEEN", "BatchScorer", "data_columns", "reader", "state_paths"]

ON_UNSEEN = ("error", "null")
"""What ``score`` does with a row holding a label outside the model's vocabulary."""


def _missing(name: str, columns: list[str]) -> SchemaError:
    renamed = [c for i, c in enumerate(columns) if c.lower() == f"{name}{i}".lower()]
    if len(renamed) > 1:  # Spark's CSV reader renames a header's repeated name: name + its position
        return SchemaError(
            f"column {name!r} not found; the DataFrame has {', '.join(map(repr, renamed))} instead: "
            f"the CSV header names {name!r} {len(renamed)} times (Spark's CSV reader adds each copy's "
            "position to it); rename the copies in the header"
        )
    hint = did_you_mean(name, columns)
    return SchemaError(f"column {name!r} not found{hint}; the DataFrame has columns {columns}")


_KEEPS_EVERY_COLUMN = (
    "the scores are added to every input column, so each name must appear once: rename or drop the copies"
)


def data_columns(
    columns: list[str], encoder: Encoder, column: str | None, weights: str | None = None
) -> list[str]:
    """The columns of a frame (Spark, Dask or Ray) with ``columns`` that ``encoder`` reads: a Record's
    columns, else ``column``, else the one column there is (besides the weight column). A column read
    (or the weight column) that ``columns`` names more than once is refused: reading it by name is
    ambiguous (Spark's ``AMBIGUOUS_REFERENCE``)."""
    names = encoder.column_names()
    available = [c for c in columns if c != weights]
    if names is not None:
        for name in names:
            if name not in columns:
                raise _missing(name, columns)
        read = list(names)
    elif column is not None:
        if column not in columns:
            raise _missing(column, columns)
        read = [column]
    elif len(available) != 1:
        raise one_column_error(available)
    else:
        read = available
    repeated = repeated_columns(columns, read if weights is None else [*read, weights])
    if repeated is not None:
        raise repeated
    return read


def reader(columns: list[str], reads_table: bool) -> Callable[[pa.RecordBatch], Any]:
    """What an encoder's from_arrow reads out of a batch: the record columns, or one column."""
    if reads_table:
        return lambda batch: batch.select(columns)
    return lambda batch: batch.column(columns[0])


def state_paths(model: Any, states_col: str | None) -> list[tuple[str, Callable[[Any], pa.Array]]]:
    """The Viterbi-path columns ``score`` adds, each with the function that turns a batch's encoding
    into that array<int> column: ``states_col`` for a hidden Markov model, ``<field>_<states_col>``
    for every hidden Markov field of a top-level record; none when ``states_col`` is None."""
    if states_col is None:
        return []

    def column(hmm: Any, pick: Callable[[Any], Any]) -> Callable[[Any], pa.Array]:
        def of(enc: Any) -> pa.Array:
            seqs = pick(enc)
            states, _ = hmm.seq_viterbi(seqs)
            ends = np.concatenate(([0], np.cumsum(seqs.lengths))).astype(np.int32)
            return pa.ListArray.from_arrays(
                pa.array(ends, pa.int32()), pa.array(states.astype(np.int32), pa.int32())
            )

        return of

    if hasattr(model, "seq_viterbi"):
        return [(states_col, column(model, lambda enc: enc))]
    if not isinstance(model, RecordDistribution):
        return []
    return [
        (f"{name}_{states_col}", column(dist, operator.itemgetter(i)))
        for i, (name, dist) in enumerate(model.fields.items())
        if hasattr(dist, "seq_viterbi")
    ]


class BatchScorer:
    """The columns ``score`` adds to a batch of rows, for one model.

    ``added`` lists them as ``(name, Arrow type)``; :meth:`read_columns` picks what it reads from a
    frame's columns; :meth:`encode` reads a batch (a bad value raises the encoder's FieldError at its
    row and column) and :meth:`scores` gives the added arrays, null where a row holds an unseen label
    when ``on_unseen="null"``.
    """

    def __init__(
        self,
        model: Distribution,
        *,
        log_likelihood_col: str = "log_likelihood",
        prediction_col: str | None = "prediction",
        probability_col: str | None = "probability",
        states_col: str | None = "states",
        on_unseen: str = "error",
        imputed_col: str | None = None,
    ) -> None:
        if on_unseen not in ON_UNSEEN:
            raise ValueError(f"on_unseen must be 'error' or 'null', got {on_unseen!r}")
        parts = getattr(model, "components", [model])  # a mixture imputes through its components
        if imputed_col is not None and not all(hasattr(p, "seq_impute") for p in [model, *parts]):
            what = type(model).__name__
            if hasattr(model, "components"):
                what = "a mixture of " + ", ".join(sorted({type(p).__name__ for p in parts}))
            raise SpecError(
                f"imputed_col={imputed_col!r}: imputing missing coordinates needs a vector Gaussian or a "
                f"mixture of them, not {what}"
            )
        self.model = model
        self.nulls = on_unseen == "null"
        self.encoder = model.encoder().with_unseen("zero" if self.nulls else "error")
        self.reads_table = self.encoder.column_names() is not None
        self.columns: list[str] = []
        self.read: Callable[[pa.RecordBatch], Any] = reader(self.columns, self.reads_table)
        mixture = hasattr(model, "seq_posterior")
        self.with_prediction = mixture and bool(prediction_col)
        self.with_probability = mixture and bool(probability_col)
        self.paths = state_paths(model, states_col)
        self.added: list[tuple[str, pa.DataType]] = [(log_likelihood_col, pa.float64())]
        if self.with_prediction:
            self.added.append((str(prediction_col), pa.int32()))
        if self.with_probability:
            self.added.append((str(probability_col), pa.list_(pa.float64())))
        self.added += [(name, pa.list_(pa.int32())) for name, _ in self.paths]
        self.imputed_col = imputed_col
        if imputed_col is not None:
            self.added.append((imputed_col, pa.list_(pa.float64())))

    def read_columns(self, available: list[str], column: str | None) -> list[str]:
        """Choose the columns to read among a frame's ``available`` ones (:func:`data_columns`); refuse
        an added column that is already there. Returns them."""
        repeated = repeated_columns(available, why=_KEEPS_EVERY_COLUMN)
        if repeated is not None:
            raise repeated
        self.columns = data_columns(available, self.encoder, column)
        self.read = reader(self.columns, self.reads_table)
        for name, _ in self.added:
            if name in available:
                raise SchemaError(f"column {name!r} already exists; choose another output column name")
        return self.columns

    def encode(self, batch: pa.RecordBatch, first: int = 0, where: Callable[[], str] | None = None) -> Any:
        """``batch`` encoded; a bad value raises at its row (``first`` rows of the partition come
        before the batch; ``where()`` names the partition) and, for a one-column model, its column."""
        try:
            return self.encoder.from_arrow(self.read(batch))
        except FieldError as err:
            err = err if self.reads_table or err.path else err.at(self.columns[0])
            raise err.in_scope(first, "the input" if where is None else where()) from None

    def _all(self, enc: Any) -> list[pa.Array]:
        out = [pa.array(self.model.seq_log_density(enc), pa.float64())]
        if self.with_prediction or self.with_probability:
            post = self.model.seq_posterior(enc)  # type: ignore[attr-defined]
            if self.with_prediction:
                out.append(pa.array(post.argmax(axis=1).astype(np.int32), pa.int32()))
            if self.with_probability:
                k = post.shape[1]
                offsets = pa.array(np.arange(0, (len(post) + 1) * k, k, dtype=np.int32), pa.int32())
                out.append(pa.ListArray.from_arrays(offsets, pa.array(post.ravel(), pa.float64())))
        out += [path(enc) for _, path in self.paths]
        if self.imputed_col is not None:
            filled = np.ascontiguousarray(self.model.seq_impute(enc))  # type: ignore[attr-defined]
            n, d = filled.shape
            offsets = pa.array(np.arange(0, (n + 1) * d, d, dtype=np.int32), pa.int32())
            out.append(pa.ListArray.from_arrays(offsets, pa.array(filled.ravel(), pa.float64())))
        return out

    def scores(self, batch: pa.RecordBatch, enc: Any) -> list[pa.Array]:
        """The added columns of ``batch`` (encoded as ``enc``); with ``on_unseen="null"`` the rows
        holding an unseen label get nulls and the others are scored exactly as without them."""
        unseen = self.encoder.unseen_rows(enc) if self.nulls else None
        if unseen is None or not unseen.any():
            return self._all(enc)
        kept = np.flatnonzero(~unseen)
        place = np.zeros(len(unseen), dtype=np.int64)
        place[kept] = np.arange(len(kept))
        where = pa.array(place, mask=unseen)
        return [column.take(where) for column in self._all(self.encode(batch.take(kept)))]
