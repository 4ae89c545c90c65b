"""Small models, data and a single-process reference shared by the torchrun tests."""

from __future__ import annotations

from typing import Any

import numpy as np

FEATURES, HIDDEN = 5, 12  # HIDDEN divides by 2 and by 3 (tensor parallelism over either world)


def make_module(seed: int = 0) -> Any:
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1))


def squared_error(module: Any, batch: Any) -> Any:
    x, y = batch
    return ((module(x) - y) ** 2).sum(dim=1)


def global_batches(steps: int, rows: int = 25, seed: int = 3) -> list[tuple[Any, Any]]:
    """``steps`` global batches of ``rows`` rows (25: uneven over 2 and over 3 ranks)."""
    import torch

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        x = rng.normal(size=(rows, FEATURES))
        y = np.sin(x[:, :1]) + 0.1 * rng.normal(size=(rows, 1))
        out.append((torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)))
    return out


def local_share(batch: tuple[Any, Any], rank: int, world: int) -> tuple[Any, Any]:
    """Rows ``rank, rank + world, ...`` of a global batch: this rank's part."""
    return batch[0][rank::world], batch[1][rank::world]


def reference_parameters(
    batches: list[tuple[Any, Any]], *, optimizer: str = "sgd", lr: float = 0.1
) -> dict[str, Any]:
    """One process, plain torch: each step on the mean loss over the whole global batch."""
    import torch

    module = make_module()
    opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam)(module.parameters(), lr=lr)
    for batch in batches:
        opt.zero_grad()
        squared_error(module, batch).mean().backward()
        opt.step()
    return {k: v.detach().clone() for k, v in module.named_parameters()}


def assert_parameters_close(
    got: dict[str, Any], want: dict[str, Any], rtol: float = 1e-6, atol: float = 1e-7
) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_allclose(got[name].numpy(), want[name].numpy(), rtol=rtol, atol=atol, err_msg=name)
