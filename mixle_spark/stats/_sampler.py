"""The one sampler of every family: a distribution with a seeded numpy ``Generator`` (and a sampler per
part of a combinator). Families draw in their own methods (``Distribution.draw`` /
``Distribution.draw_with``, see :mod:`mixle_spark.stats.base`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from mixle_spark.stats._family import Distribution

__all__ = ["Sampler"]


class Sampler:
    """Draws records from a distribution with a numpy ``Generator``.

    ``sample()`` returns one record; ``sample(size)`` returns a list of ``size`` records (families may
    return a numpy array where records are scalars). The distribution does the drawing
    (:meth:`Distribution.draw_with`); the sampler holds what lasts from one call to the next: its
    generator ``rng`` and, for a combinator, one sampler per part (:meth:`Distribution.sampling_parts`)
    in ``parts``, each seeded from this sampler's stream (:meth:`new_seed`) in order when it is built,
    so a seed fixes the whole tree's draws.
    """

    def __init__(self, dist: Distribution, seed: int | None = None) -> None:
        self.dist = dist
        self.rng = np.random.default_rng(seed)
        self.parts: list[Sampler] = [part.sampler(self.new_seed()) for part in dist.sampling_parts()]

    def new_seed(self) -> int:
        """An integer seed for a child sampler, drawn from this sampler's stream."""
        return int(self.rng.integers(0, 2**31 - 1))

    def sample(self, size: int | None = None) -> Any:
        """One record (``size`` None), or a batch of ``size`` records."""
        return self.dist.draw_with(self, size)

    def __repr__(self) -> str:
        return f"Sampler({self.dist!r})"
