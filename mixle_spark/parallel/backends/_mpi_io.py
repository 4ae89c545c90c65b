"""One MPI rank's share of the data: contiguous row ranges of in-memory data, Parquet or Delta paths.

Nothing here talks to MPI: the ``mpi`` backend plans on the root (:func:`plan_path`), broadcasts the
plan, and every rank reads its own rows (:func:`read_rows`). Rows are numbered in a fixed global
order (files in path order, row groups in file order; a Delta table's files in the order of the log's
``add`` actions), so every rank count gives the same global row ids.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa

from mixle_spark.errors import SchemaError

__all__ = [
    "FINGERPRINT_ROWS",
    "PathPlan",
    "as_table",
    "contiguous_range",
    "delta_files",
    "fingerprint",
    "is_path",
    "plan_path",
    "read_rows",
]


def contiguous_range(n: int, rank: int, size: int) -> tuple[int, int]:
    """Rows ``[start, stop)`` of ``n`` that rank ``rank`` of ``size`` owns (near-equal, in rank order)."""
    return n * rank // size, n * (rank + 1) // size


def is_path(data: Any) -> bool:
    return isinstance(data, str | os.PathLike)


def as_table(data: Any, column: str | None = None) -> pa.Table | None:
    """``data`` as a pyarrow Table when it is tabular (Table, RecordBatch, pandas, Arrow array), else None."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.ChunkedArray | pa.Array):
        return pa.table({column or "value": data})
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        return pa.Table.from_pandas(data, preserve_index=False)
    return None


@dataclass(frozen=True)
class PathPlan:
    """What every rank needs to read its rows: the files, rows per row group, the schema."""

    source: str
    files: tuple[str, ...]
    row_groups: tuple[tuple[int, ...], ...]
    schema: pa.Schema
    hive_base: str | None

    @property
    def num_rows(self) -> int:
        return int(sum(sum(rg) for rg in self.row_groups))


def plan_path(path: str | os.PathLike[str]) -> PathPlan:
    """Plan reading a Parquet file, a Parquet directory (hive partitions allowed) or a Delta table."""
    import pyarrow.dataset as ds

    where = Path(path)
    if not where.exists():
        raise FileNotFoundError(f"no such file or directory: {str(path)!r}")
    hive_base: str | None = None
    if (where / "_delta_log").is_dir():
        files = delta_files(where)
        if not files:
            raise SchemaError(f"Delta table {where} has no data files in its current snapshot")
        dataset = ds.dataset(files, format="parquet")
    else:
        hive_base = str(where) if where.is_dir() else None
        dataset = ds.dataset(str(where), format="parquet", partitioning="hive" if hive_base else None)
    fragments = list(dataset.get_fragments())
    counts = []
    for fragment in fragments:
        fragment.ensure_complete_metadata()
        counts.append(tuple(int(rg.num_rows) for rg in fragment.row_groups))
    return PathPlan(str(path), tuple(f.path for f in fragments), tuple(counts), dataset.schema, hive_base)


def read_rows(plan: PathPlan, start: int, stop: int, columns: list[str] | None = None) -> pa.Table:
    """Global rows ``[start, stop)`` of ``plan``: only the row groups that hold them are read."""
    import pyarrow.dataset as ds

    schema = plan.schema if columns is None else pa.schema([plan.schema.field(c) for c in columns])
    pieces: list[pa.Table] = []
    first = 0
    wanted: list[tuple[int, list[int], int, int]] = []  # (file index, row groups, skip, take)
    for i, groups in enumerate(plan.row_groups):
        ids: list[int] = []
        skip = take = 0
        for j, rows in enumerate(groups):
            lo, hi = max(start, first), min(stop, first + rows)
            if hi > lo:
                if not ids:
                    skip = lo - first
                ids.append(j)
                take += hi - lo
            first += rows
        if ids:
            wanted.append((i, ids, skip, take))
    if wanted:
        files = [plan.files[i] for i, *_ in wanted]
        options: dict[str, Any] = {"format": "parquet", "schema": plan.schema}
        if plan.hive_base is not None:
            options.update(partitioning="hive", partition_base_dir=plan.hive_base)
        for fragment, (_i, ids, skip, take) in zip(
            ds.dataset(files, **options).get_fragments(), wanted, strict=True
        ):
            table = fragment.subset(row_group_ids=ids).to_table(schema=plan.schema, columns=columns)
            pieces.append(table.slice(skip, take))
    if not pieces:
        return schema.empty_table()
    return pa.concat_tables(pieces).combine_chunks() if len(pieces) > 1 else pieces[0]


# -- Delta tables (read from the log, without Spark) ----------------------------------------------
def _file_path(table: Path, raw: str) -> str:
    parsed = urlparse(raw)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    if parsed.scheme and len(parsed.scheme) > 1:
        raise SchemaError(f"Delta table {table}: data file {raw!r} is not on the local file system")
    return str(table / unquote(raw))


