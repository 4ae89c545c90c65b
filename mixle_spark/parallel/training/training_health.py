"""Per-step health receipts for gradient training: non-finite values, spikes, restarts, throughput.

numpy only. A :class:`TrainingHealthMonitor` observes each committed step (a
:class:`~mixle_spark.parallel.training.contracts.StepReceipt`, or the loss and gradient norm
directly) and returns a :class:`HealthReceipt` whose ``flags`` name what is wrong with that step:

``nonfinite_loss`` / ``nonfinite_grad_norm``
    The value is NaN or infinite (a skipped step's receipt carries it in ``extra``).
``loss_spike`` / ``grad_norm_spike``
    The value is far above a robust rolling baseline of the recent healthy steps: its causal
    z-score ``(x - median) / (1.4826 * MAD)`` exceeds ``z`` (6 by default) *and* the value exceeds
    the median by ``min_ratio`` of the baseline's scale (so a near-constant loss does not flag noise).
    Only upward moves flag; a falling loss is progress.
``restart``
    The step follows an elastic restart (``restart=True``, or a receipt whose ``extra`` says so).

Flagged values do not enter the baselines, so one spike does not hide the next. The first
``min_samples`` steps build the baseline and flag only non-finite values.

Given a :class:`ModelFlopConfig` (FLOPs per step from the model's shape), a step that reports its
examples and seconds also gets its achieved FLOP/s, and, against ``peak_flops_per_sec`` (given, or
``"measure"`` for :func:`measure_peak_flops`), its model FLOP utilisation (MFU), kept as
:class:`MFUSample` s and summarised by :meth:`TrainingHealthMonitor.report`.

>>> monitor = TrainingHealthMonitor(min_samples=4)
>>> [monitor.observe_step(s, loss=1.0 - 0.01 * s).flags for s in range(6)][-1]
()
>>> monitor.observe_step(6, loss=10.0).flags
('loss_spike',)
>>> monitor.observe_step(7, loss=float("nan")).flags
('nonfinite_loss',)
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import describe_value
from mixle_spark.parallel.training._flops import (
    MFUSample,
    ModelFlopConfig,
    flop_config_from_causal_lm,
    measure_peak_flops,
    positive_number,
    theoretical_flops_per_iter,
)
from mixle_spark.parallel.training._records import StepReceipt, exact_int

__all__ = [
    "FLAGS",
    "HealthReceipt",
    "MFUSample",
    "ModelFlopConfig",
    "RollingBaseline",
    "TrainingHealthMonitor",
    "flop_config_from_causal_lm",
    "measure_peak_flops",
    "theoretical_flops_per_iter",
]

FLAGS = ("nonfinite_loss", "nonfinite_grad_norm", "loss_spike", "grad_norm_spike", "restart")

_MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution times this is its standard deviation


class RollingBaseline:
    """Median and MAD of the last ``window`` accepted values; :meth:`zscore` is causal (before adding)."""

    def __init__(self, window: int = 50, min_samples: int = 8) -> None:
        window = exact_int("window", window, 2)
        min_samples = exact_int("min_samples", min_samples, 2, f"an exact integer in [2, window={window}]")
        if min_samples > window:
            raise ValueError(
                f"min_samples must be an exact integer in [2, window={window}], got {min_samples}"
            )
        self.values: deque[float] = deque(maxlen=window)
        self.min_samples = min_samples

    @property
    def ready(self) -> bool:
        return len(self.values) >= self.min_samples

    def center_scale(self) -> tuple[float, float]:
        """``(median, 1.4826 * MAD)`` of the window (the scale floored at 1e-12 of the median's size)."""
        arr = np.fromiter(self.values, dtype=float)
        median = float(np.median(arr))
        scale = _MAD_TO_SIGMA * float(np.median(np.abs(arr - median)))
        return median, max(scale, 1e-12 * max(1.0, abs(median)))

    def zscore(self, value: float) -> float | None:
        """How many robust deviations ``value`` is above the median; None until :attr:`ready`."""
        if not self.ready:
            return None
        median, scale = self.center_scale()
        return (value - median) / scale

    def add(self, value: float) -> None:
        self.values.append(float(value))


@dataclass(frozen=True)
class HealthReceipt:
    """What the monitor concluded about one step."""

    step: int
    flags: tuple[str, ...]
    loss: float
    grad_norm: float | None
    loss_z: float | None
    grad_norm_z: float | None
    examples_per_second: float | None
    flops_per_second: float | None = None
    mfu: float | None = None

    @property
    def healthy(self) -> bool:
        return not self.flags

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "flags": list(self.flags)}


