"""The numpy engine: the fused mixture E-step over blocks of rows that stay in cache, in the data's own
precision (float64, or float32 for data stored at ``precision="float32"``: half the bytes read, twice
the values per vector instruction in the products and in exp).

Statistics leave each block in float64: a block's sums (at most :data:`BLOCK_ROWS` rows) are added to
float64 totals, so the rounding of float32 stays inside one block.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from mixle_spark.engines._base import ComputeEngine, MapFunction
from mixle_spark.engines._numpy_kernels import block_rows, responsibilities

__all__ = ["FLOAT32_IMPOSSIBLE", "NumpyEngine", "float32_coefficients"]

FLOAT32_IMPOSSIBLE = 1e30
"""What the float64 kernels' stand-in for log(0) (-1e300, which float32 cannot hold) becomes in float32:
large enough to be impossible, small enough that its products with features stay finite and that
``-1e30 + 1e30`` cancels exactly as ``-1e300 + 1e300`` does (a Bernoulli with p = 1)."""


def float32_coefficients(coef: np.ndarray) -> np.ndarray:
    """``coef`` in float32, its stand-ins for log(0) clipped to +-:data:`FLOAT32_IMPOSSIBLE` (a plain
    cast would make them infinite, and ``0 * inf`` a NaN)."""
    return np.clip(coef, -FLOAT32_IMPOSSIBLE, FLOAT32_IMPOSSIBLE).astype(np.float32)


class NumpyEngine(ComputeEngine):
    """numpy's products and ufuncs; float64 or float32 (the precision of the data it is given)."""

    name = "numpy"
    precisions = frozenset({"float64", "float32"})

    def feature_e_step(
        self, phi: np.ndarray, coef: np.ndarray, weights: np.ndarray, estimate: Any, map_fn: MapFunction
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per block (about 2 MiB of features, see :func:`~mixle_spark.engines._numpy_kernels.block_rows`):
        one product scores every component ((K, m) @ (m, b), component-major), the log-sum-exp turns the
        block into responsibilities in place, and a second product gives every component's
        ``Σ r w φ(x)`` at once. The (K, b) block buffer is reused (one per thread), so the K x n matrix
        never exists and its passes (max, shift, exp, sum, scale) run from cache. Block statistics are
        added in block order, whatever ran them."""
        dtype = phi.dtype if phi.dtype == np.float32 else np.dtype(np.float64)
        phi = np.asarray(phi, dtype=dtype)
        coef = float32_coefficients(coef) if dtype == np.float32 else np.asarray(coef, dtype=dtype)
        n, k = phi.shape[0], coef.shape[0]
        rows = block_rows(phi.shape[1])
        ll = np.empty(n)
        log_w = estimate.log_w[:, None].astype(dtype)
        buffers = threading.local()

        def block(a: int) -> tuple[np.ndarray, np.ndarray]:
            b = min(n, a + rows)
            buf = getattr(buffers, "joint", None)
            if buf is None:
                buf = buffers.joint = np.empty(k * min(n, rows), dtype=dtype)
            joint = buf[: k * (b - a)].reshape(k, b - a)  # C-contiguous for the sparse exp
            np.matmul(coef, phi[a:b].T, out=joint)
            joint += log_w
            ll[a:b] = responsibilities(joint, weights[a:b], estimate)
            return joint.sum(axis=1, dtype=np.float64), (joint @ phi[a:b]).astype(np.float64, copy=False)

        counts = np.zeros(k)
        sums = np.zeros((k, phi.shape[1]))
        for block_counts, block_sums in map_fn(block, range(0, n, rows)):
            counts += block_counts
            sums += block_sums
        return ll, counts, sums

    def feature_joint(self, phi: np.ndarray, coef: np.ndarray) -> np.ndarray:
        """``coef @ phi.T`` in the features' precision, returned as float64."""
        if phi.dtype == np.float32:
            return (float32_coefficients(coef) @ phi.T).astype(np.float64)
        return np.asarray(coef, dtype=np.float64) @ np.asarray(phi, dtype=np.float64).T
