"""Per-row scores of a fitted model over a Spark, Dask or Ray frame: ``score(model, frame)``.

One entry point for every engine that holds data: the frame's own type picks the backend that adds
the scores (Spark through ``mapInArrow``, Dask through ``map_partitions``, Ray through
``map_batches``); the result is a frame of the same engine, lazy, with every input column kept.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from mixle_spark._frames import frame_engine
from mixle_spark.parallel.backends._scoring import BatchScorer
from mixle_spark.stats.base import Distribution
from mixle_spark.stats.mixture import MixtureDistribution

__all__ = ["assignment_counts", "score"]

_ARROW_BATCH_ROWS = 65_536


def score(
    model: Distribution,
    frame: Any,
    *,
    column: str | None = None,
    log_likelihood_col: str = "log_likelihood",
    prediction_col: str | None = "prediction",
    probability_col: str | None = "probability",
    states_col: str | None = "states",
    on_unseen: str = "error",
    imputed_col: str | None = None,
) -> Any:
    """``frame`` (a pyspark DataFrame, a Dask DataFrame or a Ray Dataset) with per-row scores added
    lazily, as a frame of the same engine keeping every input column.

    Adds ``log_likelihood_col`` (double); for mixture models also ``prediction_col`` (int, the most
    probable component) and ``probability_col`` (array<double>, the posterior over components);
    for hidden Markov models ``states_col`` (array<int>, the Viterbi path, one state per element),
    and for a record ``<field>_<states_col>`` per hidden Markov field. Pass None to skip the
    mixture / state columns. ``column`` names the column a non-record model reads (default: the
    frame's one column). Spark ML Vector columns are read as array<double> (and returned as such);
    Dask adds pandas Arrow-backed columns.

    ``imputed_col`` (a vector Gaussian or a mixture of them) adds the vectors with every missing
    coordinate (NaN or null element) replaced by its conditional mean given the row's observed
    coordinates, weighted by the row's posterior over components (array<double>; observed
    coordinates as they were).

    ``on_unseen`` decides what a row holding a label outside the model's vocabulary (a categorical
    label, a Markov chain label, a multinomial token) gets: ``"error"`` (default) fails with an
    :class:`~mixle_spark.errors.UnseenLabelError` naming the label and its row; ``"null"`` scores
    such rows null in every added column (the other rows as with ``"error"``), so the added columns
    are nullable; count them with ``log_likelihood_col IS NULL``.

    A column the model needs and the frame lacks raises :class:`~mixle_spark.errors.SchemaError`
    here; a bad value raises when the frame is computed, naming its partition (Spark, Dask) or block
    (Ray) and its row there. Ray Data wraps that error in its ``UserCodeException`` unless the
    dataset's ``context.raise_original_map_exception`` is set.
    """
    scorer = BatchScorer(
        model,
        log_likelihood_col=log_likelihood_col,
        prediction_col=prediction_col,
        probability_col=probability_col,
        states_col=states_col,
        on_unseen=on_unseen,
        imputed_col=imputed_col,
    )
    engine = frame_engine(frame)
    if engine is None:
        raise TypeError(
            f"score needs a pyspark DataFrame, a Dask DataFrame or a Ray Dataset, not {type(frame).__name__} "
            "(data in memory: a mixture's score_samples / predict / predict_proba)"
        )
    backend = import_module(f"mixle_spark.parallel.backends.{engine}")  # the optional library's own
    return backend.add_scores(frame, scorer, column)


def assignment_counts(model: Distribution, data: Any, *, column: str | None = None) -> dict[str, Any] | None:
    """Rows per mixture component by hard assignment over all of ``data``, and how sure the
    assignments are (:func:`mixle_spark.profile.assignment_summary`'s layout, ``basis`` "the whole
    table"); None when ``model`` is not a mixture or ``data``'s engine has no such pass here (Dask,
    Ray: profile a sample instead).

    ``data``: a Spark DataFrame (one job: the posteriors are computed by :func:`score` in the tasks
    and only a component x certainty-bin count table reaches the driver), a pyarrow Table or pandas
    DataFrame (in batches of 65,536 rows), or a ``pyarrow.dataset.Dataset`` (read batch by batch,
    never whole).
    """
    from mixle_spark.profile import CERTAINTY_BINS, assignment_summary, merge_assignments

    if not isinstance(model, MixtureDistribution):
        return None
    k = model.num_components
    engine = frame_engine(data)
    basis = "the whole table"
    if engine == "spark":
        names = {"ll": "__mixle_ll", "k": "__mixle_k", "p": "__mixle_p"}
        scored = score(
            model,
            data,
            column=column,
            log_likelihood_col=names["ll"],
            prediction_col=names["k"],
            probability_col=names["p"],
        )
        b = CERTAINTY_BINS
        top = f"array_max(`{names['p']}`)"
        rows = (
            scored.selectExpr(
                f"`{names['k']}` AS k", f"LEAST(CAST(FLOOR({top} * {b}) AS INT), {b - 1}) AS b", f"{top} AS p"
            )
            .groupBy("k", "b")
            .agg({"p": "sum", "*": "count"})
            .collect()
        )
        counts, sure, hist = [0] * k, [0.0] * k, [0] * b
        for row in rows:
            n, total = int(row["count(1)"]), float(row["sum(p)"])
            counts[int(row["k"])] += n
            sure[int(row["k"])] += total
            hist[int(row["b"])] += n
        return {"rows": counts, "certainty_sum": sure, "certainty_histogram": hist, "basis": basis}
    if engine is not None:
        return None
    import pyarrow.dataset as pads

    if isinstance(data, pads.Dataset):
        batches: Any = data.to_batches(batch_size=_ARROW_BATCH_ROWS)
    elif hasattr(data, "to_batches"):  # a pyarrow Table
        batches = data.to_batches(max_chunksize=_ARROW_BATCH_ROWS)
    elif hasattr(data, "iloc"):  # pandas
        batches = (data.iloc[i : i + _ARROW_BATCH_ROWS] for i in range(0, len(data), _ARROW_BATCH_ROWS))
    else:
        return None
    parts = [assignment_summary(model.predict_proba(b), basis) for b in batches if len(b)]
    return merge_assignments(parts, basis) if parts else None
