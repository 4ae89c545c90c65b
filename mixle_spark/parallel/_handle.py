"""Pieces every encoded-data backend shares: binding an estimator to the scanned vocabularies,
row-keyed initial selection, the tying pass, weighted log-likelihood sums, merging payloads."""

from __future__ import annotations

from typing import Any

import numpy as np

from mixle_spark.errors import SchemaError
from mixle_spark.stats._random import RowRandom, seed_to_int
from mixle_spark.stats.base import Accumulator, AccumulatorFactory, Encoder, Estimator

__all__ = [
    "Payload",
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


def bind_estimator(estimator: Estimator, scan: Any, encoder: Encoder) -> Estimator:
    """``estimator`` with the data's scanned vocabularies / ranges fixed; it must encode like ``encoder``."""
    bound = estimator.with_scan(scan) if scan is not None else estimator
    if bound.encoder() != encoder:
        raise ValueError(
            f"{type(estimator).__name__} encodes data differently from the estimator this handle "
            "was built for; build a new handle with encoded_data(data, estimator)"
        )
    return bound


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
