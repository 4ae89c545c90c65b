"""Model-parallel E-steps: independent parts of one model threaded inside a process or a Spark task.

The whole model stays resident in every process; only the E-step's independent work is threaded:
a mixture's components (or, for exponential-family mixtures scored by the fused kernel, its row
blocks) and a record's fields. numpy releases the GIL in matrix products and ufuncs, so threads
run in parallel. Work items are combined in their serial order, so results are **bit-identical**
to the plain estimator's for any ``num_workers``.

:class:`ModelParallelEstimator` wraps any estimator: its accumulator threads ``seq_update`` and
keeps the wrapped accumulator's ``value`` / ``combine`` contract, so every data backend (local,
spark, ...) merges it unchanged and data parallelism composes with model parallelism::

    optimize(df, ModelParallelEstimator(estimator, num_workers=2))

Inside a Spark task use as many workers as the task has cores (``spark.task.cpus``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from mixle_spark.parallel._model_tree import threaded_nodes
from mixle_spark.stats._accumulator import widening_target
from mixle_spark.stats._product import ProductAccumulator
from mixle_spark.stats.base import (
    Accumulator,
    AccumulatorFactory,
    Distribution,
    Encoder,
    Estimator,
    RowRandom,
    check_parameter,
    check_spec_keys,
    estimator_from_dict,
    register_estimator,
    seq_update_with_ll,
)
from mixle_spark.stats.mixture import MixtureAccumulator, MixtureDistribution

__all__ = [
    "ComponentParallelEstimator",
    "ModelParallelAccumulator",
    "ModelParallelAccumulatorFactory",
    "ModelParallelEstimator",
    "auto_parallel_estimator",
    "component_parallel_fold",
    "model_parallel_fold",
]

EXECUTION_KIND = "component_parallel_threads"

_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """One long-lived pool per size and process (Spark reuses Python workers across tasks)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            pool = _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="mixle-model-parallel")
        return pool


def check_workers(num_workers: Any) -> int | None:
    ok = num_workers is None or (
        isinstance(num_workers, int) and not isinstance(num_workers, bool) and num_workers >= 1
    )
    check_parameter(ok, "ModelParallelEstimator", "num_workers", num_workers, "None or an integer >= 1")
    return num_workers  # type: ignore[no-any-return]


def _workers(num_workers: int | None) -> int:
    return num_workers if num_workers is not None else max(1, os.cpu_count() or 1)


def _units(model: Distribution) -> list[Distribution]:
    """The independent parts a node can thread: a mixture's components, a record's fields."""
    if isinstance(model, MixtureDistribution):
        return list(model.components)
    children = getattr(model, "child_distributions", None)
    return list(children()) if callable(children) else []


def threaded_node_ids(model: Distribution, num_workers: int | None) -> frozenset[int]:
    """Which nodes of ``model`` to thread (ids of the distribution objects): those of greatest
    benefit ``total - max(largest unit, total / P)``
    (see :mod:`mixle_spark.parallel._model_tree`)."""
    return frozenset(id(node) for node in threaded_nodes(model, _workers(num_workers)))


def _contains(model: Distribution, ids: frozenset[int]) -> bool:
    return id(model) in ids or any(_contains(u, ids) for u in _units(model))


def _fold(acc: Accumulator, model: Any, enc: Any, weights: np.ndarray, ids: frozenset[int], run: Any) -> Any:
    """``acc.seq_update(enc, weights, model)`` with the nodes in ``ids`` threaded by ``run``."""
    if model is None or not _contains(model, ids):
        return acc.seq_update(enc, weights, model)
    if isinstance(acc, MixtureAccumulator) and id(model) in ids:
        return acc.threaded_update(enc, weights, model, run)
    if isinstance(acc, ProductAccumulator):
        items = list(zip(acc.children, enc, acc._child_estimates(model), strict=True))
        if id(model) in ids:
            lls = list(run(lambda item: seq_update_with_ll(item[0], item[1], weights, item[2]), items))
        else:  # a field below is threaded: fold the fields in turn
            lls = [_fold_with_ll(a, d, e, weights, ids, run) for a, e, d in items]
        total = np.array(lls[0], dtype=np.float64)
        for ll in lls[1:]:
            total = total + ll
        return total
    return acc.seq_update(enc, weights, model)  # threads never nest below wrappers (Optional, ...)