def _check_metadata(table: Path, meta: dict[str, Any]) -> None:
    if meta.get("partitionColumns"):
        raise SchemaError(
            f"Delta table {table} is partitioned by {meta['partitionColumns']}: the mpi backend reads "
            "unpartitioned Delta tables only; read it with the spark backend"
        )
    mode = (meta.get("configuration") or {}).get("delta.columnMapping.mode", "none")
    if mode != "none":
        raise SchemaError(
            f"Delta table {table} uses column mapping ({mode!r}), which the mpi backend cannot read"
        )


def _apply(table: Path, live: dict[str, None], action: dict[str, Any]) -> None:
    if action.get("metaData"):
        _check_metadata(table, action["metaData"])
    add = action.get("add")
    if add:
        if add.get("deletionVector"):
            raise SchemaError(
                f"Delta table {table} has deletion vectors (file {add['path']!r}); the mpi backend "
                "cannot apply them: run OPTIMIZE / REORG ... APPLY (PURGE) first, or use the spark backend"
            )
        live[_file_path(table, add["path"])] = None
    remove = action.get("remove")
    if remove:
        live.pop(_file_path(table, remove["path"]), None)


def _checkpoint(table: Path, log: Path) -> tuple[int, list[dict[str, Any]]]:
    """(version, actions) of the last classic checkpoint, or (-1, []) when there is none."""
    marker = log / "_last_checkpoint"
    if not marker.exists():
        return -1, []
    info = json.loads(marker.read_text())
    version = int(info["version"])
    if "v2Checkpoint" in info:
        raise SchemaError(f"Delta table {table} uses v2 checkpoints, which the mpi backend cannot read")
    parts = info.get("parts")
    names = (
        [f"{version:020d}.checkpoint.parquet"]
        if not parts
        else [
            f"{version:020d}.checkpoint.{i:010d}.{int(parts):010d}.parquet" for i in range(1, int(parts) + 1)
        ]
    )
    missing = [n for n in names if not (log / n).exists()]
    if missing:
        raise SchemaError(
            f"Delta table {table}: checkpoint file(s) {missing} named by _last_checkpoint are missing"
        )
    import pyarrow.parquet as pq

    actions: list[dict[str, Any]] = []
    for name in names:
        cols = [c for c in ("metaData", "add", "remove") if c in pq.read_schema(log / name).names]
        actions.extend(pq.read_table(log / name, columns=cols).to_pylist())
    return version, actions


def delta_files(table: str | os.PathLike[str]) -> list[str]:
    """The data files of a Delta table's current snapshot, in log order.

    Replays the JSON commits (``add`` / ``remove`` actions) after the last classic checkpoint (read
    with pyarrow). Partitioned tables, column mapping, deletion vectors and v2 checkpoints raise
    :class:`~mixle_spark.errors.SchemaError`.
    """
    root = Path(table)
    log = root / "_delta_log"
    start, actions = _checkpoint(root, log)
    versions = sorted(int(p.stem) for p in log.glob("*.json") if p.stem.isdigit() and int(p.stem) > start)
    expected = list(range(start + 1, start + 1 + len(versions)))
    if versions != expected:
        raise SchemaError(
            f"Delta table {root}: commits {expected[:3]}... are missing from the log (found "
            f"{versions[:3]}...) and no checkpoint covers them"
        )
    if start < 0 and not versions:
        raise SchemaError(f"Delta table {root} has no commits in {log}")
    live: dict[str, None] = {}
    for action in actions:
        _apply(root, live, action)
    for version in versions:
        for line in (log / f"{version:020d}.json").read_text().splitlines():
            if line.strip():
                _apply(root, live, json.loads(line))
    return list(live)


def slice_rows(data: Any, start: int, stop: int) -> Any:
    """Rows ``[start, stop)`` of a table, an array or a list."""
    if isinstance(data, pa.Table):
        return data.slice(start, stop - start)
    if isinstance(data, np.ndarray):
        return data[start:stop]
    return list(data[start:stop])


FINGERPRINT_ROWS = 16
"""How many evenly spaced rows :func:`fingerprint` reads."""


def fingerprint(data: Any, n: int) -> str | None:
    """A digest of ``n`` and of :data:`FINGERPRINT_ROWS` evenly spaced rows of a table, an array or a
    list: ranks that pass the same data have the same one. None when a row's text is not its value
    (an object shown by its address): only the row count is compared then."""
    at = np.unique(np.linspace(0, max(n - 1, 0), num=min(n, FINGERPRINT_ROWS)).astype(np.int64))
    if isinstance(data, pa.Table):
        rows: Any = data.take(pa.array(at, type=pa.int64())).to_pylist()
    elif isinstance(data, np.ndarray) and data.dtype != object:
        rows = (data.dtype.str, data.shape[1:], data[at].tobytes())
    else:
        rows = [data[int(i)] for i in at]
    text = repr((n, rows))
    if " at 0x" in text:
        return None
    return hashlib.sha256(text.encode()).hexdigest()
