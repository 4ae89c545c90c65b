"""What a compute engine is (:class:`ComputeEngine`), what a fit asks of one (:class:`Compute`) and the
precision names (:func:`precision_name`).

A precision is where the encoded data is stored and the E-step's log-densities and responsibilities are
computed; sufficient statistics are always accumulated in float64, so merging them and the M-step stay
exact whatever the precision. ``bfloat16`` has no numpy dtype: its data is stored as float32 and the
torch engine computes in bfloat16.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "PRECISIONS",
    "Compute",
    "ComputeEngine",
    "EngineUnavailableError",
    "precision_name",
    "storage_dtype",
]

PRECISIONS = ("float64", "float32", "bfloat16")
"""The precisions a fit may ask for, by canonical name; float64 is the default."""

_ALIASES = {
    "float64": "float64",
    "fp64": "float64",
    "f64": "float64",
    "double": "float64",
    "auto": "float64",
    "float32": "float32",
    "fp32": "float32",
    "f32": "float32",
    "single": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}

MapFunction = Callable[[Callable[[Any], Any], Iterable[Any]], Iterator[Any]]


class EngineUnavailableError(ImportError):
    """A compute engine was asked for whose library is not installed (the message names the extra)."""


def precision_name(precision: Any) -> str | None:
    """The canonical name of ``precision`` (``"float64"``, ``"float32"`` or ``"bfloat16"``), None for None.

    Accepts the names and aliases (``"fp32"``, ``"bf16"``, ``"auto"`` is float64), numpy dtypes and
    scalar types (``np.float32``) and torch dtypes (``torch.bfloat16``, by their name, without importing
    torch).

    >>> precision_name("fp32"), precision_name(np.float64), precision_name("BF16")
    ('float32', 'float64', 'bfloat16')
    """
    if precision is None:
        return None
    if isinstance(precision, str):
        key = precision.strip().lower()
    elif type(precision).__module__ == "torch" or str(precision).startswith("torch."):
        key = str(precision).removeprefix("torch.")
    else:
        try:
            key = np.dtype(precision).name
        except TypeError:
            key = repr(precision)
    name = _ALIASES.get(key)
    if name is None:
        raise ValueError(
            f"precision={precision!r} is not a precision; expected one of float64, float32, bfloat16 "
            "(or fp64, fp32, bf16)"
        )
    return name


def storage_dtype(precision: str | None) -> np.dtype:
    """The numpy dtype encoded data is stored in at ``precision`` (bfloat16 is stored as float32)."""
    return np.dtype(np.float64 if precision in (None, "float64") else np.float32)


@dataclass(frozen=True)
class Compute:
    """What a fit asks of the E-step: the engine's name and the precision (canonical names).

    It travels with every pass's request to every partition (it is small and picklable) and the
    engine it names is looked up in the process that runs the E-step.
    """

    engine: str = "numpy"
    precision: str = "float64"

    @property
    def default(self) -> bool:
        """True for numpy in float64 (today's kernels, nothing to switch)."""
        return self.engine == "numpy" and self.precision == "float64"

    @property
    def dtype(self) -> np.dtype:
        """The dtype the encoded data is stored in."""
        return storage_dtype(self.precision)

    def describe(self) -> str:
        return f"engine={self.engine}, precision={self.precision}"


class ComputeEngine(ABC):
    """The E-step kernels one compute library runs: a mixture's fused feature pass.

    The families with the feature protocol (:mod:`mixle_spark.stats.base`: ``seq_features`` /
    ``feature_coefficients``) score every component of a batch with one product of a (K, m) matrix of
    coefficients and an (n, m) matrix of features; an engine computes that pass, the log-sum-exp,
    the responsibilities and the statistics' feature sums. Families without it run their numpy
    kernels (in float64 on upcast data) whatever the engine; :func:`~mixle_spark.engines.fallback_note`
    says so once per family.

    Subclasses set :attr:`name`, :attr:`extra` (the pip extra that installs the library) and
    :attr:`precisions`, and register an instance factory with
    :func:`~mixle_spark.engines.register_engine`.
    """

    name: str = ""
    extra: str | None = None
    precisions: frozenset[str] = frozenset({"float64"})

    def __init__(self, precision: str = "float64") -> None:
        if precision not in self.precisions:
            hint = " (bfloat16 needs engine='torch')" if precision == "bfloat16" else ""
            raise ValueError(
                f"engine={self.name!r} computes in {', '.join(sorted(self.precisions))}; "
                f"precision={precision!r} cannot be honoured{hint}"
            )
        self.precision = precision

    @property
    def device(self) -> str:
        """Where the kernels run (``"cpu"``, ``"cuda:0"``)."""
        return "cpu"

    @abstractmethod
    def feature_e_step(
        self, phi: np.ndarray, coef: np.ndarray, weights: np.ndarray, estimate: Any, map_fn: MapFunction
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One mixture E-step over a batch's features.

        Parameters
        ----------
        phi : ndarray, shape (n, m)
            The batch's features, in the storage precision.
        coef : ndarray, shape (K, m)
            Each component's coefficients (float64; ``phi @ coef[k]`` is ``log p_k``).
        weights : ndarray, shape (n,)
            Row weights (float64).
        estimate : MixtureDistribution
            The current mixture (its ``log_w``, ``w`` and components, for rows no component explains).
        map_fn : callable
            ``map`` or a thread pool's ordered map, over the engine's independent blocks.

        Returns
        -------
        ll, counts, sums : ndarray
            Per-row log-likelihood (n,), each component's weight Σ r w (K,) and its feature sums
            Σ r w φ (K, m), all float64.
        """

    @abstractmethod
    def feature_joint(self, phi: np.ndarray, coef: np.ndarray) -> np.ndarray:
        """``log p_k(x_i)`` for every component and row, (K, n) float64, from the features (scoring)."""
