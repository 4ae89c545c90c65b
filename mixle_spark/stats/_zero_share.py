"""What the zero_inflated and hurdle combinators share: a weight ``pi`` on zero beside a family.

* :class:`ZeroShareAccumulator` - the weight that counts towards ``pi`` (zero_inflated: the zeros'
  structural posterior weight; hurdle: the zeros' weight), the total weight and the inner family's
  statistics. Value: ``(zero_weight, total_weight, child_value)``, merged by addition.
* :class:`ZeroShareEstimator` - options ``estimator``, ``pseudo_count``, ``name``, ``keys``; the M-step
  ``pi = (zero_weight + pseudo_count / 2) / (total + pseudo_count)`` (1/2 with no weight and no
  pseudo-count) and the inner family's own M-step on the weight it was given; ``pi`` is one free
  parameter beside the inner family's.
Subclasses give ``seq_update`` / ``seq_initialize`` (how a zero's weight is split) and their classes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from mixle_spark.stats._parameters import check_pseudo_count
from mixle_spark.stats.base import Accumulator, Estimator, estimator_option

__all__ = ["ZeroShareAccumulator", "ZeroShareEstimator"]


class ZeroShareAccumulator(Accumulator):
    """``(zero_weight, total_weight, child_value)``: see the module doc."""

    encoder_class: ClassVar[Any]

    def __init__(self, child: Accumulator, keys: Any = None) -> None:
        self.child = child
        self.keys = keys
        self.zeros = 0.0
        self.total = 0.0
        self._nodes: dict[Any, Any] = {}

    def combine(self, value: Any) -> ZeroShareAccumulator:
        zeros, total, child_value = value
        self.zeros += float(zeros)
        self.total += float(total)
        self.child.combine(child_value)
        return self

    def value(self) -> tuple[float, float, Any]:
        return (self.zeros, self.total, self.child.value())

    def _scale(self, factor: float) -> None:
        self.zeros *= factor
        self.total *= factor
        self.child._scale(factor)

    def widened(self, target: Accumulator) -> tuple[float, float, Any]:
        return (self.zeros, self.total, self.child.widened(target.child))  # type: ignore[attr-defined]

    def from_value(self, value: Any) -> ZeroShareAccumulator:
        zeros, total, child_value = value
        self.zeros, self.total = float(zeros), float(total)
        self.child.from_value(child_value)
        return self

    def make_encoder(self) -> Any:
        return self.encoder_class(self.child.make_encoder())

    def parts(self) -> list[Accumulator]:
        return [self.child]

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.child.make(), self.keys)

    def __getstate__(self) -> dict[str, Any]:
        return {**vars(self), "_nodes": {}}  # nodes are a cache of the current model, not statistics


@dataclass(eq=False, repr=False)
class ZeroShareEstimator(Estimator):
    """Fits ``pi`` and the inner family (the subclass says how a zero's weight is split).

    Parameters
    ----------
    estimator : Estimator
        Estimator of the inner family.
    pseudo_count : float, optional
        ``pi = (zero weight + pseudo_count / 2) / (Σw + pseudo_count)``: shrinks ``pi`` towards 1/2.
        With zero total weight and no pseudo-count, ``pi = 1/2``.
    name, keys : str, optional
        ``keys`` ties ``pi`` and the inner statistics across sites.
    """

    estimator: Estimator = estimator_option(required=True)
    pseudo_count: float | None = None
    name: str | None = None
    keys: str | None = None

    distribution_class: ClassVar[Any]
    accumulator_class: ClassVar[Any]
    encoder_class: ClassVar[Any]

    def check(self) -> None:
        check_pseudo_count(type(self).__name__, self.pseudo_count)

    def accumulator_factory(self) -> Any:
        return self.accumulator_class(self.estimator.accumulator(), self.keys)

    def estimate(self, nobs: float | None, value: Any) -> Any:
        zeros, total, child_value = value
        pc_ = self.pseudo_count or 0.0
        weight = total + pc_
        pi = (zeros + 0.5 * pc_) / weight if weight > 0.0 else 0.5
        child = self.estimator.estimate(total - zeros, child_value)
        return self.distribution_class(child, min(max(pi, 0.0), 1.0))

    def encoder(self) -> Any:
        return self.encoder_class(self.estimator.encoder())

    def with_scan(self, scan: Any) -> ZeroShareEstimator:
        if scan is None:
            return self
        return dataclasses.replace(self, estimator=self.estimator.with_scan(scan))

    def min_rows(self) -> int:
        return self.estimator.min_rows()

    def _free_parameters(self, model: Any, tied: set[Any]) -> int:
        return 1 + self.estimator.n_free_parameters(model.dist, tied)  # pi, and the inner family's
