"""Issue 55's plumbing of the compute engine and precision: plan()'s placement and its byte estimates,
Resources' device precisions and engines honoured by encoded_data, a spec's fit section, the fit job's
--engine / --precision (in process, --backend local) and summary.json."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mixle_spark.engines import _registry
from mixle_spark.engines.numpy_engine import NumpyEngine
from mixle_spark.errors import SpecError
from mixle_spark.parallel import encoded_data
from mixle_spark.parallel.planning import _devices
from mixle_spark.parallel.planning._compute import placement_compute
from mixle_spark.parallel.planning.planner import DeviceSpec, Placement, Resources, plan
from mixle_spark.spec import FIT_OPTIONS, load_spec
from mixle_spark.stats import (
    MixtureEstimator,
    MultivariateGaussianEstimator,
    StudentTEstimator,
)

RNG = np.random.default_rng(55)
X = np.concatenate([RNG.normal(-3.0, 1.0, size=(600, 4)), RNG.normal(3.0, 0.5, size=(400, 4))])
MVN = MixtureEstimator([MultivariateGaussianEstimator()] * 2)


class HalfEngine(NumpyEngine):
    """A registered stand-in for an engine that computes in bfloat16 (the torch engine is another
    change): numpy's kernels, accepting every precision name."""

    name = "half"
    precisions = frozenset({"float64", "float32", "bfloat16"})


@pytest.fixture
def half_engine(monkeypatch: pytest.MonkeyPatch) -> str:
    """``half`` registered as an engine (and as ``torch``, for the devices that name torch), for this
    test only."""
    monkeypatch.setattr(_registry, "_ENGINES", {})
    monkeypatch.setitem(_registry._FACTORIES, "half", HalfEngine)
    monkeypatch.setitem(_registry._FACTORIES, "torch", HalfEngine)
    return "half"


# -- placement_compute: what the devices declare, what was asked ----------------------------------


def test_the_devices_precision_is_used_unless_one_is_asked_for() -> None:
    fp32 = Resources.local(2, precision="fp32")
    compute, why = placement_compute(resources=fp32)
    assert (compute.engine, compute.precision) == ("numpy", "float32")
    assert (
        why == "engine numpy (named by the resources' devices), "
        "precision float32 (declared by the resources' devices)"
    )
    assert placement_compute("numpy", "float32", fp32)[0].precision == "float32"  # asking for theirs
    assert placement_compute(resources=Resources.local(2))[0].default  # none declared: float64
    assert placement_compute()[1] == "engine numpy (the default), precision float64 (the default)"
    with pytest.raises(
        ValueError,
        match=r"^precision='float64' conflicts with the precision the resources' devices declare "
        r"\(cpu:0 float32, cpu:1 float32\); ask for theirs or for none",
    ):
        placement_compute(precision="fp64", resources=fp32)
    mixed = Resources.from_specs([DeviceSpec("a", precision="float32"), DeviceSpec("b", precision="float64")])
    with pytest.raises(
        ValueError, match=r"^the resources' devices declare different precisions \(a float32, b float64\)"
    ):
        placement_compute(resources=mixed)
    with pytest.raises(ValueError, match=r"bfloat16 needs engine='torch'"):
        placement_compute(resources=Resources.single_cpu(precision="bf16"))


def test_the_devices_engine_is_used_unless_one_is_asked_for(half_engine: str) -> None:
    both = Resources.from_specs(
        [DeviceSpec("cpu:0"), DeviceSpec("acc:0", "gpu", engine="half", throughput=10.0)]
    )
    compute, why = placement_compute(resources=both)
    assert compute.engine == "half" and why.startswith(
        "engine half (that of the fastest of the resources' devices, acc:0)"
    )
    assert placement_compute("numpy", resources=both)[0].engine == "numpy"  # asking overrides theirs
    halves = Resources.from_specs([DeviceSpec("h:0", engine="half", precision="bf16")])
    assert placement_compute(resources=halves)[0] == _registry.Compute("half", "bfloat16")


