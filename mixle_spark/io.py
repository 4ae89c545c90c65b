"""Spark sessions (with Delta) and table I/O for jobs and notebooks.

``spark_session`` builds a local or cluster session with Delta Lake configured through Spark's
package mechanism (``spark.jars.packages``, resolved from Maven Central and cached by Ivy). It never
reconfigures Delta on a session that already has it (Databricks ships its own Spark and Delta).
Local sessions read ``conf/spark-defaults.conf`` (see :func:`spark_defaults_file`).

``read_table`` reads a Delta table, Parquet, CSV or JSON path, or a metastore table, choosing the
format from the path; ``write_table`` writes a DataFrame as a Delta table in one transaction.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mixle_spark._files import (
    atomic_directory,
    check_output_free,
    delta_layout,
    remove_tree,
    table_layout,
)
from mixle_spark.errors import UnknownNameError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "DEFAULTS_ENV",
    "DELTA_EXTENSION",
    "LOCAL_DEFAULTS",
    "READ_FORMATS",
    "WRITE_FORMATS",
    "WRITE_MODES",
    "check_input_exists",
    "delta_package",
    "parse_conf",
    "read_spark_defaults",
    "read_table",
    "session_settings",
    "ship_package",
    "spark_defaults_file",
    "spark_session",
    "write_table",
]

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"

LOCAL_DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
    "spark.python.worker.reuse": "true",
    "spark.databricks.delta.snapshotPartitions": "2",
}
"""Settings for local runs (also in conf/spark-defaults.conf); cluster sessions keep their own."""

DEFAULTS_ENV = "MIXLE_SPARK_DEFAULTS"
"""Environment variable naming a spark-defaults.conf to read for local sessions instead of the search."""

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
_URI = re.compile(r"^[A-Za-z][\w+.-]+:")


def _require_pyspark() -> Any:
    try:
        import pyspark
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "mixle_spark's Spark features need pyspark and delta-spark: pip install 'mixle-spark[spark]'"
        ) from err
    return pyspark


def delta_package() -> str:
    """The Maven coordinate of the Delta jar matching the installed delta-spark (Scala 2.13)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"io.delta:delta-spark_2.13:{version('delta-spark')}"
    except PackageNotFoundError as err:
        raise ImportError("delta-spark is not installed: pip install 'mixle-spark[spark]'") from err


def _has_delta(spark: SparkSession) -> bool:
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    return DELTA_EXTENSION in extensions


