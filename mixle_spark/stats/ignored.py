"""A field the model does not describe: ``IgnoredDistribution()``.

Used for columns a Record carries but should not model (ids, free text): every record has
log-density 0, the encoder accepts anything and keeps only the number of rows, and the accumulator
holds nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.stats.base import (
    Accumulator,
    Distribution,
    Encoder,
    Estimator,
    RowRandom,
    register_distribution,
    register_estimator,
)

__all__ = [
    "IgnoredAccumulator",
    "IgnoredDistribution",
    "IgnoredEncoder",
    "IgnoredEstimator",
]


@register_distribution("ignored")
class IgnoredDistribution(Distribution):
    """Gives every record log-density 0 (the field contributes nothing to the likelihood).

    Examples
    --------
    >>> IgnoredDistribution().log_density("anything")
    0.0
    """

    def draw(self, rng: np.random.Generator, size: int | None = None) -> Any:
        """The ignored field has no model: draws are placeholder uniform floats in [0, 1), so that a
        Record with an ignored column still yields a value for it (any value is a valid record)."""
        return float(rng.random()) if size is None else rng.random(size)

    def log_density(self, x: Any) -> float:
        return 0.0

    def seq_log_density(self, enc: int) -> np.ndarray:
        return np.zeros(int(enc))

    def estimator(self, pseudo_count: float | None = None) -> IgnoredEstimator:
        return IgnoredEstimator()

    def encoder(self) -> IgnoredEncoder:
        return IgnoredEncoder()

    def n_free_parameters(self) -> int:
        return 0


class IgnoredEncoder(Encoder):
    """Accepts any records or Arrow column; the encoding is the number of rows (an int)."""

    def encode(self, records: Sequence[Any]) -> int:
        return len(records)

    def from_arrow(self, data: Any) -> int:
        num_rows = getattr(data, "num_rows", None)  # RecordBatch / Table
        return int(num_rows) if num_rows is not None else len(data)

    def expected_arrow(self) -> str:
        return "any column (ignored)"

    def union(self, other: Encoder) -> Encoder:
        if isinstance(other, IgnoredEncoder):
            return self
        raise TypeError(f"cannot combine encoders {self!r} and {other!r}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IgnoredEncoder)

    def __hash__(self) -> int:
        return hash("IgnoredEncoder")

    def embedding_scales(self) -> np.ndarray:
        return np.zeros(0, dtype=bool)

    def embed(self, enc: Any) -> np.ndarray:
        return np.zeros((int(enc), 0))


class IgnoredAccumulator(Accumulator):
    """Holds nothing; ``value()`` is None."""

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys

    def seq_update(self, enc: int, weights: np.ndarray, estimate: Any) -> None:
        return None

    def seq_initialize(self, enc: int, weights: np.ndarray, rng: RowRandom) -> None:
        return None

    def combine(self, value: Any) -> IgnoredAccumulator:
        return self

    def value(self) -> None:
        return None

    def _scale(self, factor: float) -> None:
        return None  # no statistics

    def from_value(self, value: Any) -> IgnoredAccumulator:
        return self

    def make_encoder(self) -> IgnoredEncoder:
        return IgnoredEncoder()


@register_estimator("ignored")
@dataclass(eq=False, repr=False)
class IgnoredEstimator(Estimator):
    """Always estimates :class:`IgnoredDistribution`; ``pseudo_count`` and ``keys`` are accepted for a
    uniform signature and have no effect (there is nothing to estimate or tie)."""

    pseudo_count: float | None = None
    name: str | None = None
    keys: Any = None

    accumulator_class = IgnoredAccumulator
    encoder_class = IgnoredEncoder

    def estimate(self, nobs: float | None, value: Any) -> IgnoredDistribution:
        return IgnoredDistribution()