def test_discovered_cuda_devices_get_the_torch_engine(
    monkeypatch: pytest.MonkeyPatch, half_engine: str
) -> None:
    props = SimpleNamespace(total_memory=8 * 2**30)
    cuda = SimpleNamespace(
        is_available=lambda: True, device_count=lambda: 2, get_device_properties=lambda i: props
    )
    monkeypatch.setattr(_devices, "_import_torch", lambda: SimpleNamespace(cuda=cuda, backends=None))
    found = Resources.discover(precision="fp32")
    assert [(d.name, d.kind, d.engine, d.precision) for d in found.devices] == [
        ("cpu:0", "cpu", "numpy", "float32"),
        ("cuda:0", "cuda", "torch", "float32"),
        ("cuda:1", "cuda", "torch", "float32"),
    ]
    # the fastest devices (the GPUs) name torch: the placement computes with it (here the stand-in)
    placement = plan(X, estimator=MVN, resources=found)
    assert (placement.engine, placement.precision, placement.dtype_bytes) == ("torch", "float32", 4)


# -- plan(): the placement carries the compute and sizes for it --------------------------------------


def test_plan_sizes_the_data_at_its_precision() -> None:
    f64 = plan(X, estimator=MVN)
    f32 = plan(X, estimator=MVN, precision="float32")
    assert (f64.engine, f64.precision, f64.dtype_bytes) == ("numpy", "float64", 8)
    assert (f32.engine, f32.precision, f32.dtype_bytes) == ("numpy", "float32", 4)
    assert f64.transient_row_bytes == 2 * 8 * 3 and f32.transient_row_bytes == 2 * 4 * 3
    # 4 coordinates per row: 32 bytes in float64, 16 in float32 (plus the centre, amortised over the sample)
    assert f64.encoded_row_bytes == pytest.approx(32.0, abs=0.2)
    assert f32.encoded_row_bytes == pytest.approx(16.0, abs=0.2)
    assert any(
        r == "engine numpy (named by the resources' devices), precision float32 (asked for)"
        for r in f32.reasons
    )
    assert "engine=numpy, precision=float32" in str(f32)
    again = Placement.from_dict(json.loads(json.dumps(f32.to_dict())))
    assert (again.engine, again.precision, again.dtype_bytes) == ("numpy", "float32", 4)
    assert plan(X, estimator=MVN, resources=Resources.local(2, precision="float32")).precision == "float32"
    auto = plan(X, estimator=MVN, precision="auto", resources=Resources.local(2, precision="float32"))
    assert auto.precision == "float32" and any("'auto' resolves to float32" in r for r in auto.reasons)


def test_plan_bfloat16_counts_two_bytes_per_value(half_engine: str) -> None:
    placement = plan(X, estimator=MVN, engine=half_engine, precision="bf16")
    assert (placement.engine, placement.precision, placement.dtype_bytes) == ("half", "bfloat16", 2)
    assert placement.transient_row_bytes == 2 * 2 * 3
    # bfloat16 data is stored as float32 (numpy has no bfloat16): the encoded bytes are float32's
    assert placement.encoded_row_bytes == pytest.approx(16.0, abs=0.2)
    with pytest.raises(
        ValueError, match=r"precision='bfloat16' cannot be honoured \(bfloat16 needs engine='torch'\)"
    ):
        plan(X, estimator=MVN, precision="bf16")


def test_plan_refuses_an_engine_that_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_registry, "_ENGINES", {})
    monkeypatch.setattr(_registry, "find_spec", lambda name: None)
    with pytest.raises(
        ImportError, match=r"^engine='torch' needs torch, which is not installed: pip install '.*\[torch\]'$"
    ):
        plan(X, estimator=MVN, engine="torch")


# -- encoded_data honours the devices' precision ---------------------------------------------------


