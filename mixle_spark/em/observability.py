"""Where an EM fit spends its time: per-rank receipts and the per-iteration trace.

Two layers share this module.

*Rank receipts* (the reference's ``em_observability`` names). A caller that times its ranks, workers
or partitions records one :class:`RankRecord` per rank and round; :func:`detect_stragglers` flags
slow ranks by median and MAD (a :class:`StragglerReport`: the tuple of flagged ranks with its
evidence), :func:`imbalance_receipt` measures skew in the bytes each rank read (an
:class:`ImbalanceReceipt`), :func:`plan_rebalance_weights` proposes data shares proportional to
speed, :func:`fit_report` sums it all up, and :func:`records_from_events` reads records back from
events or the parsed lines of a trace file.

*The EM trace.* The EM driver (:func:`mixle_spark.estimation.optimize`) builds one
:class:`IterationTrace` per iteration from what the backend reports for each partition
(:class:`PartitionTiming`), keeps them in an :class:`EMTrace` returned with the model, and feeds
them to sinks while the fit runs: :class:`JsonLinesSink` (a file that can be tailed) and
:class:`MlflowSink`.

Stdlib and numpy only; pandas and mlflow are imported when asked for.

>>> parts = [PartitionTiming(0, 1.0, 500, 64), PartitionTiming(1, 3.0, 500, 64)]
>>> t = IterationTrace.from_pass(iteration=1, log_likelihood=-10.5, delta=0.25, weight=1000.0,
...                              seconds=4.0, parts=parts)
>>> t.rows, t.rows_per_second, t.partition_seconds, t.skew
(1000, 250.0, (1.0, 2.0, 3.0), 1.5)
>>> detect_stragglers({0: 1.0, 1: 1.0, 2: 1.0, 3: 9.0})
(3,)
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, MutableSequence, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, overload

import numpy as np

from mixle_spark._files import named_path
from mixle_spark._locations import resolve
from mixle_spark._outputs import write_file
from mixle_spark.em._rank_events import records_from_events
from mixle_spark.em._rank_records import (
    FitReport,
    ImbalanceReceipt,
    RankRecord,
    StragglerReport,
    binary_size,
    detect_stragglers,
    fit_report,
    imbalance_receipt,
    plan_rebalance_weights,
    si_number,
    straggler_ids,
)
from mixle_spark.errors import describe_value
from mixle_spark.parallel.fold import stat_nbytes

__all__ = [
    "EMTrace",
    "FitReport",
    "ImbalanceReceipt",
    "IterationTrace",
    "JsonLinesSink",
    "MlflowSink",
    "PartitionTiming",
    "RankRecord",
    "StragglerReport",
    "check_trace_path",
    "detect_stragglers",
    "fit_report",
    "imbalance_receipt",
    "plan_rebalance_weights",
    "record_rank_round",
    "records_from_events",
    "stat_nbytes",
]


def record_rank_round(trace_or_list: EMTrace | MutableSequence[Any], record: RankRecord) -> RankRecord:
    """Append ``record`` to a list, or to ``EMTrace.rank_records``; returns it.

    Raises
    ------
    ValueError
        The target already holds a record for the same round and rank.
    """
    if not isinstance(record, RankRecord):
        raise TypeError(f"record_rank_round: expected a RankRecord, got {describe_value(record)}")
    target = trace_or_list.rank_records if isinstance(trace_or_list, EMTrace) else trace_or_list
    for held in target:
        if isinstance(held, RankRecord) and (held.round, held.rank) == (record.round, record.rank):
            raise ValueError(
                f"record_rank_round: a record for round {record.round}, rank {record.rank} is already there"
            )
    target.append(record)
    return record


# -- the per-iteration trace -----------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionTiming:
    """What one partition (chunk, worker, rank) reported for one pass."""

    part: int
    seconds: float
    rows: int
    stat_bytes: int

    def __post_init__(self) -> None:
        for name, kind in (("part", int), ("seconds", float), ("rows", int), ("stat_bytes", int)):
            object.__setattr__(self, name, kind(getattr(self, name)))


@dataclass(frozen=True)
class IterationTrace:
    """One EM iteration: its log-likelihood, throughput and the spread of partition times.

    ``iteration`` 0 is the pass over the initial model; ``delta`` is the gain over the previous
    iteration (None for the first); ``seconds`` covers the whole iteration (E-step, merge, M-step);
    ``partition_seconds`` is (min, median, max) over the partitions, ``skew`` max / median (1.0 when
    even or unknown), ``stragglers`` the partitions :func:`detect_stragglers` flags;
    ``component_weights`` the mixture weights of the model this iteration produced.
    """

    iteration: int
    log_likelihood: float
    delta: float | None
    rows: int
    weight: float
    seconds: float
    rows_per_second: float
    stat_bytes: int
    partitions: int
    partition_seconds: tuple[float, float, float]
    skew: float
    stragglers: tuple[int, ...]
    component_weights: tuple[float, ...] | None
    events: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # numpy scalars from the driver become Python ones, so to_dict is JSON-able as is
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        for name in ("iteration", "rows", "stat_bytes", "partitions"):
            put(name, int(getattr(self, name)))
        for name in ("log_likelihood", "weight", "seconds", "rows_per_second", "skew"):
            put(name, float(getattr(self, name)))
        put("delta", None if self.delta is None else float(self.delta))
        low, mid, high = (float(x) for x in self.partition_seconds)
        put("partition_seconds", (low, mid, high))
        put("stragglers", tuple(int(x) for x in self.stragglers))
        if self.component_weights is not None:
            put("component_weights", tuple(float(x) for x in self.component_weights))
        put("events", tuple(str(x) for x in self.events))

    @classmethod
    def from_pass(
        cls,
        *,
        iteration: int,
        log_likelihood: float,
        delta: float | None,
        weight: float,
        seconds: float,
        parts: Sequence[PartitionTiming],
        component_weights: Sequence[float] | None = None,
        events: Sequence[str] = (),
        rows: int | None = None,
    ) -> IterationTrace:
        """Build a record from the partitions' reports; ``rows`` defaults to the sum of theirs."""
        parts = list(parts)
        times = [p.seconds for p in parts]
        if times:
            low, mid, high = min(times), float(np.median(times)), max(times)
            skew = high / mid if mid > 0 else (1.0 if high == 0 else math.inf)
            stragglers = straggler_ids([p.part for p in parts], times, 1.5, 3.0)
        else:
            low = mid = high = 0.0
            skew, stragglers = 1.0, ()
        total_rows = sum(p.rows for p in parts) if rows is None else int(rows)
        return cls(
            iteration=iteration,
            log_likelihood=log_likelihood,
            delta=delta,
            rows=total_rows,
            weight=weight,
            seconds=seconds,
            rows_per_second=total_rows / seconds if seconds > 0 else 0.0,
            stat_bytes=sum(p.stat_bytes for p in parts),
            partitions=len(parts),
            partition_seconds=(low, mid, high),
            skew=skew,
            stragglers=stragglers,
            component_weights=None if component_weights is None else tuple(component_weights),
            events=tuple(events),
        )

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (tuples as lists; NaN and inf kept)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> IterationTrace:
        """Inverse of :meth:`to_dict`; unknown keys are ignored."""
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in d and n != "events"]
        if missing:
            raise ValueError(f"IterationTrace.from_dict: missing field(s) {missing} in {sorted(d)}")
        return cls(**{n: d[n] for n in names if n in d})

    def progress_line(self) -> str:
        """One line for a progress log: log-likelihood, gain, rows, time, throughput, skew, stats."""
        gain = "-" if self.delta is None else f"{self.delta:.4g}"
        line = (
            f"iteration {self.iteration:4d}  log-likelihood {self.log_likelihood:.8f}  gain {gain}  "
            f"rows {self.rows}  {self.seconds:.3f}s  {si_number(self.rows_per_second)} rows/s  "
            f"skew {self.skew:.2f}  stats {binary_size(self.stat_bytes)}"
        )
        if self.stragglers:
            line += f"  stragglers {list(self.stragglers)}"
        if self.events:
            line += "  " + "; ".join(self.events)
        return line


