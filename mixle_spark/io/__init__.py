"""Spark sessions (with Delta) and table I/O for jobs and notebooks.

``spark_session`` builds a local or cluster session with Delta Lake configured through Spark's
package mechanism (``spark.jars.packages``, resolved from Maven Central and cached by Ivy). It never
reconfigures Delta on a session that already has it (Databricks ships its own Spark and Delta).
Local sessions read ``conf/spark-defaults.conf`` (see :func:`spark_defaults_file`).

``read_table`` reads a Delta table, Parquet, CSV or JSON path, or a metastore table, choosing the
format from the path; ``write_table`` writes a DataFrame as a Delta table in one transaction.

The sessions live in :mod:`mixle_spark.io._session`, the tables in :mod:`mixle_spark.io._tables`.
"""

from mixle_spark.io._session import (
    DEFAULTS_ENV,
    DELTA_EXTENSION,
    LOCAL_DEFAULTS,
    delta_package,
    parse_conf,
    read_spark_defaults,
    session_settings,
    ship_package,
    spark_defaults_file,
    spark_session,
)
from mixle_spark.io._session import (
    DELTA_CATALOG as DELTA_CATALOG,
)
from mixle_spark.io._session import (
    SHIP_PACKAGE as SHIP_PACKAGE,
)
from mixle_spark.io._tables import (
    DELTA_CONFLICT as DELTA_CONFLICT,
)
from mixle_spark.io._tables import (
    DELTA_WRITE_ATTEMPTS as DELTA_WRITE_ATTEMPTS,
)
from mixle_spark.io._tables import (
    READ_FORMATS,
    WRITE_FORMATS,
    WRITE_MODES,
    check_input_exists,
    read_table,
    write_table,
)

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
