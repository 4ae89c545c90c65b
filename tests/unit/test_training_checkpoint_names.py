"""dcp_checkpoint's sharded and asynchronous saves and load_training_metadata, in one process (issue 55).

The resharding of a checkpoint written by two ranks is tested in ``tests/torchrun/test_sharded_reshard.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.checkpoint")

from mixle_spark.parallel.training import dcp_checkpoint  # noqa: E402
from mixle_spark.parallel.training.dcp_checkpoint import (  # noqa: E402
    AsyncTrainingCheckpoint,
    CheckpointIntegrityError,
    CheckpointWriteError,
    ModuleState,
    async_save_training_state,
    load_sharded,
    load_training_metadata,
    load_training_state,
    save_frozen_training_state,
    save_sharded,
    save_training_state,
)


def _model(seed: int = 0) -> tuple[Any, Any]:
    torch.manual_seed(seed)
    module = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2))
    return module, torch.optim.Adam(module.parameters(), lr=0.05)


def _train(module: Any, optimizer: Any, steps: int, seed: int = 1) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 4, generator=gen)
        optimizer.zero_grad()
        ((module(x) - x[:, :2]) ** 2).mean().backward()
        optimizer.step()


def _params(module: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _assert_equal(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        assert torch.equal(got[name], want[name]), name


def test_a_sharded_save_restores_model_and_optimizer_and_is_immutable_and_verified(tmp_path: Path) -> None:
    module, optimizer = _model()
    _train(module, optimizer, 3)
    path = save_sharded(module, optimizer, tmp_path / "ck")
    assert path == tmp_path / "ck"
    assert {"_SUCCESS", "manifest.json", ".metadata"} <= {p.name for p in path.iterdir()}
    assert not list(tmp_path.glob(".sharded-staging-*"))
    saved = _params(module)
    _train(module, optimizer, 2, seed=2)  # continue from the save: the reference for the resumed run
    want = _params(module)

    fresh, fresh_opt = _model(seed=7)
    assert load_sharded(fresh, fresh_opt, path) == 1
    _assert_equal(_params(fresh), saved)
    _train(fresh, fresh_opt, 2, seed=2)  # Adam's moments were restored too: the same two steps follow
    _assert_equal(_params(fresh), want)

    with pytest.raises(FileExistsError, match=r"ck' exists; save to a new path"):
        save_sharded(module, optimizer, path)
    shard = next(p for p in path.iterdir() if p.suffix == ".distcp")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointIntegrityError, match=f"file '{shard.name}' does not match its manifest"):
        load_sharded(fresh, fresh_opt, path)
    (path / "_SUCCESS").unlink()
    with pytest.raises(CheckpointIntegrityError, match="is incomplete"):
        load_sharded(fresh, fresh_opt, path)


def test_an_async_save_writes_the_state_of_save_time_and_publishes_on_wait(tmp_path: Path) -> None:
    module, optimizer = _model()
    _train(module, optimizer, 2)
    at_save = _params(module)
    handle = async_save_training_state(ModuleState(module, optimizer), tmp_path, step=2, extra={"batch": 2})
    _train(module, optimizer, 3, seed=3)  # training goes on while the write runs
    assert not handle.done and [p.name for p in tmp_path.iterdir()] == [".staging-000000002"]
    generation = handle.wait()
    assert handle.done and generation == tmp_path / "generation-000000002"
    assert handle.wait() is None  # nothing pending any more

    fresh, fresh_opt = _model(seed=5)
    loaded = load_training_state(ModuleState(fresh, fresh_opt), tmp_path)
    assert (loaded.step, loaded.extra, loaded.world_size) == (2, {"batch": 2}, 1)
    _assert_equal(_params(fresh), at_save)


def test_a_failed_async_write_is_raised_by_wait_and_nothing_is_published(tmp_path: Path) -> None:
    module, optimizer = _model()
    checkpoints = AsyncTrainingCheckpoint(tmp_path, keep=2)
    frozen = {"model": module.state_dict(), "optimizer": {"hook": lambda: 0}}  # cannot be pickled
    checkpoints.save(frozen, step=1)
    with pytest.raises(
        CheckpointWriteError, match=r"step 1 .* failed \(\w+Error: Can't pickle .*\); nothing was published"
    ):
        checkpoints.wait()
    assert list(tmp_path.iterdir()) == []  # the failed staging directory (ours) is removed
    checkpoints.save(ModuleState(module, optimizer), step=2)  # the next save works
    assert checkpoints.wait() == tmp_path / "generation-000000002"
    with pytest.raises(ValueError, match="timeout_s must be a positive number of seconds, got 0"):
        AsyncTrainingCheckpoint(tmp_path, timeout_s=0)


def test_frozen_state_saves_and_loads_like_a_session(tmp_path: Path) -> None:
    module, optimizer = _model()
    _train(module, optimizer, 1)
    state = ModuleState(module, optimizer).state_dict()
    save_frozen_training_state(state["model"], state["optimizer"], tmp_path, step=1, extra=[1, 2])
    fresh, fresh_opt = _model(seed=3)
    assert load_training_state(ModuleState(fresh, fresh_opt), tmp_path).extra == [1, 2]
    _assert_equal(_params(fresh), _params(module))
    with pytest.raises(TypeError, match="must be state dictionaries, got list"):
        save_frozen_training_state([1], {}, tmp_path, step=2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="extra must be JSON-ready"):
        save_training_state(ModuleState(module, optimizer), tmp_path, step=3, extra={"f": object()})


def test_metadata_is_verified_and_an_old_ranks_state_never_goes_to_a_new_world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, optimizer = _model()
    save_training_state(ModuleState(module, optimizer), tmp_path, step=4, extra={"batch_idx": 4})
    meta = load_training_metadata(tmp_path)
    assert meta == {
        "generation": str(tmp_path / "generation-000000004"),
        "step": 4,
        "saved_world_size": 1,
        "world_size": 1,
        "world_size_changed": False,
        "parallel_plan": None,
        "extra": {"batch_idx": 4},
        "rank_local_state_status": "native",
        "requires_rank_local_transform": False,
    }
    with pytest.raises(ValueError, match="rank_local_transform is for a change of world size"):
        load_training_metadata(tmp_path, rank_local_transform=lambda old, saved, rank, world: old[0])

    monkeypatch.setattr(dcp_checkpoint, "rank_world", lambda: (1, 2))  # as rank 1 of a 2-rank job
    changed = load_training_metadata(tmp_path)
    assert (changed["extra"], changed["rank_local_state_status"], changed["world_size_changed"]) == (
        None,
        "transform_required",
        True,
    )
    calls = []

    def split(old: tuple[Any, ...], saved: int, rank: int, world: int) -> Any:
        calls.append((old, saved, rank, world))
        return {"batch_idx": old[0]["batch_idx"], "share": f"{rank}/{world}"}

    moved = load_training_metadata(tmp_path, rank_local_transform=split)
    assert calls == [(({"batch_idx": 4},), 1, 1, 2)]
    assert (
        moved["extra"] == {"batch_idx": 4, "share": "1/2"}
        and moved["rank_local_state_status"] == "transformed"
    )
    monkeypatch.undo()

    sidecar = tmp_path / "generation-000000004" / "rank-00000.json"
    sidecar.write_text(sidecar.read_text().replace('"batch_idx": 4', '"batch_idx": 5'))
    with pytest.raises(
        CheckpointIntegrityError, match=r"file 'rank-00000\.json' does not match its manifest"
    ):
        load_training_metadata(tmp_path)
    save_sharded(module, optimizer, tmp_path / "weights")
    with pytest.raises(CheckpointIntegrityError, match="is a sharded save"):
        load_training_metadata(tmp_path, generation=tmp_path / "weights")
    with pytest.raises(FileNotFoundError, match="no published checkpoint generation"):
        load_training_metadata(tmp_path / "weights")
