"""fault_tolerant_training's ElasticTrainingJob, SimulatedRank and resume_batches (issue 55).

Ranks are threads; a rank killed mid-step and a job resumed from a snapshot must each consume every
rank's batches exactly once, in order.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle_spark.parallel.training.fault_tolerant_training import (
    LoaderState,
    ShardedBatches,
    resume_batches,
)

WORLD, FEATURES, CLASSES, PER_EPOCH = 3, 4, 3, 4
DATA = np.random.default_rng(8).normal(size=(400, FEATURES))
LABELS = np.random.default_rng(9).integers(0, CLASSES, size=400)


def _rows(rank: int, state: LoaderState) -> np.ndarray:
    """Rank ``r``'s batch at ``state``: 3 + r rows (ranks differ in size), a function of the position."""
    start = ((state.epoch * PER_EPOCH + state.batch_idx) * WORLD + rank) * 5
    return np.arange(start, start + 3 + rank) % len(DATA)


def _batch(rank: int, state: LoaderState) -> tuple[Any, Any]:
    import torch

    rows = _rows(rank, state)
    return torch.tensor(DATA[rows], dtype=torch.float64), torch.tensor(LABELS[rows])


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(FEATURES, CLASSES).double()


def _job(tmp: Path, **kwargs: Any) -> Any:
    from mixle_spark.parallel.training.fault_tolerant_training import ElasticTrainingJob

    return ElasticTrainingJob(
        _model, WORLD, _batch, tmp, seed=3, lr=0.5, batches_per_epoch=PER_EPOCH, **kwargs
    )


def _replay(history: list[dict[str, Any]]) -> dict[str, Any]:
    """One process, plain torch: each step on the mean loss over the union of its committed batches."""
    import torch

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for record in history:
        rows = np.concatenate(
            [_rows(r, LoaderState(3, e, r, WORLD, b)) for r, (e, b) in sorted(record["committed"].items())]
        )
        opt.zero_grad()
        x, y = torch.tensor(DATA[rows], dtype=torch.float64), torch.tensor(LABELS[rows])
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _close(got: Any, want: dict[str, Any]) -> None:
    for name, value in want.items():
        np.testing.assert_allclose(got[name].numpy(), value.numpy(), rtol=1e-12, atol=1e-14, err_msg=name)


def _per_rank(committed: list[tuple[int, int, int]]) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for rank, epoch, batch in committed:
        out[rank].append((epoch, batch))
    return dict(out)


def _stream(n: int) -> list[tuple[int, int]]:
    return [divmod(i, PER_EPOCH) for i in range(n)]


