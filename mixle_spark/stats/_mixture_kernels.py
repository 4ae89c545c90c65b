"""The mixture E-step's family-side kernels: weight validation, which components share the feature
protocol, the fused E-step (run by the current compute engine) and the reference-kernels switch.

The in-place log-sum-exp and the block sizes live with the numpy engine
(:mod:`mixle_spark.engines._numpy_kernels`)."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from mixle_spark.engines import current_engine
from mixle_spark.stats._validate import unit_sum
from mixle_spark.stats.base import Accumulator, Distribution, check_parameter


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
