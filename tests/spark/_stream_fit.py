"""Run a streaming fit over a directory of Parquet files (one file per micro-batch) until every file is
folded in; run by tests/spark/test_streaming.py in a subprocess that it may kill and start again."""

from __future__ import annotations

import sys

from mixle_spark.io import spark_session
from mixle_spark.streaming import fit_stream
from tests.spark.test_streaming import ESTIMATOR, FIT_OPTIONS, SCHEMA, UPDATE_OPTIONS


def main() -> None:
    source, output, checkpoint = sys.argv[1:4]
    spark = spark_session(
        "stream-test",
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
        delta=False,  # a Parquet stream: no Delta jar to resolve
    )
    spark.sparkContext.setLogLevel("ERROR")
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(source)
    query = fit_stream(
        stream,
        ESTIMATOR,
        output=output,
        checkpoint=checkpoint,
        fit_options=FIT_OPTIONS,
        trigger={"availableNow": True},
        **UPDATE_OPTIONS,
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
