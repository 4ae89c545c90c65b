"""Advisory load balancing of one EM iteration: a data-replica x model-shard grid, and row chunks.

An iteration costs ``N x C`` work units, ``C`` being the per-row FLOP proxy of the model
(:func:`~mixle_spark.parallel.planning.model_decomposition.subtree_work`). :func:`balance_plan` arranges ``P``
workers as ``D`` data replicas x ``M`` model shards:

* memory is a hard floor on the split, ``M >= ceil(model bytes / smallest known device memory)``;
* otherwise ``M`` grows only while it keeps more workers busy (with ``N`` rows there are at most ``N``
  data replicas), ties going to the smaller ``M`` because data parallelism needs no coupling;
* the model shards are contiguous ranges of the best axis, balanced by work, not by unit count.

:func:`balance_chunks` splits rows into contiguous ranges balanced by measured per-row cost and
device throughput. :func:`auto_balanced_estimator` only ever returns the estimator unchanged: a plan
that needs model shards raises :class:`UnrealizedModelPlacementError`, because the in-process
component-parallel runtime keeps the whole model resident.

>>> from mixle_spark.parallel.planning.planner import Resources
>>> from mixle_spark.stats.gaussian import GaussianDistribution
>>> plan = balance_plan(GaussianDistribution(0.0, 1.0), Resources.local(8), n_data=10_000)
>>> plan.data_replicas, plan.model_shards
(8, 1)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mixle_spark.errors import MixleError
from mixle_spark.parallel.planning.model_decomposition import (
    AxisCandidate,
    DecompositionAxis,
    Reduction,
    best_parallel_axis,
    check_positive_int,
    cost_balanced_cuts,
    min_known_memory,
    resource_devices,
    subtree_bytes,
    subtree_work,
)

__all__ = [
    "BalancePlan",
    "UnrealizedModelPlacementError",
    "auto_balanced_estimator",
    "balance_chunks",
    "balance_plan",
]


class UnrealizedModelPlacementError(MixleError, RuntimeError):
    """The planner chose distributed model shards that the in-process runtime cannot realise.

    ``plan`` is the :class:`~mixle_spark.parallel.planning.model_decomposition.ModelDecomposition` or
    :class:`BalancePlan` that asked for the placement."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan
        cuts = tuple(tuple(c) for c in getattr(plan, "cuts", ()) or ())  # the ranges (a ModelCut is one)
        extra = getattr(plan, "extra", None)
        where = extra.get("path") if isinstance(extra, dict) else None
        super().__init__(
            f"the planner chose distributed model shards ({len(cuts)} cuts {list(cuts)} of the "
            f"{getattr(plan, 'axis', None)} axis at {where or '/'}), but the in-process "
            "component-parallel runtime keeps the whole model resident in every process and cannot "
            "carry out a device placement; use an executor with an explicit placement contract, "
            "or change the resources or the workload "
            "(more memory per device, more rows, or fewer devices)"
        )