class TrainingHealthMonitor:
    """Flags unhealthy steps against robust rolling baselines of the loss and the gradient norm.

    Parameters
    ----------
    window, min_samples : int
        Baseline length and how many healthy steps it needs before spikes are judged.
    loss_z, grad_z : float
        Causal robust z-score above which a value is a spike.
    min_ratio : float
        A spike must also exceed the median by this fraction of the median's magnitude (default 0.5),
        so a loss that has converged to a near-constant value does not flag its own noise.
    flop_config : ModelFlopConfig, optional
        The model's shape: a step with ``examples`` and ``seconds`` then gets its achieved FLOP/s.
    peak_flops_per_sec : float or "measure", optional
        The peak MFU is taken against (with ``flop_config``): a number, or ``"measure"`` for
        :func:`measure_peak_flops` (measured once, here).
    """

    def __init__(
        self,
        *,
        window: int = 50,
        min_samples: int = 8,
        loss_z: float = 6.0,
        grad_z: float = 6.0,
        min_ratio: float = 0.5,
        flop_config: ModelFlopConfig | None = None,
        peak_flops_per_sec: float | str | None = None,
    ) -> None:
        for name, value in (("loss_z", loss_z), ("grad_z", grad_z), ("min_ratio", min_ratio)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive number, got {describe_value(value)}")
        self.loss = RollingBaseline(window, min_samples)
        self.grad = RollingBaseline(window, min_samples)
        self.loss_z, self.grad_z, self.min_ratio = float(loss_z), float(grad_z), float(min_ratio)
        self.receipts: list[HealthReceipt] = []
        if flop_config is not None and not isinstance(flop_config, ModelFlopConfig):
            raise TypeError(
                f"flop_config must be a ModelFlopConfig or None, got {describe_value(flop_config)}"
            )
        if peak_flops_per_sec is not None and flop_config is None:
            raise ValueError("peak_flops_per_sec needs flop_config (the FLOPs of a step) to give an MFU")
        if isinstance(peak_flops_per_sec, str):
            if peak_flops_per_sec != "measure":
                raise ValueError(
                    f"peak_flops_per_sec must be a positive number or 'measure', got "
                    f"{describe_value(peak_flops_per_sec)}"
                )
            peak_flops_per_sec = measure_peak_flops()
        self.flop_config = flop_config
        self.peak_flops_per_sec = (
            None if peak_flops_per_sec is None else positive_number("peak_flops_per_sec", peak_flops_per_sec)
        )
        self.mfu_samples: list[MFUSample] = []

    def _throughput(
        self, step: int, examples: int | None, seconds: float | None
    ) -> tuple[float | None, float | None, float | None]:
        """Examples / s, FLOP/s and MFU of a step (None where what they need is missing)."""
        if examples is None or seconds is None or seconds == 0:  # a zero-length timing measures nothing
            return None, None, None
        examples = exact_int("examples", examples, 0)
        seconds = positive_number("seconds", seconds)
        if self.flop_config is None or examples == 0:
            return examples / seconds, None, None
        step_flops = self.flop_config.flops_per_iter(examples)
        if self.peak_flops_per_sec is None:
            return examples / seconds, step_flops / seconds, None
        sample = MFUSample(step, step_flops, seconds, self.peak_flops_per_sec)
        self.mfu_samples.append(sample)
        return examples / seconds, sample.achieved_flops_per_sec, sample.mfu

    def _spike(self, baseline: RollingBaseline, value: float, limit: float) -> tuple[bool, float | None]:
        z = baseline.zscore(value)
        if z is None:
            return False, None
        median, _ = baseline.center_scale()
        return bool(z > limit and value - median > self.min_ratio * abs(median)), z

    def observe_step(
        self,
        step: int,
        *,
        loss: float,
        grad_norm: float | None = None,
        examples: int | None = None,
        seconds: float | None = None,
        restart: bool = False,
    ) -> HealthReceipt:
        """Judge one step and remember it; the :class:`HealthReceipt` says what was flagged."""
        flags: list[str] = []
        rate, flops, mfu = self._throughput(int(step), examples, seconds)  # validated before any change
        loss = float(loss)
        loss_ok = math.isfinite(loss)
        if not loss_ok:
            flags.append("nonfinite_loss")
        grad_ok = grad_norm is None or math.isfinite(float(grad_norm))
        if not grad_ok:
            flags.append("nonfinite_grad_norm")
        loss_spike, lz = self._spike(self.loss, loss, self.loss_z) if loss_ok else (False, None)
        grad_spike, gz = (
            self._spike(self.grad, float(grad_norm), self.grad_z)
            if grad_norm is not None and grad_ok
            else (False, None)
        )
        if loss_spike:
            flags.append("loss_spike")
        if grad_spike:
            flags.append("grad_norm_spike")
        if restart:
            flags.append("restart")
        if loss_ok and grad_ok and not loss_spike and not grad_spike:
            self.loss.add(loss)
            if grad_norm is not None:
                self.grad.add(float(grad_norm))
        receipt = HealthReceipt(
            int(step),
            tuple(flags),
            loss,
            None if grad_norm is None else float(grad_norm),
            lz,
            gz,
            rate,
            flops,
            mfu,
        )
        self.receipts.append(receipt)
        return receipt

    def observe(self, receipt: StepReceipt, *, restart: bool | None = None) -> HealthReceipt:
        """Judge a :class:`StepReceipt`. A skipped step's non-finite loss or gradient norm comes from
        its ``extra`` (``nonfinite``, ``loss``, ``grad_norm``); ``restart`` defaults to
        ``extra["restart"]``."""
        if not isinstance(receipt, StepReceipt):
            raise TypeError(f"observe takes a StepReceipt, got {describe_value(receipt)}")
        extra = receipt.extra
        loss = float(extra["loss"]) if receipt.skipped and "loss" in extra else receipt.loss
        grad = extra.get("grad_norm")
        return self.observe_step(
            receipt.step,
            loss=loss,
            grad_norm=None if grad is None else float(grad),
            examples=receipt.global_examples,
            seconds=extra.get("seconds"),
            restart=bool(extra.get("restart", False)) if restart is None else restart,
        )

    def flagged(self) -> dict[str, list[int]]:
        """Steps flagged, by flag."""
        out: dict[str, list[int]] = {}
        for r in self.receipts:
            for flag in r.flags:
                out.setdefault(flag, []).append(r.step)
        return out

    def report(self) -> dict[str, Any]:
        """Steps seen, flag counts, the flagged steps, the median throughput (examples / s and FLOP/s)
        and the MFU samples' count, mean, min and max (None without samples)."""
        rates = [r.examples_per_second for r in self.receipts if r.examples_per_second is not None]
        flops = [r.flops_per_second for r in self.receipts if r.flops_per_second is not None]
        mfu = np.array([s.mfu for s in self.mfu_samples])
        counts = Counter(flag for r in self.receipts for flag in r.flags)
        return {
            "steps": len(self.receipts),
            "healthy_steps": sum(r.healthy for r in self.receipts),
            "flag_counts": {flag: counts.get(flag, 0) for flag in FLAGS},
            "flagged_steps": self.flagged(),
            "median_examples_per_second": float(np.median(rates)) if rates else None,
            "median_flops_per_second": float(np.median(flops)) if flops else None,
            "mfu": {
                "n_samples": int(mfu.size),
                "mean": float(mfu.mean()) if mfu.size else None,
                "min": float(mfu.min()) if mfu.size else None,
                "max": float(mfu.max()) if mfu.size else None,
                "peak_flops_per_sec": self.peak_flops_per_sec,
            },
        }
