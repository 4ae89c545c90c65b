"""Spark sessions with Delta configured: the local defaults, ``conf/spark-defaults.conf``, ``--conf``
pairs, spark-submit's settings, and shipping this package to a cluster's executors."""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

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
        Path(__file__).resolve().parents[2] / "conf" / "spark-defaults.conf",
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
    i.e. already shipped). The executors' Python still needs numpy, pyarrow and pandas: see
    docs/cluster.md, "The package on executors".
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
