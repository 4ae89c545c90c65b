"""Spark sessions (with Delta) and table I/O for jobs and notebooks.

``spark_session`` builds a local or cluster session with Delta Lake configured through Spark's
package mechanism (``spark.jars.packages``, resolved from Maven Central and cached by Ivy). It never
reconfigures Delta on a session that already has it (Databricks ships its own Spark and Delta).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

__all__ = ["DELTA_EXTENSION", "LOCAL_DEFAULTS", "delta_package", "spark_session"]

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
}
"""Settings for local runs (also in conf/spark-defaults.conf); cluster sessions keep their own."""


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


def spark_session(
    app: str = "mixle_spark",
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    *,
    delta: bool = True,
) -> SparkSession:
    """Get or create a SparkSession with Delta configured.

    Parameters
    ----------
    app : str
        Application name.
    master : str, optional
        ``local[2]``, ``local[*]``, a cluster URL... When None and no session is active, the
        ``MASTER`` environment variable or ``local[*]`` is used (with the local defaults); an
        active session (Databricks, spark-submit) is returned unchanged apart from ``conf``.
    conf : mapping, optional
        Extra Spark settings (applied at build time; runtime-settable ones on an existing session).
    delta : bool
        Configure the Delta extension, catalog and jar (skipped when the session already has Delta).
    """
    _require_pyspark()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        for key, value in (conf or {}).items():
            active.conf.set(key, value)
        return active
    builder = SparkSession.builder.appName(app)
    master = master or os.environ.get("MASTER") or "local[*]"
    if master.startswith("local"):
        # Local Python workers must run this interpreter (the one with mixle_spark installed),
        # not whatever `python3` is first on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = builder.master(master)
    settings: dict[str, str] = dict(LOCAL_DEFAULTS) if master.startswith("local") else {}
    settings.update(conf or {})
    if delta:
        packages = [p for p in settings.get("spark.jars.packages", "").split(",") if p]
        if not any(p.startswith("io.delta:delta-spark") for p in packages):
            packages.append(delta_package())
        settings["spark.jars.packages"] = ",".join(packages)
        settings.setdefault("spark.sql.extensions", DELTA_EXTENSION)
        settings.setdefault("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if delta and not _has_delta(spark):
        raise RuntimeError(
            "the Spark session was created without the Delta extension; stop it or pass delta=False"
        )
    return spark
