"""The task slots of the session's one SparkContext: which resident executors' tasks hold them now,
and taking them back before a job or another session needs them (:func:`claim_slots`).

Resident tasks hold every task slot while they run, so a job of another handle (validation data
scored during a fit, a second fit) would wait for them: the executors register here while their
session runs (:func:`hold_slots` / :func:`free_slots`) and give the slots up when asked.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

from mixle_spark.parallel.backends.spark._common import resident_blocker
from mixle_spark.parallel.backends.spark._encoding import ChunkFrame

__all__ = ["SHARED_SLOTS", "SlotHolder", "claim_slots", "free_slots", "hold_slots", "slots_refused"]


class SlotHolder(Protocol):
    """An executor whose resident tasks may hold the task slots (a ``ResidentExecutor``)."""

    chunks: Any

    def release_workers(self) -> None:
        """End the resident tasks, freeing their slots."""
        ...

    def give_up_slots(self) -> bool:
        """Another handle needs the slots: end the session; True when a fit of its own was running."""
        ...


_HOLDERS: weakref.WeakSet[SlotHolder] = weakref.WeakSet()
"""Resident executors whose tasks hold the (one) SparkContext's task slots."""
SHARED_SLOTS = "another encoded-data handle (e.g. validation data) runs Spark jobs in this fit"


def slots_refused(frame: Any, chunks: ChunkFrame | None) -> str | None:
    """Why a resident session over ``frame`` may not take the task slots (the session cannot run
    them, or another handle's fit holds them: it keeps them), else None once other holders are
    stopped (:func:`claim_slots`)."""
    blocker = resident_blocker(frame)
    if blocker is not None:
        return blocker
    return SHARED_SLOTS if claim_slots(chunks) else None


def claim_slots(chunks: ChunkFrame | None) -> bool:
    """Before a job over ``chunks`` or a resident session of them starts: the resident tasks holding
    the session's task slots stop (those of ``chunks`` itself quietly; another handle's stay off for
    the rest of its fit). True when slots were taken from another handle's running fit."""
    taken = False
    for holder in list(_HOLDERS):
        if holder.chunks is chunks:
            holder.release_workers()
        elif holder.give_up_slots():
            taken = True
    return taken


def hold_slots(holder: SlotHolder) -> None:
    """``holder``'s resident tasks hold the task slots now (until :func:`free_slots`)."""
    _HOLDERS.add(holder)


def free_slots(holder: SlotHolder) -> None:
    """``holder``'s resident tasks stopped: they hold no slot."""
    _HOLDERS.discard(holder)
