# Databricks notebook source
# MAGIC %md
# MAGIC # A model that keeps learning: stream a Delta table into it
# MAGIC
# MAGIC Customer events land in a Delta table day by day. Instead of refitting over all history every night,
# MAGIC a Structured Streaming query folds each new micro-batch into the model (`fit_stream`: incremental EM,
# MAGIC the old rows never re-read) and publishes every model version atomically, exactly once even when
# MAGIC the query is killed and restarted. Each update reports drift: how well the new rows fit the model
# MAGIC before it learned from them. Runs on Databricks (set the widgets) and locally as
# MAGIC `python notebooks/streaming_updates.py` (defaults: the bundled sample, split into two days).

# COMMAND ----------

import time

from mixle_spark.em.model_versions import ModelVersions
from mixle_spark.io import read_table, spark_session
from mixle_spark.notebook import widget
from mixle_spark.spec import load_spec
from mixle_spark.streaming import fit_stream
from mixle_spark.summary import describe_model

INPUT = widget("input", "data/customers_sample.parquet", "Events (path or table name)")
SPEC = widget("model_spec", "conf/models/sample.json", "Model spec (JSON)")
OUTPUT = widget("output", "output/notebooks/streaming", "Where the table, checkpoint and models go")

if "spark" not in globals():  # Databricks provides `spark`; locally we start one with Delta
    spark = spark_session("mixle-streaming", master="local[2]")

RUN = f"{OUTPUT}/run-{time.strftime('%Y%m%d-%H%M%S')}"  # each run of the notebook starts afresh
TABLE, MODELS, CHECKPOINT = f"{RUN}/events", f"{RUN}/models", f"{RUN}/checkpoint"
spec = load_spec(SPEC)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Day 1: the table starts, the stream fits the first model

# COMMAND ----------

events = read_table(spark, INPUT)
day1, day2 = events.randomSplit([0.6, 0.4], seed=7)
day1.write.format("delta").save(TABLE)


def run_stream() -> None:
    """Fold whatever is new in the table into the model, then stop (a scheduled job's trigger)."""
    query = fit_stream(
        spark.readStream.format("delta").load(TABLE),
        spec.estimator,
        output=MODELS,
        checkpoint=CHECKPOINT,
        fit_options={"seed": 1, "max_its": 100},
        trigger={"availableNow": True},
        decay=0.9,  # each day's statistics weigh 0.9 of the next day's
    )
    query.awaitTermination()


run_stream()
versions = ModelVersions(MODELS)
version, model = versions.latest()
print(f"version {version}: {model.statistics.rows} rows folded in")
print(describe_model(model))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Day 2: new rows arrive; the model learns from them alone

# COMMAND ----------

day2.write.format("delta").mode("append").save(TABLE)
run_stream()
version, model = versions.latest()
result = model.update_result
print(f"version {version}: {model.statistics.rows} rows, {model.statistics.updates} updates")
print(result.summary())
print(f"segment weights before {[round(w, 3) for w in result.weights_before]}")
print(f"segment weights after  {[round(w, 3) for w in result.weights_after]}")

# COMMAND ----------

# MAGIC %md
# MAGIC Run the stream again: nothing is new, nothing is folded twice (the versions stay as they are).

# COMMAND ----------

before = versions.versions()
run_stream()
assert versions.versions() == before
print(f"model versions in {MODELS}: {before}")