_FRAME_COLUMNS = (
    "iteration", "log_likelihood", "delta", "rows", "weight", "seconds", "rows_per_second", "stat_bytes",
    "partitions", "partition_seconds_min", "partition_seconds_median", "partition_seconds_max", "skew",
    "stragglers", "component_weights", "events",
)  # fmt: skip


def _json_line(obj: Any) -> str:
    return json.dumps(obj, allow_nan=True) + "\n"


_TRACE_HEADER = b'{"metadata": '  # how every trace starts (_json_line of its header)


def check_trace_path(path: str | os.PathLike[str], flag: str = "trace_path") -> Path | None:
    """The real path of trace file ``path``, once writing it can lose nothing: not through a
    symbolic link (:func:`mixle_spark._files.named_path`), and absent, empty, or an EM trace (its
    first line the header :meth:`EMTrace.to_jsonl` and :class:`JsonLinesSink` write). A trace path
    is often typed by hand (``--trace notes.txt``): replacing someone's file would lose it. A URI
    (:func:`mixle_spark._locations.resolve`) is checked alike on its filesystem (None is returned).

    Raises UnsafePathError or FileExistsError naming the path (``flag`` is what the advice names).
    """
    location = resolve(path, "trace file")
    if location.local is None:
        kind = location.remote.kind(location.uri)
        why = None
        if kind == "dir":
            why = "it is not a regular file"
        elif kind == "file" and location.remote.size(location.uri) > 0:
            if not location.remote.read(location.uri).startswith(_TRACE_HEADER):
                why = "its first line is not an EM trace header"
        _refuse_trace(path, why, flag)
        return None
    real = named_path(location.local, "trace file")
    if not os.path.lexists(real):
        return real
    why = None
    if not real.is_file():
        why = "it is not a regular file"
    else:
        with open(real, "rb") as fh:
            head = fh.read(len(_TRACE_HEADER))
        if head and head != _TRACE_HEADER:
            why = "its first line is not an EM trace header"
    _refuse_trace(path, why, flag)
    return real


