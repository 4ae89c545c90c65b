"""The accumulator contract: weighted sufficient statistics that merge by ``combine``, each accumulator
its own factory, and parameter tying by ``keys``; for incremental EM, statistics that scale
(``scale``, old rows decayed) and move into a wider vocabulary (``widened``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

import numpy as np

from mixle_spark._checks import number
from mixle_spark.errors import SpecError
from mixle_spark.stats._encoder import Encoded, Encoder
from mixle_spark.stats._random import RowRandom

if TYPE_CHECKING:
    from mixle_spark.stats._family import Distribution

__all__ = [
    "SCALE_FACTOR",
    "Accumulator",
    "AccumulatorFactory",
    "seq_update_with_ll",
    "widened_parts",
    "widening_target",
]

SCALE_FACTOR = number(0.0)
"""What :meth:`Accumulator.scale` takes: a finite number >= 0."""


class AccumulatorFactory(ABC):
    """Makes fresh, zeroed accumulators; small and picklable (shipped to workers).

    Every accumulator is its own factory (:meth:`Accumulator.make`); a separate factory class is
    for wrappers that make another class's accumulators."""

    @abstractmethod
    def make(self) -> Accumulator:
        """A new accumulator with zero statistics."""


class Accumulator(AccumulatorFactory):
    """Weighted sufficient statistics of one family.

    ``keys`` (optional) ties parameters: every accumulator site with the same key is estimated
    from the pooled statistics after :meth:`key_merge` / :meth:`key_replace` run once over the
    fully merged tree (never per shard: pooling twice double-counts).
    """

    keys: Any = None

    def update(self, x: Any, weight: float, estimate: Distribution | None) -> None:
        """Add one record with weight ``weight`` (the slow path; equals ``seq_update`` on one row)."""
        enc = self.make_encoder().encode([x])
        self.seq_update(enc, np.array([float(weight)]), estimate)

    @abstractmethod
    def seq_update(
        self, enc: Encoded, weights: np.ndarray, estimate: Distribution | None
    ) -> np.ndarray | None:
        """Add a weighted encoded batch; ``weights`` has shape (n,).

        Returns the per-row log-density of ``estimate`` (shape (n,)) when computing it was a by-product
        of the update (mixtures compute it for the posteriors), else None. See :func:`seq_update_with_ll`.
        """

    def initialize(self, x: Any, weight: float, rng: RowRandom) -> None:
        """Randomised initial statistics for one record; ``rng`` has one row."""
        enc = self.make_encoder().encode([x])
        self.seq_initialize(enc, np.array([float(weight)]), rng)

    def seq_initialize(self, enc: Encoded, weights: np.ndarray, rng: RowRandom) -> None:
        """Randomised initial statistics for a batch; the default is a plain update."""
        self.seq_update(enc, weights, None)

    @abstractmethod
    def combine(self, value: Any) -> Accumulator:
        """Add another accumulator's ``value()`` into this one (never aliasing it); returns self."""

    @abstractmethod
    def value(self) -> Any:
        """The statistics as plain data (picklable, JSON-able after array -> list)."""

    @abstractmethod
    def from_value(self, value: Any) -> Accumulator:
        """Replace this accumulator's statistics by ``value`` (copied); returns self."""

    def scale(self, factor: float) -> Accumulator:
        """Multiply every weighted sum of the statistics by ``factor``, in place; returns self.

        Afterwards the statistics equal (to rounding) those of the same rows with every weight
        multiplied by ``factor``: incremental EM decays the statistics of older rows this way.
        What is not a weighted sum (a centre, a range, a vocabulary, ``keys``) is kept.

        Parameters
        ----------
        factor : float
            A finite number >= 0 (0 zeroes the sums and keeps their shape).
        """
        self._scale(SCALE_FACTOR(factor, "scale factor"))
        return self

    def _scale(self, factor: float) -> None:
        """:meth:`scale` after the check of ``factor``: multiply this accumulator's weighted sums and
        call its parts' ``_scale``."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement _scale(factor) (multiply its weighted sums by "
            "factor in place), so its statistics cannot be scaled or decayed"
        )

    def widened(self, target: Accumulator) -> Any:
        """This accumulator's statistics (a :meth:`value`) over the vocabularies of ``target``.

        ``target`` is an accumulator of the same structure whose label vocabularies contain this
        one's (made by the same estimator after ``with_scan`` added labels); new labels get zero
        statistics, so ``target.make().from_value(acc.widened(target))`` merges with ``target``'s own
        statistics. The default, for accumulators without a vocabulary, is :meth:`value`.

        Raises
        ------
        SpecError
            ``target`` has another structure, or lacks a label of this accumulator's vocabulary.
        """
        widening_target(self, target)
        return self.value()

    encoder_class: ClassVar[type[Encoder] | None] = None

    def make_encoder(self) -> Encoder:
        """The encoder matching this accumulator (for ``update`` / ``initialize`` on raw records);
        default: a fresh :attr:`encoder_class`."""
        if self.encoder_class is None:
            raise NotImplementedError(f"{type(self).__name__} has no encoder")
        return self.encoder_class()

    def fresh_args(self) -> tuple[Any, ...]:
        """The constructor arguments of a fresh, zeroed accumulator like this one (default
        ``(keys,)``; composites make fresh parts)."""
        return (self.keys,)

    def make(self) -> Accumulator:
        """A fresh, zeroed accumulator like this one: every accumulator is its own factory."""
        cls: Any = type(self)
        return cls(*self.fresh_args())  # type: ignore[no-any-return]

    def parts(self) -> list[Accumulator]:
        """The accumulators of this one's parts (the tying passes walk them); default none."""
        return []

    def key_merge(self, stats: dict[Any, Any]) -> None:
        """Tying pass 1: pool this site's statistics into ``stats[self.keys]``, then its parts'."""
        # The first site becomes the pool and later sites add into it; key_replace then copies the
        # pooled value back into every site (the pool itself included, harmlessly).
        if self.keys is not None:
            if self.keys in stats:
                stats[self.keys].combine(self.value())
            else:
                stats[self.keys] = self
        for part in self.parts():
            part.key_merge(stats)

    def key_replace(self, stats: dict[Any, Any]) -> None:
        """Tying pass 2: copy the pooled statistics back into this site, then into its parts."""
        if self.keys is not None and self.keys in stats:
            self.from_value(stats[self.keys].value())
        for part in self.parts():
            part.key_replace(stats)


