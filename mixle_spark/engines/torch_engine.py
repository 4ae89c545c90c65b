"""The torch engine: the fused mixture E-step in torch, on the CPU or a CUDA device, in float64, float32
or bfloat16 (``encoded_data(..., engine="torch", precision=...)``; the ``torch`` extra).

The mathematics is the numpy engine's (:mod:`mixle_spark.engines.numpy_engine`): per block of rows one
product scores every component, the log-sum-exp with the floors of
:func:`~mixle_spark.engines._numpy_kernels.exp_shifted` turns the block into responsibilities, a second
product gives every component's ``Σ r w φ(x)``; statistics leave every block in float64. A block
where some row's largest term is not finite (a row no component explains, a ``+inf`` or a NaN
log-density) is computed by the numpy kernels in float64, so impossible rows, ``+inf`` rows and the
NaN error are exactly numpy's.

Precisions: float64 and float32 compute everything in that dtype. bfloat16 computes the scoring
product (each coefficient split in two bfloat16 halves, see :meth:`TorchEngine._score`) and exp in
bfloat16; the row maxima, sums and normalisation run in float32, and so does the statistics
product (second moments of the features lose too much to an 8-bit mantissa: a component's covariance
is a difference of them).

Device: ``device=`` of :class:`TorchEngine`, else the environment variable ``MIXLE_SPARK_TORCH_DEVICE``
(``"cpu"``, ``"cuda"``, ``"cuda:1"``), else torch's current CUDA device when CUDA is available, else
the CPU. On the CPU the features are read in place (``torch.from_numpy``); on CUDA a batch's features
are copied to the device once per E-step and its statistics come back once.

Threads: the engine never lets torch use more intra-op threads than the process is given: the
smallest of ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` (Spark tasks and the
mp backend's workers set one) and the CPUs the process may run on.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from mixle_spark.engines._base import ComputeEngine, MapFunction
from mixle_spark.engines._numpy_kernels import _LOG_FLOOR, block_rows, responsibilities

__all__ = ["DEVICE_VARIABLE", "TorchEngine", "thread_budget"]

DEVICE_VARIABLE = "MIXLE_SPARK_TORCH_DEVICE"
"""The environment variable naming the device of engines built without ``device=`` (every process
of a fit reads its own, so Spark executors or torchrun ranks may each name theirs)."""

_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}


def thread_budget() -> int:
    """The intra-op threads this process may use: the smallest positive value of ``OMP_NUM_THREADS``,
    ``MKL_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` and the number of CPUs it may run on."""
    limits = [len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1]
    for name in _THREAD_VARIABLES:
        raw = os.environ.get(name, "").strip()
        if raw.isdigit() and int(raw) > 0:
            limits.append(int(raw))
    return max(1, min(limits))


def _device(device: Any) -> torch.device:
    """``device`` (a name, a torch.device or a planner's DeviceSpec) as a torch.device, checked."""
    if device is None:
        device = os.environ.get(DEVICE_VARIABLE, "").strip() or None
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    if hasattr(device, "kind") and hasattr(device, "name"):  # a DeviceSpec: "cuda:1", "node:3:cuda:0"
        parts = str(device.name).split(":")
        index = parts[-1] if len(parts) >= 2 and parts[-2] == device.kind else None
        device = device.kind if index is None or not index.isdigit() else f"{device.kind}:{index}"
    try:
        found = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        found = None
    if found is None or found.type not in ("cpu", "cuda"):
        raise ValueError(
            f"device={device!r} is not a device of engine='torch'; expected 'cpu', 'cuda' or 'cuda:<i>'"
        )
    if found.type == "cpu":
        return torch.device("cpu")  # one CPU device ("cpu:3" of a planner's slots is still the CPU)
    if found.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r}: CUDA is not available to torch in this process")
        if found.index is None:
            found = torch.device("cuda", torch.cuda.current_device())
        if found.index >= torch.cuda.device_count():
            raise ValueError(
                f"device={device!r}: this process sees {torch.cuda.device_count()} CUDA device(s)"
            )
    return found


class TorchEngine(ComputeEngine):
    """torch's products and kernels, on the CPU or a CUDA device (see the module's docstring).

    Parameters
    ----------
    precision : str
        ``"float64"``, ``"float32"`` or ``"bfloat16"``.
    device : str, torch.device or DeviceSpec, optional
        Where to compute; default: :data:`DEVICE_VARIABLE`, else the current CUDA device, else the CPU.
        The registry builds engines without it; register a factory to pin another device,
        ``register_engine("torch", lambda p: TorchEngine(p, device="cuda:1"), override=True)``.

    >>> TorchEngine("float32", device="cpu").device
    'cpu'
    """

    name = "torch"
    extra = "torch"
    precisions = frozenset({"float64", "float32", "bfloat16"})

    def __init__(self, precision: str = "float64", device: Any = None) -> None:
        super().__init__(precision)
        self._device = _device(device)
        self.in_order = self._device.type != "cpu"
        """Run a batch as few large blocks in order on the device (CUDA), rather than cache-sized
        blocks through the E-step's ``map_fn`` (CPU)."""
        self.device_block_values = 1 << 22
        """(K, b) values per in-order block (16 MiB of float32): few kernel launches, bounded memory."""
        self.dtype = _DTYPES[precision]
        # bfloat16 reduces, normalises and sums statistics in float32; the others in their own dtype.
        self.wide = torch.float32 if precision == "bfloat16" else self.dtype
        self._floor = float(torch.exp(torch.tensor(_LOG_FLOOR, dtype=self.dtype)))  # e^-50 in this dtype
        if self._device.type == "cpu" and torch.get_num_threads() > thread_budget():
            torch.set_num_threads(thread_budget())

    @property
    def device(self) -> str:
        return str(self._device)

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        """``array`` as a CPU tensor without a copy (a read-only array, which torch would write
        through, is copied)."""
        if not array.flags.writeable or any(s < 0 for s in array.strides):
            array = np.array(array)
        return torch.from_numpy(array)

    def _features(self, phi: np.ndarray) -> torch.Tensor:
        """The batch's features on the engine's device: a view on the CPU; on a device one transfer
        of the array as it lies in memory (feature-major features go as their contiguous transpose,
        not through a reordered host copy)."""
        if not self.in_order:
            return self._tensor(phi)
        if phi.flags.f_contiguous and not phi.flags.c_contiguous:
            return self._tensor(phi.T).to(self._device).T
        return self._tensor(np.ascontiguousarray(phi)).to(self._device)

    def _block_rows(self, n: int, k: int, m: int) -> int:
        if not self.in_order:
            return block_rows(m)
        return max(256, self.device_block_values // max(k, 1) // 256 * 256)

    def feature_e_step(
        self, phi: np.ndarray, coef: np.ndarray, weights: np.ndarray, estimate: Any, map_fn: MapFunction
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The fused E-step over blocks of rows (see :class:`~mixle_spark.engines.ComputeEngine`).

        On the CPU the blocks run through ``map_fn`` (torch releases the GIL in its kernels); on CUDA
        they run in order on the device, which keeps the statistics until the batch is done."""
        n, m = phi.shape
        k = coef.shape[0]
        rows = self._block_rows(n, k, m)
        features = self._features(phi)
        scoring_coef = self._scoring_coef(coef)
        log_w = torch.from_numpy(np.asarray(estimate.log_w, dtype=np.float64)).to(self._device, self.wide)
        tweights = self._tensor(np.asarray(weights, dtype=np.float64)).to(self._device)
        ll = torch.empty(n, dtype=torch.float64, device=self._device)

        def block(a: int) -> tuple[torch.Tensor, torch.Tensor]:
            b = min(n, a + rows)
            x = features[a:b].to(self.dtype)
            joint = self._score(scoring_coef, x, k)  # (K, b)
            joint += log_w[:, None]
            top = joint.amax(dim=0)
            if not bool(torch.isfinite(top).all()):
                return self._numpy_block(phi[a:b], coef, weights[a:b], estimate, ll, a)
            joint -= top
            joint.clamp_(min=_LOG_FLOOR)
            if self.dtype != self.wide:
                joint = joint.to(self.dtype).exp_().to(self.wide)
            else:
                joint.exp_()
            joint -= self._floor
            total = joint.sum(dim=0)
            ll[a:b] = torch.log(total).add_(top)
            joint *= (tweights[a:b] / total).to(self.wide)
            sums = joint @ (x if self.wide == self.dtype else features[a:b].to(self.wide))
            return joint.sum(dim=1, dtype=torch.float64), sums.to(torch.float64)

        counts = torch.zeros(k, dtype=torch.float64, device=self._device)
        sums = torch.zeros((k, m), dtype=torch.float64, device=self._device)
        for block_counts, block_sums in (map if self.in_order else map_fn)(block, range(0, n, rows)):
            counts += block_counts
            sums += block_sums
        return ll.cpu().numpy(), counts.cpu().numpy(), sums.cpu().numpy()

    def _scoring_coef(self, coef: np.ndarray) -> torch.Tensor:
        """The coefficients the scoring product reads: (K, m) in the engine's dtype; for bfloat16
        (2K, m), each coefficient split in a bfloat16 head and the bfloat16 rounding of its rest."""
        tcoef = torch.from_numpy(np.asarray(coef, dtype=np.float64)).to(self._device)
        if self.dtype != torch.bfloat16:
            return tcoef.to(self.dtype)
        head = tcoef.to(torch.bfloat16)
        rest = torch.where(torch.isfinite(tcoef), tcoef - head.to(torch.float64), 0.0)  # -inf stays in head
        return torch.cat([head, rest.to(torch.bfloat16)])

    def _score(self, scoring_coef: torch.Tensor, x: torch.Tensor, k: int) -> torch.Tensor:
        """``log p_k`` of the block's rows, (K, b) in the engine's wide dtype.

        In bfloat16 a density's coefficients are often large and cancel (a normaliser against the
        terms it normalises): rounded to 8 bits they moved a batch's log-likelihood by up to 13% (von
        Mises-Fisher), split in head and rest they stay within 0.3% (every feature family's contract
        case). The features are rounded once; the two halves of the product are added in float32."""
        joint = scoring_coef @ x.to(self.dtype).T  # no copy: the block is in the engine's dtype
        if self.dtype != torch.bfloat16:
            return joint
        return joint[:k].to(torch.float32) + joint[k:].to(torch.float32)

    def _numpy_block(
        self,
        phi: np.ndarray,
        coef: np.ndarray,
        weights: np.ndarray,
        estimate: Any,
        ll: torch.Tensor,
        a: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A block with a row whose largest term is not finite, by the numpy kernels in float64
        (impossible rows get the prior as posterior, ``+inf`` rows split evenly, NaN raises)."""
        x = np.asarray(phi, dtype=np.float64)
        joint = np.asarray(coef, dtype=np.float64) @ x.T
        joint += estimate.log_w[:, None]
        ll[a : a + len(x)] = torch.from_numpy(responsibilities(joint, weights, estimate)).to(ll.device)
        counts, sums = joint.sum(axis=1), joint @ x
        return torch.from_numpy(counts).to(self._device), torch.from_numpy(sums).to(self._device)

    def feature_joint(self, phi: np.ndarray, coef: np.ndarray) -> np.ndarray:
        """``coef @ phi.T`` computed at the engine's precision on its device, returned as float64."""
        features = self._features(phi)
        return self._score(self._scoring_coef(coef), features, coef.shape[0]).to(torch.float64).cpu().numpy()