@pytest.mark.torch
def test_a_rank_killed_mid_step_is_left_out_and_rejoins_at_its_first_uncommitted_batch(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    from mixle_spark.parallel.training.training_health import ModelFlopConfig, TrainingHealthMonitor

    monitor = TrainingHealthMonitor(flop_config=ModelFlopConfig(n_params=4 * 3 + 3), peak_flops_per_sec=1e12)
    job = _job(tmp_path, health_monitor=monitor)
    records = [job.run_step() for _ in range(2)]
    killed = job.run_step(kill_ranks={1})
    assert (killed["survivors"], killed["newly_dead"]) == ([0, 2], [1])
    assert killed["committed"] == {0: (0, 2), 2: (0, 2)}
    records += [killed, job.run_step(), job.run_step()]
    assert records[-1]["survivors"] == [0, 2] and job.dead_ranks == {1}
    assert job.respawn_rank(1) == LoaderState(3, 0, 1, WORLD, 2)  # batch 2 was never committed
    back = job.run_step()
    assert back["restart"] and "restart" in back["flags"] and back["committed"][1] == (0, 2)
    records += [back] + [job.run_step() for _ in range(3)]

    ranks = _per_rank(job.committed)
    assert ranks == {0: _stream(9), 1: _stream(6), 2: _stream(9)}  # none twice, none lost, in order
    assert [r["step"] for r in records] == list(range(9))
    _close(job.model.state_dict(), _replay(records))  # each update: exactly its survivors' examples
    assert all(np.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in records)
    # 6 FLOPs per parameter per example: 3 + 4 + 5 examples a full step, 3 + 5 with rank 1 dead
    assert [s.step_flops for s in monitor.mfu_samples] == [
        6 * 15 * n for n in (12, 12, 8, 8, 8, 12, 12, 12, 12)
    ]
    assert all(0 < s.mfu < 1 for s in monitor.mfu_samples)


@pytest.mark.torch
def test_a_job_resumed_from_a_snapshot_replays_exactly_the_uncommitted_batches(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    straight = _job(tmp_path / "straight")
    for _ in range(7):
        straight.run_step()

    crashed = _job(tmp_path / "run")
    for _ in range(3):
        crashed.run_step()
    handle = crashed.checkpoint()  # at step 3, in the background while steps 3 and 4 run
    crashed.run_step()
    crashed.run_step()
    assert handle.wait() == tmp_path / "run" / "generation-000000003"
    # The job dies here: steps 3 and 4 were never snapshotted.

    resumed = _job(tmp_path / "run")
    assert resumed.resume() == 3
    assert resumed.loader_states[2] == LoaderState(3, 0, 2, WORLD, 3)
    first = resumed.run_step()
    assert first["step"] == 3 and first["restart"]
    for _ in range(3):
        resumed.run_step()
    assert crashed.committed[: 3 * WORLD] + resumed.committed == straight.committed
    assert _per_rank(straight.committed) == {r: _stream(7) for r in range(WORLD)}
    _close(
        resumed.model.state_dict(), {k: v.detach().clone() for k, v in straight.model.state_dict().items()}
    )

    from mixle_spark.parallel.training.fault_tolerant_training import ElasticTrainingJob

    other = ElasticTrainingJob(_model, WORLD, _batch, tmp_path / "run", seed=4, batches_per_epoch=PER_EPOCH)
    with pytest.raises(
        ValueError, match=r"loader positions of another run \(seeds \[3\], this job's seed is 4\)"
    ):
        other.resume()


@pytest.mark.torch
def test_the_job_refuses_bad_ranks_and_a_rank_that_fails_dies_alone(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    job = _job(tmp_path)
    with pytest.raises(ValueError, match=r"kill_ranks must hold ranks in \[0, 3\), got \[3\]"):
        job.run_step(kill_ranks={3})
    with pytest.raises(ValueError, match="rank 0 is not dead"):
        job.respawn_rank(0)
    job.run_step(kill_ranks={0})
    with pytest.raises(ValueError, match=r"kill_ranks holds ranks already dead: \[0\]"):
        job.run_step(kill_ranks={0})

    def broken(rank: int, state: LoaderState) -> Any:
        if rank == 2 and state.batch_idx == 2:
            raise OSError("disk gone")
        return _batch(rank, state)

    from mixle_spark.parallel.training.fault_tolerant_training import ElasticTrainingJob

    fragile = ElasticTrainingJob(_model, WORLD, broken, tmp_path / "f", seed=3, batches_per_epoch=PER_EPOCH)
    fragile.run_step()
    fragile.run_step()
    record = fragile.run_step()
    assert record["survivors"] == [0, 1] and record["newly_dead"] == [2]
    assert "OSError('disk gone')" in record["rank_failures"][2]
    with pytest.raises(ValueError, match="step_timeout_s must be a positive number of seconds, got 0"):
        ElasticTrainingJob(_model, WORLD, _batch, tmp_path, step_timeout_s=0)


def test_resume_batches_gives_the_rest_of_the_epoch_and_refuses_another_stream() -> None:
    loader = ShardedBatches(23, 5, seed=4, rank=1, world_size=2)
    epoch = [b.tolist() for b in loader.epoch_batches(1)]
    other_rank = ShardedBatches(23, 5, seed=4, rank=0, world_size=2).epoch_batches(1)
    assert len(epoch) == 5
    assert sorted([i for b in epoch for i in b] + [i for b in other_rank for i in b.tolist()]) == list(
        range(23)
    )
    state = LoaderState(4, 1, 1, 2, 3)
    assert [b.tolist() for b in resume_batches(loader, state)] == epoch[3:]
    assert [b.tolist() for b in resume_batches(loader, state.as_dict())] == epoch[3:]
    for _ in range(8):  # the live loader agrees: epoch 1, batch 3 is its ninth batch
        loader.next_indices()
    assert loader.next_indices().tolist() == epoch[3]
    with pytest.raises(ValueError, match="loader state has seed=5, this loader seed=4"):
        resume_batches(loader, LoaderState(5, 1, 1, 2, 3))
    with pytest.raises(ValueError, match="loader state has rank=0, this loader rank=1"):
        resume_batches(loader, LoaderState(4, 1, 0, 2, 3))
    with pytest.raises(ValueError, match=r"batch_idx=7 is past the end of epoch 1 \(5 batches\)"):
        resume_batches(loader, LoaderState(4, 1, 1, 2, 7))
    with pytest.raises(ValueError, match="rank must be in \\[0, world_size=2\\), got 2"):
        LoaderState(4, 1, 2, 2, 3)
    with pytest.raises(TypeError, match="loader must have epoch_batches"):
        resume_batches(object(), state)
    assert LoaderState(4, 1, 1, 2, 4).advanced(3, batches_per_epoch=5) == LoaderState(4, 2, 1, 2, 2)