def test_resources_declaring_float32_store_and_compute_at_float32() -> None:
    with encoded_data(X, MVN, resources=Resources.local(2, precision="float32")) as handle:
        assert handle.compute == _registry.Compute("numpy", "float32")
        assert {enc.dtype for _a, _b, enc in handle.chunks} == {np.dtype(np.float32)}
        assert handle.placement.precision == "float32" and handle.placement.num_chunks == 2
    with encoded_data(X, MVN, resources=Resources.local(2)) as handle:
        assert handle.compute is None and {enc.dtype for _a, _b, enc in handle.chunks} == {
            np.dtype(np.float64)
        }
    with pytest.raises(
        ValueError,
        match=r"^precision='float64' conflicts with the precision the resources' devices declare "
        r"\(cpu:0 float32",
    ):
        encoded_data(X, MVN, precision="float64", resources=Resources.local(2, precision="float32"))
    float32_plan = plan(X, estimator=MVN, resources=Resources.local(3), precision="float32")
    with encoded_data(X, MVN, placement=float32_plan) as handle:
        assert handle.compute is not None and handle.compute.precision == "float32"
    with pytest.raises(
        ValueError, match=r"^precision='float32' conflicts with the placement's precision 'float64'"
    ):
        encoded_data(
            X, MVN, precision="float32", placement=plan(X, estimator=MVN, resources=Resources.local(3))
        )


# -- a spec's fit section -------------------------------------------------------------------------


def test_a_specs_fit_section_takes_engine_and_precision() -> None:
    assert FIT_OPTIONS[-2:] == ("engine", "precision")
    spec = load_spec({"estimator": "gaussian", "fit": {"engine": "NumPy", "precision": "fp32", "max_its": 3}})
    assert spec.fit == {"engine": "numpy", "precision": "float32", "max_its": 3}
    for fit, message in (
        (
            {"precision": "bf16"},
            "engine='numpy' computes in float32, float64; precision='bfloat16' cannot be honoured "
            "(bfloat16 needs engine='torch')",
        ),
        (
            {"precision": "int8"},
            "precision='int8' is not a precision; expected one of float64, float32, bfloat16 "
            "(or fp64, fp32, bf16)",
        ),
        ({"engine": "cupy"}, "engine='cupy' is not a compute engine; registered: numpy, torch"),
        ({"engine": 2}, "engine must be an engine's name (numpy, torch), got 2"),
    ):
        with pytest.raises(SpecError) as caught:
            load_spec({"estimator": "gaussian", "fit": fit})
        assert str(caught.value) == f"spec: fit section: {message}"


# -- the fit job: --engine / --precision, in process with the local backend ------------------------


def _vector_input(tmp_path: Path) -> tuple[str, str]:
    data = tmp_path / "points.parquet"
    pq.write_table(pa.table({"x": pa.array(list(X), type=pa.list_(pa.float64()))}), data)
    spec = tmp_path / "spec.json"
    component = {"type": "multivariate_gaussian"}
    spec.write_text(
        json.dumps({"estimator": {"type": "mixture", "k": 2, "component": component}, "fit": {"seed": 3}})
    )
    return str(data), str(spec)


def _fit(tmp_path: Path, name: str, *flags: str) -> int:
    from mixle_spark.cli.fit import main

    data, spec = _vector_input(tmp_path)
    out = ["--output", str(tmp_path / name)]
    return main(
        ["--backend", "local", "--input", data, "--model", spec, *out, "--max-its", "8", "--quiet", *flags]
    )


def test_em_fit_precision_float32_is_fitted_and_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _fit(tmp_path, "f64") == 0
    assert _fit(tmp_path, "f32", "--precision", "fp32", "--engine", "numpy") == 0
    f64 = json.loads((tmp_path / "f64" / "summary.json").read_text())
    f32 = json.loads((tmp_path / "f32" / "summary.json").read_text())
    assert f64["compute"] == {"engine": "numpy", "precision": "float64"}
    assert f32["compute"] == {"engine": "numpy", "precision": "float32"}
    assert f32["fit_options"]["precision"] == "float32" and "precision" not in f64["fit_options"]
    assert f32["log_likelihood"] == pytest.approx(f64["log_likelihood"], rel=1e-5)
    assert f32["log_likelihood"] != f64["log_likelihood"]  # computed in float32, not float64 again


