"""FLOP accounting for model FLOP utilisation (MFU): FLOPs per step from a model's shape, a peak.

numpy only. Private: :mod:`~mixle_spark.parallel.training.training_health` exports these names and
feeds them to its monitor.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import numpy as np

from mixle_spark.errors import describe_value
from mixle_spark.parallel.training._records import exact_int

__all__ = [
    "MFUSample",
    "ModelFlopConfig",
    "flop_config_from_causal_lm",
    "measure_peak_flops",
    "positive_number",
    "theoretical_flops_per_iter",
]


def positive_number(name: str, value: Any) -> float:
    """``float(value)`` for a finite ``value > 0`` (bools refused), else a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (Integral, float, np.floating)):
        raise ValueError(f"{name} must be a finite positive number, got {describe_value(value)}")
    result = float(value)
    if not (math.isfinite(result) and result > 0):
        raise ValueError(f"{name} must be a finite positive number, got {describe_value(value)}")
    return result


def theoretical_flops_per_iter(
    *, n_params: int, n_layer: int, n_head: int, d_model: int, seq_len: int, batch_size: int
) -> float:
    """Forward and backward FLOPs of one training step of a decoder-only transformer.

    Per token, ``6 * n_params`` for the dense matrix products (a multiply-add is 2 FLOPs, and the
    backward pass costs twice the forward) plus ``12 * n_layer * n_head * head_dim * seq_len`` for
    attention's two products (scores and the weighted values), which the parameter count misses;
    times ``seq_len`` tokens and ``batch_size`` sequences (PaLM's appendix B; nanoGPT's
    ``estimate_mfu``). ``n_params`` leaves out position embeddings (a lookup, not a product).
    ``n_layer=0`` counts a model without attention: ``6 * n_params`` per example when ``seq_len=1``.

    >>> theoretical_flops_per_iter(n_params=1000, n_layer=2, n_head=2, d_model=8, seq_len=4, batch_size=3)
    81216.0
    """
    n_params = exact_int("n_params", n_params, 1)
    n_layer = exact_int("n_layer", n_layer, 0)
    n_head = exact_int("n_head", n_head, 1)
    d_model = exact_int("d_model", d_model, 1)
    seq_len = exact_int("seq_len", seq_len, 1)
    batch_size = exact_int("batch_size", batch_size, 1)
    if d_model % n_head:
        raise ValueError(f"d_model={d_model} must be a multiple of n_head={n_head}")
    head_dim = d_model // n_head
    per_token = 6.0 * n_params + 12.0 * n_layer * n_head * head_dim * seq_len
    return per_token * seq_len * batch_size


@dataclass(frozen=True)
class ModelFlopConfig:
    """The shape a model's FLOPs per step follow from (see :func:`theoretical_flops_per_iter`).

    ``ModelFlopConfig(n_params, n_layer=0)`` is a model without attention whose examples are one
    token each (an MLP): ``6 * n_params`` FLOPs per example.
    """

    n_params: int
    n_layer: int = 0
    n_head: int = 1
    d_model: int = 1
    seq_len: int = 1

    def __post_init__(self) -> None:
        self.flops_per_iter(1)  # validates every field, naming the bad one

    def flops_per_iter(self, batch_size: int) -> float:
        """FLOPs of one step over ``batch_size`` sequences (examples)."""
        return theoretical_flops_per_iter(
            n_params=self.n_params,
            n_layer=self.n_layer,
            n_head=self.n_head,
            d_model=self.d_model,
            seq_len=self.seq_len,
            batch_size=batch_size,
        )


def flop_config_from_causal_lm(
    model: Any,
    seq_len: int,
    *,
    n_layer: int | None = None,
    n_head: int | None = None,
    d_model: int | None = None,
) -> ModelFlopConfig:
    """The :class:`ModelFlopConfig` of a causal language model at context length ``seq_len``.

    Parameters are counted from ``model.parameters()`` less a position embedding ``model.pos.weight``
    when there is one; ``n_layer`` / ``n_head`` / ``d_model`` are read from the model's attributes of
    those names unless given.
    """
    parameters = getattr(model, "parameters", None)
    if not callable(parameters):
        raise TypeError(f"model must have parameters() (a torch module), got {describe_value(model)}")
    n_params = sum(int(p.numel()) for p in parameters())
    position = getattr(getattr(model, "pos", None), "weight", None)
    if position is not None:
        n_params -= int(position.numel())
    shape = {}
    for name, given in (("n_layer", n_layer), ("n_head", n_head), ("d_model", d_model)):
        value = given if given is not None else getattr(model, name, None)
        if value is None:
            raise ValueError(f"model has no attribute {name!r}: pass {name}= to flop_config_from_causal_lm")
        shape[name] = value
    return ModelFlopConfig(n_params=n_params, seq_len=seq_len, **shape)


@dataclass(frozen=True)
class MFUSample:
    """One step's FLOPs and wall-clock time against a peak FLOP rate."""

    step: int
    step_flops: float
    step_time_s: float
    peak_flops_per_sec: float

    def __post_init__(self) -> None:
        exact_int("step", self.step, 0)
        for name in ("step_flops", "step_time_s", "peak_flops_per_sec"):
            object.__setattr__(self, name, positive_number(name, getattr(self, name)))

    @property
    def achieved_flops_per_sec(self) -> float:
        return self.step_flops / self.step_time_s

    @property
    def mfu(self) -> float:
        """Model FLOP utilisation: achieved over peak FLOP/s."""
        return self.achieved_flops_per_sec / self.peak_flops_per_sec


def measure_peak_flops(*, size: int = 1024, repeats: int = 3, dtype: str = "float32") -> float:
    """The FLOP/s of a dense ``size x size`` matrix product on this machine (best of ``repeats``).

    A measured stand-in for a vendor's peak where none is given: numpy's BLAS with the threads this
    process may use. MFU against it is the share of the matrix-product throughput actually reached
    (usually above MFU against a datasheet peak).
    """
    size = exact_int("size", size, 16)
    repeats = exact_int("repeats", repeats, 1)
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {describe_value(dtype)}")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size)).astype(dtype)
    b = rng.standard_normal((size, size)).astype(dtype)
    a @ b  # warm up the BLAS (threads, pages)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / max(best, 1e-9)
