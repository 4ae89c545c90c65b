"""The ``spark`` backend: encoded data as a persisted Spark DataFrame of encoded chunks.

Building a handle (:class:`SparkEncodedData`) reads the selected columns once (:mod:`._encoding`):
each task learns its partition's vocabularies / ranges (the encoders' scans), validates every value
with a batch-local encoder (so a string in a numeric column, a null without Optional, NaN, a negative
count... are reported before any EM iteration, with the column, the value, the global row and the
count of bad rows), counts its rows and writes what every later pass consumes (:mod:`._chunks`):
the encoder's output for chunks of rows, with their weights and row ids, one binary cell per chunk,
persisted (``MEMORY_AND_DISK``). Chunks whose own scan differs from the merged one are then rebased
in a pass over the cached chunks, which reads no input. (A family that cannot rebase its batches
caches the input columns, scans them, then encodes from the cache.) So the data is read from its
source once, and validated, looked up and converted once.

Each EM iteration is one pass, run by the handle's executor (:mod:`._executors`, chosen when
the handle is built): resident tasks that hold their decoded partition while a fit runs (when the
session can run them), else one Spark job that unpickles each chunk, or reads its executor-local
copy, and folds it. ``mapInArrow`` yields one small payload per partition (total weight,
log-likelihood of the current model, statistics); payloads merge with ``treeAggregate`` (``depth``,
default 2) or, without RDDs (Spark Connect, or ``merge="dataframe"``), with rounds of ``repartition``
+ ``mapInArrow`` merges whose last few rows are collected. On the job path the encoded data is laid
out with at most one partition per task the session runs at once (one wave of tasks a pass). Only
statistics reach the driver. The E-step has no side effects, so task retries and speculative
execution do not change the result.

Rows keep a stable global id (their index in the input DataFrame's order, from
``monotonically_increasing_id`` and per-partition counts), so initialization selects the same rows
and draws the same random responsibilities as the local backend for one seed, whatever
``num_chunks`` is.
"""

from mixle_spark.parallel.backends.spark._common import ROW_ID_COLUMN, WEIGHT_COLUMN, is_spark_connect
from mixle_spark.parallel.backends.spark._handle import SPARK_CONTROLS, SparkEncodedData, make_spark
from mixle_spark.parallel.backends.spark._scores import add_scores

__all__ = [
    "ROW_ID_COLUMN",
    "SPARK_CONTROLS",
    "WEIGHT_COLUMN",
    "SparkEncodedData",
    "add_scores",
    "is_spark_connect",
    "make_spark",
]
