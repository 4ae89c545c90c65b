# Databricks notebook source
# MAGIC %md
# MAGIC # Quickstart: fit the sample customer model and look at the report
# MAGIC
# MAGIC The bundled sample (5,000 customers) is fitted with the spec `conf/models/sample.json` — the same
# MAGIC thing `make demo` / `python jobs/em_fit.py` does — and the fit report (log-likelihood per iteration,
# MAGIC segment weights, parameters per segment, a 2-D projection coloured by segment) is written as one HTML
# MAGIC file and shown below.

# COMMAND ----------

import os

from mixle_spark.estimation import best_of
from mixle_spark.io import read_table, spark_session
from mixle_spark.notebook import display_html, widget
from mixle_spark.report import write_report
from mixle_spark.spec import load_spec, save_model

INPUT = widget("input", "data/customers_sample.parquet", "Input table (path or name)")
SPEC = widget("model_spec", "conf/models/sample.json", "Model spec (JSON)")
OUTPUT = widget("output", "output/notebooks/quickstart", "Output directory")

if "spark" not in globals():  # Databricks provides `spark`; locally we start one
    spark = spark_session("mixle-quickstart", master="local[2]")

# COMMAND ----------

df = read_table(spark, INPUT).repartition(2)
spec = load_spec(SPEC)
ll, model = best_of(df, spec.estimator, trials=2, max_its=100, seed=1, print_iter=0)
print(f"log-likelihood {ll:.1f} after {model.fit_result.n_iter} iterations; weights {model.w.round(3)}")

# COMMAND ----------

os.makedirs(OUTPUT, exist_ok=True)
save_model(model, os.path.join(OUTPUT, "model.json"), overwrite=True)
sample = df.limit(2000).toPandas()
report = write_report(model, os.path.join(OUTPUT, "report.html"), sample=sample, title="Sample customers")
with open(report, encoding="utf-8") as page:
    display_html(page.read())
