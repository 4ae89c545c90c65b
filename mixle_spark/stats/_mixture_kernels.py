"""Numerical kernels of the mixture E-step: weight validation and the in-place log-sum-exp."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from mixle_spark.engines import current_engine
from mixle_spark.errors import NonFiniteLikelihoodError
from mixle_spark.stats._validate import unit_sum
from mixle_spark.stats.base import Accumulator, Distribution, check_parameter

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


def normalized_weights(w: Any, k: int, family: str) -> np.ndarray:
    """Validate mixture weights and renormalise them so that ``math.fsum(w) == 1.0`` exactly.

    Exactness makes renormalisation idempotent, so ``from_dict(to_dict())`` round-trips bit for bit.
    """
    try:
        arr = np.array(w, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        check_parameter(False, family, "w", w, f"a sequence of {k} numbers")
    check_parameter(arr.size == k, family, "w", w, f"a sequence of {k} weights (one per component)")
    check_parameter(bool(np.all(np.isfinite(arr))), family, "w", w, "finite")
    check_parameter(bool(np.all(arr >= 0)), family, "w", w, "non-negative")
    total = math.fsum(arr)
    check_parameter(abs(total - 1.0) <= 1e-9, family, "w", w, "summing to 1 (within 1e-9)")
    return unit_sum(arr)


def log_weights(w: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(w)


def exp_normalize(
    joint: np.ndarray, w: np.ndarray, components: Sequence[Distribution]
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


def _defining_class(cls: type, name: str) -> type | None:
    return next((k for k in cls.__mro__ if name in vars(k)), None)


def _features_match_density(cls: type) -> bool:
    """False when a subclass overrides ``seq_log_density`` but inherits the feature protocol:
    the features would then describe the parent's density, not the subclass's."""
    return _defining_class(cls, "seq_log_density") is _defining_class(cls, "feature_coefficients")


def features_shared(
    components: Sequence[Distribution], accumulators: Sequence[Accumulator] | None, enc: Any = None
) -> bool:
    """True when every component (and accumulator) supports the fast path with one feature map (and
    the batch ``enc``, when given, has every value its features need: no missing coordinates)."""
    if enc is not None and getattr(enc, "has_missing", False):
        return False
    if not all(hasattr(c, "feature_key") and _features_match_density(type(c)) for c in components):
        return False
    if accumulators is not None and not all(hasattr(a, "add_feature_sums") for a in accumulators):
        return False
    first = components[0].feature_key()  # type: ignore[attr-defined]
    return all(c.feature_key() == first for c in components[1:])  # type: ignore[attr-defined]


_REFERENCE_DEPTH = 0
_REFERENCE_LOCK = threading.Lock()


@contextlib.contextmanager
def reference_kernels() -> Iterator[None]:
    """Within this block mixture E-steps take the per-component path (each component scores the
    batch, then updates its own statistics) instead of the fused matrix products.

    The two paths compute the same statistics in a different order with different code, so their
    results agree to rounding (~1e-12 relative) and a corrupted result shows up as a mismatch: the
    silent-corruption audit (:mod:`mixle_spark.em.sdc_audit`) recomputes partitions this way.
    It is process-wide while active (E-step threads of this process see it too).
    """
    global _REFERENCE_DEPTH
    with _REFERENCE_LOCK:
        _REFERENCE_DEPTH += 1
    try:
        yield
    finally:
        with _REFERENCE_LOCK:
            _REFERENCE_DEPTH -= 1


def reference_active() -> bool:
    """True inside a :func:`reference_kernels` block (in any thread of this process)."""
    return _REFERENCE_DEPTH > 0


def responsibilities(joint: np.ndarray, weights: np.ndarray, estimate: Any) -> np.ndarray:
    """Turn ``joint`` (K, n) of ``log w_k + log p_k(x_i)`` into ``weights * posterior`` in place
    (no second (K, n) array); returns the per-row log-likelihood. ``estimate`` is the mixture."""
    ll, s, bad, bad_post = exp_normalize(joint, estimate.w, estimate.components)
    joint *= weights / s
    if bad is not None and bad_post is not None:
        joint[:, bad] = (bad_post * weights[bad, None]).T
    return ll


def fused_e_step(
    accumulators: Sequence[Accumulator],
    counts: np.ndarray,
    enc: Any,
    weights: np.ndarray,
    estimate: Any,
    map_fn: Callable[[Callable[[Any], Any], Iterable[Any]], Iterator[Any]],
) -> np.ndarray:
    """The feature-protocol mixture E-step, run by the current compute engine
    (:func:`mixle_spark.engines.current_engine`: numpy unless a fit asked for another); adds the
    component weights to ``counts`` (in place) and the statistics to ``accumulators``; returns the
    per-row log-likelihood (float64).

    The features keep the batch's precision (float32 for data stored at ``precision="float32"``); the
    coefficients are computed in float64 from the parameters and the engine returns float64 sums, so
    the statistics are accumulated in float64 whatever the precision. ``map_fn`` (``map`` or a thread
    pool's ordered ``map``) runs the engine's independent blocks; their sums are added in block order.
    """
    comps = estimate.components
    phi = feature_matrix(comps[0], enc)
    coef = np.array([c.feature_coefficients(enc) for c in comps], dtype=np.float64)
    ll, block_counts, sums = current_engine().feature_e_step(phi, coef, weights, estimate, map_fn)
    counts += block_counts
    for j, (acc, comp) in enumerate(zip(accumulators, comps, strict=True)):
        acc.add_feature_sums(sums[j], enc, comp)  # type: ignore[attr-defined]
    return ll


def feature_matrix(component: Any, enc: Any) -> np.ndarray:
    """``component.seq_features(enc)`` as float64, or float32 when the batch is stored in float32."""
    phi = np.asarray(component.seq_features(enc))
    return phi if phi.dtype in (np.float64, np.float32) else phi.astype(np.float64)
