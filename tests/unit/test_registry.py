"""The encoded-data registry and ``encoded_data``: names, aliases, collisions, controls, reuse."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import mixle_spark.parallel as parallel
from mixle_spark.parallel import (
    EncodedDataControlConflictError,
    LocalEncodedData,
    UnsupportedControlError,
    available_encoded_data_backends,
    encoded_data,
    is_encoded_data_handle,
    register_encoded_data_backend,
)
from mixle_spark.parallel.backends import registry as registry_module
from mixle_spark.stats import GaussianDistribution, GaussianEstimator, MixtureDistribution, MixtureEstimator

X = np.random.default_rng(0).normal(size=200)


@pytest.fixture
def clean_registry() -> Iterator[None]:
    """Restore the registry after a test registers or overrides backends."""
    factories = dict(registry_module._FACTORIES)
    canonical = dict(registry_module._CANONICAL)
    defaults = list(registry_module._DEFAULT_FOR_DATA)
    hinted = dict(registry_module._HINTED)
    yield
    registry_module._HINTED.clear()
    registry_module._HINTED.update(hinted)
    registry_module._FACTORIES.clear()
    registry_module._FACTORIES.update(factories)
    registry_module._CANONICAL.clear()
    registry_module._CANONICAL.update(canonical)
    registry_module._DEFAULT_FOR_DATA[:] = defaults


def test_importing_the_namespace_registers_the_built_in_backends() -> None:
    names = available_encoded_data_backends()
    assert {"local", "spark", "model_parallel"} <= set(names)
    assert parallel is not None


@pytest.mark.parametrize("name", [None, "local", "LOCAL", "Local", "numpy", "serial"])
def test_none_and_any_case_of_a_name_select_local(name: str | None) -> None:
    handle = encoded_data(X, GaussianEstimator(), backend=name)
    assert type(handle) is LocalEncodedData
    assert len(handle) == 200


def test_unknown_backend_lists_the_registered_ones() -> None:
    with pytest.raises(
        ValueError, match=r"unknown encoded-data backend 'nope'; registered backends: .*local"
    ):
        encoded_data(X, GaussianEstimator(), backend="nope")
    with pytest.raises(
        ValueError,
        match=r"unknown encoded-data backend 'Sprak' \(did you mean 'spark'\?\); registered backends: ",
    ):
        encoded_data(X, GaussianEstimator(), backend="Sprak")
    with pytest.raises(TypeError, match="backend must be a name"):
        encoded_data(X, GaussianEstimator(), backend=3)  # type: ignore[arg-type]


def test_a_custom_factory_receives_data_and_the_controls_given(clean_registry: None) -> None:
    seen: dict[str, Any] = {}

    def factory(data: Any, **options: Any) -> LocalEncodedData:
        seen.update(options)
        return LocalEncodedData(data, estimator=options["estimator"])

    register_encoded_data_backend("ftb", factory, aliases=("ftb-alias",))
    encoder = GaussianEstimator().encoder()
    handle = encoded_data(X, GaussianEstimator(), backend="FTB-ALIAS", encoder=encoder, sub_chunks=3)
    assert isinstance(handle, LocalEncodedData)
    assert seen == {"estimator": GaussianEstimator(), "model": None, "encoder": encoder, "sub_chunks": 3}
    assert seen["encoder"] is encoder


def test_collisions_are_refused_before_anything_is_written(clean_registry: None) -> None:
    def other(data: Any, **options: Any) -> Any:
        return None

    with pytest.raises(ValueError, match=r"'local' is already registered .*override=True"):
        register_encoded_data_backend("local", other)
    with pytest.raises(ValueError, match=r"'spark' is already registered"):
        register_encoded_data_backend("brand-new", other, aliases=("SPARK",))
    assert "brand-new" not in available_encoded_data_backends()
    assert type(encoded_data(X, GaussianEstimator(), backend="local")) is LocalEncodedData
    with pytest.raises(TypeError, match="backend factory must be callable"):
        register_encoded_data_backend("x", "not callable")  # type: ignore[arg-type]


def test_same_factory_is_a_no_op_and_override_replaces(clean_registry: None) -> None:
    def first(data: Any, **options: Any) -> str:
        return "first"

    def second(data: Any, **options: Any) -> str:
        return "second"

    register_encoded_data_backend("twice", first)
    register_encoded_data_backend("twice", first)
    assert encoded_data(X, backend="twice") == "first"
    register_encoded_data_backend("twice", second, override=True)
    assert encoded_data(X, backend="twice") == "second"


def test_a_handle_is_reused_only_without_controls() -> None:
    handle = encoded_data(X, GaussianEstimator())
    assert is_encoded_data_handle(handle)
    assert not is_encoded_data_handle([1.0, 2.0])
    assert encoded_data(handle) is handle
    with pytest.raises(
        EncodedDataControlConflictError,
        match=r"cannot apply control\(s\): sub_chunks, root, root_only; omit controls to reuse it",
    ):
        encoded_data(handle, sub_chunks=2, root=1, root_only=True)
    with pytest.raises(EncodedDataControlConflictError, match="backend"):
        encoded_data(handle, backend="local")
    assert issubclass(EncodedDataControlConflictError, ValueError)


def test_local_refuses_controls_it_cannot_honour() -> None:
    with pytest.raises(UnsupportedControlError, match=r"'local' backend cannot honour comm='world', root=2"):
        encoded_data(X, GaussianEstimator(), comm="world", root=2)
    with pytest.raises(UnsupportedControlError, match=r"batch_size=64"):
        encoded_data(X, GaussianEstimator(), batch_size=64)
    # issue 55: float32 and the torch engine are honoured; bf16 needs torch, an unknown engine is named
    with pytest.raises(
        ValueError, match=r"precision='bfloat16' cannot be honoured \(bfloat16 needs engine='torch'\)"
    ):
        encoded_data(X, GaussianEstimator(), precision="bf16")
    with pytest.raises(ValueError, match=r"engine='cupy' is not a compute engine; registered: numpy, torch"):
        encoded_data(X, GaussianEstimator(), engine="cupy")
    with pytest.raises(TypeError, match="parallel_chunks must be True or False, got 1"):
        encoded_data(X, GaussianEstimator(), parallel_chunks=1)


def test_a_hint_is_dropped_by_the_backends_that_do_not_take_it(clean_registry: None) -> None:
    """defer_encoding is a hint (registry.HINTS): it reaches only the backends registered as taking it
    (Spark); the others encode at once, and a custom factory never sees it, where any other control
    they cannot honour is refused."""
    for backend in ("local", "model_parallel"):
        with encoded_data(X, GaussianEstimator(), backend=backend, defer_encoding=True) as handle:
            assert len(handle) == len(X)
    with pytest.raises(UnsupportedControlError, match=r"batch_size=64"):
        encoded_data(X, GaussianEstimator(), batch_size=64, defer_encoding=True)
    assert registry_module._HINTED["spark"] == {"defer_encoding"} and not registry_module._HINTED["mp"]
    seen: list[dict[str, Any]] = []
    registry_module.register_encoded_data_backend("hint_test", lambda data, **options: seen.append(options))
    encoded_data(X, GaussianEstimator(), backend="hint_test", defer_encoding=True, num_chunks=2)
    assert seen == [{"estimator": seen[0]["estimator"], "model": None, "num_chunks": 2}]
    with pytest.raises(ValueError, match=r"unknown hint\(s\) \['eager'\]"):
        registry_module.register_encoded_data_backend("hint_test2", lambda d, **o: d, hints=("eager",))


def test_local_honours_chunking_controls_with_identical_results() -> None:
    mix = MixtureDistribution([GaussianDistribution(-1.0, 1.0), GaussianDistribution(2.0, 0.5)], [0.5, 0.5])
    est = MixtureEstimator([GaussianEstimator()] * 2)
    plain = encoded_data(X, est, num_chunks=1)
    sub = encoded_data(X, est, num_chunks=2, sub_chunks=3)
    threaded = encoded_data(X, est, num_chunks=4, parallel_chunks=True, chunk_workers=2)
    assert len(sub.chunks) == 6
    assert [c[:2] for c in sub.chunks][:2] == [(0, 33), (33, 67)]
    want_n, want_ll, want = plain.pysp_em_step(est, mix)
    for handle in (sub, threaded):
        n, ll, got = handle.pysp_em_step(est, mix)
        assert n == want_n
        assert ll == pytest.approx(want_ll, rel=1e-12)
        assert got.w == pytest.approx(want.w, rel=1e-12)
    four = encoded_data(X, est, num_chunks=4)
    assert threaded.pysp_em_step(est, mix)[2].to_dict() == four.pysp_em_step(est, mix)[2].to_dict()
    assert threaded.pysp_seq_log_density_sum(mix) == four.pysp_seq_log_density_sum(mix)


@pytest.mark.parametrize(
    ("backend", "hidden", "extra"),
    [("dask", "distributed", "mixle-spark[dask]"), ("ray", "ray.data", "mixle-spark[ray]")],
)
def test_an_engine_whose_library_is_absent_names_its_extra(
    monkeypatch: pytest.MonkeyPatch, backend: str, hidden: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, hidden, None)  # importing it raises ImportError
    with pytest.raises(ImportError, match=re.escape(f"pip install '{extra}'")):
        encoded_data(X, GaussianEstimator(), backend=backend)


def test_the_declared_controls_are_encoded_datas_keyword_defaults() -> None:
    """``controls.CONTROL_DEFAULTS`` (what backends pop out of their options) is exactly the keywords of
    ``encoded_data`` after data, estimator and model, with their defaults: the two cannot drift apart."""
    import inspect

    from mixle_spark.parallel.backends import controls, registry

    signature = {
        name: parameter.default
        for name, parameter in inspect.signature(registry.encoded_data).parameters.items()
        if parameter.kind is parameter.POSITIONAL_OR_KEYWORD and name not in ("data", "estimator", "model")
    }
    assert list(controls.CONTROL_DEFAULTS.items()) == list(signature.items())
    assert registry.CONTROL_DEFAULTS is controls.CONTROL_DEFAULTS
    assert registry.take_controls is controls.take_controls