def _refuse_trace(path: str | os.PathLike[str], why: str | None, flag: str) -> None:
    if why is not None:
        raise FileExistsError(
            f"trace file {os.fspath(path)} exists and was not written by mixle_spark ({why}); "
            f"choose another {flag} or remove it yourself"
        )


class EMTrace:
    """The :class:`IterationTrace` of a fit in order, with metadata (backend, rows, seed, ...).

    ``rank_records`` holds any :class:`RankRecord` added by :func:`record_rank_round`.
    """

    def __init__(
        self, records: Iterable[IterationTrace] = (), metadata: Mapping[str, Any] | None = None
    ) -> None:
        self.records: list[IterationTrace] = []
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.rank_records: list[RankRecord] = []
        for record in records:
            self.append(record)

    def append(self, record: IterationTrace) -> None:
        """Add the next iteration."""
        if not isinstance(record, IterationTrace):
            raise TypeError(f"EMTrace.append: expected an IterationTrace, got {describe_value(record)}")
        self.records.append(record)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[IterationTrace]:
        return iter(self.records)

    @overload
    def __getitem__(self, index: int) -> IterationTrace: ...
    @overload
    def __getitem__(self, index: slice) -> list[IterationTrace]: ...
    def __getitem__(self, index: int | slice) -> IterationTrace | list[IterationTrace]:
        return self.records[index]

    def __repr__(self) -> str:
        return f"EMTrace({len(self)} iterations, metadata={self.metadata!r})"

    def to_dict(self) -> dict[str, Any]:
        """``{"metadata", "records", "rank_records"}``, JSON-able."""
        return {
            "metadata": dict(self.metadata),
            "records": [r.to_dict() for r in self.records],
            "rank_records": [r.to_dict() for r in self.rank_records],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EMTrace:
        """Inverse of :meth:`to_dict`."""
        trace = cls((IterationTrace.from_dict(r) for r in d.get("records", ())), d.get("metadata"))
        trace.rank_records = [RankRecord.from_dict(r) for r in d.get("rank_records", ())]
        return trace

    def to_jsonl(self, path: str | os.PathLike[str]) -> None:
        """Write a header line ``{"metadata": ...}`` then one line per iteration, atomically, to a local
        path or a URI (:func:`mixle_spark._outputs.write_file`); an existing ``path`` is replaced only
        when it is a trace (:func:`check_trace_path`)."""
        check_trace_path(path)
        header: dict[str, Any] = {"metadata": self.metadata}
        if self.rank_records:
            header["rank_records"] = [r.to_dict() for r in self.rank_records]
        lines = [_json_line(header), *(_json_line(r.to_dict()) for r in self.records)]
        write_file(path, "".join(lines), what="trace file")

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str]) -> EMTrace:
        """Read :meth:`to_jsonl` or :class:`JsonLinesSink` output.

        A partial last line (a fit killed while writing it) is ignored; any other line that is
        not a header or an iteration raises ValueError naming the line.
        """
        text = Path(path).read_text(encoding="utf-8")
        lines = text.split("\n")
        trace = cls()
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                if number == len(lines):  # no newline after it: torn by an interrupted write
                    break
                raise ValueError(f"{path}: line {number} is not JSON ({err.msg})") from err
            if isinstance(obj, dict) and "iteration" in obj:
                trace.append(IterationTrace.from_dict(obj))
            elif isinstance(obj, dict) and "metadata" in obj:
                trace.metadata.update(obj["metadata"] or {})
                trace.rank_records += [RankRecord.from_dict(r) for r in obj.get("rank_records", ())]
            else:
                raise ValueError(f"{path}: line {number} is neither a metadata header nor an iteration")
        return trace

    def to_pandas(self) -> Any:
        """One row per iteration; ``partition_seconds`` split into ``_min``/``_median``/``_max``."""
        import pandas as pd

        rows = []
        for r in self.records:
            d = r.to_dict()
            low, mid, high = d.pop("partition_seconds")
            d.update(partition_seconds_min=low, partition_seconds_median=mid, partition_seconds_max=high)
            d["delta"] = math.nan if r.delta is None else r.delta
            d["stragglers"], d["events"] = r.stragglers, r.events
            d["component_weights"] = r.component_weights
            rows.append(d)
        return pd.DataFrame(rows, columns=list(_FRAME_COLUMNS))

    def summary(self, times: bool = True) -> str:
        """A few lines: iterations, final log-likelihood, time, throughput, worst skew. ``times=False``
        leaves out the passes' total seconds (a job that reports its own timings, once)."""
        if not self.records:
            return "EM trace: no iterations"
        last = self.records[-1]
        seconds = sum(r.seconds for r in self.records)
        rows = sum(r.rows for r in self.records)
        worst = max(self.records, key=lambda r: r.skew if not math.isnan(r.skew) else -math.inf)
        gain = "" if last.delta is None else f" (last gain {last.delta:.4g})"
        flagged = [r.iteration for r in self.records if r.stragglers]
        lines = [
            f"EM trace: {len(self.records)} iterations ({self.records[0].iteration}-{last.iteration})",
            f"final log-likelihood {last.log_likelihood:.8f}{gain}",
            (f"total {seconds:.3f}s, " if times else "")
            + f"mean {si_number(rows / seconds if seconds > 0 else 0.0)} rows/s",
            f"worst skew {worst.skew:.2f} at iteration {worst.iteration}"
            + (f"; stragglers in iterations {flagged}" if flagged else ""),
        ]
        return "\n".join(lines)


