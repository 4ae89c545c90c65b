"""Per-rank receipts of a distributed fit (the reference's ``em_observability`` names).

A caller that times its ranks, workers or partitions records one :class:`RankRecord` per rank and
round; :func:`detect_stragglers` flags slow ranks by median and MAD, :func:`imbalance_receipt`
measures skew in the bytes each rank read, :func:`plan_rebalance_weights` proposes data shares
proportional to speed, and :func:`fit_report` sums it all up. Public through
:mod:`mixle_spark.em.observability`, which also holds the per-iteration EM trace.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from mixle_spark.errors import describe_value

__all__ = [
    "FitReport",
    "ImbalanceReceipt",
    "RankRecord",
    "StragglerReport",
    "binary_size",
    "detect_stragglers",
    "fit_report",
    "imbalance_receipt",
    "plan_rebalance_weights",
    "si_number",
    "straggler_ids",
]

_MAD_SCALE = 1.4826  # MAD of a normal sample times this estimates its standard deviation
_INT_FIELDS = ("rank", "round", "bytes_processed", "accumulator_bytes", "n_obs")
_SECONDS_FIELDS = ("e_step_seconds", "m_step_seconds")


def _non_negative_int(where: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{where}: expected a non-negative int, got {describe_value(value)}")
    if value < 0:
        raise ValueError(f"{where}: expected a non-negative int, got {describe_value(value)}")
    return int(value)


def _non_negative_seconds(where: str, value: Any) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where}: expected a finite number of seconds >= 0, got {describe_value(value)}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{where}: expected a finite number of seconds >= 0, got {describe_value(value)}")
    return seconds


# -- rank receipts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankRecord:
    """What one rank (worker, partition) measured in one EM round.

    Parameters
    ----------
    rank, round : int
        Who and when; both non-negative.
    e_step_seconds, m_step_seconds : float
        Finite, non-negative durations.
    bytes_processed, accumulator_bytes, n_obs : int
        Non-negative counts: bytes of data read, bytes of sufficient statistics produced, rows.
    extra : mapping
        Free-form measurements; a key may not reuse a field name.
    """

    rank: int
    round: int
    e_step_seconds: float
    m_step_seconds: float = 0.0
    bytes_processed: int = 0
    accumulator_bytes: int = 0
    n_obs: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        for name in _INT_FIELDS:
            object.__setattr__(self, name, _non_negative_int(f"RankRecord.{name}", getattr(self, name)))
        for name in _SECONDS_FIELDS:
            object.__setattr__(self, name, _non_negative_seconds(f"RankRecord.{name}", getattr(self, name)))
        if not isinstance(self.extra, Mapping):
            raise TypeError(f"RankRecord.extra: expected a mapping, got {describe_value(self.extra)}")
        names = {f.name for f in fields(self)}
        for key in self.extra:
            if key in names:
                raise ValueError(
                    f"RankRecord.extra: key {key!r} shadows the measurement field {key!r}; "
                    "pass it as that field or rename the key"
                )
        object.__setattr__(self, "extra", dict(self.extra))

    @property
    def seconds(self) -> float:
        """E-step plus M-step seconds."""
        return self.e_step_seconds + self.m_step_seconds

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict."""
        return {
            f.name: dict(self.extra) if f.name == "extra" else getattr(self, f.name) for f in fields(self)
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RankRecord:
        """Inverse of :meth:`to_dict`."""
        return cls(**dict(d))


def _checked_records(records: Iterable[Any], where: str) -> list[RankRecord]:
    """The records as a list; refuses other types and a repeated (round, rank)."""
    out: list[RankRecord] = []
    seen: set[tuple[int, int]] = set()
    for record in records:
        if not isinstance(record, RankRecord):
            raise TypeError(f"{where}: expected RankRecord items, got {describe_value(record)}")
        key = (record.round, record.rank)
        if key in seen:
            raise ValueError(f"{where}: duplicate record for round {record.round}, rank {record.rank}")
        seen.add(key)
        out.append(record)
    return out


def _straggler_evidence(
    ids: Sequence[int], seconds: Sequence[float], threshold_ratio: float, z_threshold: float
) -> tuple[float, float, dict[int, float], dict[int, float], tuple[int, ...]]:
    """(median, MAD, ratio by id, robust z by id, flagged ids) of :func:`detect_stragglers`' rule."""
    if len(ids) == 0:
        return 0.0, 0.0, {}, {}, ()
    t = np.asarray(seconds, dtype=np.float64)
    median = float(np.median(t))
    mad = float(np.median(np.abs(t - median)))
    with np.errstate(divide="ignore", invalid="ignore"):
        # every rank at zero but this one (if it is slower at all) is infinitely slower
        ratio = t / median if median > 0 else np.where(t > 0, math.inf, 1.0)
        z = (t - median) / (_MAD_SCALE * mad) if mad > 0 else np.where(t > median, math.inf, 0.0)
    flagged = (ratio >= threshold_ratio) & ((mad == 0) | (z >= z_threshold))
    keys = [int(i) for i in ids]
    return (
        median,
        mad,
        dict(zip(keys, ratio.tolist(), strict=True)),
        dict(zip(keys, z.tolist(), strict=True)),
        tuple(sorted(k for k, bad in zip(keys, flagged.tolist(), strict=True) if bad)),
    )


def straggler_ids(
    ids: Sequence[int], seconds: Sequence[float], threshold_ratio: float, z_threshold: float
) -> tuple[int, ...]:
    """The ``ids`` whose ``seconds`` are stragglers' (:func:`detect_stragglers`' rule)."""
    return _straggler_evidence(ids, seconds, threshold_ratio, z_threshold)[4]


class StragglerReport(tuple[int, ...]):
    """The verdict of :func:`detect_stragglers` for one round, with its evidence.

    The report *is* the tuple of flagged ranks, sorted (so ``detect_stragglers(...) == (3,)``,
    ``if report:`` and its repr read as before); the evidence is in its read-only attributes:

    Attributes
    ----------
    slow_ranks : tuple of int
        The flagged ranks (the tuple itself).
    round : int or None
        The round of the records (None for a mapping of seconds).
    rank_seconds : dict
        rank -> the E-step seconds the test used.
    median_seconds, mad_seconds : float
        Median and (unscaled) median absolute deviation of those seconds.
    ratios, z_scores : dict
        rank -> seconds / median, and rank -> (seconds - median) / (1.4826 * MAD) (inf above the
        median when MAD is 0).
    threshold_ratio, z_threshold : float
        The thresholds applied.
    """

    round: int | None
    rank_seconds: dict[int, float]
    median_seconds: float
    mad_seconds: float
    ratios: dict[int, float]
    z_scores: dict[int, float]
    threshold_ratio: float
    z_threshold: float

    def __new__(
        cls,
        slow_ranks: Iterable[int] = (),
        *,
        round: int | None = None,
        rank_seconds: Mapping[int, float] | None = None,
        median_seconds: float = 0.0,
        mad_seconds: float = 0.0,
        ratios: Mapping[int, float] | None = None,
        z_scores: Mapping[int, float] | None = None,
        threshold_ratio: float = 1.5,
        z_threshold: float = 3.0,
    ) -> StragglerReport:
        report = super().__new__(cls, sorted(int(r) for r in slow_ranks))
        evidence = {
            "round": round,
            "rank_seconds": dict(rank_seconds or {}),  # copies: the caller's dicts stay theirs
            "median_seconds": float(median_seconds),
            "mad_seconds": float(mad_seconds),
            "ratios": dict(ratios or {}),
            "z_scores": dict(z_scores or {}),
            "threshold_ratio": float(threshold_ratio),
            "z_threshold": float(z_threshold),
        }
        report.__dict__.update(evidence)
        return report

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"StragglerReport is read-only: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"StragglerReport is read-only: cannot delete {name!r}")

    @property
    def slow_ranks(self) -> tuple[int, ...]:
        """The flagged ranks as a plain tuple."""
        return tuple(self)

    @property
    def has_stragglers(self) -> bool:
        """Whether any rank was flagged."""
        return len(self) > 0

    def to_dict(self) -> dict[str, Any]:
        """The evidence as a JSON-able dict (``slow_ranks`` a list)."""
        return {
            "slow_ranks": list(self),
            **{k: (dict(v) if isinstance(v, dict) else v) for k, v in vars(self).items()},
        }


def detect_stragglers(
    records_or_seconds: Iterable[RankRecord] | Mapping[int, float],
    threshold_ratio: float = 1.5,
    z_threshold: float = 3.0,
    *,
    round: int | None = None,
) -> StragglerReport:
    """Ranks much slower than the median within one round.

    A rank with E-step time ``t`` is flagged when ``t / median >= threshold_ratio`` and either the
    median absolute deviation (MAD) is 0 or ``(t - median) / (1.4826 * MAD) >= z_threshold``. The
    ratio test keeps a tight group from flagging its slowest member; the robust z-score keeps one
    noisy round of a widely spread group from flagging half of it.

    Parameters
    ----------
    records_or_seconds : iterable of RankRecord, or mapping rank -> seconds
        Records of one round, or of several with ``round`` naming the one to test.
    threshold_ratio : float
        Minimum slowdown relative to the median, > 0.
    z_threshold : float
        Minimum robust z-score.
    round : int, optional
        The round to test (records of other rounds are left out); for a mapping, the report's label.

    Returns
    -------
    StragglerReport
        The flagged ranks, sorted (a tuple), with the medians, ratios and z-scores behind them.
    """
    if not math.isfinite(threshold_ratio) or threshold_ratio <= 0:
        raise ValueError(
            f"detect_stragglers: threshold_ratio must be a finite number > 0, got {threshold_ratio!r}"
        )
    if not math.isfinite(z_threshold):
        raise ValueError(f"detect_stragglers: z_threshold must be finite, got {z_threshold!r}")
    if round is not None:
        round = _non_negative_int("detect_stragglers: round", round)
    if isinstance(records_or_seconds, Mapping):
        ids = [_non_negative_int("detect_stragglers: rank", r) for r in records_or_seconds]
        seconds = [
            _non_negative_seconds(f"detect_stragglers: seconds of rank {r}", s)
            for r, s in records_or_seconds.items()
        ]
        label = round
    else:
        records = _checked_records(records_or_seconds, "detect_stragglers")
        if round is not None:
            records = [r for r in records if r.round == round]
        rounds = sorted({r.round for r in records})
        if len(rounds) > 1:
            raise ValueError(
                f"detect_stragglers: expected the records of one round, got rounds {rounds} "
                "(pass round= to choose one)"
            )
        ids = [r.rank for r in records]
        seconds = [r.e_step_seconds for r in records]
        label = rounds[0] if rounds else round
    median, mad, ratios, z_scores, flagged = _straggler_evidence(ids, seconds, threshold_ratio, z_threshold)
    return StragglerReport(
        flagged,
        round=label,
        rank_seconds=dict(zip(ids, seconds, strict=True)),
        median_seconds=median,
        mad_seconds=mad,
        ratios=ratios,
        z_scores=z_scores,
        threshold_ratio=threshold_ratio,
        z_threshold=z_threshold,
    )


_IMBALANCE_KEYS = (
    "ranks",
    "bytes_by_rank",
    "mean_bytes",
    "relative_to_mean",
    "max_over_mean",
    "max_over_min",
)


@dataclass(frozen=True, eq=False)
class ImbalanceReceipt(Mapping[str, Any]):
    """How unevenly the bytes read were spread over the ranks (built by :func:`imbalance_receipt`).

    Attributes (the reference's names, and ours)
    ----------
    round : int or None
        The round measured; None when summed over every round.
    bytes_per_rank, n_obs_per_rank : dict
        rank -> bytes read, rank -> rows, sorted by rank.
    mean_bytes : float
        Mean bytes over the ranks.
    skew_by_rank : dict
        rank -> bytes / mean (1.0 throughout when every rank read nothing).
    max_bytes_ratio : float
        max / mean bytes; ``max_over_min`` max / min (inf when some rank read nothing and another did).

    It is also the read-only mapping the function returned before it had a type: ``ranks``,
    ``bytes_by_rank``, ``mean_bytes``, ``relative_to_mean``, ``max_over_mean``, ``max_over_min``
    (``dict(receipt)``, ``receipt["max_over_min"]``); it equals such a dict with the same values.
    """

    round: int | None
    bytes_per_rank: dict[int, int]
    n_obs_per_rank: dict[int, int]
    mean_bytes: float
    skew_by_rank: dict[int, float]
    max_bytes_ratio: float
    max_over_min: float

    def __post_init__(self) -> None:
        for name in ("bytes_per_rank", "n_obs_per_rank", "skew_by_rank"):
            object.__setattr__(self, name, dict(getattr(self, name)))

    @property
    def ranks(self) -> int:
        """How many ranks reported."""
        return len(self.bytes_per_rank)

    def __getitem__(self, key: str) -> Any:
        if key == "ranks":
            return self.ranks
        if key == "bytes_by_rank":
            return self.bytes_per_rank
        if key == "mean_bytes":
            return self.mean_bytes
        if key == "relative_to_mean":
            return self.skew_by_rank
        if key == "max_over_mean":
            return self.max_bytes_ratio
        if key == "max_over_min":
            return self.max_over_min
        raise KeyError(f"ImbalanceReceipt: no key {key!r}; the keys are {list(_IMBALANCE_KEYS)}")

    def __iter__(self) -> Iterator[str]:
        return iter(_IMBALANCE_KEYS)

    def __len__(self) -> int:
        return len(_IMBALANCE_KEYS)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ImbalanceReceipt):
            return self.to_dict() == other.to_dict()
        if isinstance(other, Mapping):
            return dict(self) == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        """Every field (the reference's names) as a dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def imbalance_receipt(records: Iterable[RankRecord], *, round: int | None = None) -> ImbalanceReceipt:
    """Bytes read by each rank, relative to the mean over ranks.

    Summed over every round (the default), or of one ``round`` (the reference's view of a round).
    All ranks at zero bytes count as even (ratios 1.0); no records give zeros throughout.
    """
    checked = _checked_records(records, "imbalance_receipt")
    if round is not None:
        round = _non_negative_int("imbalance_receipt: round", round)
        checked = [r for r in checked if r.round == round]
    by_rank: dict[int, int] = {}
    rows: dict[int, int] = {}
    for r in checked:
        by_rank[r.rank] = by_rank.get(r.rank, 0) + r.bytes_processed
        rows[r.rank] = rows.get(r.rank, 0) + r.n_obs
    by_rank, rows = dict(sorted(by_rank.items())), dict(sorted(rows.items()))
    if not by_rank:
        return ImbalanceReceipt(round, {}, {}, 0.0, {}, 0.0, 0.0)
    values = list(by_rank.values())
    mean = sum(values) / len(values)
    low, high = min(values), max(values)
    return ImbalanceReceipt(
        round=round,
        bytes_per_rank=by_rank,
        n_obs_per_rank=rows,
        mean_bytes=mean,
        skew_by_rank={k: (v / mean if mean > 0 else 1.0) for k, v in by_rank.items()},
        max_bytes_ratio=high / mean if mean > 0 else 1.0,
        max_over_min=high / low if low > 0 else (math.inf if high > 0 else 1.0),
    )


def plan_rebalance_weights(records: Iterable[RankRecord]) -> dict[int, float]:
    """Data-share weights proportional to each rank's speed, summing to the number of ranks.

    A rank's time is its mean E-step seconds over its rounds (only the E-step scales with the data
    a rank holds). Weight 1.0 keeps a rank's share; 0.5 halves it.

    Raises
    ------
    ValueError
        A rank whose E-step time is zero (its speed is unknown).
    """
    totals: dict[int, list[float]] = {}
    for r in _checked_records(records, "plan_rebalance_weights"):
        totals.setdefault(r.rank, []).append(r.e_step_seconds)
    mean_seconds = {rank: sum(ts) / len(ts) for rank, ts in sorted(totals.items())}
    for rank, seconds in mean_seconds.items():
        if seconds == 0:
            raise ValueError(
                f"plan_rebalance_weights: rank {rank} has zero E-step seconds; cannot weight it by 1/time"
            )
    speed = {rank: 1.0 / s for rank, s in mean_seconds.items()}
    scale = len(speed) / sum(speed.values()) if speed else 0.0
    return {rank: v * scale for rank, v in speed.items()}


@dataclass(frozen=True)
class FitReport:
    """Totals of a set of :class:`RankRecord` (built by :func:`fit_report`).

    ``total_seconds`` sums every record's E- and M-step seconds (rank-seconds); ``critical_seconds``
    sums each round's slowest rank, the time a synchronous fit waited. ``stragglers_by_round`` holds
    each round's :class:`StragglerReport`, ``imbalance`` the :class:`ImbalanceReceipt` over every
    round and ``imbalance_by_round`` each round's.
    """

    rounds: int
    ranks: int
    records: int
    total_seconds: float
    e_step_seconds: float
    m_step_seconds: float
    critical_seconds: float
    bytes_processed: int
    stragglers_by_round: dict[int, StragglerReport] = field(hash=False)
    imbalance: ImbalanceReceipt = field(hash=False)
    imbalance_by_round: dict[int, ImbalanceReceipt] = field(default_factory=dict, hash=False)

    @property
    def stragglers(self) -> tuple[int, ...]:
        """Every rank flagged in some round, sorted."""
        return tuple(sorted({r for ranks in self.stragglers_by_round.values() for r in ranks}))

    def as_dict(self) -> dict[str, Any]:
        """The report as a dict (``stragglers`` included)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["stragglers_by_round"] = dict(self.stragglers_by_round)
        out["imbalance"] = dict(self.imbalance)
        out["imbalance_by_round"] = {rnd: dict(r) for rnd, r in self.imbalance_by_round.items()}
        out["stragglers"] = self.stragglers
        return out

    def render(self) -> str:
        """A few human-readable lines; ``STRAGGLERS=(...)`` lists every flagged rank."""
        lines = [
            f"fit report: {self.rounds} rounds, {self.ranks} ranks, {self.records} records",
            f"seconds: total {self.total_seconds:.3f} (E-step {self.e_step_seconds:.3f}, "
            f"M-step {self.m_step_seconds:.3f}), critical path {self.critical_seconds:.3f}",
            f"STRAGGLERS={self.stragglers}",
        ]
        lines += [
            f"  round {rnd}: ranks {list(ranks)}" for rnd, ranks in self.stragglers_by_round.items() if ranks
        ]
        lines.append(
            f"bytes: {binary_size(self.bytes_processed)} read, max/mean "
            f"{self.imbalance['max_over_mean']:.3g}, max/min {self.imbalance['max_over_min']:.3g}"
        )
        return "\n".join(lines)


