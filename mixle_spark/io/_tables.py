"""Reading and writing tables: the format from the path, a missing input refused before Spark
starts, Delta writes in one transaction, file writes staged and published whole."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mixle_spark._files import (
    atomic_directory,
    check_output_free,
    delta_layout,
    remove_tree,
    table_layout,
)
from mixle_spark._locations import scheme_of
from mixle_spark.errors import SchemaError, UnknownNameError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

READ_FORMATS = ("auto", "csv", "delta", "json", "parquet", "table")
WRITE_FORMATS = ("csv", "delta", "json", "parquet")
WRITE_MODES = ("error", "overwrite")
_SUFFIX_FORMATS = {
    "parquet": "parquet",
    "csv": "csv",
    "json": "json",
    "jsonl": "json",
    "ndjson": "json",
}
_TABLE_NAME = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*){0,2}$|^`[^`]+`(\.`[^`]+`){0,2}$")


def _local_path(source: str | os.PathLike[str]) -> Path | None:
    """The local filesystem path of ``source``, or None for a URI on another filesystem."""
    text = os.fspath(source)
    if text.startswith("file:"):
        return Path(re.sub(r"^file:(//)?", "", text))
    if scheme_of(text) is not None:  # two letters or more: a drive letter (C:) stays local
        return None
    return Path(text)


def _format_from_name(name: str) -> str | None:
    """``parquet`` / ``csv`` / ``json`` from a file name's suffixes (``x.csv.gz`` is csv)."""
    for part in reversed(name.lower().split(".")[1:]):
        if part in _SUFFIX_FORMATS:
            return _SUFFIX_FORMATS[part]
    return None


def _local_format(path: Path) -> str:
    """The format of an existing local file or directory."""
    if path.is_dir():
        if (path / "_delta_log").is_dir():
            return "delta"
        found: set[str] = set()
        for _, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
            names = [f for f in files if not f.startswith(("_", "."))]
            found.update(fmt for fmt in map(_format_from_name, names) if fmt is not None)
        for fmt in ("parquet", "csv", "json"):
            if fmt in found:
                return fmt
        raise FileNotFoundError(
            f"{path}: no data files in this directory (no _delta_log, .parquet, .csv or .json files)"
        )
    suffix_format = _format_from_name(path.name)
    if suffix_format is None:
        raise UnknownNameError(
            "table file suffix (pass format=...)",
            path.suffix or path.name,
            [f".{s}" for s in _SUFFIX_FORMATS],
        )
    return suffix_format


def _looks_like_path(text: str) -> bool:
    return "/" in text or os.sep in text or scheme_of(text) is not None or _format_from_name(text) is not None


def check_input_exists(source: str | os.PathLike[str], format: str = "auto") -> None:
    """Refuse a local input path that does not exist, as :func:`read_table` would, without Spark.

    The jobs call this before starting Spark, so that a mistyped ``--input`` fails at once. Paths on
    other filesystems (``s3://``, ``abfss://``, ``dbfs:/``...) and metastore table names (``name``,
    ``db.name``) are not checked: only Spark can tell whether they exist.

    >>> check_input_exists("s3://bucket/missing.parquet"), check_input_exists("sales.customers")
    (None, None)
    >>> check_input_exists("/nope/x.parquet")
    Traceback (most recent call last):
    ...
    FileNotFoundError: no such file or directory: '/nope/x.parquet'

    Raises
    ------
    FileNotFoundError
        For a local path (by :func:`read_table`'s rule) that does not exist, naming it.
    """
    text = os.fspath(source)
    local = _local_path(text)
    if local is None or format == "table" or local.exists():
        return
    if format == "auto" and not _looks_like_path(text):  # a metastore table name
        return
    raise FileNotFoundError(f"no such file or directory: {text!r}")


def _condition(err: BaseException) -> str:
    getter = getattr(err, "getCondition", None)
    return str(getter() or "") if getter is not None else ""