class JsonLinesSink:
    """Write each :class:`IterationTrace` to a JSON-lines file as the fit runs (``tail -f`` it).

    The layout is :meth:`EMTrace.to_jsonl`'s, so :meth:`EMTrace.from_jsonl` reads the file at any
    time. Each line is written and flushed by its own open/append/close, so nothing is lost or left
    open if the fit dies. ``append=True`` continues an existing file (a resumed fit) without a new
    header, first dropping a partial last line an interrupted write may have left. An existing
    file is replaced or continued only when it is a trace (:func:`check_trace_path`).
    """

    def __init__(
        self, path: str | os.PathLike[str], metadata: Mapping[str, Any] | None = None, *, append: bool = False
    ) -> None:
        check_trace_path(path)
        self.location = resolve(path, "trace file")
        self.path = Path(path)
        self.metadata = dict(metadata or {})
        self.closed = False
        self._remote_lines: list[str] | None = None
        if self.location.local is None:  # no appending there: the file is rewritten whole each time
            self._start_remote(append)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if append and self.path.exists():
            data = self.path.read_bytes()
            if data and not data.endswith(b"\n"):
                with open(self.path, "rb+") as fh:
                    fh.truncate(data.rfind(b"\n") + 1)
            if self.path.stat().st_size > 0:
                return
        with open(self.path, "w", encoding="utf-8") as fh:
            fh.write(_json_line({"metadata": self.metadata}))

    def _start_remote(self, append: bool) -> None:
        files, uri = self.location.remote, self.location.uri
        lines: list[str] = []
        if append and files.kind(uri) == "file":
            text = files.read(uri).decode("utf-8")
            lines = text.splitlines(keepends=True)
            if lines and not lines[-1].endswith("\n"):
                lines.pop()
        self._remote_lines = lines or [_json_line({"metadata": self.metadata})]
        files.write(uri, "".join(self._remote_lines).encode("utf-8"), False)

    def __call__(self, record: IterationTrace) -> None:
        """Append one line for ``record``."""
        if self.closed:
            raise ValueError(f"JsonLinesSink({self.location.shown!r}) is closed")
        if not isinstance(record, IterationTrace):
            raise TypeError(f"JsonLinesSink: expected an IterationTrace, got {describe_value(record)}")
        if self._remote_lines is not None:
            self._remote_lines.append(_json_line(record.to_dict()))
            data = "".join(self._remote_lines).encode("utf-8")
            self.location.remote.write(self.location.uri, data, False)
            return
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(_json_line(record.to_dict()))
            fh.flush()

    def close(self) -> None:
        """Refuse further records (the file is never held open)."""
        self.closed = True

    def __enter__(self) -> JsonLinesSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_MLFLOW_HINT = "MlflowSink needs mlflow: pip install 'mixle-spark[mlflow]' (or mlflow)"


