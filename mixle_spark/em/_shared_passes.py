"""Several fits' passes as one pass over the data (private; the runner is :mod:`mixle_spark.em._lockstep`).

A :class:`SharedPass` is a row task (see
:func:`~mixle_spark.parallel.fold.accumulate_chunks`) whose
members are what several fits need from the same pass: an E-step from a model, a score of a model, an
initial selection, a seeding row task. Its accumulator (:class:`SharedAccumulator`, made by
:class:`SharedFactory`) keeps one accumulator, one total weight and one log-likelihood per member; its
value merges member by member, with the members' own ``combine``. Every chunk folds each member exactly
as a pass of that member alone would, and partitions merge in the same tree, so each member's result
equals the result of its own pass: fits advanced together equal the same fits run one by one. Any
backend with row passes runs it unchanged (one Spark job or resident request, one mp / MPI round).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.parallel.fold import fold_chunk

__all__ = ["SharedAccumulator", "SharedFactory", "SharedPass"]


class SharedAccumulator:
    """Per member: its accumulator (or None), total weight and weighted log-likelihood."""

    def __init__(self, factories: tuple[Any, ...]) -> None:
        self.factories = factories
        self.accs: list[Any] = [None if f is None else f.make() for f in factories]
        self.nobs = np.zeros(len(factories))
        self.ll = np.zeros(len(factories))
        self.touched = np.zeros(len(factories), dtype=bool)

    def combine(self, value: Any) -> SharedAccumulator:
        values, nobs, ll, touched = value
        for i, v in enumerate(values):
            if v is None:
                continue
            acc = self.accs[i]
            if self.touched[i] and acc is not None:
                acc.combine(v)
            elif acc is not None:
                acc.from_value(v)
            self.touched[i] = True
        self.nobs += np.asarray(nobs)
        self.ll += np.asarray(ll)
        self.touched |= np.asarray(touched, dtype=bool)
        return self

    def value(self) -> tuple[Any, ...]:
        values = tuple(
            None if acc is None or not seen else acc.value()
            for acc, seen in zip(self.accs, self.touched, strict=True)
        )
        return (values, self.nobs.copy(), self.ll.copy(), self.touched.copy())

    def from_value(self, value: Any) -> SharedAccumulator:
        self.accs = [None if f is None else f.make() for f in self.factories]
        self.nobs[:] = 0.0
        self.ll[:] = 0.0
        self.touched[:] = False
        return self.combine(value)


class SharedFactory:
    """Makes empty :class:`SharedAccumulator` for members with these factories."""

    def __init__(self, factories: tuple[Any, ...]) -> None:
        self.factories = factories

    def make(self) -> SharedAccumulator:
        return SharedAccumulator(self.factories)


@dataclass(frozen=True)
class SharedPass:
    """The row task folding every member into its own part of a :class:`SharedAccumulator`.

    A member is a pass request ``(factory, model, initialize)`` as
    :func:`~mixle_spark.parallel.fold.accumulate_chunks` takes it: an E-step, a score (``factory``
    None), the random initial selection (``initialize = (seed, p)``) or a row task (a seeding pass).
    """

    members: tuple[tuple[Any, Any, Any], ...]

    def factory(self) -> SharedFactory:
        return SharedFactory(tuple(member[0] for member in self.members))

    def fold(self, acc: SharedAccumulator, enc: Any, w: np.ndarray, ids: np.ndarray) -> None:
        for i, (_factory, model, initialize) in enumerate(self.members):
            weight, ll = fold_chunk(acc.accs[i], model, initialize, enc, w, ids)
            acc.nobs[i] += weight
            acc.ll[i] += ll
            acc.touched[i] = True
