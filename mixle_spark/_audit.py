"""The silent-corruption audit's policy and comparison: :class:`SDCAudit` (when, how much, how
strictly, what a mismatch does), its receipts and :func:`compare_statistics`.

Public through :mod:`mixle_spark.em.sdc_audit` (the EM driver's audit); here, outside the driver and the
backends, so that a backend handle that audits its own passes (the mp backend's
``AuditedMPEncodedData``) uses the same policy without importing the driver.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark._checks import check_fields, checked, integer, number, one_of
from mixle_spark.errors import SilentCorruptionError
from mixle_spark.stats._random import RowRandom, seed_to_int

__all__ = [
    "AuditReceipt",
    "SDCAudit",
    "SilentCorruptionWarning",
    "StatisticMismatch",
    "compare_statistics",
]


class SilentCorruptionWarning(UserWarning):
    """An audit mismatch reported with ``on_mismatch="warn"``."""


@dataclass(frozen=True)
class StatisticMismatch:
    """One disagreeing statistic: where (iteration, partition, path) and the two values."""

    iteration: int
    part: int
    path: str
    first: Any
    second: Any
    abs_diff: float
    rel_diff: float

    def describe(self) -> str:
        return (
            f"iteration {self.iteration}, partition {self.part}, {self.path}: first pass "
            f"{_short(self.first)}, audit pass {_short(self.second)} (abs diff {self.abs_diff:.3g}, "
            f"rel diff {self.rel_diff:.3g})"
        )


@dataclass(frozen=True)
class AuditReceipt:
    """What one audited iteration checked."""

    iteration: int
    parts: tuple[int, ...]
    mismatches: tuple[StatisticMismatch, ...]

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def describe(self) -> str:
        if self.ok:
            return f"audit ok: partitions {list(self.parts)}"
        bad = sorted({m.part for m in self.mismatches})
        return f"audit MISMATCH in partitions {bad} of {list(self.parts)}"


def _short(value: Any) -> str:
    text = repr(value.tolist() if isinstance(value, np.ndarray) else value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class SDCAudit:
    """When and how strictly the EM driver audits partitions.

    Parameters
    ----------
    every : int
        Audit iterations ``0, every, 2*every, ...`` (>= 1).
    fraction : float
        Fraction of the non-empty partitions recomputed per audit, in (0, 1]; at least one.
    rtol, atol : float
        Floating statistics agree when ``|a - b| <= atol + rtol * |b|``. The two kernels sum in a
        different order, so exact equality is not expected; rounding differences are ~1e-13.
    seed : int
        Seed of the partition sample (drawn per iteration, so it does not depend on timing).
    on_mismatch : {"raise", "warn"}
        ``raise`` stops the fit with :class:`SilentCorruptionError` (the suspect statistics are not
        used); ``warn`` emits :class:`SilentCorruptionWarning` and continues.
    """

    every: int = checked(integer(1), 1)
    fraction: float = checked(number(0, 1, low_open=True), 0.1)
    rtol: float = checked(number(0), 1e-9)
    atol: float = checked(number(0), 1e-9)
    seed: int = 0
    on_mismatch: str = checked(one_of(("raise", "warn")), "raise")

    def __post_init__(self) -> None:
        check_fields(self, "SDCAudit: ")

    def due(self, iteration: int) -> bool:
        """Whether ``iteration`` is audited."""
        return iteration % self.every == 0

    def select(self, iteration: int, parts: Iterable[int]) -> frozenset[int]:
        """The partitions audited at ``iteration``: ``ceil(fraction * len(parts))`` of ``parts``,
        drawn from (seed, iteration) — the same on every run and backend."""
        pool = np.array(sorted(set(int(p) for p in parts)), dtype=np.int64)
        if pool.size == 0:
            return frozenset()
        count = min(pool.size, max(1, math.ceil(self.fraction * pool.size)))
        keys = RowRandom(seed_to_int(self.seed), pool.astype(np.uint64)).child(f"sdc-{iteration}").uniform()
        return frozenset(int(p) for p in pool[np.argsort(keys, kind="stable")[:count]])

    def check(
        self,
        iteration: int,
        first: Mapping[int, Any],
        second: Mapping[int, Any],
    ) -> AuditReceipt:
        """Compare the two passes' payloads; raise or warn per ``on_mismatch``; the receipt."""
        mismatches: list[StatisticMismatch] = []
        for part in sorted(set(first) | set(second)):
            if part not in first or part not in second:  # one pass did not report the partition
                mismatches.append(
                    StatisticMismatch(
                        iteration, part, "payload", first.get(part), second.get(part), math.inf, math.inf
                    )
                )
                continue
            mismatches.extend(
                compare_statistics(
                    first[part], second[part], rtol=self.rtol, atol=self.atol, iteration=iteration, part=part
                )
            )
        receipt = AuditReceipt(iteration, tuple(sorted(set(first) | set(second))), tuple(mismatches))
        if mismatches:
            lines = "; ".join(m.describe() for m in mismatches[:5])
            more = f" (and {len(mismatches) - 5} more)" if len(mismatches) > 5 else ""
            message = (
                f"silent data corruption suspected: statistics recomputed by an independent pass "
                f"disagree: {lines}{more}"
            )
            if self.on_mismatch == "raise":
                raise SilentCorruptionError(message + "; the fit stopped before using them", mismatches)
            warnings.warn(message, SilentCorruptionWarning, stacklevel=3)
        return receipt


