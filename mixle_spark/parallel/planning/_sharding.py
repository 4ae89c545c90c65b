"""Model sharding by component (:func:`model_sharding_plan`, :class:`ModelShard`): the planning half of
model parallelism, re-exported by :mod:`mixle_spark.parallel.planning.planner`; and the integer checks the
planner's records share (:func:`check_ints`)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.parallel.planning._calibration import estimate_model_nbytes
from mixle_spark.parallel.planning._devices import DeviceSpec, Resources
from mixle_spark.parallel.planning._sizing import statistic_nbytes

__all__ = ["ModelShard", "check_ints", "model_sharding_plan"]


def check_ints(owner: str, **values: Any) -> None:
    for label, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{owner}: {label} must be an int, got {value!r}")


@dataclass(frozen=True)
class ModelShard:
    """Components ``[start, stop)`` of a model owned by ``device``, with their estimated bytes."""

    device: DeviceSpec
    start: int
    stop: int
    parameter_bytes: int
    statistic_bytes: int

    def __post_init__(self) -> None:
        check_ints(
            "ModelShard",
            start=self.start,
            stop=self.stop,
            parameter_bytes=self.parameter_bytes,
            statistic_bytes=self.statistic_bytes,
        )
        if not 0 <= self.start < self.stop:
            raise ValueError(
                f"ModelShard needs a non-empty range 0 <= start < stop, got [{self.start}:{self.stop}]"
            )
        if self.parameter_bytes < 0 or self.statistic_bytes < 0:
            raise ValueError(
                f"ModelShard bytes must be >= 0, got parameter_bytes={self.parameter_bytes}, "
                f"statistic_bytes={self.statistic_bytes}"
            )
        memory = self.device.memory_bytes
        if memory is not None and self.total_bytes > memory:
            raise MemoryError(
                f"components [{self.start}:{self.stop}] need {self.total_bytes} bytes but device "
                f"{self.device.name} has {memory}"
            )

    @property
    def num_components(self) -> int:
        """Number of components in the shard."""
        return self.stop - self.start

    @property
    def total_bytes(self) -> int:
        """Parameter plus statistic bytes."""
        return self.parameter_bytes + self.statistic_bytes


def model_sharding_plan(
    model: Any,
    resources: Resources,
    estimator: Any = None,
    axis: str = "components",
    min_components_per_shard: int = 1,
) -> tuple[ModelShard, ...]:
    """An advisory split of a mixture's components across devices (nothing is moved).

    Uses the first ``max(1, min(len(devices), K // min_components_per_shard))`` devices in the order
    given; counts are proportional to their throughput, each at least ``min_components_per_shard``, in
    contiguous blocks in device order. Bytes are the model's (and the zero accumulator's, or else the
    model's) estimated bytes times the shard's fraction of components, rounded up.

    >>> from mixle_spark.stats import GaussianDistribution, MixtureDistribution
    >>> model = MixtureDistribution([GaussianDistribution(0.0, 1.0)] * 5, [0.2] * 5)
    >>> two = Resources.from_specs([DeviceSpec("slow"), DeviceSpec("fast", throughput=3.0)])
    >>> [(s.start, s.stop) for s in model_sharding_plan(model, two)]
    [(0, 1), (1, 5)]
    """
    if axis != "components":
        raise ValueError(f"only axis='components' is currently supported, got axis={axis!r}.")
    minimum = min_components_per_shard
    if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum <= 0:
        raise ValueError(f"min_components_per_shard must be a positive integer, got {minimum!r}")
    k = getattr(model, "num_components", None)
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise ValueError(
            "model_sharding_plan needs a model with a positive num_components; "
            f"{type(model).__name__} has {k!r}"
        )
    if minimum > k:
        raise ValueError(f"min_components_per_shard={minimum} exceeds the model's K={k} components")
    devices = resources.devices[: max(1, min(len(resources.devices), k // minimum))]
    w = np.array([d.throughput for d in devices])
    w = w / w.sum()
    counts = np.maximum(np.floor(w * k).astype(np.int64), minimum)
    while counts.sum() > k:
        i = int(np.argmax(counts))
        if counts[i] <= minimum:
            break
        counts[i] -= 1
    while counts.sum() < k:
        counts[int(np.argmax(w - counts / k))] += 1
    bounds, start = [], 0
    for count in counts:
        bounds.append([start, start + int(count)])
        start += int(count)
    bounds[-1][1] = max(bounds[-1][1], k)
    parameter_total = estimate_model_nbytes(model)
    statistic_total = statistic_nbytes(estimator, parameter_total)
    shards = tuple(
        ModelShard(
            device,
            a,
            b,
            math.ceil(parameter_total * (b - a) / k),
            math.ceil(statistic_total * (b - a) / k),
        )
        for device, (a, b) in zip(devices, bounds, strict=True)
    )
    covered = [(s.start, s.stop) for s in shards]
    if covered[0][0] != 0 or covered[-1][1] != k or any(a[1] != b[0] for a, b in itertools.pairwise(covered)):
        raise RuntimeError(f"model shards {covered} do not cover components [0, {k}) contiguously")
    if any(s.num_components < minimum for s in shards):
        raise RuntimeError(f"model shards {covered} hold fewer than {minimum} components")
    return shards
