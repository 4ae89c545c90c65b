"""The statistics of a scalar family fitted by EM with one latent number ``tau`` per row that enters
linearly (``x = location + b tau + normal noise``): the skew normal's half-normal ``tau``, the
ex-Gaussian's exponential part.

:class:`LatentSumsAccumulator` sums ``Σw``, ``Σw c``, ``Σw c^2``, ``Σw c^3`` (first pass only: the moment
start), ``Σw E[tau | x]``, ``Σw E[tau^2 | x]``, ``Σw c E[tau | x]`` with ``c = x - shift``, the shift being
the current model's location (a function of the model: every partition agrees) or, on a first pass, the
first value seen. ``combine`` re-expresses a value taken about another shift exactly (sums of powers of
``c + d``), so any split merged in any order gives the same statistics up to rounding.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats.base import Accumulator, Distribution

__all__ = ["LatentSumsAccumulator", "reshift"]

SHIFT, HAS_SHIFT = 7, 9
"""Positions of the shift and of its flag in the value (the other fields are weighted sums)."""


def reshift(value: tuple[float, ...], new: float) -> tuple[float, ...]:
    """The statistics re-expressed about ``new`` (sums of powers of ``c + d``, ``d = old - new``)."""
    sw, s1, s2, s3, t1, t2, t1c, shift, sw_em, _ = value
    d = shift - new
    return (
        sw,
        s1 + d * sw,
        s2 + 2.0 * d * s1 + d * d * sw,
        s3 + 3.0 * d * s2 + 3.0 * d * d * s1 + d**3 * sw,
        t1,
        t2,
        t1c + d * t1,
        new,
        sw_em,
        1.0,
    )


class LatentSumsAccumulator(Accumulator):
    """Value ``(sw, s1, s2, s3, t1, t2, t1c, shift, sw_em, has_shift)``: ``Σw c^k`` (``s3`` on a first pass
    only), ``Σw E[tau | x]``, ``Σw E[tau^2 | x]``, ``Σw c E[tau | x]``, the weight of the rows updated with a
    current model (``sw_em``; 0 means a first pass) and whether the shift is set.

    Subclasses set :attr:`model_class` (whose ``location`` attribute is the shift and whose
    ``posterior_moments(x)`` gives ``(E[tau | x], E[tau^2 | x])``) and :attr:`encoder_class`.
    """

    model_class: ClassVar[type[Distribution]]
    location: ClassVar[str]

    def __init__(self, keys: Any = None) -> None:
        self.keys = keys
        self.stats = [0.0] * 10

    def seq_update(self, enc: np.ndarray, weights: np.ndarray, estimate: Distribution | None) -> None:
        x = np.asarray(enc, dtype=np.float64)
        w = np.asarray(weights, dtype=np.float64)
        if x.size == 0:
            return None
        if estimate is not None and not isinstance(estimate, self.model_class):
            raise SpecError(
                f"{type(self).__name__}.seq_update needs the current {self.model_class.__name__} (or None on "
                f"the first pass), got {estimate!r}"
            )
        new = float(x[0]) if estimate is None else float(getattr(estimate, self.location))
        if not self.stats[HAS_SHIFT]:
            self.stats[SHIFT], self.stats[HAS_SHIFT] = new, 1.0
        elif self.stats[SHIFT] != new and estimate is not None:
            self.stats = list(reshift(tuple(self.stats), new))
        st = self.stats
        c = x - st[SHIFT]
        wc = w * c
        total = float(w.sum())
        st[0] += total
        st[1] += float(wc.sum())
        st[2] += float(np.dot(wc, c))
        if estimate is None:
            st[3] += float(np.dot(wc, c * c))
            return None
        t1, t2 = estimate.posterior_moments(x)  # type: ignore[attr-defined]
        st[4] += float(np.dot(w, t1))
        st[5] += float(np.dot(w, t2))
        st[6] += float(np.dot(wc, t1))
        st[8] += total
        return None

    def combine(self, value: Any) -> LatentSumsAccumulator:
        other = tuple(float(v) for v in value)
        if not other[HAS_SHIFT]:
            return self
        if not self.stats[HAS_SHIFT]:
            self.stats = list(other)
            return self
        if other[SHIFT] != self.stats[SHIFT]:
            other = reshift(other, self.stats[SHIFT])
        for j in (0, 1, 2, 3, 4, 5, 6, 8):
            self.stats[j] += other[j]
        return self

    def value(self) -> tuple[float, ...]:
        return tuple(self.stats)

    def _scale(self, factor: float) -> None:
        self.stats = [v if j in (SHIFT, HAS_SHIFT) else factor * v for j, v in enumerate(self.stats)]

    def from_value(self, value: Any) -> LatentSumsAccumulator:
        self.stats = [float(v) for v in value]
        return self