def fit_report(
    records: Iterable[RankRecord], threshold_ratio: float = 1.5, z_threshold: float = 3.0
) -> FitReport:
    """Summarise rank records: rounds, ranks, seconds, stragglers per round, byte imbalance (over
    every round and per round)."""
    checked = _checked_records(records, "fit_report")
    by_round: dict[int, list[RankRecord]] = {}
    for r in checked:
        by_round.setdefault(r.round, []).append(r)
    by_round = dict(sorted(by_round.items()))
    return FitReport(
        rounds=len(by_round),
        ranks=len({r.rank for r in checked}),
        records=len(checked),
        total_seconds=sum(r.seconds for r in checked),
        e_step_seconds=sum(r.e_step_seconds for r in checked),
        m_step_seconds=sum(r.m_step_seconds for r in checked),
        critical_seconds=sum(max(r.seconds for r in rs) for rs in by_round.values()),
        bytes_processed=sum(r.bytes_processed for r in checked),
        stragglers_by_round={
            rnd: detect_stragglers(rs, threshold_ratio, z_threshold) for rnd, rs in by_round.items()
        },
        imbalance=imbalance_receipt(checked),
        imbalance_by_round={rnd: imbalance_receipt(rs, round=rnd) for rnd, rs in by_round.items()},
    )


def si_number(value: float) -> str:
    """``2430000 -> '2.43M'``: three significant digits and a K/M/G/T suffix."""
    if not math.isfinite(value):
        return str(value)
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale * 0.9995:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def binary_size(n: float) -> str:
    """``12595 -> '12.3 KiB'``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale * 0.9995:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"