def _fold_with_ll(
    acc: Accumulator, model: Distribution, enc: Any, weights: np.ndarray, ids: frozenset[int], run: Any
) -> np.ndarray:
    ll = _fold(acc, model, enc, weights, ids, run)
    return model.seq_log_density(enc) if ll is None else ll


def model_parallel_fold(
    acc: Accumulator,
    model: Distribution,
    enc: Any,
    weights: Any,
    num_workers: int | None = None,
    *,
    parallel_ids: Iterable[int] | None = None,
) -> np.ndarray | None:
    """Fold one encoded batch into ``acc`` (in place) with the model's independent work threaded.

    Parameters
    ----------
    acc : Accumulator
        The plain accumulator of ``model``'s estimator.
    model : Distribution
        The current model (fully resident).
    enc : encoded batch
    weights : array of shape (n,)
        Finite, non-negative row weights.
    num_workers : int, optional
        Threads (default: the machine's cores). 1 folds serially.
    parallel_ids : iterable of int, optional
        ``id()`` of the model nodes to thread; by default the nodes of greatest benefit.

    Returns
    -------
    The per-row log-likelihood when the accumulator computes it (as ``seq_update`` does), else None.
    The statistics are bit-identical to ``acc.seq_update(enc, weights, model)``.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(
            "fold weights must be a finite, non-negative one-dimensional array, "
            f"got shape {w.shape} with min {np.min(w, initial=0.0)!r}"
        )
    workers = _workers(check_workers(num_workers))
    if workers == 1:
        return acc.seq_update(enc, w, model)
    ids = frozenset(parallel_ids) if parallel_ids is not None else threaded_node_ids(model, workers)
    if not ids:
        return acc.seq_update(enc, w, model)
    pool = _pool(workers)
    return _fold(acc, model, enc, w, ids, pool.map)  # type: ignore[no-any-return]


component_parallel_fold = model_parallel_fold


class ModelParallelAccumulator(Accumulator):
    """The wrapped accumulator with a threaded ``seq_update``; everything else is delegated."""

    def __init__(self, inner: Accumulator, num_workers: int | None = None) -> None:
        self.inner = inner
        self.num_workers = num_workers
        self.keys = getattr(inner, "keys", None)

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.inner.make(), self.num_workers)

    def update(self, x: Any, weight: float, estimate: Distribution | None) -> None:
        self.inner.update(x, weight, estimate)

    def seq_update(self, enc: Any, weights: np.ndarray, estimate: Distribution | None) -> Any:
        if estimate is None:
            return self.inner.seq_update(enc, weights, estimate)
        return model_parallel_fold(self.inner, estimate, enc, weights, self.num_workers)

    def initialize(self, x: Any, weight: float, rng: RowRandom) -> None:
        self.inner.initialize(x, weight, rng)

    def seq_initialize(self, enc: Any, weights: np.ndarray, rng: RowRandom) -> None:
        self.inner.seq_initialize(enc, weights, rng)

    def seq_assign(
        self,
        enc: Any,
        weights: np.ndarray,
        resp: np.ndarray,
        rng: RowRandom,
        nested: tuple[int, np.ndarray] | None = None,
    ) -> None:
        self.inner.seq_assign(enc, weights, resp, rng, nested)  # type: ignore[attr-defined]

    def combine(self, value: Any) -> ModelParallelAccumulator:
        self.inner.combine(value)
        return self

    def value(self) -> Any:
        return self.inner.value()

    def _scale(self, factor: float) -> None:
        self.inner._scale(factor)

    def widened(self, target: Accumulator) -> Any:
        return self.inner.widened(widening_target(self, target).inner)

    def from_value(self, value: Any) -> ModelParallelAccumulator:
        self.inner.from_value(value)
        return self

    def make_encoder(self) -> Encoder:
        return self.inner.make_encoder()

    def key_merge(self, stats: dict[Any, Any]) -> None:
        self.inner.key_merge(stats)

    def key_replace(self, stats: dict[Any, Any]) -> None:
        self.inner.key_replace(stats)


class ModelParallelAccumulatorFactory(AccumulatorFactory):
    """Makes :class:`ModelParallelAccumulator` around the wrapped factory's accumulators (picklable)."""

    def __init__(self, inner: AccumulatorFactory, num_workers: int | None = None) -> None:
        self.inner = inner
        self.num_workers = num_workers

    def make(self) -> ModelParallelAccumulator:
        return ModelParallelAccumulator(self.inner.make(), self.num_workers)


