"""Silent-data-corruption audit: recompute a sample of partitions and compare.

A bit flipped in memory, a miscompiled kernel or a flaky core changes the statistics a partition
returns without raising anything; EM then converges to a wrong model and nobody knows. The audit
catches it by redundancy:

1. in an audited iteration the E-step pass also returns the own payloads (total weight,
   log-likelihood, statistics) of a random sample of partitions (``PassOptions.keep``);
2. a second, independent pass recomputes only those partitions with the reference kernels
   (:func:`mixle_spark.stats.mixture.reference_kernels`: per-component scoring instead of the fused
   matrix products, the log-likelihood scored apart from the update; on Spark it is a new job, so
   the data is re-read from the cache and re-encoded);
3. the two are compared field by field within ``rtol`` / ``atol`` (integers exactly).

A mismatch is reported with the iteration, the partition id, the statistic's path and both values;
by default it raises :class:`SilentCorruptionError` before the suspect M-step result is used.

Use it through the EM driver: ``optimize(..., audit=SDCAudit(every=5, fraction=0.1))`` (or
``jobs/em_fit.py --audit-every 5``). The cost is one extra pass over ``fraction`` of the partitions
every ``every`` iterations. Backends: local (a partition is a chunk), spark (a partition), mp (a
worker's shard), mpi / torchrun (a rank's share).

The reference's ``finite_guarded_fold`` and ``inject_bit_flip`` are here too. Its
``AuditedMPEncodedData`` (an mp handle that audits its own E-steps with an :class:`SDCAudit`,
recomputing on another worker) is :mod:`mixle_spark.parallel.backends.mp_resilient`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from mixle_spark._audit import (
    AuditReceipt,
    SDCAudit,
    SilentCorruptionWarning,
    StatisticMismatch,
    compare_statistics,
)
from mixle_spark.errors import SilentCorruptionError

__all__ = [
    "AuditReceipt",
    "SDCAudit",
    "SilentCorruptionError",
    "SilentCorruptionWarning",
    "StatisticMismatch",
    "compare_statistics",
    "finite_guarded_fold",
    "inject_bit_flip",
]


def finite_guarded_fold(accumulator: Any, payloads: Iterable[Any]) -> Any:
    """Combine statistics ``payloads`` into ``accumulator``, checking the running value for NaN /
    inf after every ``combine`` (and after the tying passes); the error names the payload index.

    Returns the accumulator. Raises :class:`SilentCorruptionError` at the first non-finite value.
    """
    from mixle_spark.parallel.fold import fold_key_passes

    count = 0
    for index, value in enumerate(payloads):
        accumulator.combine(value)
        count += 1
        bad = _first_nonfinite(accumulator.value(), "stats")
        if bad is not None:
            raise SilentCorruptionError(
                f"non-finite statistic {bad} after combining payload index {index} "
                f"({count} combine() calls so far)"
            )
    fold_key_passes(accumulator)
    bad = _first_nonfinite(accumulator.value(), "stats")
    if bad is not None:
        raise SilentCorruptionError(
            f"non-finite statistic {bad} after the tying passes ({count} combine() calls)"
        )
    return accumulator


def _first_nonfinite(value: Any, path: str) -> str | None:
    if isinstance(value, tuple | list):
        for i, item in enumerate(value):
            found = _first_nonfinite(item, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            found = _first_nonfinite(item, f"{path}[{key!r}]")
            if found is not None:
                return found
        return None
    if isinstance(value, float | np.floating) and not math.isfinite(value):
        return f"{path} = {value}"
    if isinstance(value, np.ndarray) and value.dtype.kind in "fc" and not np.all(np.isfinite(value)):
        return f"{path} (array with {int(np.sum(~np.isfinite(value)))} non-finite values)"
    return None


def inject_bit_flip(payload: Any, bit_offset: int | None = None) -> Any:
    """A copy of ``payload`` with exactly one bit flipped in its first floating-point leaf (for
    testing the audit). ``bit_offset`` counts bits from the start of that leaf's bytes; the default
    is the middle bit of its first element."""
    done = [False]

    def flip(value: Any) -> Any:
        if done[0]:
            return value
        if isinstance(value, tuple | list):
            return type(value)(flip(v) for v in value)
        if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
            out = np.array(value, copy=True)
            raw = out.view(np.uint8).reshape(-1)
            bit = out.itemsize * 4 if bit_offset is None else int(bit_offset)
            if not 0 <= bit < raw.size * 8:
                raise ValueError(f"bit_offset {bit_offset} outside the leaf's {raw.size * 8} bits")
            raw[bit // 8] ^= np.uint8(1 << (bit % 8))
            done[0] = True
            return out
        if isinstance(value, float):
            return float(flip(np.array([value]))[0])
        return value

    flipped = flip(payload)
    if not done[0]:
        raise ValueError("the payload has no floating-point values to flip")
    return flipped