@dataclass(frozen=True)
class BalancePlan:
    """A ``D`` data replicas x ``M`` model shards grid for one EM iteration.

    ``cuts`` are the contiguous unit ranges of ``axis`` held by each model shard (empty when
    ``M == 1``); ``shard_work`` and ``shard_bytes`` are per-shard work per row and resident bytes
    (the shard's units plus the replicated rest of the model); ``fits`` is None when no device
    reports its memory."""

    data_replicas: int
    model_shards: int
    workers_used: int
    workers_total: int
    axis: DecompositionAxis
    reduction: Reduction
    cuts: tuple[tuple[int, int], ...]
    shard_work: tuple[float, ...]
    shard_bytes: tuple[int, ...]
    model_work: float
    model_bytes: int
    busiest_worker_work: float
    fits: bool | None
    rationale: tuple[str, ...]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_model_parallel(self) -> bool:
        return self.model_shards > 1

    @property
    def workers_idle(self) -> int:
        return max(0, self.workers_total - self.workers_used)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (enums as their string values)."""
        return {
            "data_replicas": self.data_replicas,
            "model_shards": self.model_shards,
            "workers_used": self.workers_used,
            "workers_total": self.workers_total,
            "axis": self.axis.value,
            "reduction": self.reduction.value,
            "cuts": [list(c) for c in self.cuts],
            "shard_work": list(self.shard_work),
            "shard_bytes": list(self.shard_bytes),
            "model_work": self.model_work,
            "model_bytes": self.model_bytes,
            "busiest_worker_work": self.busiest_worker_work,
            "fits": self.fits,
            "rationale": list(self.rationale),
            "extra": dict(self.extra),
        }


@dataclass(frozen=True)
class _Shards:
    cuts: tuple[tuple[int, int], ...]
    work: tuple[float, ...]
    nbytes: tuple[int, ...]


def _shards(best: AxisCandidate | None, m: int, model_work: float, model_bytes: int) -> _Shards:
    """The work-balanced split of the best axis into ``m`` shards; the rest of the model is replicated."""
    if m <= 1 or best is None:
        return _Shards((), (model_work,), (model_bytes,))
    cuts = cost_balanced_cuts(best.unit_works, [1.0] * m, 1)
    rest_work = max(0.0, model_work - best.total_work)
    rest_bytes = max(0, model_bytes - best.total_bytes)
    work = tuple(rest_work + float(sum(best.unit_works[a:b])) for a, b in cuts)
    nbytes = tuple(rest_bytes + int(sum(best.unit_bytes[a:b])) for a, b in cuts)
    return _Shards(cuts, work, nbytes)


def _grid(m_lo: int, m_hi: int, rows: int, p: int, fits_at: Callable[[int], bool]) -> tuple[int, int]:
    """``(M, D)`` keeping the most workers busy, ties to smaller M; grids whose shards fit first."""
    grids = [(m, min(rows, p // m)) for m in range(m_lo, m_hi + 1) if p // m >= 1]
    fitting = [g for g in grids if fits_at(g[0])]
    pool = fitting or grids
    return max(pool, key=lambda g: (g[0] * g[1], -g[0]))


def balance_plan(model: Any, resources: Any, *, n_data: int | None) -> BalancePlan:
    """Choose the ``D x M`` worker grid that balances one EM iteration's work under memory.

    Parameters
    ----------
    model : Distribution
        The model tree.
    resources : Resources
        The workers (``resources.devices``); memory is each device's ``memory_bytes``.
    n_data : int or None
        Number of rows; None means unknown and assumed to fill every worker.

    Returns
    -------
    BalancePlan
        ``M`` starts at the memory floor ``min(ceil(bytes / smallest known memory), units, P)`` and
        grows while more workers are kept busy (ties to smaller ``M``), preferring grids whose
        shards fit; ``D = min(N, P // M)``.
    """
    where = "balance_plan"
    check_positive_int(n_data, "n_data", where, allow_none=True)
    devices = resource_devices(resources, where)
    p = len(devices)
    rows = p if n_data is None else int(n_data)
    model_work, model_bytes = subtree_work(model), subtree_bytes(model)
    best = best_parallel_axis(model, p)
    max_units = best.num_units if best is not None else 1
    mem = min_known_memory(devices)
    m_mem = max(1, math.ceil(model_bytes / mem)) if mem else 1
    m_lo = max(1, min(m_mem, max_units, p))
    m_hi = max(m_lo, min(max_units, p))

    def fits_at(m: int) -> bool:
        return mem is None or max(_shards(best, m, model_work, model_bytes).nbytes) <= mem

    m, d = _grid(m_lo, m_hi, rows, p, fits_at)
    shards = _shards(best, m, model_work, model_bytes)
    fits = None if mem is None else max(shards.nbytes) <= mem
    busiest = math.ceil(rows / d) * max(shards.work)
    rationale = _rationale(model, model_bytes, best, (m, d, p), n_data, m_mem, shards, fits, mem, devices)
    return BalancePlan(
        data_replicas=d,
        model_shards=m,
        workers_used=m * d,
        workers_total=p,
        axis=best.axis if m > 1 and best is not None else DecompositionAxis.NONE,
        reduction=best.reduction if m > 1 and best is not None else Reduction.REPLICATE,
        cuts=shards.cuts,
        shard_work=shards.work,
        shard_bytes=shards.nbytes,
        model_work=model_work,
        model_bytes=model_bytes,
        busiest_worker_work=float(busiest),
        fits=fits,
        rationale=rationale,
        extra={
            "max_units": max_units,
            "m_mem": m_mem,
            "min_device_memory": mem,
            "n_data": n_data,
            "path": None if best is None else best.path,
        },
    )


def _rationale(
    model: Any,
    model_bytes: int,
    best: AxisCandidate | None,
    grid: tuple[int, int, int],
    n_data: int | None,
    m_mem: int,
    shards: _Shards,
    fits: bool | None,
    mem: int | None,
    devices: tuple[Any, ...],
) -> tuple[str, ...]:
    m, d, p = grid
    n_text = "unknown (assumed to fill every worker)" if n_data is None else str(n_data)
    used = m * d
    out: list[str] = []
    if m == 1 and best is None and n_data is not None and n_data < p:
        out.append(
            f"Single replica, {used} of {p} workers busy: N={n_data} rows cannot fill {p} workers and the "
            f"{type(model).__name__} model has no splittable axis (a split needs a mixture, record or "
            "composite with 2 or more units)."
        )
    elif m == 1:
        out.append(
            f"Data-parallel: D={d} replicas x M=1; the whole model ({shards.nbytes[0]} bytes, work "
            f"{shards.work[0]:g} per row) is replicated and N={n_text} rows keep {used} of {p} workers busy."
        )
    elif best is not None:  # m > 1 only happens with an axis
        split = (
            f"the {best.num_units} {best.axis.value} units of {best.family} at {best.path} are split into "
            f"M={m} shards {list(shards.cuts)} balanced by work (per-row work "
            f"{', '.join(f'{w:g}' for w in shards.work)})"
        )
        if d == 1:
            out.append(f"Model-parallel: N={n_text} rows cannot fill {p} workers with replicas, so {split}.")
        else:
            out.append(
                f"Data x model grid D={d} x M={m} = {used} of {p} workers: {split}, and the data is "
                f"split {d} ways."
            )
        if m_mem > 1:
            out.append(
                f"Memory floor: the model ({model_bytes} bytes) exceeds the smallest device ({mem} bytes), "
                f"so it needs at least ceil({model_bytes} / {mem}) = {m_mem} shards."
            )
    if fits is None:
        out.append(
            "MEMORY FIT UNKNOWN: no device reports memory_bytes, so the plan does not check that the "
            f"{max(shards.nbytes)} bytes per worker fit."
        )
    elif fits is False:
        units = 1 if best is None else best.num_units
        out.append(
            f"WARNING: the model does not fit: the largest shard needs {max(shards.nbytes)} bytes but the "
            f"smallest device has {mem} bytes; memory asks for at least {m_mem} shards and the best axis "
            f"offers {units} unit(s) on {p} worker(s)."
        )
    unknown = [dev.name for dev in devices if getattr(dev, "memory_bytes", None) is None]
    if fits is not None and unknown:
        out.append(f"Memory was checked only on devices reporting it; unknown for: {', '.join(unknown)}.")
    return tuple(out)


def balance_chunks(
    row_costs_or_n: int | Sequence[float] | np.ndarray, resources: Any
) -> tuple[tuple[int, int], ...]:
    """Contiguous row ranges, one per device in order, balanced by per-row cost and throughput.

    Device ``i`` receives rows whose summed cost is as close as the row granularity allows to the
    fraction ``throughput_i / sum(throughput)`` of the total cost. A range may be empty when there
    are fewer rows than devices.

    Parameters
    ----------
    row_costs_or_n : int or array-like of shape (n,)
        A row count (every row costs the same) or measured per-row costs (finite, non-negative;
        e.g. seconds or the length of list-valued rows).
    resources : Resources
        The devices receiving the chunks.

    Examples
    --------
    >>> from mixle_spark.parallel.planning.planner import DeviceSpec, Resources
    >>> res = Resources.from_specs([DeviceSpec("slow"), DeviceSpec("fast", throughput=3.0)])
    >>> balance_chunks(8, res)
    ((0, 2), (2, 8))
    """
    where = "balance_chunks"
    devices = resource_devices(resources, where)
    if isinstance(row_costs_or_n, (int, np.integer)) and not isinstance(row_costs_or_n, bool):
        if row_costs_or_n < 0:
            raise ValueError(f"{where}: the row count must be non-negative, got {row_costs_or_n!r}")
        costs = np.ones(int(row_costs_or_n))
    else:
        try:
            costs = np.asarray(row_costs_or_n, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"{where}: expected a row count or a 1-D array of per-row costs, got {row_costs_or_n!r}"
            ) from err
        if costs.ndim != 1 or not np.all(np.isfinite(costs)) or np.any(costs < 0):
            raise ValueError(
                f"{where}: per-row costs must be a finite, non-negative 1-D array, got {row_costs_or_n!r}"
            )
    return cost_balanced_cuts(costs, [float(dev.throughput) for dev in devices], 0)


def auto_balanced_estimator(
    estimator: Any, model: Any, resources: Any = None, *, n_data: int | None = None
) -> tuple[Any, BalancePlan]:
    """``(estimator, plan)`` with the estimator unchanged when the plan is data-parallel.

    The data degree ``D`` is realised by the data backend (``backend="spark"`` partitions the rows).
    ``resources`` defaults to ``Resources.local()``.

    Raises
    ------
    UnrealizedModelPlacementError
        When the plan needs ``M > 1`` model shards, which the in-process runtime cannot place.
    """
    if resources is None:
        from mixle_spark.parallel.planning.planner import Resources

        resources = Resources.local()
    plan = balance_plan(model, resources, n_data=n_data)
    if plan.is_model_parallel:
        raise UnrealizedModelPlacementError(plan)
    return estimator, plan
