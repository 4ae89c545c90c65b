"""The training modules in one process: refusals without their libraries, loaders, health, bad input.

Their distributed behaviour is tested under torchrun in ``tests/torchrun``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from mixle_spark.parallel.training.training_health import RollingBaseline, TrainingHealthMonitor


@pytest.mark.parametrize(
    ("module", "call", "extra"),
    [
        ("torch_training", lambda m: m.init_process_group(), "torch"),
        ("dcp_checkpoint", lambda m: m.save_training_state(object(), "x", step=1), "torch"),
        ("dcp_checkpoint", lambda m: m.save_sharded(object(), object(), "x"), "torch"),
        ("dcp_checkpoint", lambda m: m.load_training_metadata("x"), "torch"),
        ("fault_tolerant_training", lambda m: m.ElasticTrainingJob(object, 1, print, "x"), "torch"),
        ("torch_neural", lambda m: m.ShardedTensorData([np.zeros(3)], batch_size=1), "torch"),
        ("neural_mixture", lambda m: m.MixtureOfExperts(1, 2), "torch"),
        ("lightning_data", lambda m: m.encoded_datamodule(np.zeros(3)), "lightning"),
    ],
)
def test_each_module_imports_without_its_library_and_refuses_in_one_line_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, call: Any, extra: str
) -> None:
    import importlib

    for name in [m for m in sys.modules if m == "torch" or m.startswith(("torch.", "lightning"))]:
        monkeypatch.delitem(sys.modules, name)
    for name in ("torch", "torch.distributed", "lightning"):
        monkeypatch.setitem(sys.modules, name, None)
    imported = importlib.import_module(f"mixle_spark.parallel.training.{module}")
    with pytest.raises(ImportError, match=rf"^\S+.* needs .*: pip install 'mixle-spark\[{extra}\]'$") as err:
        call(imported)
    assert "\n" not in str(err.value)


def test_megatron_is_refused_in_one_line_without_megatron_core() -> None:
    from mixle_spark.parallel.training.megatron_training import MegatronBackend, megatron_unavailable

    reason = megatron_unavailable()
    assert reason is not None and reason.startswith("Megatron training needs") and "\n" not in reason
    from mixle_spark.parallel.training.contracts import ParallelPlan

    with pytest.raises(RuntimeError, match=r"^Megatron training needs"):
        MegatronBackend().prepare(object(), plan=ParallelPlan())


def test_sharded_batches_cover_each_epoch_once_and_resume_from_their_state() -> None:
    from mixle_spark.parallel.training.fault_tolerant_training import ShardedBatches

    ranks = [ShardedBatches(23, 5, seed=4, rank=r, world_size=2) for r in range(2)]
    assert ranks[0].batches_per_epoch == 5
    epoch = np.concatenate([b.next_indices() for _ in range(5) for b in ranks])
    assert sorted(epoch.tolist()) == list(range(23))
    straight = ShardedBatches(23, 5, seed=4)
    for _ in range(7):
        straight.next_indices()
    state = straight.state.as_dict()
    resumed = ShardedBatches(23, 5, seed=4)
    resumed.load_state(state)
    assert state == {"seed": 4, "epoch": 1, "batch_idx": 2, "rank": 0, "world_size": 1}
    assert [resumed.next_indices().tolist() for _ in range(4)] == [
        straight.next_indices().tolist() for _ in range(4)
    ]
    with pytest.raises(ValueError, match="loader state has seed 4, this loader 5"):
        ShardedBatches(23, 5, seed=5).load_state(state)


def test_the_health_baseline_is_robust_and_causal() -> None:
    baseline = RollingBaseline(window=10, min_samples=4)
    for value in (1.0, 1.1, 0.9, 1.0):
        baseline.add(value)
    median, scale = baseline.center_scale()
    assert median == pytest.approx(1.0) and scale == pytest.approx(1.4826 * 0.05)
    assert baseline.zscore(1.0 + 6 * scale) == pytest.approx(6.0)
    monitor = TrainingHealthMonitor(min_samples=4)
    losses = [2.0, 1.8, 1.7, 1.65, 1.6, 16.5, 1.58, float("inf"), 1.55]
    flags = [monitor.observe_step(i, loss=v, grad_norm=1.0).flags for i, v in enumerate(losses)]
    assert flags == [(), (), (), (), (), ("loss_spike",), (), ("nonfinite_loss",), ()]
    assert monitor.observe_step(9, loss=1.5, grad_norm=40.0, restart=True).flags == (
        "grad_norm_spike",
        "restart",
    )
    assert monitor.report()["flag_counts"] == {
        "nonfinite_loss": 1, "nonfinite_grad_norm": 0, "loss_spike": 1, "grad_norm_spike": 1, "restart": 1,
    }  # fmt: skip


@pytest.mark.torch
def test_one_process_sessions_train_in_bf16_and_refuse_bad_arguments() -> None:
    torch = pytest.importorskip("torch")
    from mixle_spark.parallel.training.contracts import ParallelPlan
    from mixle_spark.parallel.training.torch_training import TorchDistributedBackend

    module = torch.nn.Linear(3, 1)

    def loss_fn(m: Any, batch: Any) -> Any:
        return ((m(batch[0]) - batch[1]) ** 2).sum(dim=1)

    session = TorchDistributedBackend().prepare(
        module, plan=ParallelPlan(), loss_fn=loss_fn, precision="bf16", distributed=False
    )
    receipt = session.step((torch.ones(8, 3), torch.zeros(8, 1)))
    assert receipt.precision == "bf16" and receipt.global_examples == 8 and not receipt.skipped
    with pytest.raises(ValueError, match="does not support precision='fp8'"):
        TorchDistributedBackend().prepare(module, plan=ParallelPlan(), loss_fn=loss_fn, precision="fp8")
    with pytest.raises(ValueError, match="optimizer must be one of sgd, adam, adamw"):
        TorchDistributedBackend().prepare(module, plan=ParallelPlan(), loss_fn=loss_fn, optimizer="lbfgs")
    with pytest.raises(ValueError, match=r"one loss per example \(a 1-D tensor\), got shape \(\)"):
        bad = TorchDistributedBackend().prepare(
            module, plan=ParallelPlan(), loss_fn=lambda m, b: loss_fn(m, b).mean(), distributed=False
        )
        bad.step((torch.ones(2, 3), torch.zeros(2, 1)))


@pytest.mark.torch
def test_the_neural_mixture_names_a_bad_column_and_row() -> None:
    pytest.importorskip("torch")
    import pandas as pd

    from mixle_spark.parallel.training.neural_mixture import MixtureOfExperts, covariate_tensors

    table = pd.DataFrame({"x": [0.1, 0.2, np.nan], "y": [1.0, 2.0, 3.0], "s": ["a", "b", "c"]})
    with pytest.raises(ValueError, match=r"column 'x' row 2: nan \(expected a finite number\)"):
        covariate_tensors(table, ["x"], "y")
    with pytest.raises(ValueError, match=r"column\(s\) \['z'\] not found"):
        covariate_tensors(table, ["z"], "y")
    with pytest.raises(ValueError, match="column 's' must be numeric"):
        covariate_tensors(table, ["s"], "y")
    with pytest.raises(ValueError, match=r"x must have shape \(rows, 2\), got \(3, 1\)"):
        MixtureOfExperts(2, 2).fit(np.zeros((3, 1)), np.zeros(3), distributed=False)
