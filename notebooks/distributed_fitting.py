# Databricks notebook source
# MAGIC %md
# MAGIC # Distributed fitting with `mixle_spark.parallel`
# MAGIC
# MAGIC Describe the cluster (`Resources.from_spark`), ask the planner where the encoded data would go
# MAGIC and whether it fits (`plan`), check whether the model itself needs to be split
# MAGIC (`auto_parallel_estimator`), and thread each task's E-step over the mixture's components
# MAGIC (`ModelParallelEstimator`) — with the same estimates as the plain estimator.

# COMMAND ----------

import numpy as np
import pyarrow as pa
from pyspark.ml.functions import array_to_vector

from mixle_spark.estimation import optimize
from mixle_spark.io import spark_session
from mixle_spark.notebook import widget
from mixle_spark.parallel import ModelParallelEstimator, Resources, auto_parallel_estimator, plan
from mixle_spark.stats import MixtureEstimator, MultivariateGaussianEstimator

ROWS = int(widget("rows", "20000", "Rows to generate"))
COMPONENTS = int(widget("components", "8", "Mixture components"))
THREADS = int(widget("threads", "2", "Threads per task (spark.task.cpus)"))

if "spark" not in globals():  # Databricks provides `spark`; locally we start one
    spark = spark_session("mixle-distributed-fitting", master="local[2]")

# COMMAND ----------

rng = np.random.default_rng(0)
centres = rng.normal(0, 6, size=(COMPONENTS, 5))
x = centres[rng.integers(0, COMPONENTS, ROWS)] + rng.normal(size=(ROWS, 5))
df = spark.createDataFrame(pa.table({"features": list(x)})).repartition(2)
df = df.select(array_to_vector("features").alias("features")).cache()
estimator = MixtureEstimator([MultivariateGaussianEstimator(dim=5)] * COMPONENTS)

# COMMAND ----------

resources = Resources.from_spark(spark.sparkContext)
placement = plan(df, estimator=estimator, resources=resources)
print(placement)  # where the rows go, estimated bytes, and why

# COMMAND ----------

plain = optimize(df, estimator, max_its=15, delta=None, seed=1, print_iter=0)
threaded = optimize(
    df, ModelParallelEstimator(estimator, num_workers=THREADS), max_its=15, delta=None, seed=1, print_iter=0
)
same = np.allclose(plain.w, threaded.w, rtol=1e-9, atol=1e-12)
print(f"weights {np.round(np.sort(plain.w), 3)}; threaded E-steps give the same model: {same}")
assert same

# COMMAND ----------

# Does the model itself need to be split across devices? With N >> devices, data parallelism wins and
# the plain estimator comes back (a split it cannot realise would raise UnrealizedModelPlacementError).
chosen, decomposition = auto_parallel_estimator(estimator, plain, resources, n_data=ROWS)
assert chosen is estimator
print("\n".join(decomposition.rationale))
