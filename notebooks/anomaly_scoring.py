# Databricks notebook source
# MAGIC %md
# MAGIC # Anomaly scoring of a Delta table
# MAGIC
# MAGIC Fit a mixture to a Delta table, score every row with its log-likelihood under the model, and write
# MAGIC the least likely rows (the anomalies) to a Delta table in one transaction. Runs on Databricks (set the
# MAGIC widgets) and locally as `python notebooks/anomaly_scoring.py` (defaults: the bundled sample).

# COMMAND ----------

from pyspark.sql import functions as F

from mixle_spark.estimation import best_of
from mixle_spark.io import read_table, spark_session, write_table
from mixle_spark.notebook import widget
from mixle_spark.scoring import score
from mixle_spark.spec import load_spec

INPUT = widget("input", "data/customers_sample.parquet", "Input table (path or name)")
SPEC = widget("model_spec", "conf/models/sample.json", "Model spec (JSON)")
OUTPUT = widget("output", "output/notebooks/anomalies_delta", "Output Delta table")
QUANTILE = float(widget("quantile", "0.01", "Share of rows flagged as anomalies"))

if "spark" not in globals():  # Databricks provides `spark`; locally we start one with Delta
    spark = spark_session("mixle-anomaly-scoring", master="local[2]")

# COMMAND ----------

df = read_table(spark, INPUT).repartition(2)
spec = load_spec(SPEC)
ll, model = best_of(df, spec.estimator, trials=2, max_its=100, seed=3, print_iter=0)
print(f"fitted on {df.count()} rows, log-likelihood {ll:.2f}")

# COMMAND ----------

# Every input column is kept; `log_likelihood` is the row's log-density under the fitted model.
scored = score(model, df)
threshold = scored.approxQuantile("log_likelihood", [QUANTILE], 0.001)[0]
anomalies = scored.where(F.col("log_likelihood") <= threshold).drop("probability")
written = write_table(anomalies, OUTPUT, mode="overwrite")
flagged = spark.read.format("delta").load(written).count()
print(f"{flagged} rows at or below the {QUANTILE:.0%} log-likelihood quantile ({threshold:.3f}) -> {written}")

# COMMAND ----------

display_rows = anomalies.orderBy("log_likelihood").limit(5).toPandas()
print(display_rows[["log_likelihood", "prediction"]].to_string())