def read_spark_defaults(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a ``spark-defaults.conf``: one ``key value`` (or ``key=value``) per line, ``#`` comments.

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    """
    settings: dict[str, str] = {}
    for line in Path(path).read_text().splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        match = re.match(r"^(\S+?)(?:\s*=\s*|\s+)(.*)$", text)
        key, value = (text, "") if match is None else (match.group(1), match.group(2).strip())
        settings[key] = value
    return settings


def spark_defaults_file() -> Path | None:
    """The ``spark-defaults.conf`` that local sessions read, or None.

    Searched in order: the file named by ``$MIXLE_SPARK_DEFAULTS`` (which must exist),
    ``conf/spark-defaults.conf`` in the current directory, then ``conf/spark-defaults.conf`` of the
    source checkout this package was imported from.
    """
    named = os.environ.get(DEFAULTS_ENV)
    if named:
        path = Path(named)
        if not path.is_file():
            raise FileNotFoundError(f"{DEFAULTS_ENV}={named}: no such file")
        return path
    for candidate in (
        Path.cwd() / "conf" / "spark-defaults.conf",
        Path(__file__).resolve().parents[1] / "conf" / "spark-defaults.conf",
    ):
        if candidate.is_file():
            return candidate
    return None


def parse_conf(pairs: Iterable[str]) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` (as given to ``--conf``) -> dict; later pairs win.

    >>> parse_conf(["spark.sql.shuffle.partitions=8", "spark.app.name=a=b"])
    {'spark.sql.shuffle.partitions': '8', 'spark.app.name': 'a=b'}

    Raises
    ------
    ValueError
        For a pair without ``=`` or with an empty key, repeating the pair.
    """
    settings: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf expects KEY=VALUE, got {pair!r}")
        settings[key.strip()] = value
    return settings


def _submitted_conf() -> dict[str, str] | None:
    """The settings spark-submit launched this process with (None when it did not)."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())


def session_settings(
    master: str,
    conf: Mapping[str, str] | None = None,
    *,
    submitted: Mapping[str, str] | None = None,
    delta: bool = True,
) -> dict[str, str]:
    """The settings :func:`spark_session` gives a new session's builder.

    For a local master: :data:`LOCAL_DEFAULTS`, overridden by the spark-defaults file (see
    :func:`spark_defaults_file`), minus whatever spark-submit was given (``submitted``); then
    ``conf`` overrides all. With ``delta``, the Delta jar, extension and catalog are added unless
    already there.

    >>> settings = session_settings("local[2]", {"spark.sql.shuffle.partitions": "8"}, delta=False)
    >>> settings["spark.sql.shuffle.partitions"], settings["spark.ui.enabled"]
    ('8', 'false')
    >>> session_settings("spark://host:7077", delta=False)
    {}
    """
    local = master.startswith("local")
    settings: dict[str, str] = dict(LOCAL_DEFAULTS) if local else {}
    defaults_file = spark_defaults_file() if local else None
    if defaults_file is not None:
        settings.update(read_spark_defaults(defaults_file))
    for key in submitted or {}:  # what spark-submit was told wins over our defaults
        settings.pop(key, None)
    settings.update(conf or {})
    if delta:
        packages = [p for p in settings.get("spark.jars.packages", "").split(",") if p]
        if not any(p.startswith("io.delta:delta-spark") for p in packages):
            packages.append(delta_package())
        settings["spark.jars.packages"] = ",".join(packages)
        settings.setdefault("spark.sql.extensions", DELTA_EXTENSION)
        settings.setdefault("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
    return settings


def spark_session(
    app: str = "mixle_spark",
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    *,
    delta: bool = True,
    jvm_log: str | os.PathLike[str] | None = None,
) -> SparkSession:
    """Get or create a SparkSession with Delta configured.

    Parameters
    ----------
    app : str
        Application name.
    master : str, optional
        ``local[2]``, ``local[*]``, a cluster URL... When None and no session is active, the
        master spark-submit was given, else the ``MASTER`` environment variable, else ``local[*]``
        is used (with the local defaults for local masters); an active session (Databricks, a
        notebook) is returned unchanged apart from ``conf``.
    conf : mapping, optional
        Extra Spark settings (applied at build time; runtime-settable ones on an existing session).
        For local masters these override ``conf/spark-defaults.conf`` (see
        :func:`spark_defaults_file`), which overrides :data:`LOCAL_DEFAULTS`.
    delta : bool
        Configure the Delta extension, catalog and jar (skipped when the session already has Delta).
    jvm_log : path, optional
        When this call launches the JVM, its console output (the jar resolution report, Spark's
        log) goes to this file instead of stderr: what the jobs do unless ``--verbose``, so that a
        failure is one line. Under ``spark-submit`` the JVM is already running and this is ignored.

    Notes
    -----
    On a cluster master a new session ships this mixle_spark to the executors (:func:`ship_package`;
    ``spark.mixle.shipPackage=false`` turns it off); they still need numpy, pyarrow and pandas.
    Under ``spark-submit`` (no ``master`` given) the submitted master and settings are kept. Spark resolves
    ``spark.jars.packages`` only when it launches, so there pass the Delta jar on the command line:
    ``spark-submit --packages io.delta:delta-spark_2.13:4.0.1 ...`` (see :func:`delta_package`).
    """
    _require_pyspark()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        for key, value in (conf or {}).items():
            active.conf.set(key, value)
        return active
    builder = SparkSession.builder.appName(app)
    submitted = _submitted_conf() if master is None else None
    if submitted is not None:
        master = submitted.get("spark.master")
    master = master or os.environ.get("MASTER") or "local[*]"
    local = master.startswith("local")
    if local:
        # Local Python workers must run this interpreter (the one with mixle_spark installed),
        # not whatever `python3` is first on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "hostname resolves to loopback" warning
    if submitted is None:
        builder = builder.master(master)
    settings = session_settings(master, conf, submitted=submitted, delta=delta)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if jvm_log is not None and submitted is None:
        _launch_jvm_logging_to(jvm_log, {"spark.master": master, "spark.app.name": app, **settings})
    spark = builder.getOrCreate()
    if not local and (spark.conf.get(SHIP_PACKAGE, "true") or "true").lower() != "false":
        ship_package(spark)
    if delta and not _has_delta(spark):
        raise RuntimeError(
            "the Spark session was created without the Delta extension; stop it or pass delta=False"
        )
    if delta and not _delta_loadable(spark):
        raise RuntimeError(
            "Delta Lake is not on the Spark classpath; under spark-submit pass "
            f"--packages {delta_package()} (or delta=False to run without Delta)"
        )
    return spark


def _launch_jvm_logging_to(path: str | os.PathLike[str], settings: Mapping[str, str]) -> None:
    """Start the Spark JVM (if none runs in this process) with its stdout and stderr in ``path``."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        conf.set(key, value)
    with open(target, "ab") as log:
        gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)


SHIP_PACKAGE = "spark.mixle.shipPackage"
"""Session setting: ``false`` stops :func:`spark_session` from shipping mixle_spark to executors."""
_shipped: dict[str, Path] = {}


def ship_package(spark: SparkSession) -> Path | None:
    """Make the mixle_spark the driver runs importable on the session's executors.

    Zips the package's sources once per application and adds the zip with ``addPyFile``; Python
    workers put it ahead of their site-packages, so executors run the driver's version even where an
    older one is installed. Returns the zip (None when this package is itself imported from a zip,
    i.e. already shipped). The executors' Python still needs numpy, pyarrow and pandas: see the
    README's "Running on a cluster".
    """
    import zipfile

    import mixle_spark

    root = Path(mixle_spark.__file__).resolve().parent
    if not root.is_dir():
        return None
    sc = spark.sparkContext
    app = sc.applicationId
    if app in _shipped:
        return _shipped[app]
    target = Path(tempfile.mkdtemp(prefix="mixle_spark-ship-")) / f"mixle_spark-{mixle_spark.__version__}.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".typed") and "__pycache__" not in path.parts:
                archive.write(path, Path("mixle_spark") / path.relative_to(root))
    sc.addPyFile(str(target))
    _shipped[app] = target
    return target


def _delta_loadable(spark: SparkSession) -> bool:
    # spark.jars.packages set after the JVM started (spark-submit) is silently not resolved.
    jvm = spark.sparkContext._jvm
    return jvm is None or bool(jvm.org.apache.spark.util.Utils.classIsLoadable(DELTA_EXTENSION))


def _local_path(source: str | os.PathLike[str]) -> Path | None:
    """The local filesystem path of ``source``, or None for a URI on another filesystem."""
    text = os.fspath(source)
    if text.startswith("file:"):
        return Path(re.sub(r"^file:(//)?", "", text))
    if _URI.match(text) and not re.match(r"^[A-Za-z]:[\\/]", text):  # a Windows drive is local
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
    return (
        "/" in text or os.sep in text or _URI.match(text) is not None or _format_from_name(text) is not None
    )


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
        raise


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
