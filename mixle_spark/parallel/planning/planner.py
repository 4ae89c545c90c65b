"""Advisory planning: which devices exist, which rows go where, and how a model splits by component.

* :class:`DeviceSpec` / :class:`Resources` describe placement targets (CPU slots, Spark task slots,
  MPI ranks, dask workers, torchrun ranks, GPUs) and round-trip through JSON, calibrated throughput
  included.
* :func:`plan` measures the encoded bytes of a data sample and returns a :class:`Placement`: row ranges
  proportional to device throughput, split further where a device's memory would overflow, with the
  reasons for every decision.
* :func:`model_sharding_plan` splits a mixture's components across devices (:class:`ModelShard`).
* :func:`calibrate_resources` measures each device's throughput on a sample of the data (the
  calibration types and :func:`estimate_model_nbytes` are in ``_calibration``).

Nothing here moves data or starts workers; backends read the plan. Optional libraries (torch) are
imported lazily and never required.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mixle_spark.parallel.planning._calibration import (
    CalibrationCatalog,
    CalibrationRecord,
    DeviceCalibration,
    ResourceCalibrationError,
    calibrate_resources,
    estimate_estimator_stat_nbytes,
    estimate_model_nbytes,
)
from mixle_spark.parallel.planning._compute import placement_compute
from mixle_spark.parallel.planning._devices import PRECISION_BYTES, DeviceSpec, Resources, precision_name
from mixle_spark.parallel.planning._sharding import ModelShard, check_ints, model_sharding_plan
from mixle_spark.parallel.planning._sizing import (
    MemorySized,
    UnknownMemoryFootprintError,
    cap_range,
    encoder_for,
    estimate_nbytes,
    measure_rows,
    num_components,
    row_ranges,
    shard_bytes,
    statistic_nbytes,
)

__all__ = [
    "CalibrationCatalog",
    "CalibrationRecord",
    "DeviceCalibration",
    "DeviceSpec",
    "MemorySized",
    "ModelShard",
    "Placement",
    "PlacementShard",
    "ResourceCalibrationError",
    "Resources",
    "UnknownMemoryFootprintError",
    "calibrate_resources",
    "estimate_estimator_stat_nbytes",
    "estimate_model_nbytes",
    "estimate_nbytes",
    "model_sharding_plan",
    "plan",
    "precision_name",
]


# -- row placement ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlacementShard:
    """Rows ``[start, stop)`` on ``device``, folded in ``sub_chunks`` pieces, with estimated bytes."""

    device: DeviceSpec
    start: int
    stop: int
    sub_chunks: int = 1
    encoded_bytes: int = 0
    transient_bytes: int = 0

    def __post_init__(self) -> None:
        check_ints(
            "PlacementShard",
            start=self.start,
            stop=self.stop,
            sub_chunks=self.sub_chunks,
            encoded_bytes=self.encoded_bytes,
            transient_bytes=self.transient_bytes,
        )
        if not 0 <= self.start <= self.stop:
            raise ValueError(f"PlacementShard needs 0 <= start <= stop, got [{self.start}:{self.stop}]")
        if self.sub_chunks < 1:
            raise ValueError(f"PlacementShard sub_chunks must be >= 1, got {self.sub_chunks}")
        if self.encoded_bytes < 0 or self.transient_bytes < 0:
            raise ValueError(
                f"PlacementShard bytes must be >= 0, got encoded_bytes={self.encoded_bytes}, "
                f"transient_bytes={self.transient_bytes}"
            )

    @property
    def size(self) -> int:
        """Number of rows."""
        return self.stop - self.start

    @property
    def total_bytes(self) -> int:
        """Encoded plus transient bytes."""
        return self.encoded_bytes + self.transient_bytes

    def __str__(self) -> str:
        return (
            f"{self.device.name}[{self.start}:{self.stop}] rows={self.size} sub_chunks={self.sub_chunks} "
            f"estimated_bytes={self.total_bytes}"
        )


@dataclass
class Placement:
    """An advisory row placement: shards tiling ``[0, total_rows)``, byte estimates and the reasons,
    and the compute ``engine`` and ``precision`` it was planned for (what ``encoded_data(...,
    placement=...)`` stores and computes at unless asked otherwise).

    ``fits`` is False when some shard's estimated bytes exceed its device's memory (see ``reasons``);
    :func:`plan` then still returns the placement, and ``validate(strict=True)`` raises MemoryError.
    """

    shards: tuple[PlacementShard, ...]
    total_rows: int
    encoded_row_bytes: float
    transient_row_bytes: float
    model_bytes: int
    statistic_bytes: int
    dtype_bytes: int
    resources: Resources | None = None
    backend: str = "local"
    precision: str = "float64"
    reasons: tuple[str, ...] = ()
    engine: str = "numpy"

    def __post_init__(self) -> None:
        self.shards = tuple(self.shards)
        self.reasons = tuple(str(r) for r in self.reasons)
        self.precision = precision_name(self.precision)
        if not isinstance(self.backend, str) or not self.backend:
            raise ValueError(f"Placement backend must be a non-empty string, got {self.backend!r}")
        if not isinstance(self.engine, str) or not self.engine.strip():
            raise ValueError(f"Placement engine must be a non-empty string, got {self.engine!r}")
        self.engine = self.engine.strip().lower()
        self.validate()

    @property
    def num_chunks(self) -> int:
        """Number of shards."""
        return len(self.shards)

    @property
    def total_bytes(self) -> int:
        """Estimated bytes over all shards."""
        return sum(s.total_bytes for s in self.shards)

    @property
    def fits(self) -> bool:
        """True when every shard fits its device's memory (devices of unknown memory always fit)."""
        return not self._overflowing()

    def _overflowing(self) -> list[PlacementShard]:
        return [
            s
            for s in self.shards
            if s.device.memory_bytes is not None and s.total_bytes > s.device.memory_bytes
        ]

    def validate(
        self, total_rows: int | None = None, resources: Resources | None = None, strict: bool = False
    ) -> None:
        """Check the placement; raise TypeError / ValueError (MemoryError too when ``strict``).

        Checks integer and byte fields, that ``total_rows`` and ``resources`` (when given) match the
        placement's, that every shard's device is declared, and that the shards tile ``[0, total_rows)``
        without gaps, overlaps or empty shards (a zero-row placement holds only ``[0:0]`` shards).
        """
        check_ints(
            "Placement",
            total_rows=self.total_rows,
            model_bytes=self.model_bytes,
            statistic_bytes=self.statistic_bytes,
            dtype_bytes=self.dtype_bytes,
        )
        if self.total_rows < 0 or self.model_bytes < 0 or self.statistic_bytes < 0 or self.dtype_bytes < 1:
            raise ValueError(
                f"Placement needs total_rows, model_bytes, statistic_bytes >= 0 and dtype_bytes >= 1, got "
                f"{self.total_rows}, {self.model_bytes}, {self.statistic_bytes}, {self.dtype_bytes}"
            )
        for label in ("encoded_row_bytes", "transient_row_bytes"):
            value = getattr(self, label)
            if (
                isinstance(value, bool)
                or not isinstance(value, numbers.Real)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(f"Placement {label} must be finite and >= 0, got {value!r}")
        if total_rows is not None and total_rows != self.total_rows:
            raise ValueError(f"placement covers {self.total_rows} rows but the data has {total_rows}")
        if resources is not None and self.resources is not None and resources != self.resources:
            raise ValueError("placement was planned for different resources than the ones given")
        declared = resources if resources is not None else self.resources
        for shard in self.shards:
            if not isinstance(shard, PlacementShard):
                raise TypeError(f"Placement shards must be PlacementShard, got {type(shard).__name__}")
            if declared is not None and shard.device not in declared.devices:
                raise ValueError(
                    f"shard device {shard.device.name!r} is not among the declared resources "
                    f"{[d.name for d in declared.devices]}"
                )
        if strict:
            for shard in self._overflowing():
                raise MemoryError(
                    f"shard {shard.device.name}[{shard.start}:{shard.stop}] needs {shard.total_bytes} "
                    f"bytes but device {shard.device.name} has {shard.device.memory_bytes}"
                )
        self._validate_coverage()

    def _validate_coverage(self) -> None:
        if self.total_rows == 0:
            bad = [s for s in self.shards if s.start != 0 or s.stop != 0]
            if bad:
                raise ValueError(
                    f"a zero-row placement may hold only [0:0] shards, got [{bad[0].start}:{bad[0].stop}]"
                )
            return
        position = 0
        for shard in sorted(self.shards, key=lambda s: (s.start, s.stop)):
            if shard.size == 0:
                raise ValueError(f"placement shard {shard.device.name}[{shard.start}:{shard.stop}] is empty")
            if shard.start > position:
                raise ValueError(f"placement row coverage has a gap at row {position}")
            if shard.start < position:
                raise ValueError(f"placement row coverage has an overlap at row {shard.start}")
            position = shard.stop
        if position != self.total_rows:
            raise ValueError(f"placement row coverage stops at {position}, expected {self.total_rows}")

    def for_device(self, name: str) -> tuple[PlacementShard, ...]:
        """The shards placed on the device called ``name``."""
        return tuple(s for s in self.shards if s.device.name == name)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able summary: totals, our fields (backend, precision, fits, reasons), resources, shards."""
        return {
            "total_rows": self.total_rows,
            "encoded_row_bytes": float(self.encoded_row_bytes),
            "transient_row_bytes": float(self.transient_row_bytes),
            "model_bytes": self.model_bytes,
            "statistic_bytes": self.statistic_bytes,
            "dtype_bytes": self.dtype_bytes,
            "total_bytes": self.total_bytes,
            "num_chunks": self.num_chunks,
            "backend": self.backend,
            "precision": self.precision,
            "engine": self.engine,
            "fits": self.fits,
            "reasons": list(self.reasons),
            "resources": None if self.resources is None else self.resources.to_dict(),
            "shards": [
                {
                    "device": s.device.name,
                    "kind": s.device.kind,
                    "engine": s.device.engine,
                    "memory_bytes": s.device.memory_bytes,
                    "throughput": s.device.throughput,
                    "start": s.start,
                    "stop": s.stop,
                    "sub_chunks": s.sub_chunks,
                    "encoded_bytes": s.encoded_bytes,
                    "transient_bytes": s.transient_bytes,
                }
                for s in self.shards
            ],
        }

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> Placement:
        """Rebuild from :meth:`to_dict` output (devices are taken from ``resources`` when present)."""
        resources = Resources.from_dict(payload["resources"]) if payload.get("resources") else None
        by_name = {d.name: d for d in resources.devices} if resources is not None else {}
        shards = []
        for s in payload["shards"]:
            device = by_name.get(s["device"]) or DeviceSpec(
                s["device"],
                s.get("kind", "cpu"),
                s.get("memory_bytes"),
                s.get("engine", "numpy"),
                s.get("throughput", 1.0),
            )
            shards.append(
                PlacementShard(
                    device, s["start"], s["stop"], s["sub_chunks"], s["encoded_bytes"], s["transient_bytes"]
                )
            )
        return cls(
            tuple(shards),
            payload["total_rows"],
            payload["encoded_row_bytes"],
            payload["transient_row_bytes"],
            payload["model_bytes"],
            payload["statistic_bytes"],
            payload["dtype_bytes"],
            resources,
            payload.get("backend", "local"),
            payload.get("precision", "float64"),
            tuple(payload.get("reasons", ())),
            payload.get("engine", "numpy"),
        )

    def __str__(self) -> str:
        lines = [
            f"Placement(backend={self.backend}, rows={self.total_rows}, chunks={self.num_chunks}, "
            f"engine={self.engine}, precision={self.precision}, fits={self.fits}, "
            f"estimated_bytes={self.total_bytes})"
        ]
        lines += [f"  {shard}" for shard in self.shards]
        if self.reasons:
            lines.append("reasons:")
            lines += [f"  - {reason}" for reason in self.reasons]
        return "\n".join(lines)


def plan(
    data: Any = None,
    model: Any = None,
    estimator: Any = None,
    encoder: Any = None,
    resources: Resources | None = None,
    engine: str | None = None,
    precision: Any = None,
    num_chunks: int | None = None,
    sub_chunks: int = 1,
    sample_size: int = 256,
    safety_factor: float = 1.25,
) -> Placement:
    """An advisory placement of the rows of ``data`` on ``resources``.

    Parameters
    ----------
    data : list, numpy array, pandas DataFrame, pyarrow Table / RecordBatch / Array, or a pyspark or
        Dask DataFrame or Ray Dataset
        The records; a pyspark DataFrame (detected by type, never imported) gives backend ``"spark"``,
        a Dask DataFrame ``"dask"``, a Ray Dataset ``"ray"``, anything else ``"local"``. None plans
        ``num_chunks`` empty-data chunks.
    model, estimator, encoder
        What the data is encoded with: ``encoder``, else ``model.encoder()``, else ``estimator.encoder()``
        (after a scan of the sample when the encoder needs one). ``model`` sizes the parameters and
        ``estimator`` the statistics (a zero accumulator's ``value()``; the model size without one).
    resources : Resources, optional
        Placement targets (default :meth:`Resources.single_cpu`).
    engine : str, optional
        Compute engine (a registered name: ``"numpy"``, ``"torch"``; :mod:`mixle_spark.engines`).
        None: the one the devices name (the fastest device's when they differ), else numpy.
    precision : str or dtype, optional
        ``"float64"``, ``"float32"`` or ``"bfloat16"`` (see :func:`precision_name`). None (or
        ``"auto"``): the one the devices declare, else float64; one that differs from a device's is
        an error naming both. Sets ``dtype_bytes`` (8, 4, 2: the transient bytes per value) and the
        precision the encoded sample is measured in (bfloat16 data is stored as float32).
    num_chunks : int, optional
        Split the rows into this many near-equal chunks on the throughput-weighted device cycle instead
        of one range per device.
    sub_chunks : int
        Pieces each shard is folded in.
    sample_size : int
        Rows encoded to measure ``encoded_row_bytes``.
    safety_factor : float
        Multiplies every byte estimate.

    Returns
    -------
    Placement
        Shards with byte estimates; ``fits`` is False (and a reason says which device, needed and
        available bytes) when a shard exceeds its device's memory.
    """
    auto = isinstance(precision, str) and precision.strip().lower() == "auto"
    asked = None if auto or precision is None else precision_name(precision)
    if resources is None:
        resources = Resources.single_cpu(precision=asked)
    if not isinstance(resources, Resources):
        raise TypeError(f"resources must be a Resources, got {type(resources).__name__}")
    if isinstance(sub_chunks, bool) or not isinstance(sub_chunks, int) or sub_chunks <= 0:
        raise ValueError(f"sub_chunks must be a positive integer, got {sub_chunks!r}")
    if not isinstance(safety_factor, numbers.Real) or not math.isfinite(safety_factor) or safety_factor <= 0:
        raise ValueError(f"safety_factor must be finite and > 0, got {safety_factor!r}")
    if data is None and num_chunks is None:
        raise ValueError("plan requires data or an explicit num_chunks.")
    if num_chunks is not None and (
        isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1
    ):
        raise ValueError(f"num_chunks must be a positive integer, got {num_chunks!r}")
    if isinstance(sample_size, bool) or not isinstance(sample_size, int) or sample_size < 1:
        raise ValueError(f"sample_size must be a positive integer, got {sample_size!r}")
    resolved = encoder_for(encoder, model, estimator)
    if data is not None and resolved is None:
        raise ValueError("plan needs an encoder, a model or an estimator to measure the data")
    compute, computed_why = placement_compute(engine, asked, resources)
    precision = compute.precision

    n, encoded_row_bytes, backend = 0, 0.0, "local"
    if data is not None:
        n, encoded_row_bytes, backend, estimator = measure_rows(
            data, resolved, estimator, encoder is not None, sample_size, compute
        )
    dtype_bytes = PRECISION_BYTES[precision]
    k = num_components(model, estimator)
    transient_row_bytes = float(max(k, 1) * dtype_bytes * 3)
    model_bytes = estimate_model_nbytes(model)
    statistic_bytes = statistic_nbytes(estimator, model_bytes)
    fixed = math.ceil((model_bytes + statistic_bytes) * safety_factor)

    if data is None:
        source = "backend 'local': no data given, only num_chunks"
    elif backend == "spark":
        source = "backend 'spark': data is a pyspark DataFrame (rows counted with count())"
    elif backend == "dask":
        source = (
            "backend 'dask': data is a Dask DataFrame (rows counted partition by partition on its cluster)"
        )
    elif backend == "ray":
        source = "backend 'ray': data is a Ray Dataset (rows counted by Ray)"
    else:
        source = f"backend 'local': data is held in this process ({type(data).__name__})"
    measured = (
        f"encoded {encoded_row_bytes:g} bytes/row measured on {min(n, sample_size)} sampled rows"
        if n
        else "encoded bytes/row not measured (no rows)"
    )
    reasons = [
        source,
        f"precision {precision} ({dtype_bytes} bytes per value)"
        + (f": 'auto' resolves to {precision}" if auto else ""),
        computed_why,
        f"{measured}; transient {transient_row_bytes:g} bytes/row = {max(k, 1)} component(s) x "
        f"{dtype_bytes} bytes x 3",
    ]
    ranges, why = row_ranges(n, resources, num_chunks)
    reasons.append(why)
    reasons.append(f"each shard is folded in {sub_chunks} sub-chunk(s) (sub_chunks={sub_chunks})")
    shards = []
    for device, start, stop in ranges:
        pieces, note = cap_range(
            device, start, stop, (encoded_row_bytes, transient_row_bytes), safety_factor, fixed
        )
        if note is not None:
            reasons.append(note)
        for a, b in pieces:
            encoded_bytes, transient_bytes = shard_bytes(
                b - a, encoded_row_bytes, transient_row_bytes, safety_factor, fixed
            )
            shards.append(PlacementShard(device, a, b, max(1, sub_chunks), encoded_bytes, transient_bytes))
    unknown = [d.name for d in resources.devices if d.memory_bytes is None]
    if unknown:
        reasons.append(f"memory unknown for {', '.join(unknown)}: no memory cap applied there")
    return Placement(
        tuple(shards),
        n,
        encoded_row_bytes,
        transient_row_bytes,
        model_bytes,
        statistic_bytes,
        dtype_bytes,
        resources,
        backend,
        precision,
        tuple(reasons),
        compute.engine,
    )


# -- model sharding -----------------------------------------------------------------------------
