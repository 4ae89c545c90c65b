"""calibrate_resources (measured device throughput), its evidence and catalog types, and the model and
statistic sizes (estimate_model_nbytes, estimate_estimator_stat_nbytes) of the planner."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle_spark.errors import EmptyDataError, UnknownNameError
from mixle_spark.estimation import optimize
from mixle_spark.parallel.planner import (
    CalibrationCatalog,
    CalibrationRecord,
    DeviceCalibration,
    DeviceSpec,
    MemorySized,
    ResourceCalibrationError,
    Resources,
    UnknownMemoryFootprintError,
    calibrate_resources,
    estimate_estimator_stat_nbytes,
    estimate_model_nbytes,
    plan,
)
from mixle_spark.stats import (
    CategoricalDistribution,
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
    MultivariateGaussianDistribution,
    RecordDistribution,
)

RNG = np.random.default_rng(7)
X1 = [float(v) for v in RNG.normal(size=3000)]


def gauss_mix(k: int = 2) -> MixtureDistribution:
    return MixtureDistribution([GaussianDistribution(float(i), 1.0 + i) for i in range(k)], [1.0 / k] * k)


def full_cov_mix(k: int, d: int) -> MixtureDistribution:
    comps = []
    for i in range(k):
        a = RNG.normal(size=(d, d))
        comps.append(MultivariateGaussianDistribution(RNG.normal(size=d) + i, a @ a.T + d * np.eye(d)))
    return MixtureDistribution(comps, [1.0 / k] * k)


def cpu_and_gpu() -> Resources:
    return Resources.from_specs(
        [DeviceSpec("cpu:0"), DeviceSpec("cuda:0", "cuda", 16 * 2**30, "torch", 10.0)]
    )


# -- calibrate_resources -------------------------------------------------------------------------


def test_throughput_is_the_sample_rows_over_the_median_time_and_round_trips_json() -> None:
    catalog = CalibrationCatalog()
    resources = Resources.local(2, memory_bytes=2 * 10**9)
    out = calibrate_resources(X1, gauss_mix(), resources, sample_size=1000, repeats=5, catalog=catalog)
    (record,) = catalog.records
    assert record.fully_successful and record.workload == "score" and record.sample_size == 1000
    assert record.row_count == 3000 and record.repeats == 5 and record.model_type == "MixtureDistribution"
    for device, before, result in zip(out.devices, resources.devices, record.device_results, strict=True):
        assert result.success and result.device_name == device.name and len(result.elapsed_seconds) == 5
        assert device.throughput == result.throughput == 1000 / statistics.median(result.elapsed_seconds)
        assert (device.name, device.memory_bytes, device.kind) == (
            before.name,
            before.memory_bytes,
            before.kind,
        )
    assert out.devices[0].throughput != 1.0
    # the two CPU slots of this process are timed once together: one measurement, shared
    assert record.device_results[0].elapsed_seconds == record.device_results[1].elapsed_seconds
    again = Resources.from_json(out.to_json())
    assert again == out and again.devices[0].throughput == out.devices[0].throughput
    assert record.resources == out


def test_a_heavier_model_measures_slower() -> None:
    """The measurement times the real workload: a 32-component, 16-dimensional full-covariance
    mixture scores far fewer rows per second than a two-component univariate one (about 20x here)."""
    x16 = [row for row in RNG.normal(size=(2000, 16))]
    light = calibrate_resources(X1, gauss_mix(), sample_size=2000, repeats=5).devices[0].throughput
    heavy = calibrate_resources(x16, full_cov_mix(32, 16), sample_size=2000, repeats=5).devices[0].throughput
    assert light > 5 * heavy


@pytest.mark.parametrize("workload", ["estep", "accumulate", "em"])
def test_the_estep_and_em_workloads_run_the_estimator(workload: str) -> None:
    class Counting(MixtureEstimator):
        estimates = 0

        def estimate(self, nobs: float | None, value: Any) -> Any:
            type(self).estimates += 1
            return super().estimate(nobs, value)

    catalog = CalibrationCatalog()
    estimator = Counting([GaussianEstimator()] * 2)
    calibrate_resources(X1, gauss_mix(), estimator=estimator, workload=workload, repeats=2, catalog=catalog)
    record = catalog.records[0]
    assert record.workload == ("em" if workload == "em" else "estep")
    assert record.estimator_type == "Counting" and record.statistic_bytes == 2 * 8 + 2 * 4 * 8
    assert Counting.estimates == (3 if workload == "em" else 0)  # one untimed run, then the repeats


def test_the_estep_workload_defaults_to_the_models_estimator() -> None:
    catalog = CalibrationCatalog()
    calibrate_resources(X1, gauss_mix(3), workload="estep", catalog=catalog)
    assert catalog.records[0].estimator_type == "MixtureEstimator"
    assert catalog.records[0].model_bytes == estimate_model_nbytes(gauss_mix(3))


def test_plan_splits_rows_by_measured_throughput() -> None:
    calibrated = calibrate_resources(X1, gauss_mix(), Resources.local(2), repeats=2)
    placement = plan(X1, model=gauss_mix(), resources=calibrated)
    assert [(s.start, s.stop) for s in placement.shards] == [(0, 1500), (1500, 3000)]


def test_a_device_this_process_does_not_compute_fails_the_calibration() -> None:
    catalog = CalibrationCatalog()
    with pytest.raises(
        ResourceCalibrationError, match=r"failed for cuda:0: kind 'cuda' with engine 'torch'"
    ) as info:
        calibrate_resources(X1, gauss_mix(), cpu_and_gpu(), catalog=catalog)
    cpu, gpu = info.value.resources.devices
    assert cpu.throughput > 1.0 and gpu.throughput == 10.0  # the GPU keeps its declared weight
    assert [r.success for r in info.value.results] == [True, False]
    record = catalog.latest()
    assert record is not None and not record.fully_successful
    assert catalog.resources_for() is None


def test_devices_are_timed_at_their_precision_and_engine() -> None:
    """A float32 device is timed on float32 data with the numpy engine's float32 kernels, a torch CPU
    device on the torch engine; bf16 with numpy fails the calibration naming the engine that has it."""
    fp32 = calibrate_resources(X1, gauss_mix(), precision="fp32")
    assert fp32.devices[0].precision == "float32" and fp32.devices[0].throughput > 1.0
    forced = calibrate_resources(X1, gauss_mix(), Resources.local(1), precision="double")
    assert forced.devices[0].precision == "float64"
    with pytest.raises(ResourceCalibrationError, match=r"cpu:0: .*bfloat16 needs engine='torch'"):
        calibrate_resources(X1, gauss_mix(), precision="bf16")
    pytest.importorskip("torch")
    torch_cpu = Resources.from_specs([DeviceSpec("cpu:0", "cpu", None, "torch")])
    timed = calibrate_resources(X1, gauss_mix(), torch_cpu, precision="float32", workload="estep")
    assert timed.devices[0].throughput > 1.0 and timed.devices[0].engine == "torch"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"workload": "scor"}, UnknownNameError, "unknown calibration workload 'scor'.*did you mean 'score'"),
        ({"sample_size": 0}, ValueError, "sample_size must be a positive integer, got 0"),
        ({"repeats": True}, ValueError, "repeats must be a positive integer, got True"),
        ({"resources": [DeviceSpec("cpu:0")]}, TypeError, "resources must be a Resources, got list"),
        ({"model": "gauss"}, TypeError, "model must be a distribution, got str"),
        ({"data": []}, EmptyDataError, "data has no rows to time"),
    ],
)
def test_calibrate_resources_rejects_bad_arguments(kwargs: dict[str, Any], error: type, match: str) -> None:
    args: dict[str, Any] = {"data": X1, "model": gauss_mix(), **kwargs}
    with pytest.raises(error, match=match):
        calibrate_resources(**args)


# -- evidence and the catalog --------------------------------------------------------------------


def test_catalog_file_gathers_records_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    calibrate_resources(X1, gauss_mix(), repeats=1, catalog_path=path)
    calibrate_resources(X1, gauss_mix(), repeats=1, workload="em", catalog_path=path)
    catalog = CalibrationCatalog.load(path)
    assert [r.workload for r in catalog.records] == ["score", "em"]
    assert CalibrationCatalog.from_json(catalog.to_json()) == catalog
    assert json.loads(path.read_text())["records"][1]["device_results"][0]["success"] is True
    latest = catalog.latest(model_type="MixtureDistribution", workload="accumulate")
    assert latest is None and catalog.latest(workload="EM") is catalog.records[1]
    resources = catalog.resources_for(workload="score")
    assert resources is not None and resources == catalog.records[0].resources
    assert catalog.latest(precision="float32") is None


def test_catalog_save_refuses_a_file_it_did_not_write(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    path.write_text('{"something": "else"}')
    with pytest.raises(FileExistsError, match="does not hold a calibration catalog"):
        CalibrationCatalog().save(path)
    assert path.read_text() == '{"something": "else"}'


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"success": True}, "successful calibration needs its timings"),
        ({"success": True, "elapsed_seconds": (0.1,)}, "finite throughput > 0, got None"),
        ({"success": False}, "failed calibration needs its error"),
        (
            {"success": False, "elapsed_seconds": (-1.0,), "error": "x"},
            "timings must be finite and > 0 seconds, got -1.0",
        ),
        ({"success": "yes"}, "success must be a bool, got 'yes'"),
    ],
)
def test_device_calibration_validates(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        DeviceCalibration("cpu:0", **kwargs)


def test_calibration_record_round_trips_and_rejects_unknown_keys() -> None:
    record = CalibrationRecord(
        "MixtureDistribution",
        "score",
        Resources.single_cpu(),
        10,
        2,
        precision="fp64",
        device_results=(DeviceCalibration("cpu:0", True, (0.5, 0.25), 40.0),),
    )
    assert record.precision == "float64" and record.fully_successful
    assert CalibrationRecord.from_dict(record.to_dict()) == record
    with pytest.raises(ValueError, match=r"unknown keys \['sample'\]"):
        CalibrationRecord.from_dict({**record.to_dict(), "sample": 3})


# -- sizes ---------------------------------------------------------------------------------------


def _held_bytes(node: Any) -> int:
    """What a leaf distribution holds: its arrays' nbytes and 8 bytes per number attribute."""
    values = list(vars(node).values())
    arrays = sum(v.nbytes for v in values if isinstance(v, np.ndarray))
    return arrays + 8 * sum(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def test_estimate_model_nbytes_of_a_gaussian_mixture_is_its_arrays() -> None:
    model = full_cov_mix(4, 6)
    arrays = [v for c in model.components for v in vars(c).values() if isinstance(v, np.ndarray)]
    assert sum(a.nbytes for a in arrays) >= 4 * (6 * 6 * 8)  # the covariances at least
    expected = model.w.nbytes + model.log_w.nbytes + sum(_held_bytes(c) for c in model.components)
    assert estimate_model_nbytes(model) == expected
    shared = MixtureDistribution([model.components[0]] * 3, [1 / 3] * 3)  # one component, held once
    assert estimate_model_nbytes(shared) == 3 * 8 * 2 + _held_bytes(model.components[0])


def test_estimate_model_nbytes_of_a_categorical_and_a_record() -> None:
    labels = [f"label{i:03d}" for i in range(100)]
    cat = CategoricalDistribution({label: 0.01 for label in labels})
    vocabulary = 2 * sum(len(label) for label in labels)  # the pmap's keys and the labels tuple
    assert estimate_model_nbytes(cat) == 100 * 8 + cat._p.nbytes + cat._log_p.nbytes + vocabulary
    record = RecordDistribution({"amount": GaussianDistribution(1.0, 2.0), "channel": cat})
    assert estimate_model_nbytes(record) == estimate_model_nbytes(cat) + _held_bytes(record.fields["amount"])
    assert estimate_model_nbytes(None) == 0


def test_a_fitted_models_bookkeeping_is_not_counted() -> None:
    fitted = optimize(X1[:300], MixtureEstimator([GaussianEstimator()] * 2), max_its=3, delta=None)
    assert fitted.fit_result is not None
    same = MixtureDistribution(list(fitted.components), fitted.w)
    assert estimate_model_nbytes(fitted) == estimate_model_nbytes(same) == 2 * 16 + 2 * 24
    assert plan(X1, model=fitted).model_bytes == 80


def test_estimate_estimator_stat_nbytes() -> None:
    assert estimate_estimator_stat_nbytes(MixtureEstimator([GaussianEstimator()] * 3)) == 3 * 8 + 3 * 4 * 8
    assert estimate_estimator_stat_nbytes(None) == 0
    with pytest.raises(UnknownMemoryFootprintError, match="accumulator_factory\\(\\), got str"):
        estimate_estimator_stat_nbytes("gaussian")


def test_an_object_reporting_its_size_is_memory_sized() -> None:
    class Blob:
        def mixle_memory_nbytes(self) -> int:
            return 4096

    assert isinstance(Blob(), MemorySized) and not isinstance(gauss_mix(), MemorySized)
    assert estimate_model_nbytes(Blob()) == 4096