def test_em_fit_refuses_what_no_engine_computes_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SystemExit) as bf16:
        _fit(tmp_path, "out", "--precision", "bf16")
    assert bf16.value.code == 2
    assert capsys.readouterr().err == (
        "em_fit: error: --engine / --precision: engine='numpy' computes in float32, float64; "
        "precision='bfloat16' cannot be honoured (bfloat16 needs engine='torch') (see --help)\n"
    )
    with pytest.raises(SystemExit):
        _fit(tmp_path, "out", "--precision", "half")
    assert (
        "argument --precision: 'half' is not a precision; expected one of float64, float32, bf16"
        in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        _fit(tmp_path, "out", "--engine", "jax")
    assert (
        "argument --engine: 'jax' is not a compute engine; expected one of numpy, torch"
        in capsys.readouterr().err
    )
    monkeypatch.setattr(_registry, "_ENGINES", {})
    monkeypatch.setattr(_registry, "find_spec", lambda name: None)  # torch not installed
    with pytest.raises(SystemExit) as missing:
        _fit(tmp_path, "out", "--engine", "torch")
    assert missing.value.code == 2
    assert capsys.readouterr().err == (
        "em_fit: error: --engine / --precision: engine='torch' needs torch, which is not installed: "
        "pip install 'mixle-spark[torch]' (see --help)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["points.parquet", "spec.json"]  # nothing written


def test_em_fit_checks_the_command_line_with_the_specs_fit_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mixle_spark.cli.fit import main

    data, spec = _vector_input(tmp_path)
    bf16 = tmp_path / "bf16.json"
    bf16.write_text(
        json.dumps(
            {"estimator": json.loads(Path(spec).read_text())["estimator"], "fit": {"precision": "bf16"}}
        )
    )
    argv = ["--backend", "local", "--input", data, "--output", str(tmp_path / "out"), "--quiet"]
    assert main([*argv, "--model", str(bf16)]) == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .startswith(
            f"em_fit: error: {bf16}: fit section: engine='numpy' computes in float32, float64; "
            "precision='bfloat16'"
        )
    )
    fp32 = tmp_path / "fp32.json"
    fp32.write_text(
        json.dumps(
            {
                "estimator": json.loads(Path(spec).read_text())["estimator"],
                "fit": {"precision": "fp32", "max_its": 2},
            }
        )
    )
    assert main([*argv, "--model", str(fp32), "--precision", "float64"]) == 0  # the command line wins
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["compute"] == {"engine": "numpy", "precision": "float64"}
    assert main([*argv, "--model", str(fp32), "--overwrite"]) == 0
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["compute"]["precision"] == "float32"


def test_em_fit_help_names_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from mixle_spark.cli.fit import main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--engine {numpy,torch}" in text and "--precision {float64,float32,bf16}" in text
    assert "spark[torch]" in text and "statistics are summed in float64 either way" in text


def test_a_family_that_computes_in_float64_keeps_float64_data() -> None:
    """A family that does not narrow keeps float64 data at float32 (its kernels run in float64)."""
    values = RNG.normal(size=200)
    with encoded_data(
        values, StudentTEstimator(), resources=Resources.local(2, precision="float32")
    ) as handle:
        assert handle.compute is not None and handle.compute.precision == "float32"
        assert plan(
            values, estimator=StudentTEstimator(), precision="float32"
        ).encoded_row_bytes == pytest.approx(8.0)


def test_an_update_takes_the_precision_and_records_it(tmp_path: Path) -> None:
    from mixle_spark.cli.fit import main

    assert _fit(tmp_path, "fitted") == 0
    data, _spec = _vector_input(tmp_path)
    argv = ["--backend", "local", "--update-from", str(tmp_path / "fitted"), "--input", data, "--quiet"]
    assert main([*argv, "--output", str(tmp_path / "f64")]) == 0
    assert main([*argv, "--output", str(tmp_path / "f32"), "--precision", "float32"]) == 0
    f64 = json.loads((tmp_path / "f64" / "summary.json").read_text())
    f32 = json.loads((tmp_path / "f32" / "summary.json").read_text())
    assert f64["compute"] == {"engine": "numpy", "precision": "float64"}
    assert f32["compute"] == {"engine": "numpy", "precision": "float32"}
    before32, before64 = (
        f32["update"]["mean_log_likelihood_before"],
        f64["update"]["mean_log_likelihood_before"],
    )
    assert before32 == pytest.approx(before64, rel=1e-5) and before32 != before64  # scored in float32
