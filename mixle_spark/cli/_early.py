"""The jobs' schema check before Spark starts: the input's column names and types, read from this
machine without Spark, checked against the model the way the Spark backend checks them.

What is read: a Parquet file's footer (a directory: its first part file, with the ``name=value``
folders of a partitioned one as columns of unknown type); a Delta table's schema from its log (the
newest commit or checkpoint holding a ``metaData`` action); a CSV file's header (names only: the
jobs infer CSV types from the data, so only a missing column is found early). Anything else (a
remote URI, a metastore table, JSON, a layout not recognised) is left to the checks in Spark.

What is refused is what the Spark backend would refuse, with the same message: a column the model
reads that the input lacks (:func:`~mixle_spark.parallel.backends._scoring.data_columns`, naming the
near names), and a type the model's encoder refuses (its own ``check_arrow_type``, the predicate the
Spark backend runs on the same Arrow schema). The fit refuses a type only where its encoder cannot
read any value of it (an empty batch of that type), as it does in Spark: a boolean column under
``gaussian`` reads as 0 / 1 there. A column holding text is left to Spark, which names the first cell
that does not read as a number and its row. Nullability is never refused: a nullable column without
nulls is fine, and only the data can tell.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from mixle_spark.errors import FieldError, SchemaError
from mixle_spark.parallel.backends._scoring import data_columns
from mixle_spark.stats.base import Encoder

__all__ = ["check_fit_input", "check_score_input", "input_schema"]

_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.\d+\.\d+)?\.parquet$")
_COMMIT = re.compile(r"^(\d{20})\.json$")


def _local(source: str) -> Path | None:
    """The local path of ``source`` (a plain path or a ``file:`` URI) when it exists, else None."""
    text = re.sub(r"^file:(//)?", "", source) if source.startswith("file:") else source
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", text):  # s3://, dbfs:/, abfss://...: Spark's to read
        return None
    path = Path(text)
    return path if path.exists() else None


def _visible(name: str) -> bool:
    return not name.startswith(("_", "."))


def _as_spark_reads(typ: pa.DataType) -> pa.DataType:
    """A Parquet column's Arrow type as Spark hands it to Python: dictionaries as their values, large
    strings and lists as plain ones (nested types too)."""
    if pa.types.is_dictionary(typ):
        return _as_spark_reads(typ.value_type)
    if pa.types.is_large_string(typ):
        return pa.string()
    if pa.types.is_large_list(typ) or pa.types.is_list(typ):
        return pa.list_(_as_spark_reads(typ.value_type))
    if pa.types.is_struct(typ):
        return pa.struct([pa.field(f.name, _as_spark_reads(f.type)) for f in typ])
    return typ


def _parquet_schema(path: Path) -> pa.Schema | None:
    """The footer schema of a Parquet file, or of a directory's first part file plus the columns its
    ``name=value`` folders add (typed null: their type is Spark's to infer)."""
    import pyarrow.parquet as pq

    if path.is_file():
        return _spark_view(pq.read_schema(path))
    first, partitions = None, []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if _visible(d))
        parts = sorted(f for f in files if _visible(f) and f.endswith(".parquet"))
        if parts:
            first = Path(root) / parts[0]
            partitions = [d.split("=", 1)[0] for d in Path(root).relative_to(path).parts if "=" in d]
            break
    if first is None:
        return None
    schema = _spark_view(pq.read_schema(first))
    for name in partitions:
        if name not in schema.names:
            schema = schema.append(pa.field(name, pa.null()))
    return schema


def _spark_view(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, _as_spark_reads(f.type)) for f in schema])


def _delta_metadata(log: Path) -> dict[str, Any] | None:
    """The newest ``metaData`` action of a Delta log: from the newest commit file holding one, or from
    the newest checkpoint when the commits after it hold none."""
    names = sorted(os.listdir(log), reverse=True)
    checkpoints = [n for n in names if _CHECKPOINT.match(n)]
    newest_checkpoint = int(_CHECKPOINT.match(checkpoints[0])[1]) if checkpoints else -1  # type: ignore[index]
    for name in names:
        found = _COMMIT.match(name)
        if found is None or int(found[1]) <= newest_checkpoint:
            continue
        with open(log / name, encoding="utf-8") as lines:
            for line in lines:
                action = json.loads(line) if line.strip() else {}
                if "metaData" in action:
                    return dict(action["metaData"])
    if newest_checkpoint < 0:
        return None
    import pyarrow.parquet as pq

    version = f"{newest_checkpoint:020d}.checkpoint"
    for name in (n for n in checkpoints if n.startswith(version)):
        column = pq.read_table(log / name, columns=["metaData"]).column("metaData")
        for value in column.to_pylist():
            if value is not None and value.get("schemaString"):
                return dict(value)
    return None


