"""The numpy engine's in-place log-sum-exp and block sizes (the mixture E-step's numerical core).

They sit below the families (stats imports them; they import no family): ``estimate`` arguments are
duck-typed (``w``, ``components``, ``log_w``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle_spark.errors import NonFiniteLikelihoodError

__all__ = ["BLOCK_ROWS", "block_rows", "exp_normalize", "exp_shifted", "responsibilities"]

_LOG_FLOOR = -50.0
"""Terms below ``e^-50`` of a row's largest are dropped (set exactly to 0): with fewer than ~10^5
components their total is below one rounding unit of the row's sum, so the log-likelihood is unchanged,
and responsibilities under ``1e-21`` become 0."""
_EXP_FLOOR = math.exp(_LOG_FLOOR)
_SPARSE_FRACTION = 0.3
"""Below this fraction of surviving terms, only the survivors are exponentiated (gather / scatter)."""
BLOCK_ROWS = 8192
"""Most rows per block of the fused E-step (a (K, b) block stays in a core's L2 between passes)."""
_BLOCK_FEATURE_VALUES = 1 << 18
"""Feature values per block (2 MiB of float64): the block's features are read by both products and
must still be in cache for the second when every core runs an E-step (2 processes on 2 cores were
1.2x one with 8192-row blocks of d=10 features, 1.9x with ~4000-row blocks)."""


def block_rows(num_features: int) -> int:
    """Rows per fused E-step block for ``num_features`` features: about 2 MiB of features, a
    multiple of 256 rows between 256 and :data:`BLOCK_ROWS`."""
    rows = (_BLOCK_FEATURE_VALUES // max(num_features, 1)) // 256 * 256
    return int(min(BLOCK_ROWS, max(256, rows)))


def exp_normalize(
    joint: np.ndarray, w: np.ndarray, components: Sequence[Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Turn ``joint`` (K, n) of ``log w_k + log p_k(x_i)`` into ``exp(joint - colmax)`` IN PLACE.

    The matrix is component-major, (K, n), so every reduction over components is a contiguous
    row-wise pass. Returns ``(ll, s, bad, bad_post)``: the per-row log-sum-exp (n,), the sums of
    the exponentiated columns (1 on bad rows), the indices of rows whose maximum is not finite,
    and the posteriors of those rows (len(bad), K). An impossible row (every component ``-inf``)
    gets the prior weights ``w`` as its posterior (so it never produces NaN) and ``ll = -inf``; a
    row where some component is ``+inf`` splits its posterior evenly among those components.
    A NaN raises NonFiniteLikelihoodError naming the component.
    """
    m = joint.max(axis=0)
    bad = bad_post = None
    if not np.isfinite(m).all():
        nan_rows = np.isnan(m)
        if nan_rows.any():
            i = int(np.flatnonzero(nan_rows)[0])
            k = int(np.flatnonzero(np.isnan(joint[:, i]))[0])
            raise NonFiniteLikelihoodError(
                f"mixture component {k} gave a NaN log-density (row {i + 1} of {len(m)}, "
                f"{int(nan_rows.sum())} such rows); non-finite parameters of the component: "
                f"{components[k].nonfinite_parameters() or 'none'}"
            )
        bad = np.flatnonzero(~np.isfinite(m))
        top = joint[:, bad].T == np.inf
        bad_post = np.where(top.any(axis=1, keepdims=True), top.astype(np.float64), w[None, :])
        bad_post /= bad_post.sum(axis=1, keepdims=True)
        bad_m = m[bad]
        m[bad] = 0.0
        joint[:, bad] = 0.0
    joint -= m
    exp_shifted(joint)
    s = joint.sum(axis=0)
    if bad is not None:
        s[bad] = 1.0
    ll = np.log(s)
    ll += m
    if bad is not None:
        ll[bad] = bad_m
    return ll, s, bad, bad_post


def exp_shifted(joint: np.ndarray) -> None:
    """``exp(joint) - e^-50`` where ``joint > -50``, exactly 0 elsewhere, in place (``joint <= 0``).

    exp is the costliest step of the E-step (numpy's float64 exp is scalar on CPUs without AVX-512,
    and several times slower again for results that underflow). Once a model has separated its
    components most terms of a row are far below its largest, so when fewer than 30% survive only
    those are exponentiated. Both branches give identical values (w_k = 0 stays exactly 0).
    """
    keep = joint > _LOG_FLOOR
    if joint.flags.c_contiguous and np.count_nonzero(keep) < _SPARSE_FRACTION * joint.size:
        flat = joint.reshape(-1)
        idx = np.flatnonzero(keep)
        vals = flat[idx]
        np.exp(vals, out=vals)
        vals -= _EXP_FLOOR
        flat.fill(0.0)
        flat[idx] = vals
    else:
        np.maximum(joint, _LOG_FLOOR, out=joint)
        np.exp(joint, out=joint)
        joint -= _EXP_FLOOR


def responsibilities(joint: np.ndarray, weights: np.ndarray, estimate: Any) -> np.ndarray:
    """Turn ``joint`` (K, n) of ``log w_k + log p_k(x_i)`` into ``weights * posterior`` in place
    (no second (K, n) array); returns the per-row log-likelihood. ``estimate`` is the mixture."""
    ll, s, bad, bad_post = exp_normalize(joint, estimate.w, estimate.components)
    joint *= weights / s
    if bad is not None and bad_post is not None:
        joint[:, bad] = (bad_post * weights[bad, None]).T
    return ll