@register_estimator("model_parallel")
class ModelParallelEstimator(Estimator):
    """Fit ``inner`` with its E-step's independent work threaded over ``num_workers`` threads.

    The M-step (``estimate``), the encoder and the statistics are ``inner``'s, unchanged.

    Parameters
    ----------
    inner : Estimator
        The estimator to fit (typically a mixture, or a record holding one).
    num_workers : int, optional
        Threads per process / Spark task (default: the machine's cores).
    """

    family = "model_parallel"
    execution_kind = EXECUTION_KIND

    def __init__(self, inner: Estimator, num_workers: int | None = None) -> None:
        check_parameter(
            isinstance(inner, Estimator), "ModelParallelEstimator", "inner", inner, "an Estimator"
        )
        self.inner = inner
        self.num_workers = check_workers(num_workers)
        self.keys = inner.keys
        self.name = inner.name
        self.pseudo_count = inner.pseudo_count

    def accumulator_factory(self) -> ModelParallelAccumulatorFactory:
        return ModelParallelAccumulatorFactory(self.inner.accumulator_factory(), self.num_workers)

    def estimate(self, nobs: float | None, value: Any) -> Distribution:
        return self.inner.estimate(nobs, value)

    def encoder(self) -> Encoder:
        return self.inner.encoder()

    def with_scan(self, scan: Any) -> ModelParallelEstimator:
        return ModelParallelEstimator(self.inner.with_scan(scan), self.num_workers)

    def with_inner(self, inner: Estimator) -> ModelParallelEstimator:
        """``inner`` threaded as this one is (``select_k`` varies the components of what it wraps)."""
        return ModelParallelEstimator(inner, self.num_workers)

    def min_rows(self) -> int:
        return self.inner.min_rows()

    def init_sample_size(self) -> tuple[int, int] | None:
        return self.inner.init_sample_size()

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.family, "estimator": self.inner.to_dict(), "num_workers": self.num_workers}

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> ModelParallelEstimator:
        check_spec_keys(spec, cls.family, required=("estimator",), optional=("num_workers",))
        return cls(estimator_from_dict(spec["estimator"]), spec.get("num_workers"))


ComponentParallelEstimator = ModelParallelEstimator


def auto_parallel_estimator(
    estimator: Estimator,
    model: Distribution,
    resources: Any = None,
    *,
    n_data: int | None = None,
    min_components_per_shard: int = 1,
) -> tuple[Estimator, Any]:
    """``(estimator, decomposition)``: the plain estimator when no model placement is needed.

    The structural planner (:func:`~mixle_spark.parallel.planning.model_decomposition.decompose_model`) is
    advisory. When it cuts the model into shards that would need model storage partitioned across
    devices, this raises :class:`~mixle_spark.parallel.planning.balance.UnrealizedModelPlacementError`
    carrying the plan: threads keep the
    whole model in every process and cannot realise such a placement. Choose
    :class:`ModelParallelEstimator` explicitly when the model fits in each process.
    """
    from mixle_spark.parallel.planning.balance import UnrealizedModelPlacementError
    from mixle_spark.parallel.planning.model_decomposition import decompose_model
    from mixle_spark.parallel.planning.planner import Resources

    resources = Resources.local() if resources is None else resources
    decomposition = decompose_model(
        model, resources, n_data=n_data, min_components_per_shard=min_components_per_shard
    )
    if decomposition.is_model_parallel:
        raise UnrealizedModelPlacementError(decomposition)
    return estimator, decomposition