def _delta_schema(table: Path) -> pa.Schema | None:
    """A Delta table's schema as Spark's Arrow conversion gives it (``to_arrow_schema``, as the Spark
    backend converts a DataFrame's schema); None when the log or a type cannot be read."""
    metadata = _delta_metadata(table / "_delta_log")
    if metadata is None:
        return None
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import StructType

    struct = StructType.fromJson(json.loads(metadata["schemaString"]))
    fields = []
    for field in struct.fields:
        try:
            fields.append(pa.field(field.name, to_arrow_type(field.dataType)))
        except Exception:  # a type Arrow cannot carry: Spark's check names it, if the model reads it
            fields.append(pa.field(field.name, pa.null()))
    return pa.schema(fields)


def _csv_header(path: Path) -> pa.Schema | None:
    """A CSV file's header as columns of unknown (null) type; None when Spark would rename its names
    (a repeated or empty name) or the file is compressed."""
    if path.suffix.lower() != ".csv":
        return None
    with open(path, encoding="utf-8", newline="") as text:
        header = next(csv.reader(text), None)
    if not header or len(set(header)) != len(header) or not all(header):
        return None
    return pa.schema([pa.field(name, pa.null()) for name in header])


def input_schema(source: str) -> pa.Schema | None:
    """The Arrow schema of a local input as far as it can be known without Spark (columns of unknown
    type are typed null), or None (see the module docstring)."""
    path = _local(source)
    if path is None:
        return None
    try:
        if path.is_dir() and (path / "_delta_log").is_dir():
            schema = _delta_schema(path)
        elif path.is_file() and path.suffix.lower() == ".csv":
            schema = _csv_header(path)
        elif path.is_file() and path.suffix.lower() != ".parquet":
            return None
        else:
            schema = _parquet_schema(path)
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return None  # a file that does not read (empty, damaged, not text): Spark's read names it
    if schema is None or len(set(schema.names)) != len(schema.names):
        return None  # a name given twice: Spark's reader refuses the input, naming it
    return schema


def _has_text(typ: pa.DataType) -> bool:
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return True
    return any(_has_text(typ.field(i).type) for i in range(typ.num_fields))


def _column_type(schema: pa.Schema, path: tuple[str, ...]) -> pa.DataType | None:
    """The Arrow type at a column path (a column, then struct fields), or None."""
    if not path or path[0] not in schema.names:
        return None
    typ = schema.field(path[0]).type
    for name in path[1:]:
        if not pa.types.is_struct(typ) or typ.get_field_index(name) < 0:
            return typ
        typ = typ.field(name).type
    return typ


def _check_types(
    schema: pa.Schema, encoder: Encoder, columns: list[str], unreadable: Callable[[pa.Schema], bool]
) -> None:
    """The Spark backend's type check (``encoder.check_arrow_type`` on the columns read), raising its
    SchemaError unless the failing column's type is unknown here (null) or holds text, or
    ``unreadable`` says a batch of these types would read after all."""
    selected = pa.schema([schema.field(c) for c in columns])
    if any(pa.types.is_null(f.type) for f in selected):
        known = [f for f in selected if not pa.types.is_null(f.type)]
        if encoder.column_names() is None or not known:
            return
    try:
        if encoder.column_names() is not None:
            encoder.check_arrow_type(selected)
        else:
            try:
                encoder.check_arrow_type(selected.field(0).type)
            except SchemaError as err:
                raise SchemaError(f"column {columns[0]!r}: {err}") from None
    except SchemaError as err:
        path = tuple(getattr(err, "field_path", ())) or (columns[0],)
        typ = _column_type(selected, path)
        if typ is None or pa.types.is_null(typ) or _has_text(typ) or not unreadable(selected):
            return
        raise


def _fit_refuses(encoder: Encoder, reads_table: bool) -> Callable[[pa.Schema], bool]:
    """Whether the fit's encoding in Spark would refuse a batch of this schema whatever its values:
    the encoder refuses an empty batch of it (a type error, not a value's)."""

    def refuses(schema: pa.Schema) -> bool:
        empty = schema.empty_table()
        try:
            encoder.from_arrow(empty if reads_table else empty.column(0))
        except (FieldError, SchemaError):
            return True
        except Exception:  # any other failure on zero rows says nothing of the type: Spark decides
            return False
        return False

    return refuses


def check_fit_input(source: str, estimator: Any) -> None:
    """Refuse, before Spark starts, a local ``source`` whose columns the fit of ``estimator`` would
    refuse in Spark (a missing column, a type its encoder cannot read), with the Spark backend's
    message. Returns quietly when the input's schema cannot be known here."""
    schema = input_schema(source)
    if schema is None:
        return
    encoder = estimator.encoder()
    columns = data_columns(list(schema.names), encoder, None)
    _check_types(schema, encoder, columns, _fit_refuses(encoder, encoder.column_names() is not None))


def check_score_input(source: str, scorer: Any) -> None:
    """As :func:`check_fit_input` for em_score's ``scorer`` (a
    :class:`~mixle_spark.parallel.backends._scoring.BatchScorer`): scoring in Spark refuses a type its
    encoder's ``check_arrow_type`` refuses, and an output column the input already has."""
    schema = input_schema(source)
    if schema is None:
        return
    columns = scorer.read_columns(list(schema.names), None)
    _check_types(schema, scorer.encoder, columns, lambda _schema: True)