def read_table(spark: SparkSession, source: str | os.PathLike[str], format: str = "auto") -> DataFrame:
    """Read a table into a (lazy) DataFrame.

    Parameters
    ----------
    spark : SparkSession
        The session to read with.
    source : str or path
        A path (local or any filesystem Spark knows: ``s3://``, ``abfss://``, ``dbfs:/``...) or a
        metastore table name (``name``, ``db.name``, ``catalog.db.name``).
    format : {"auto", "delta", "parquet", "csv", "json", "table"}
        ``auto`` decides from the source: a directory with ``_delta_log`` is Delta; a ``.parquet``
        file or a directory of them Parquet; ``.csv`` CSV (with a header row, column types
        inferred); ``.json`` / ``.jsonl`` JSON (one object per line, or one JSON array); a remote
        path without a suffix is Delta when it holds a Delta log, else Parquet; a name that is not
        a path is a metastore table.

    Raises
    ------
    FileNotFoundError
        When the path (or table) does not exist, naming it.
    UnknownNameError
        For an unknown ``format``, or a file whose suffix does not tell its format.
    SchemaError
        When the files' schema names a column more than once (Spark reads none of it), naming it.
    """
    if format not in READ_FORMATS:
        raise UnknownNameError("table format", format, READ_FORMATS)
    text = os.fspath(source)
    check_input_exists(text, format)
    local = _local_path(text)
    if format == "table" or (
        format == "auto" and not (local is not None and local.exists()) and not _looks_like_path(text)
    ):
        if not _TABLE_NAME.match(text) or not spark.catalog.tableExists(text):
            raise FileNotFoundError(f"no such path or table: {text!r}")
        return spark.table(text)
    if local is not None:
        fmt = _local_format(local) if format == "auto" else format
        location = local.resolve().as_uri()
    else:
        fmt = (
            format
            if format != "auto"
            else (_format_from_name(text.rstrip("/")) or _remote_format(spark, text))
        )
        location = text
    reader = spark.read.format(fmt)
    if fmt == "csv":
        # FAILFAST: a row with more or fewer fields than the header is an error, not dropped fields or
        # nulls (the jobs name its file and line: mixle_spark.cli._common.translate_spark_error)
        reader = reader.option("header", "true").option("inferSchema", "true").option("mode", "FAILFAST")
    elif fmt == "json" and local is not None and local.is_file() and _starts_with_bracket(local):
        reader = reader.option("multiLine", "true")
    try:
        return reader.load(location)
    except Exception as err:
        if _condition(err) == "PATH_NOT_FOUND":
            raise FileNotFoundError(f"no such file or directory: {text!r}") from None
        if _condition(err) == "COLUMN_ALREADY_EXISTS":  # a file's schema names a column twice
            raise _repeated_column(err, text) from None
        raise


def _repeated_column(err: BaseException, source: str) -> SchemaError:
    """Spark's COLUMN_ALREADY_EXISTS on reading ``source``, as one line naming the column."""
    getter = getattr(err, "getMessageParameters", None)
    parameters = getter() if getter is not None else None
    name = str(parameters.get("columnName", "")).strip("`") if parameters else ""
    what = f"column {name!r}" if name else "a column"
    return SchemaError(
        f"{what} appears more than once in input {source}; its columns are read by name, so each must "
        "appear once: rename the copies"
    )


def _remote_format(spark: SparkSession, path: str) -> str:
    try:
        spark.read.format("delta").load(path).schema  # noqa: B018  (reads only the Delta log)
    except Exception:
        return "parquet"
    return "delta"


