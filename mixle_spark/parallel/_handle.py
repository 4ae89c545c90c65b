"""Pieces every encoded-data backend shares: binding an estimator to the scanned vocabularies,
row-keyed initial selection, the tying pass, weighted log-likelihood sums, merging payloads."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

import numpy as np

from mixle_spark.errors import SchemaError
from mixle_spark.stats._random import RowRandom, seed_to_int
from mixle_spark.stats.base import (
    Accumulator,
    AccumulatorFactory,
    Distribution,
    Encoder,
    Estimator,
    seq_update_with_ll,
)

__all__ = [
    "Payload",
    "PayloadHandle",
    "accumulate_chunks",
    "bind_estimator",
    "fold_key_passes",
    "initial_keep_weights",
    "merge_payloads",
    "one_column_error",
    "seed_from",
    "weighted_sum",
]

Payload = tuple[float, float, Any]
"""What a chunk / partition contributes: (total weight, weighted log-likelihood, statistics value or None)."""


def fold_key_passes(acc: Accumulator) -> Accumulator:
    """Run the tying passes once over a fully merged accumulator tree (never per shard)."""
    stats: dict[Any, Any] = {}
    acc.key_merge(stats)
    acc.key_replace(stats)
    return acc


def initial_keep_weights(seed: int, row_ids: np.ndarray, p: float) -> np.ndarray:
    """1.0 for rows selected into the initial sample (each with probability p), else 0.0.

    The draw is a hash of (seed, row id): the same rows are selected on every backend.
    """
    u = RowRandom(seed, row_ids).child("init-select").uniform()
    return (u < p).astype(np.float64)


def seed_from(rng: Any) -> int:
    """A 64-bit seed from an int, None, a numpy Generator or a RandomState."""
    if rng is None or isinstance(rng, (int, str)):
        return seed_to_int(rng)
    if isinstance(rng, np.integer):
        return seed_to_int(int(rng))
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(0, 2**63 - 1))
    if isinstance(rng, np.random.RandomState):
        return int(rng.randint(0, 2**31 - 1))
    raise TypeError(f"rng must be an int seed, None, a numpy Generator or RandomState, got {rng!r}")


def bind_estimator(
    estimator: Estimator, scan: Any, encoder: Encoder, num_workers: int | None = None
) -> Estimator:
    """``estimator`` with the data's scanned vocabularies / ranges fixed; it must encode like ``encoder``.

    With ``num_workers``, its E-step is threaded over that many threads
    (:class:`~mixle_spark.parallel.model_parallel.ModelParallelEstimator`, bit-identical results).
    """
    bound = estimator.with_scan(scan) if scan is not None else estimator
    if bound.encoder() != encoder:
        raise ValueError(
            f"{type(estimator).__name__} encodes data differently from the estimator this handle "
            "was built for; build a new handle with encoded_data(data, estimator)"
        )
    if num_workers is None:
        return bound
    from mixle_spark.parallel.model_parallel import ModelParallelEstimator  # it imports the backends

    return bound if isinstance(bound, ModelParallelEstimator) else ModelParallelEstimator(bound, num_workers)


def weighted_sum(w: np.ndarray, rows_ll: np.ndarray) -> float:
    """Σ w_i ll_i over rows with positive weight (so a zero-weight -inf row contributes 0, not NaN)."""
    used = w > 0
    if used.all():
        return float(np.dot(w, rows_ll))
    return float(np.dot(w[used], rows_ll[used]))


def merge_payloads(factory: AccumulatorFactory, a: Payload | None, b: Payload | None) -> Payload | None:
    """Merge two payloads; statistics are combined in a fresh accumulator (never aliasing either)."""
    if a is None:
        return b
    if b is None:
        return a
    if a[2] is None:
        value = b[2]
    elif b[2] is None:
        value = a[2]
    else:
        value = factory.make().from_value(a[2]).combine(b[2]).value()
    return (a[0] + b[0], a[1] + b[1], value)


def one_column_error(columns: list[str]) -> SchemaError:
    return SchemaError(
        f"the model reads one column but the data has {len(columns)}: {columns}; "
        "pass column=NAME or use a RecordEstimator"
    )


def check_engine_and_precision(backend: str, engine: Any, precision: Any) -> None:
    """Our backends compute with numpy in float64: any other engine or precision is refused."""
    if engine is not None and str(engine).lower() != "numpy":
        raise ValueError(f"the {backend!r} backend computes with numpy; engine={engine!r} is not available")
    if precision is not None and precision not in ("auto", "float64", "fp64", np.float64):
        raise ValueError(
            f"the {backend!r} backend computes in float64; precision={precision!r} cannot be honoured "
            "(results must agree across backends to 1e-9)"
        )


def accumulate_chunks(chunks: Iterable[tuple[Any, np.ndarray, Any]], request: Any) -> Payload:
    """One partition's payload: ``request = (factory, model, initialize)``.

    ``factory`` None scores ``model`` only; ``initialize = (seed, p)`` runs the row-keyed initial
    selection; otherwise an E-step from ``model``. ``chunks`` are ``(encoded, weights, row ids)``.
    """
    factory, model, initialize = request
    acc = None if factory is None else factory.make()
    touched = False
    nobs = ll = 0.0
    for enc, w, ids in chunks:
        touched = True
        if acc is None:
            ll += weighted_sum(w, model.seq_log_density(enc))
        elif initialize is not None:
            seed, p = initialize
            kept = w * initial_keep_weights(seed, ids, p)
            acc.seq_initialize(enc, kept, RowRandom(seed, ids).child("init"))
            w = kept
        else:
            ll += weighted_sum(w, seq_update_with_ll(acc, enc, w, model))
        nobs += float(w.sum())
    return (nobs, ll, acc.value() if acc is not None and touched else None)


_Handle = TypeVar("_Handle", bound="PayloadHandle")


class PayloadHandle:
    """The handle contract for backends whose workers each fold their chunks into one payload.

    A subclass provides ``bind(estimator)`` and ``_estep(factory, model, initialize) -> Payload``:
    every worker runs :func:`accumulate_chunks` over its chunks with ``(factory, model, initialize)``
    and the payloads are merged (:func:`merge_payloads`); the M-step runs here, once.
    """

    n: int

    def bind(self, estimator: Estimator) -> Estimator:
        raise NotImplementedError

    def close(self) -> None:
        """Release workers and caches (idempotent)."""

    def __len__(self) -> int:
        return self.n

    def __enter__(self: _Handle) -> _Handle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _estep(
        self, factory: Any, model: Distribution | None, initialize: tuple[int, float] | None
    ) -> Payload:
        raise NotImplementedError

    def pysp_em_step(
        self, estimator: Estimator, prev_estimate: Distribution
    ) -> tuple[float, float, Distribution]:
        """One pass: (total weight, log-likelihood of ``prev_estimate``, next estimate)."""
        bound = self.bind(estimator)
        factory = bound.accumulator_factory()
        nobs, ll, value = self._estep(factory, prev_estimate, None)
        return nobs, ll, bound.estimate(nobs, fold_key_passes(factory.make().from_value(value)).value())

    def pysp_seq_estimate(self, estimator: Estimator, prev_estimate: Distribution) -> Distribution:
        """The next EM estimate from ``prev_estimate``."""
        return self.pysp_em_step(estimator, prev_estimate)[2]

    def pysp_stream_accumulate(self, estimator: Estimator, model: Distribution) -> tuple[float, Any]:
        """The E-step fold without the M-step: (total weight, merged statistics value)."""
        factory = self.bind(estimator).accumulator_factory()
        nobs, _ll, value = self._estep(factory, model, None)
        return nobs, fold_key_passes(factory.make().from_value(value)).value()

    def pysp_seq_log_density_sum(self, estimate: Distribution) -> tuple[float, float]:
        """(total weight, weighted total log-likelihood of ``estimate``)."""
        nobs, ll, _ = self._estep(None, estimate, None)
        return nobs, ll

    def pysp_seq_initialize(self, estimator: Estimator, rng: Any, p: float) -> Distribution:
        """An initial model from rows kept with probability ``p`` (a hash of seed and global row id)
        and row-keyed random statistics: the same model as the local backend for one seed."""
        bound = self.bind(estimator)
        seed = seed_from(rng)
        p = 1.0 if p is None or p >= 1.0 else (0.1 if p <= 0.0 else float(p))
        factory = bound.accumulator_factory()
        nobs, _ll, value = self._estep(factory, None, (seed, p))
        if nobs < max(bound.min_rows(), 1) and p < 1.0:
            nobs, _ll, value = self._estep(factory, None, (seed, 1.0))
        return bound.estimate(nobs, fold_key_passes(factory.make().from_value(value)).value())