def seq_update_with_ll(
    acc: Accumulator, enc: Encoded, weights: np.ndarray, estimate: Distribution
) -> np.ndarray:
    """Run ``acc.seq_update`` and return the per-row log-density of ``estimate`` on ``enc``.

    Uses the log-density the update computed as a by-product when there is one, else scores the
    batch; combinators use this so one pass yields statistics and log-likelihood together.
    """
    ll = acc.seq_update(enc, weights, estimate)
    return estimate.seq_log_density(enc) if ll is None else ll


AccumulatorT = TypeVar("AccumulatorT", bound=Accumulator)


def widening_target(acc: AccumulatorT, target: Accumulator) -> AccumulatorT:
    """``target`` of ``acc.widened(target)``, checked to be of ``acc``'s class (else a SpecError)."""
    if type(target) is not type(acc):
        raise SpecError(
            f"{type(acc).__name__}.widened: the target must be a {type(acc).__name__} of the same "
            f"structure, got {type(target).__name__}"
        )
    return cast(AccumulatorT, target)


def widened_parts(acc: Accumulator, parts: Any, targets: Any) -> tuple[Any, ...]:
    """Each of ``acc``'s ``parts`` widened to the matching part of the target's ``targets``."""
    parts, targets = list(parts), list(targets)
    if len(parts) != len(targets):
        raise SpecError(
            f"{type(acc).__name__}.widened: the target has {len(targets)} parts, this accumulator "
            f"{len(parts)}"
        )
    return tuple(part.widened(target) for part, target in zip(parts, targets, strict=True))
