"""What the truncated and censored combinators share: a family wrapped with fixed bounds.

* :func:`bound_option` - a ``low`` / ``high`` option (a finite number, or absent).
* :class:`BoundedAccumulator` - the inner family's accumulator plus the cache of tail nodes at the
  current model; its value is the inner accumulator's, so merging, scaling and widening are the inner
  family's. Subclasses give ``seq_update`` and ``seq_initialize`` (which rows are the inner family's,
  and what the tails add).
* :class:`BoundedEstimator` - the estimator options ``estimator``, ``low``, ``high``, ``name``, ``keys``,
  their check (bounds in order, at least one, the inner family's tails), and the M-step: the inner
  family's, wrapped again with the same bounds. The bounds are fixed, not fitted.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from mixle_spark.errors import SpecError
from mixle_spark.stats._tails import check_bounds_order, require_tails
from mixle_spark.stats.base import Accumulator, Estimator, estimator_option, option

__all__ = ["BoundedAccumulator", "BoundedEstimator", "bound_option"]


def bound_option() -> Any:
    return option(None, lambda v: math.isfinite(v), "a finite number", read=float)


class BoundedAccumulator(Accumulator):
    """The inner family's statistics (the observed rows' and the tails' expected ones); value: the inner
    accumulator's value."""

    encoder_class: ClassVar[Any]

    def __init__(
        self, child: Accumulator, low: float | None = None, high: float | None = None, keys: Any = None
    ):
        self.child = child
        self.low, self.high = low, high
        self.keys = keys
        self._nodes: dict[Any, Any] = {}

    def combine(self, value: Any) -> BoundedAccumulator:
        self.child.combine(value)
        return self

    def value(self) -> Any:
        return self.child.value()

    def _scale(self, factor: float) -> None:
        self.child._scale(factor)

    def widened(self, target: Accumulator) -> Any:
        return self.child.widened(target.child)  # type: ignore[attr-defined]

    def from_value(self, value: Any) -> BoundedAccumulator:
        self.child.from_value(value)
        return self

    def make_encoder(self) -> Any:
        return self.encoder_class(self.child.make_encoder(), self.low, self.high)

    def parts(self) -> list[Accumulator]:
        return [self.child]

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.child.make(), self.low, self.high, self.keys)

    def __getstate__(self) -> dict[str, Any]:
        return {**vars(self), "_nodes": {}}  # nodes are a cache of the current model, not statistics


@dataclass(eq=False, repr=False)
class BoundedEstimator(Estimator):
    """Fits ``estimator``'s family to data seen through fixed bounds (the subclass says how).

    Parameters
    ----------
    estimator : Estimator
        Estimator of a scalar family that gives its cdf and survival function (and quantile when
        continuous).
    low, high : float, optional
        The bounds (fixed, not fitted); either may be absent, not both.
    name, keys : str, optional
        ``keys`` ties the inner statistics across sites.
    """

    estimator: Estimator = estimator_option(required=True)
    low: float | None = bound_option()
    high: float | None = bound_option()
    name: str | None = None
    keys: str | None = None

    wrapper: ClassVar[str]
    """The spec name, as :func:`~mixle_spark.stats._tails.require_tails` names it in a refusal."""
    distribution_class: ClassVar[Any]
    accumulator_class: ClassVar[Any]
    encoder_class: ClassVar[Any]

    def check(self) -> None:
        check_bounds_order(type(self).__name__, self.low, self.high)
        if self.low is None and self.high is None:
            raise SpecError(f"{type(self).__name__}: give low, high or both")
        require_tails(self.estimator.family, self.wrapper)

    def accumulator_factory(self) -> Any:
        return self.accumulator_class(self.estimator.accumulator(), self.low, self.high, self.keys)

    def estimate(self, nobs: float | None, value: Any) -> Any:
        return self.distribution_class(self.estimator.estimate(nobs, value), self.low, self.high)

    def encoder(self) -> Any:
        return self.encoder_class(self.estimator.encoder(), self.low, self.high)

    def with_scan(self, scan: Any) -> BoundedEstimator:
        if scan is None:
            return self
        return dataclasses.replace(self, estimator=self.estimator.with_scan(scan))

    def min_rows(self) -> int:
        return self.estimator.min_rows()

    def _free_parameters(self, model: Any, tied: set[Any]) -> int:
        return self.estimator.n_free_parameters(model.dist, tied)  # the bounds are fixed