def compare_statistics(
    first: Any, second: Any, *, rtol: float = 1e-9, atol: float = 1e-9, iteration: int = 0, part: int = 0
) -> list[StatisticMismatch]:
    """Typed comparison of two statistics values: floats within ``atol + rtol * |second|``,
    integers, strings and other leaves exactly, structures element by element (with their path)."""
    out: list[StatisticMismatch] = []
    _compare(first, second, "stats", rtol, atol, iteration, part, out)
    return out


def _compare(
    a: Any,
    b: Any,
    path: str,
    rtol: float,
    atol: float,
    iteration: int,
    part: int,
    out: list[StatisticMismatch],
) -> None:
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        if len(a) != len(b):
            out.append(
                StatisticMismatch(iteration, part, f"{path} (length)", len(a), len(b), math.inf, math.inf)
            )
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _compare(x, y, f"{path}[{i}]", rtol, atol, iteration, part, out)
        return
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if set(a) != set(b):
            out.append(
                StatisticMismatch(
                    iteration,
                    part,
                    f"{path} (keys)",
                    sorted(map(str, a)),
                    sorted(map(str, b)),
                    math.inf,
                    math.inf,
                )
            )
            return
        for key in a:
            _compare(a[key], b[key], f"{path}[{key!r}]", rtol, atol, iteration, part, out)
        return
    if _numeric(a) and _numeric(b):
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape:
            out.append(
                StatisticMismatch(iteration, part, f"{path} (shape)", x.shape, y.shape, math.inf, math.inf)
            )
            return
        if x.dtype.kind in "iub" and y.dtype.kind in "iub":
            if not np.array_equal(x, y):
                gap = float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64))))
                out.append(StatisticMismatch(iteration, part, path, a, b, gap, math.inf))
            return
        xf, yf = x.astype(np.float64), y.astype(np.float64)
        same_nan = np.isnan(xf) & np.isnan(yf)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(xf - yf)
            bad = ~same_nan & ~((xf == yf) | (diff <= atol + rtol * np.abs(yf)))
        if bad.any():
            worst = float(np.max(np.where(bad, diff, 0.0))) if np.isfinite(diff[bad]).all() else math.inf
            scale = np.abs(yf[bad])
            rel = float(np.max(diff[bad] / np.where(scale > 0, scale, 1.0)))
            out.append(StatisticMismatch(iteration, part, path, a, b, worst, rel))
        return
    if type(a) is not type(b) or not _equal(a, b):
        out.append(StatisticMismatch(iteration, part, path, a, b, math.inf, math.inf))


def _numeric(value: Any) -> bool:
    if isinstance(value, bool | np.bool_):
        return True
    if isinstance(value, int | float | np.number):
        return True
    return isinstance(value, np.ndarray) and value.dtype.kind in "iufb"


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # e.g. arrays of objects: compare their representations
        return repr(a) == repr(b)
