"""k-means|| for a mixture whose components hold a mixture field (private; used by
:mod:`mixle_spark.em.seeding`).

A mixture of ``K`` records whose field ``x`` is itself a mixture of ``k`` components is a mixture of
``K * k`` flat clusters, grouped ``k`` to an outer component. Seeding only the ``K`` outer clusters
leaves two problems: k-means splits the rows along ``x``'s own modes (the largest spread) rather
than along the outer components, and every nested mixture starts from random responsibilities, so
its components start equal and EM fills the outer components with ``x``'s modes before they split.
Here the seeding finds the ``K * k`` flat clusters (the same passes, more centres), groups them
into ``K`` outer components of ``k`` each by the coordinates of the *other* fields, and starts each
unit one-hot on its outer component and, inside it, on its nested component.

One nested mixture field per component is seeded this way (the first whose components all agree);
other nested mixtures, and mixtures nested deeper, start from random responsibilities as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.em._seeding_passes import Assign, Target, local_kmeans, one_hot
from mixle_spark.stats._mixture_encoder import MixtureEncoder
from mixle_spark.stats._product import ProductEncoder
from mixle_spark.stats._random import RowRandom
from mixle_spark.stats.base import Estimator

__all__ = ["AssignNested", "Nested", "nested_plan"]


@dataclass(frozen=True)
class Nested:
    """The nested mixture field seeded with its outer mixture: child ``field`` of every component,
    ``k`` components, its embedding ``columns`` [start, stop) within a row's embedding."""

    field: int
    name: str
    k: int
    columns: tuple[int, int]

    def flat_k(self, outer: int) -> int:
        return outer * self.k

    def groups(
        self, centres: np.ndarray, outer: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """(outer component, nested component) of each of the ``outer * k`` flat ``centres``: the
        centres are grouped ``k`` to a group by the other fields' coordinates (all coordinates when
        the field is the only one), each centre to the nearest group centroid with room left."""
        start, stop = self.columns
        others = np.ones(centres.shape[1], dtype=bool)
        others[start:stop] = False
        points = centres[:, others] if others.any() else centres
        groups = local_kmeans(points, np.ones(len(points)), outer, rng)
        d2 = ((points[:, None, :] - groups[None, :, :]) ** 2).sum(axis=2)
        owner = np.full(len(points), -1)
        room = np.full(outer, self.k)
        for flat in np.argsort(d2, axis=None, kind="stable"):
            c, j = divmod(int(flat), outer)
            if owner[c] < 0 and room[j] > 0:
                owner[c] = j
                room[j] -= 1
        # inside a group, by the field's own coordinates: the order of a group's centres by their
        # distance to its centroid is a near-tie that rounding (the backend's sums) could flip
        inner = np.zeros(len(points), dtype=np.int64)
        for j in range(outer):
            members = np.flatnonzero(owner == j)
            order = np.lexsort(centres[members, start:stop].T[::-1])
            inner[members[order]] = np.arange(len(members))
        return owner, inner


def _children(estimator: Estimator) -> list[Estimator] | None:
    """The children of a record or composite estimator (in encoder order), else None."""
    from mixle_spark.stats.composite import CompositeEstimator
    from mixle_spark.stats.record import RecordEstimator

    if isinstance(estimator, RecordEstimator):
        return list(estimator.fields.values())
    if isinstance(estimator, CompositeEstimator):
        return list(estimator.components)
    return None


def _names(estimator: Estimator) -> list[str]:
    from mixle_spark.stats.record import RecordEstimator

    if isinstance(estimator, RecordEstimator):
        return list(estimator.fields)
    return [f"part {i}" for i in range(len(_children(estimator) or []))]


def nested_plan(estimator: Estimator, target: Target) -> Nested | None:
    """The nested mixture field to seed with ``estimator``'s components (a plain mixture of records
    or composites whose field ``i`` is, in every component, a mixture of the same size), or None."""
    from mixle_spark.stats.mixture import MixtureEstimator

    estimator = getattr(estimator, "inner", estimator)  # ModelParallelEstimator threads a mixture
    if type(estimator) is not MixtureEstimator or target.kind != "rows":
        return None
    encoder = target.encoder.inner if isinstance(target.encoder, MixtureEncoder) else None
    if not isinstance(encoder, ProductEncoder):
        return None
    children = [_children(c) for c in estimator.estimators]
    if any(c is None or len(c) != len(encoder.children) for c in children):
        return None
    widths = [len(child.embedding_scales()) for child in encoder.children]
    for i, width in enumerate(widths):
        fields: list[Any] = [c[i] for c in children]  # type: ignore[index]
        if width == 0 or not all(type(f) is MixtureEstimator for f in fields):
            continue
        sizes = {len(f.estimators) for f in fields}
        if len(sizes) == 1 and (k := sizes.pop()) > 1:
            start = sum(widths[:i])
            return Nested(i, _names(estimator.estimators[0])[i], k, (start, start + width))
    return None


@dataclass(frozen=True)
class AssignNested(Assign):
    """:class:`~mixle_spark.em._seeding_passes.Assign` for a mixture with a nested mixture field:
    every unit is one-hot on the outer component of its nearest flat centre (``centres`` are the
    flat ones) and, in the nested field, on that centre's nested component."""

    nested: Nested
    owner: np.ndarray
    inner: np.ndarray

    def assign(self, acc: Any, enc: Any, w: np.ndarray, index: np.ndarray, rng: RowRandom) -> None:
        outer = one_hot(self.owner[index], self.target.k)
        acc.seq_assign(
            enc, w, outer, rng, nested=(self.nested.field, one_hot(self.inner[index], self.nested.k))
        )
