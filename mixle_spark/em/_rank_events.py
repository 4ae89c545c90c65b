"""Rank records read back from event streams: the reference's ``records_from_events``.

Public through :mod:`mixle_spark.em.observability`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any

from mixle_spark.em._rank_records import RankRecord
from mixle_spark.errors import describe_value

__all__ = ["records_from_events"]

_FEATURE_TOTAL = "total_seconds"  # what the reference's event features add; derived, so dropped


def _record_from_mapping(d: Mapping[str, Any], where: str) -> RankRecord:
    names = {f.name for f in fields(RankRecord)}
    known = {k: v for k, v in d.items() if k in names and k != "extra"}
    extra = dict(d.get("extra") or {})
    extra.update({k: v for k, v in d.items() if k not in names and k != _FEATURE_TOTAL})
    missing = [k for k in ("rank", "round") if k not in known]
    if missing:
        raise ValueError(f"{where}: a rank record needs {missing}, got keys {sorted(d)}")
    record = RankRecord(**known, extra=extra)
    total = d.get(_FEATURE_TOTAL)
    if total is not None and not math.isclose(float(total), record.seconds, rel_tol=1e-9, abs_tol=1e-12):
        raise ValueError(
            f"{where}: total_seconds {total!r} of round {record.round}, rank {record.rank} is not "
            f"e_step_seconds + m_step_seconds = {record.seconds!r}"
        )
    return record


def records_from_events(events: Iterable[Any]) -> list[RankRecord]:
    """The :class:`RankRecord` in a stream of events, in order.

    Each item may be a RankRecord; an event with ``kind`` and ``features`` (an object or a dict, as
    the reference's telemetry writes them; only ``kind == "em_round"`` is a rank record); a record's
    ``to_dict()`` or a flat dict of features (unknown keys go to ``extra``; ``total_seconds``, when
    there, must equal E- plus M-step seconds); an :class:`~mixle_spark.em.observability.EMTrace`
    header line ``{"metadata": ..., "rank_records": [...]}``, whose records are taken. Iteration
    lines of a trace (a dict with ``iteration``, or an object with ``progress_line``) are skipped,
    so the parsed lines of a JSON-lines trace file can be passed as they are.
    """
    out: list[RankRecord] = []
    for index, item in enumerate(events):
        where = f"records_from_events: item {index}"
        if isinstance(item, RankRecord):
            out.append(item)
        elif isinstance(item, Mapping):
            if "kind" in item:
                if item["kind"] == "em_round":
                    out.append(_record_from_mapping(item.get("features") or {}, where))
            elif "metadata" in item:
                out += [_record_from_mapping(r, where) for r in item.get("rank_records", ())]
            elif "iteration" not in item:
                out.append(_record_from_mapping(item, where))
        elif hasattr(item, "kind") and hasattr(item, "features"):
            if item.kind == "em_round":
                out.append(_record_from_mapping(item.features, where))
        elif not hasattr(item, "progress_line"):
            raise TypeError(
                f"{where}: expected a RankRecord, an event with kind and features, or a dict, "
                f"got {describe_value(item)}"
            )
    return out
