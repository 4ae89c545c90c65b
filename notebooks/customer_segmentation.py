# Databricks notebook source
# MAGIC %md
# MAGIC # Customer segmentation on mixed-type columns
# MAGIC
# MAGIC Spend (log-normal), channel (categorical), items per order (Poisson) and product tags (a list of
# MAGIC labels): one mixture of records models them together — no one-hot encoding, no scaling. Each segment
# MAGIC gets its own distribution per column, and every customer a segment and its probability.

# COMMAND ----------

from pyspark.sql import functions as F

from mixle_spark.estimation import best_of
from mixle_spark.io import read_table, spark_session
from mixle_spark.notebook import widget
from mixle_spark.scoring import score
from mixle_spark.stats import (
    CategoricalEstimator,
    LogGaussianEstimator,
    MixtureEstimator,
    PoissonEstimator,
    RecordEstimator,
    SequenceEstimator,
)
from mixle_spark.summary import count_free_parameters, describe_model, information_criteria

INPUT = widget("input", "data/customers_sample.parquet", "Customer table (path or name)")
SEGMENTS = int(widget("segments", "3", "Number of segments"))

if "spark" not in globals():  # Databricks provides `spark`; locally we start one
    spark = spark_session("mixle-customer-segmentation", master="local[2]")

# COMMAND ----------

customers = read_table(spark, INPUT).repartition(2).cache()
segment = RecordEstimator(
    {
        "amount": LogGaussianEstimator(),
        "channel": CategoricalEstimator(pseudo_count=0.5),
        "n_items": PoissonEstimator(),
        "tags": SequenceEstimator(CategoricalEstimator(pseudo_count=0.5), PoissonEstimator()),
    }
)
estimator = MixtureEstimator([segment] * SEGMENTS)
ll, model = best_of(customers, estimator, trials=2, max_its=150, seed=7, print_iter=0)
rows = customers.count()
criteria = information_criteria(ll, count_free_parameters(model), rows)
print(f"{SEGMENTS} segments on {rows} customers: log-likelihood {ll:.1f}, BIC {criteria['bic']:.1f}")

# COMMAND ----------

print(describe_model(model))  # weights and per-column parameters of every segment

# COMMAND ----------

segments = score(model, customers)  # adds log_likelihood, prediction, probability
sizes = segments.groupBy("prediction").agg(
    F.count("*").alias("customers"), F.round(F.avg("amount"), 2).alias("avg_amount")
)
sizes_pd = sizes.orderBy("prediction").toPandas()
print(sizes_pd.to_string(index=False))
assert int(sizes_pd["customers"].sum()) == rows
