"""Cut arithmetic and argument checks shared by the advisory planners (model decomposition, balance)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle_spark.parallel._model_tree import check_positive_int

__all__ = ["check_positive_int", "cost_balanced_cuts", "min_known_memory", "resource_devices"]


# --- validation shared with balance.py ------------------------------------------------------------
def resource_devices(resources: Any, where: str) -> tuple[Any, ...]:
    """``resources.devices`` as a tuple; ``TypeError`` unless there is at least one device."""
    devices = tuple(getattr(resources, "devices", ()) or ())
    if not devices:
        raise TypeError(f"{where}: expected a Resources with at least one device, got {resources!r}")
    return devices


def min_known_memory(devices: Sequence[Any]) -> int | None:
    """Smallest ``memory_bytes`` among devices that report one, or None when none does."""
    known = [int(d.memory_bytes) for d in devices if getattr(d, "memory_bytes", None) is not None]
    return min(known) if known else None


# --- cuts -----------------------------------------------------------------------------------------
def cost_balanced_cuts(
    unit_costs: Sequence[float] | np.ndarray, shares: Sequence[float], min_units_per_cut: int = 0
) -> tuple[tuple[int, int], ...]:
    """Contiguous ranges over the units, one per share, balancing cost against the shares.

    The boundary after cut ``s`` is the unit index whose cumulative cost is nearest the cumulative
    share fraction of the total cost, kept monotone and leaving every cut ``min_units_per_cut`` units
    (with 0, a cut may be empty). An all-zero cost vector is balanced by unit count.

    Parameters
    ----------
    unit_costs : sequence of float, length n
        Finite, non-negative cost of each unit (work of a component, cost of a row).
    shares : sequence of float, length S
        Positive relative capacity of each cut (device throughputs).
    min_units_per_cut : int
        Lower bound on the units of every cut; ``S * min_units_per_cut`` must not exceed ``n``.
    """
    costs = np.asarray(unit_costs, dtype=np.float64)
    weights = np.asarray(shares, dtype=np.float64).reshape(-1)
    if costs.ndim != 1 or not np.all(np.isfinite(costs)) or np.any(costs < 0):
        raise ValueError(f"cost_balanced_cuts: unit costs must be finite and non-negative, got {costs!r}")
    if weights.shape[0] < 1 or not np.all(np.isfinite(weights)) or np.any(weights <= 0):
        raise ValueError(f"cost_balanced_cuts: shares must be finite and positive, got {weights!r}")
    n, s_count = costs.shape[0], weights.shape[0]
    if min_units_per_cut < 0 or s_count * min_units_per_cut > n:
        raise ValueError(
            f"cost_balanced_cuts: cannot give {s_count} cuts at least {min_units_per_cut} of {n} units each"
        )
    if float(costs.sum()) <= 0.0:
        costs = np.ones(n)
    cum = np.concatenate(([0.0], np.cumsum(costs)))
    targets = np.cumsum(weights / weights.sum())[:-1] * cum[-1]
    bounds = [0]
    for s, target in enumerate(targets):
        lo = bounds[-1] + min_units_per_cut
        hi = n - (s_count - 1 - s) * min_units_per_cut
        k = int(np.searchsorted(cum, target))  # cum[k-1] < target <= cum[k]
        k = min(max(k, lo), hi)
        if k - 1 >= lo and abs(cum[k - 1] - target) <= abs(cum[k] - target):
            k -= 1
        bounds.append(k)
    bounds.append(n)
    return tuple((bounds[i], bounds[i + 1]) for i in range(s_count))
