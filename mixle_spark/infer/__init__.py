"""A model spec inferred from a table: :func:`infer_spec` profiles every column in one pass, fits each
column's candidate families on a sample and keeps the one of least BIC (docs/infer-spec.md)."""

from mixle_spark.infer.inference import GEM_ITERATIONS, SAMPLE_ROWS, InferredSpec, infer_spec

__all__ = ["GEM_ITERATIONS", "SAMPLE_ROWS", "InferredSpec", "infer_spec"]