class MlflowSink:
    """Log each iteration's metrics to MLflow at ``step=iteration``.

    Metrics (with ``prefix``): ``log_likelihood``, ``rows_per_second``, ``seconds``, ``skew``,
    ``stat_bytes`` and ``delta`` (from the second iteration on). NaN and infinite values are skipped:
    MLflow rejects them. Logs to the active run, or to ``run_id`` through an ``MlflowClient``.
    """

    def __init__(self, run_id: str | None = None, prefix: str = "em_") -> None:
        try:
            import mlflow
        except ImportError as err:
            raise ImportError(_MLFLOW_HINT) from err
        self._mlflow = mlflow
        self.run_id = run_id
        self.prefix = prefix
        self._client: Any = None

    def __call__(self, record: IterationTrace) -> None:
        """Log ``record``'s metrics."""
        p = self.prefix
        metrics = {
            p + "log_likelihood": record.log_likelihood,
            p + "rows_per_second": record.rows_per_second,
            p + "seconds": record.seconds,
            p + "skew": record.skew,
            p + "stat_bytes": float(record.stat_bytes),
        }
        if record.delta is not None:
            metrics[p + "delta"] = record.delta
        finite = {k: float(v) for k, v in metrics.items() if math.isfinite(v)}
        if not finite:
            return
        if self.run_id is None:
            self._mlflow.log_metrics(finite, step=record.iteration)
            return
        if self._client is None:
            self._client = self._mlflow.tracking.MlflowClient()
        for key, value in finite.items():
            self._client.log_metric(self.run_id, key, value, step=record.iteration)

    @staticmethod
    def active() -> bool:
        """True when mlflow is importable and a run is active; never raises."""
        try:
            import mlflow

            return mlflow.active_run() is not None
        except Exception:  # a broken or absent mlflow only means "do not log"
            return False