def _starts_with_bracket(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(4096).lstrip()
    return head.startswith(b"[")


def _has_commit(path: Path) -> bool:
    log = path / "_delta_log"
    return log.is_dir() and any(log.glob("*.json"))


def write_table(
    df: DataFrame, path: str | os.PathLike[str], mode: str = "error", format: str = "delta"
) -> str:
    """Write ``df`` to ``path`` as one transaction: all of it, or nothing.

    Parameters
    ----------
    df : DataFrame
        What to write (its Spark session does the writing).
    path : str or path
        Local path or any filesystem Spark knows.
    mode : {"error", "overwrite"}
        ``error`` refuses an existing table; ``overwrite`` replaces it (schema included) in one Delta
        commit, so readers see the old table or the new one, never a mix.
    format : {"delta", "parquet", "csv", "json"}
        ``delta`` (the default) commits atomically on every filesystem. The others are written to a
        temporary sibling directory that is renamed into place, which is atomic only on a local
        filesystem; on others they rely on Spark's output committer and an existing path is refused.
        The directory lists its files in ``_mixle_spark_files.json``, so that ``overwrite`` replaces
        it and nothing else (also accepted: a directory of Spark / Dask / Ray part files, ``_SUCCESS``
        and checksums only).

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    FileExistsError
        With ``mode="error"`` when the table exists, or when ``path`` holds something that is not a
        Delta table (``format="delta"``) or not a table of files this package wrote (the others):
        such a path is never overwritten, and nothing is written.
    UnsafePathError
        When a local ``path`` is a symbolic link, or a ``..`` after a link leads elsewhere.
    UnknownNameError
        For an unknown ``mode`` or ``format``.
    """
    if mode not in WRITE_MODES:
        raise UnknownNameError("write mode", mode, WRITE_MODES)
    if format not in WRITE_FORMATS:
        raise UnknownNameError("table write format", format, WRITE_FORMATS)
    text = os.fspath(path)
    local = _local_path(text)
    if local is not None and format != "delta":  # links and others' files refused, then staged
        with atomic_directory(local, mode == "overwrite", _FILES_OUTPUT) as staging:
            _file_writer(df, format).mode("overwrite").save(staging.as_uri())  # ours, and empty
        return text
    if local is not None:
        local = check_output_free(local, mode == "overwrite", _DELTA_OUTPUT)  # as for the files
        present = local.exists()
        existed = present and any(local.iterdir())
    elif format != "delta":  # another filesystem: Spark refuses an existing path; nothing is replaced
        _file_writer(df, format).mode("error").save(text)
        return text
    else:
        present = existed = _remote_format(df.sparkSession, text) == "delta"
        if existed and mode == "error":
            raise FileExistsError(f"{text} exists; pass mode='overwrite' to replace it")
    # The mode asked for is the mode committed (a new table written with "overwrite" records Overwrite).
    writer = df.write.format("delta")
    writer = (
        writer.mode("overwrite").option("overwriteSchema", "true")
        if mode == "overwrite"
        else writer.mode("error")
    )
    for attempt in range(1, DELTA_WRITE_ATTEMPTS + 1):
        try:
            writer.save(local.as_uri() if local is not None else text)
            return text
        except Exception as err:
            if local is not None and not existed and not _has_commit(local):
                # Files of a failed first commit: no reader can see them, and no one needs them.
                remove_tree(local, keep_dir=present)
            if _condition(err) in ("DELTA_PATH_EXISTS", "PATH_ALREADY_EXISTS"):
                raise FileExistsError(f"{text} exists; pass mode='overwrite' to replace it") from None
            if mode != "overwrite" or attempt == DELTA_WRITE_ATTEMPTS or not DELTA_CONFLICT.search(str(err)):
                raise
            time.sleep(0.5 * attempt)  # another writer committed first: overwrite again, whole
    return text


_DELTA_OUTPUT = delta_layout("mode='overwrite'", "path")
_FILES_OUTPUT = table_layout("mixle_spark", "mode='overwrite'", "path")


def _file_writer(df: DataFrame, format: str) -> Any:
    writer = df.write.format(format)
    return writer.option("header", "true") if format == "csv" else writer


DELTA_WRITE_ATTEMPTS = 3
"""Tries of an overwrite that loses a race to another writer's commit (each writes the whole table)."""
DELTA_CONFLICT = re.compile(
    r"DELTA_CONCURRENT_\w+|DELTA_PROTOCOL_CHANGED|DELTA_METADATA_CHANGED|Concurrent\w*Exception|"
    r"ProtocolChangedException|MetadataChangedException"
)
"""Delta's words for a commit that lost to another writer's."""
