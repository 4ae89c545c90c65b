"""A Spark job that failed in the spark backend's E-step, told as the partition and the remote error.

Each E-step task adds :data:`EXECUTOR_NOTE` and its partition to an exception it raises; after Spark's
retries the driver sees a Py4J / Spark error whose text holds the note and the task's traceback, and
:func:`executor_error` turns it into an :class:`~mixle_spark.errors.ExecutorError`.
"""

from __future__ import annotations

import re

from mixle_spark.errors import ExecutorError

__all__ = ["EXECUTOR_NOTE", "executor_error"]

EXECUTOR_NOTE = "mixle_spark: E-step failed in partition"
_REMOTE_ERROR = re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception|Interrupt|Exit)): (.*)$", re.MULTILINE)


def executor_error(err: BaseException) -> ExecutorError | None:
    """An :class:`~mixle_spark.errors.ExecutorError` for a Spark job that failed in our E-step (the
    partition from the note the task added, the remote error from its traceback), else None."""
    text = str(err)
    where = re.search(re.escape(EXECUTOR_NOTE) + r" (\d+)", text)
    if where is None:
        return None
    before = text[: where.start()]
    found = _REMOTE_ERROR.findall(before)
    remote_type, remote_message = found[-1] if found else ("Error", "")
    remote_type = remote_type.rsplit(".", 1)[-1]
    part = int(where.group(1))
    return ExecutorError(
        f"E-step failed in partition {part} (after Spark's task retries): {remote_type}: "
        f"{remote_message.strip()}; the fit stopped (checkpoints written before this iteration stay valid)",
        partition=part,
        remote_type=remote_type,
        remote_message=remote_message.strip(),
    )
