"""torch_neural and the neural mixture on a real gloo process group."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mixle_spark.parallel.training.contracts import ParallelPlan
from tests.torchrun._models import assert_parameters_close, make_module, squared_error

pytestmark = pytest.mark.torchrun

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_object", "broadcast", "broadcast_object_list",
               "barrier", "reduce_scatter_tensor", "all_gather_into_tensor", "gather_object",
               "scatter_object_list")  # fmt: skip


def test_each_rank_trains_on_its_own_shard_and_the_only_collective_is_the_gradient_all_reduce(
    dist: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from mixle_spark.parallel.training.torch_neural import ShardedTensorData, shard_bounds
    from mixle_spark.parallel.training.torch_training import TorchDistributedBackend

    world = dist.get_world_size()
    rng = np.random.default_rng(4)
    x = torch.tensor(rng.normal(size=(47, 5)), dtype=torch.float32)
    y = torch.sin(x[:, :1])
    data = ShardedTensorData([x, y], batch_size=6, shard_by_rank=True, shuffle=True, seed=2)
    session = TorchDistributedBackend().prepare(
        make_module(), plan=ParallelPlan(dp_replicate=world), loss_fn=squared_error, lr=0.1
    )
    calls: list[str] = []
    for name in COLLECTIVES:
        real = getattr(torch.distributed, name)
        monkeypatch.setattr(
            torch.distributed, name, lambda *a, _n=name, _f=real, **k: (calls.append(_n), _f(*a, **k))[1]
        )
    receipts, schedule = data.train(session, lambda m, t: squared_error(m, t), epochs=2)
    monkeypatch.undo()
    assert calls == []
    assert (
        len(receipts) == 2 * schedule.steps_per_epoch == 2 * -(-len(range(*shard_bounds(47, world)[0])) // 6)
    )
    assert schedule.shard_sizes == tuple(b - a for a, b in shard_bounds(47, world))
    assert [r.global_examples for r in receipts[: schedule.steps_per_epoch]] == [
        sum(s) for s in schedule.real_rows
    ]

    # One process over the union of the ranks' step batches (the same rows, the same order of steps).
    reference = make_module()
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    shards = [ShardedTensorData([x, y], batch_size=6, shard_by_rank=True, rank=r, world_size=world, seed=2)
              for r in range(world)]  # fmt: skip
    for epoch in range(2):
        per_rank = [s.batches(epoch) for s in shards]
        for step in range(schedule.steps_per_epoch):
            parts = [per_rank[r][step] for r in range(world)]
            bx = torch.cat([p[0][0][: p[2]] for p in parts])
            by = torch.cat([p[0][1][: p[2]] for p in parts])
            opt.zero_grad()
            squared_error(reference, (bx, by)).mean().backward()
            opt.step()
    want = {k: v.detach() for k, v in reference.named_parameters()}
    assert_parameters_close(session.full_parameters(), want, rtol=1e-5, atol=1e-6)


def _moe_data(n: int = 24000, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    first = rng.random(n) < 1 / (1 + np.exp(-(2.0 * x + 0.5)))  # gate: logit of expert "a" is 2x + 0.5
    y = np.where(first, 2.0 * x + 1.0 + 0.3 * rng.normal(size=n), -1.5 * x - 0.5 + 0.5 * rng.normal(size=n))
    return x[:, None], y


def test_the_neural_mixture_recovers_a_two_expert_mixture_of_regressions_on_every_rank(dist: Any) -> None:
    from mixle_spark.parallel.training.neural_mixture import MixtureOfExperts
    from mixle_spark.parallel.training.torch_neural import shard_bounds

    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = _moe_data()
    start, stop = shard_bounds(len(y), world)[rank]
    model = MixtureOfExperts(1, 2, seed=0)
    fit = model.fit(x[start:stop], y[start:stop], max_its=60)
    assert fit.rows == len(y) and fit.converged
    # Maximum likelihood: at least the generating model's log-likelihood on these rows.
    xs = x[:, 0]
    gate_a = 1 / (1 + np.exp(-(2.0 * xs + 0.5)))
    dens = lambda mu, s: np.exp(-0.5 * ((y - mu) / s) ** 2) / (s * np.sqrt(2 * np.pi))  # noqa: E731
    true_ll = np.log(gate_a * dens(2.0 * xs + 1.0, 0.3) + (1 - gate_a) * dens(-1.5 * xs - 0.5, 0.5)).mean()
    assert true_ll - 1e-6 <= fit.log_likelihood[-1] < true_ll + 0.01
    assert fit.log_likelihood[-1] > fit.log_likelihood[0] + 0.2
    got = model.parameters()
    a = int(np.argmax(got["experts.weight"][:, 0]))  # the expert with slope 2
    b = 1 - a
    weight, bias, sigma = got["experts.weight"][:, 0], got["experts.bias"], got["sigma"]
    estimates = {
        "slope a": weight[a], "intercept a": bias[a], "sigma a": sigma[a],
        "slope b": weight[b], "intercept b": bias[b], "sigma b": sigma[b],
        "gate slope": got["gate.weight"][a, 0] - got["gate.weight"][b, 0],
        "gate intercept": got["gate.bias"][a] - got["gate.bias"][b],
    }  # fmt: skip
    truth = {"slope a": 2.0, "intercept a": 1.0, "sigma a": 0.3, "slope b": -1.5, "intercept b": -0.5,
             "sigma b": 0.5, "gate slope": 2.0, "gate intercept": 0.5}  # fmt: skip
    for name, value in truth.items():
        assert estimates[name] == pytest.approx(value, rel=0.05), name

    # The data-parallel fit equals one process fitting every row.
    alone = MixtureOfExperts(1, 2, seed=0)
    alone.fit(x, y, max_its=60, distributed=False)
    for name, value in alone.parameters().items():
        np.testing.assert_allclose(got[name], value, rtol=1e-6, atol=1e-9, err_msg=name)
