"""model_decomposition's reference names: compute_cost (work and bytes of a model), shard_children (the
units a node splits into) and ModelCut (a unit range on a device), on real models."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import numpy as np
import pytest

from mixle_spark.parallel.model_decomposition import (
    ModelCut,
    Reduction,
    compute_cost,
    decompose_model,
    shard_children,
)
from mixle_spark.parallel.planner import DeviceSpec, Resources
from mixle_spark.stats import (
    CategoricalDistribution,
    CompositeDistribution,
    GaussianDistribution,
    MixtureDistribution,
    MultivariateGaussianDistribution,
    OptionalDistribution,
    RecordDistribution,
)

RNG = np.random.default_rng(3)


def mvg(d: int) -> MultivariateGaussianDistribution:
    a = RNG.normal(size=(d, d))
    return MultivariateGaussianDistribution(RNG.normal(size=d), a @ a.T + d * np.eye(d))


def held(node: Any) -> tuple[int, int]:
    """(array elements + numeric scalars, their bytes) of a leaf's attributes."""
    values = list(vars(node).values())
    arrays = [v for v in values if isinstance(v, np.ndarray)]
    scalars = sum(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    return sum(a.size for a in arrays) + scalars, sum(a.nbytes for a in arrays) + 8 * scalars


def test_compute_cost_follows_the_components_sizes() -> None:
    small, large = mvg(2), mvg(8)
    for comp in (small, large):
        units, nbytes = held(comp)
        assert compute_cost(comp) == (1.0 + units, nbytes)
        assert compute_cost(comp)[0] - 1.0 == nbytes / 8  # float64 parameters: work is their count
    assert compute_cost(large)[1] > 10 * compute_cost(small)[1]
    mix = MixtureDistribution([small, large, large], [0.2, 0.4, 0.4])
    own_units, own_bytes = held(mix)  # w and log_w
    work, nbytes = compute_cost(mix)
    assert work == 1.0 + own_units + compute_cost(small)[0] + compute_cost(large)[0]  # `large` once
    assert nbytes == own_bytes + compute_cost(small)[1] + compute_cost(large)[1]


def test_shard_children_are_the_units_of_the_node() -> None:
    comps = [GaussianDistribution(float(i), 1.0) for i in range(4)]
    mix = MixtureDistribution(comps, [0.25] * 4)
    assert shard_children(mix) == tuple(comps) and all(
        a is b for a, b in zip(shard_children(mix), comps, strict=True)
    )
    cat = CategoricalDistribution({"a": 0.5, "b": 0.5})
    record = RecordDistribution({"amount": comps[0], "channel": cat})
    assert shard_children(record) == (comps[0], cat)
    assert shard_children(CompositeDistribution((cat, comps[1]))) == (cat, comps[1])
    assert shard_children(OptionalDistribution(mix, 0.1)) == ()  # a wrapper does not split
    assert shard_children(comps[0]) == ()


def test_model_cuts_cover_every_child_once_and_balance_the_cost() -> None:
    comps = [mvg(8) for _ in range(4)] + [mvg(2) for _ in range(8)]  # equal counts would not balance
    mix = MixtureDistribution(comps, [1 / 12] * 12)
    resources = Resources.from_specs([DeviceSpec(f"dev:{i}", memory_bytes=10_000) for i in range(3)])
    dec = decompose_model(mix, resources)  # the model does not fit one device: it is cut
    assert dec.is_model_parallel and all(isinstance(c, ModelCut) for c in dec.cuts)
    assert [c.device for c in dec.cuts] == list(resources.devices)
    assert all(c.reduction is Reduction.LOGSUMEXP_RESPONSIBILITY for c in dec.cuts)
    children = shard_children(mix)
    placed = [child for cut in dec.cuts for child in children[cut.start : cut.stop]]
    assert len(placed) == 12 and all(a is b for a, b in zip(placed, comps, strict=True))
    works = [sum(compute_cost(c)[0] for c in children[cut.start : cut.stop]) for cut in dec.cuts]
    assert works == dec.extra["cut_work"]
    heaviest = max(compute_cost(c)[0] for c in comps)
    assert max(works) - sum(works) / 3 <= heaviest / 2  # balanced within half a unit
    fast = Resources.from_specs(
        [DeviceSpec("slow", memory_bytes=10_000), DeviceSpec("fast", memory_bytes=10_000, throughput=2.0)]
    )
    slow_cut, fast_cut = decompose_model(mix, fast).cuts
    assert (slow_cut.device.name, fast_cut.device.name, fast_cut.stop) == ("slow", "fast", 12)
    slow_work = sum(compute_cost(c)[0] for c in children[slow_cut.start : slow_cut.stop])
    assert abs(slow_work / sum(works) - 1 / 3) < heaviest / sum(works)


def test_a_model_cut_is_its_range_on_a_device() -> None:
    device = DeviceSpec("cpu:1")
    cut = ModelCut(device, 2, 5, "logsumexp_responsibility")
    start, stop = cut
    assert (start, stop) == (2, 5) and cut == (2, 5) and list(cut) == [2, 5] and cut.num_units == 3
    assert cut.device is device and cut.reduction is Reduction.LOGSUMEXP_RESPONSIBILITY
    assert cut == ModelCut(device, 2, 5, Reduction.LOGSUMEXP_RESPONSIBILITY)
    assert cut != ModelCut(DeviceSpec("cpu:2"), 2, 5, Reduction.LOGSUMEXP_RESPONSIBILITY)
    assert cut != ModelCut(device, 2, 5, Reduction.SUM)
    assert len({cut, ModelCut(device, 2, 5, Reduction.LOGSUMEXP_RESPONSIBILITY)}) == 1 and hash(cut) == hash(
        (2, 5)
    )
    for again in (pickle.loads(pickle.dumps(cut)), copy.deepcopy(cut)):
        assert again == cut and again.device == device and isinstance(again, ModelCut)
    assert repr(cut) == "ModelCut(device='cpu:1', start=2, stop=5, reduction='logsumexp_responsibility')"
    with pytest.raises(AttributeError, match="ModelCut is immutable: cannot set 'device'"):
        cut.device = DeviceSpec("cpu:3")  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"0 <= start < stop, got \[3, 3\)"):
        ModelCut(device, 3, 3, Reduction.SUM)
    with pytest.raises(TypeError, match=r"ModelCut start must be an int, got 1\.5"):
        ModelCut(device, 1.5, 3, Reduction.SUM)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'sideways' is not a valid Reduction"):
        ModelCut(device, 0, 1, "sideways")


def test_a_decomposition_with_model_cuts_stays_json() -> None:
    mix = MixtureDistribution([GaussianDistribution(float(k), 1.0) for k in range(10)], [0.1] * 10)
    dec = decompose_model(mix, Resources.local(3), n_data=10)
    assert dec.cuts == ((0, 3), (3, 7), (7, 10))
    assert json.loads(json.dumps(dec.to_dict()))["cuts"] == [[0, 3], [3, 7], [7, 10]]
    assert [c.device.name for c in dec.cuts] == ["cpu:0", "cpu:1", "cpu:2"]
