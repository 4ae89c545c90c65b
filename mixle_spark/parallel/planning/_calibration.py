"""Measured throughput: :func:`calibrate_resources` times a real workload on a sample of the data.

Re-exported by :mod:`mixle_spark.parallel.planning.planner` (the public home of these names, as in
the reference's ``mixle.utils.parallel.planner``). A calibration encodes the first ``sample_size``
rows once, then times the model on them ``repeats`` times per device: scoring
(``seq_log_density``), the E-step (a fresh accumulator's ``seq_update``) or a whole EM step (the
E-step and ``estimator.estimate``). The median time gives each device's throughput in rows per
second, so :func:`~mixle_spark.parallel.planning.planner.plan` splits rows by measured speed.

Every repetition is kept as evidence (:class:`DeviceCalibration`); a device that cannot be measured
is recorded as failed and :class:`ResourceCalibrationError` is raised, never a guessed throughput.
A :class:`CalibrationCatalog` keeps the measurements (model, workload, precision, sizes) as JSON.

Also here: :func:`estimate_model_nbytes` and :func:`estimate_estimator_stat_nbytes`, the model's
parameter bytes and its statistics' bytes that a calibration record carries.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
import re
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark._outputs import write_file
from mixle_spark.engines import Compute, engine_for, narrow_encoded, resolve_compute, using_engine
from mixle_spark.errors import EmptyDataError, MixleError, UnknownNameError
from mixle_spark.parallel.planning._devices import DeviceSpec, Resources, precision_name
from mixle_spark.parallel.planning._sizing import (
    UnknownMemoryFootprintError,
    encoded_sample,
    encoder_for,
    estimate_nbytes,
)
from mixle_spark.stats.base import Distribution

__all__ = [
    "CalibrationCatalog",
    "CalibrationRecord",
    "DeviceCalibration",
    "ResourceCalibrationError",
    "calibrate_resources",
    "estimate_estimator_stat_nbytes",
    "estimate_model_nbytes",
]


# -- sizes ----------------------------------------------------------------------------------------


def estimate_model_nbytes(model: Any) -> int:
    """The bytes of a model's parameters (0 for None).

    For a :class:`~mixle_spark.stats.base.Distribution`, the arrays, numbers and strings of every node
    of its tree (a shared subtree once; the ``fit_result`` a fit attaches is bookkeeping, not
    parameters); for anything else, :func:`~mixle_spark.parallel.planning.planner.estimate_nbytes`.

    Raises
    ------
    UnknownMemoryFootprintError
        When the model holds something that cannot be sized (a callable, a lock, ...).

    >>> from mixle_spark.stats import GaussianDistribution, MixtureDistribution
    >>> estimate_model_nbytes(MixtureDistribution([GaussianDistribution(0.0, 1.0)] * 2, [0.5, 0.5]))
    56
    """
    if model is None:
        return 0
    if isinstance(model, Distribution):
        from mixle_spark.parallel.planning.model_decomposition import subtree_bytes

        return subtree_bytes(model)
    return estimate_nbytes(model)


def estimate_estimator_stat_nbytes(estimator: Any) -> int:
    """The bytes of an estimator's sufficient statistics: a zero accumulator's ``value()`` (0 for None).

    Raises
    ------
    UnknownMemoryFootprintError
        When no accumulator can be made from ``estimator``, or its value cannot be sized.
    """
    if estimator is None:
        return 0
    make = getattr(estimator, "accumulator_factory", None)
    if not callable(make):
        raise UnknownMemoryFootprintError(
            f"estimator: expected an estimator with accumulator_factory(), got {type(estimator).__name__}"
        )
    return estimate_nbytes(make().make().value())


# -- evidence -------------------------------------------------------------------------------------


def _positive_finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return math.isfinite(value) and float(value) > 0


@dataclass(frozen=True)
class DeviceCalibration:
    """The measurement of one device: every timed repetition and the throughput, or why it failed.

    Parameters
    ----------
    device_name : str
        The device (:attr:`DeviceSpec.name`).
    success : bool
        True with ``elapsed_seconds`` and ``throughput``; False with ``error``.
    elapsed_seconds : tuple of float
        Seconds of each repetition (finite, > 0).
    throughput : float, optional
        Rows per second: the sample's rows over the median repetition.
    error : str, optional
        Why the device was not measured.
    """

    device_name: str
    success: bool
    elapsed_seconds: tuple[float, ...] = ()
    throughput: float | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.device_name, str) or not self.device_name.strip():
            raise ValueError(
                f"DeviceCalibration device_name must be a non-blank string, got {self.device_name!r}"
            )
        if not isinstance(self.success, (bool, np.bool_)):
            raise TypeError(f"DeviceCalibration success must be a bool, got {self.success!r}")
        object.__setattr__(self, "success", bool(self.success))
        bad = [t for t in self.elapsed_seconds if not _positive_finite(t)]
        if bad:
            raise ValueError(
                f"device {self.device_name!r}: timings must be finite and > 0 seconds, got {bad[0]!r}"
            )
        object.__setattr__(self, "elapsed_seconds", tuple(float(t) for t in self.elapsed_seconds))
        if self.success:
            if not self.elapsed_seconds:
                raise ValueError(f"device {self.device_name!r}: a successful calibration needs its timings")
            if not _positive_finite(self.throughput):
                raise ValueError(
                    f"device {self.device_name!r}: a successful calibration needs a finite throughput > 0, "
                    f"got {self.throughput!r}"
                )
            if self.error is not None:
                raise ValueError(f"device {self.device_name!r}: a successful calibration has no error")
        elif not self.error:
            raise ValueError(f"device {self.device_name!r}: a failed calibration needs its error")

    def to_dict(self) -> dict[str, Any]:
        """All five fields, JSON-able."""
        return {
            "device_name": self.device_name,
            "success": self.success,
            "elapsed_seconds": list(self.elapsed_seconds),
            "throughput": self.throughput,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> DeviceCalibration:
        """Rebuild from :meth:`to_dict` output."""
        return cls(
            device_name=payload["device_name"],
            success=payload["success"],
            elapsed_seconds=tuple(payload.get("elapsed_seconds", ())),
            throughput=payload.get("throughput"),
            error=payload.get("error"),
        )


@dataclass(frozen=True)
class CalibrationRecord:
    """One calibration: what was timed (model, estimator, workload, sample, precision), the sizes,
    when, the calibrated resources and each device's evidence."""

    model_type: str
    workload: str
    resources: Resources
    sample_size: int
    repeats: int
    precision: str | None = None
    estimator_type: str | None = None
    row_count: int | None = None
    model_bytes: int | None = None
    statistic_bytes: int | None = None
    timestamp: float = 0.0
    device_results: tuple[DeviceCalibration, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "device_results", tuple(self.device_results))
        if not isinstance(self.resources, Resources):
            raise TypeError(
                f"CalibrationRecord resources must be a Resources, got {type(self.resources).__name__}"
            )
        if self.precision is not None:
            object.__setattr__(self, "precision", precision_name(self.precision))

    @property
    def fully_successful(self) -> bool:
        """True when every device of ``resources`` was measured."""
        measured = {r.device_name for r in self.device_results if r.success}
        return all(d.name in measured for d in self.resources.devices)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (resources and device results nested)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["resources"] = self.resources.to_dict()
        out["device_results"] = [r.to_dict() for r in self.device_results]
        return out

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> CalibrationRecord:
        """Rebuild from :meth:`to_dict` output."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(payload) - fields)
        if unknown:
            raise ValueError(f"calibration record: unknown keys {unknown}; expected some of {sorted(fields)}")
        values = dict(payload)
        values["resources"] = Resources.from_dict(payload["resources"])
        values["device_results"] = tuple(
            DeviceCalibration.from_dict(r) for r in payload.get("device_results", ())
        )
        return cls(**values)


_CATALOG_HEAD = re.compile(rb'\s*\{\s*"records"\s*:')


@dataclass
class CalibrationCatalog:
    """Calibration records, appended in order, kept as JSON (:meth:`save` / :meth:`load`)."""

    records: tuple[CalibrationRecord, ...] = ()

    def __post_init__(self) -> None:
        self.records = tuple(self.records)

    def add(self, record: CalibrationRecord) -> CalibrationRecord:
        """Append ``record``; returns it."""
        if not isinstance(record, CalibrationRecord):
            raise TypeError(
                f"CalibrationCatalog.add expects a CalibrationRecord, got {type(record).__name__}"
            )
        self.records = (*self.records, record)
        return record

    def latest(
        self, model_type: str | None = None, workload: str | None = None, precision: Any = None
    ) -> CalibrationRecord | None:
        """The newest record (by timestamp; the last added on a tie) matching every filter given."""
        wanted = None if precision is None else precision_name(precision)
        work = None if workload is None else _workload_name(workload)
        matching = [
            r
            for r in self.records
            if (model_type is None or r.model_type == model_type)
            and (work is None or r.workload == work)
            and (wanted is None or r.precision == wanted)
        ]
        return max(reversed(matching), key=lambda r: r.timestamp) if matching else None

    def resources_for(
        self, model_type: str | None = None, workload: str | None = None, precision: Any = None
    ) -> Resources | None:
        """The calibrated resources of :meth:`latest`, when every one of its devices was measured."""
        record = self.latest(model_type, workload, precision)
        return record.resources if record is not None and record.fully_successful else None

    def to_dict(self) -> dict[str, Any]:
        """``{"records": [record.to_dict(), ...]}``."""
        return {"records": [r.to_dict() for r in self.records]}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> CalibrationCatalog:
        """Rebuild from :meth:`to_dict` output."""
        if not isinstance(payload, Mapping) or "records" not in payload:
            raise ValueError(f"a calibration catalog needs a 'records' key, got {str(payload)[:200]!r}")
        return cls(tuple(CalibrationRecord.from_dict(r) for r in payload["records"]))

    def to_json(self, **kwargs: Any) -> str:
        """JSON of :meth:`to_dict`; ``kwargs`` go to ``json.dumps``."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_json(cls, text: str) -> CalibrationCatalog:
        """Rebuild from :meth:`to_json` output."""
        return cls.from_dict(json.loads(text))

    def save(self, path: str | os.PathLike[str], **kwargs: Any) -> None:
        """Write :meth:`to_json` to ``path`` whole or not at all (a temporary file renamed into
        place); an existing file is replaced only when it holds a calibration catalog."""
        write_file(
            path,
            self.to_json(**kwargs),
            what="calibration catalog",
            ours=lambda head: _CATALOG_HEAD.match(head) is not None,
            claim="does not hold a calibration catalog saved by mixle_spark",
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CalibrationCatalog:
        """Read a catalog written by :meth:`save`."""
        with open(path, encoding="utf-8") as handle:
            return cls.from_json(handle.read())


class ResourceCalibrationError(MixleError, RuntimeError):
    """Some devices could not be measured: ``results`` holds every device's evidence and
    ``resources`` the devices, those that were measured with their new throughput."""

    def __init__(self, results: tuple[DeviceCalibration, ...], resources: Resources) -> None:
        self.results, self.resources = tuple(results), resources
        failed = "; ".join(f"{r.device_name}: {r.error}" for r in self.results if not r.success)
        super().__init__(f"resource calibration failed for {failed}")


# -- the workloads --------------------------------------------------------------------------------


def _score(model: Any, estimator: Any, enc: Any, weights: np.ndarray) -> None:
    model.seq_log_density(enc)


def _estep(model: Any, estimator: Any, enc: Any, weights: np.ndarray) -> Any:
    accumulator = estimator.accumulator_factory().make()
    accumulator.seq_update(enc, weights, model)
    return accumulator


def _em(model: Any, estimator: Any, enc: Any, weights: np.ndarray) -> None:
    estimator.estimate(float(weights.sum()), _estep(model, estimator, enc, weights).value())


WORKLOADS: dict[str, Callable[[Any, Any, Any, np.ndarray], Any]] = {
    "score": _score,
    "estep": _estep,
    "em": _em,
}
"""What a calibration times: scoring the sample, the E-step on it, or the E-step and the M-step."""
_WORKLOAD_ALIASES = {"accumulate": "estep"}

_KINDS = ("cpu", "cuda")
"""The device kinds this process computes: its CPUs (numpy or torch) and, with torch, a CUDA GPU."""


def _compute_of(device: DeviceSpec, precision: str) -> Compute | str:
    """The engine and precision ``device`` is timed with in this process, or why it cannot be."""
    if device.kind not in _KINDS:
        return f"kind {device.kind!r} is not computed in this process (it computes {', '.join(_KINDS)})"
    try:
        compute = resolve_compute(device.engine, precision)
    except (ValueError, ImportError) as err:
        return str(err)
    if device.kind == "cuda" and engine_for(compute).device == "cpu":
        return f"kind 'cuda' with engine {device.engine!r}: no CUDA device computes here"
    return compute


def _workload_name(workload: Any) -> str:
    name = str(workload).strip().lower()
    name = _WORKLOAD_ALIASES.get(name, name)
    if name not in WORKLOADS:
        raise UnknownNameError("calibration workload", workload, [*WORKLOADS, *_WORKLOAD_ALIASES])
    return name


def _check_count(value: Any, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"calibrate_resources: {name} must be a positive integer, got {value!r}")
    return int(value)


def _time(run: Callable[[], Any], repeats: int) -> tuple[float, ...]:
    run()  # untimed: one-time costs (caches, lazily built tables) are not the device's speed
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        timings.append(max(time.perf_counter() - start, 1e-9))
    return tuple(timings)


def calibrate_resources(
    data: Any,
    model: Any,
    resources: Resources | None = None,
    estimator: Any = None,
    encoder: Any = None,
    sample_size: int = 512,
    repeats: int = 3,
    workload: str = "score",
    precision: Any = None,
    catalog: CalibrationCatalog | None = None,
    catalog_path: str | os.PathLike[str] | None = None,
) -> Resources:
    """``resources`` with each device's throughput measured on a sample of ``data``.

    The first ``min(sample_size, n)`` rows are encoded once; the workload runs once untimed, then
    ``repeats`` timed times, and the device's throughput is the sample's rows over the median time
    (rows per second). Devices run in this process: a calibration distinguishes devices by what
    this process computes them with (kind, engine, precision), so devices alike are timed once
    together and share the measurement; a device this process does not compute (a GPU, a torch
    rank, a float32 device while the numpy E-step is float64) is recorded as failed.

    Parameters
    ----------
    data : list, numpy array, pandas DataFrame, pyarrow Table, or a pyspark / Dask DataFrame, Ray Dataset
        The records (only the sample is read, as :func:`plan` reads it).
    model : Distribution
        The model timed.
    resources : Resources, optional
        The devices (default :meth:`Resources.single_cpu`).
    estimator, encoder
        The estimator of the ``"estep"`` and ``"em"`` workloads (default ``model.estimator()``); the
        encoder (default ``model.encoder()``).
    sample_size, repeats : int
        Rows timed and timed repetitions (positive).
    workload : {"score", "estep" (alias "accumulate"), "em"}
        ``model.seq_log_density`` on the sample; a fresh accumulator's ``seq_update`` with the model;
        the same followed by ``estimator.estimate``.
    precision : str, optional
        The precision to time every device in (default: each device's own, else float64); it is
        written into the calibrated devices.
    catalog, catalog_path
        Append a :class:`CalibrationRecord` (failed devices included) to ``catalog``, else to the
        catalog file at ``catalog_path`` (created when missing); with a path, the catalog appended
        to is written there whole (with both, ``catalog`` replaces the file's records).

    Returns
    -------
    Resources
        The same devices with measured throughput (and ``precision`` when given).

    Raises
    ------
    ResourceCalibrationError
        When some device could not be measured (after recording the calibration); its ``results``
        and ``resources`` hold what was measured.
    """
    work = _workload_name(workload)
    sample_size, repeats = _check_count(sample_size, "sample_size"), _check_count(repeats, "repeats")
    resources = Resources.single_cpu(precision=precision) if resources is None else resources
    if not isinstance(resources, Resources):
        raise TypeError(f"calibrate_resources: resources must be a Resources, got {type(resources).__name__}")
    if not callable(getattr(model, "seq_log_density", None)):
        raise TypeError(f"calibrate_resources: model must be a distribution, got {type(model).__name__}")
    if estimator is None and work != "score":
        estimator = model.estimator()
    n, enc, rows, _, estimator = encoded_sample(
        data, encoder_for(encoder, model, estimator), estimator, encoder is not None, sample_size
    )
    if n == 0:
        raise EmptyDataError("calibrate_resources: data has no rows to time")
    weights = np.ones(rows)
    stored_by = estimator.encoder() if estimator is not None else model.encoder()

    def _timed(compute: Compute) -> tuple[float, ...]:
        stored = narrow_encoded(stored_by, enc, compute)
        with using_engine(compute):
            return _time(lambda: WORKLOADS[work](model, estimator, stored, weights), repeats)

    forced = None if precision is None else precision_name(precision)
    groups: dict[tuple[str, str, str], tuple[float, ...] | str] = {}
    results, devices = [], []
    for device in resources.devices:
        wanted = forced or device.precision or "float64"
        key = (device.kind, device.engine, wanted)
        if key not in groups:
            compute = _compute_of(device, wanted)
            groups[key] = compute if isinstance(compute, str) else _timed(compute)
        measured = groups[key]
        if isinstance(measured, str):
            results.append(DeviceCalibration(device.name, False, error=measured))
            devices.append(device)
            continue
        throughput = rows / statistics.median(measured)
        results.append(DeviceCalibration(device.name, True, measured, throughput))
        devices.append(
            dataclasses.replace(device, throughput=throughput, precision=forced or device.precision)
        )
    calibrated = Resources(tuple(devices))
    if catalog is not None or catalog_path is not None:
        record = CalibrationRecord(
            model_type=type(model).__name__,
            workload=work,
            resources=calibrated,
            sample_size=rows,
            repeats=repeats,
            precision=forced,
            estimator_type=None if estimator is None else type(estimator).__name__,
            row_count=n,
            model_bytes=estimate_model_nbytes(model),
            statistic_bytes=None if estimator is None else estimate_estimator_stat_nbytes(estimator),
            timestamp=time.time(),
            device_results=tuple(results),
        )
        _record(record, catalog, catalog_path)
    if not all(r.success for r in results):
        raise ResourceCalibrationError(tuple(results), calibrated)
    return calibrated


def _record(
    record: CalibrationRecord, catalog: CalibrationCatalog | None, path: str | os.PathLike[str] | None
) -> None:
    """Append ``record`` to ``catalog``, else to the catalog at ``path`` (a new one when the file is
    missing or empty); the catalog appended to is then written to ``path`` when given."""
    if catalog is None:
        on_disk = path is not None and os.path.isfile(path) and os.path.getsize(path) > 0
        catalog = CalibrationCatalog.load(path) if on_disk and path is not None else CalibrationCatalog()
    catalog.add(record)
    if path is not None:
        catalog.save(path, sort_keys=True)
