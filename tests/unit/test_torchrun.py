"""The torchrun backend over a thread-simulated ``torch.distributed``: these run without torch (an
optional extra). Ranks run as threads; every object crosses a pickle round trip as it would between
processes. The same cases on a real gloo process group are in ``tests/torchrun`` (``make
test-torchrun`` runs them under torchrun with 2 and 3 processes)."""

from __future__ import annotations

import pickle
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import DataTypeError
from mixle_spark.estimation import optimize
from mixle_spark.parallel import encoded_data
from mixle_spark.parallel.backends.torchrun import (
    TorchComm,
    TorchRunEncodedData,
    require_torch_distributed,
    world_comm,
)
from mixle_spark.stats import (
    CategoricalEstimator,
    GaussianEstimator,
    MixtureEstimator,
    MultivariateGaussianEstimator,
    RecordEstimator,
)


class FakeDist:
    """The object collectives of torch.distributed for ``size`` ranks running as threads."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.local = threading.local()
        self.barrier_ = threading.Barrier(size, timeout=60)
        self.slots: list[Any] = [None] * size
        self.boxes = {(a, b): queue.Queue() for a in range(size) for b in range(size)}  # type: ignore[var-annotated]

    def get_rank(self, group: Any = None) -> int:
        return int(self.local.rank)

    def get_world_size(self, group: Any = None) -> int:
        return self.size

    def _exchange(self, obj: Any) -> list[Any]:
        self.barrier_.wait()
        self.slots[self.get_rank()] = pickle.dumps(obj)
        self.barrier_.wait()
        out = [pickle.loads(b) for b in self.slots]
        self.barrier_.wait()
        return out

    def all_gather_object(self, out: list[Any], obj: Any, group: Any = None) -> None:
        out[:] = self._exchange(obj)

    def broadcast_object_list(self, box: list[Any], src: int, group: Any = None) -> None:
        box[0] = self._exchange(box[0] if self.get_rank() == src else None)[src]

    def scatter_object_list(self, out: list[Any], items: Any, src: int, group: Any = None) -> None:
        out[0] = self._exchange(items)[src][self.get_rank()]

    def send_object_list(self, box: list[Any], dst: int, group: Any = None) -> None:
        self.boxes[(self.get_rank(), dst)].put(pickle.dumps(box[0]))

    def recv_object_list(self, box: list[Any], src: int, group: Any = None) -> None:
        box[0] = pickle.loads(self.boxes[(src, self.get_rank())].get(timeout=60))

    def barrier(self, group: Any = None, async_op: bool = False) -> Any:
        self.barrier_.wait()
        return None


def run_ranks(size: int, fn: Callable[[TorchComm], Any]) -> list[Any]:
    """``fn(comm)`` on ``size`` thread-ranks; the results (or exceptions) in rank order."""
    dist = FakeDist(size)
    results: list[Any] = [None] * size

    def target(rank: int) -> None:
        dist.local.rank = rank
        try:
            results[rank] = fn(TorchComm(dist))
        except BaseException as err:
            results[rank] = err

    threads = [threading.Thread(target=target, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    return results


RNG = np.random.default_rng(21)
X = np.concatenate([RNG.normal(-2, 1, (700, 2)), RNG.normal(3, 0.5, (500, 2))])


@pytest.mark.parametrize("size", [2, 3])
def test_fits_equal_the_local_backend_on_every_rank(size: int) -> None:
    est = MixtureEstimator([MultivariateGaussianEstimator(dim=2)] * 2)
    want = optimize(X, est, max_its=5, delta=None, seed=4, print_iter=0)

    def fit(comm: TorchComm) -> Any:
        with TorchRunEncodedData(X, est, comm=comm, num_chunks=2) as handle:
            assert len(handle) == len(X)
            return optimize(handle, est, max_its=5, delta=None, seed=4, print_iter=0)

    for got in run_ranks(size, fit):
        assert not isinstance(got, BaseException), got
        np.testing.assert_allclose(got.w, want.w, rtol=1e-9)
        for a, b in zip(got.components, want.components, strict=True):
            np.testing.assert_allclose(a.covar, b.covar, rtol=1e-9)


def test_vocabularies_are_merged_across_ranks_and_root_only_scatters() -> None:
    rows = [{"x": float(i % 7), "c": "abcdef"[i * 6 // 300]} for i in range(300)]
    est = RecordEstimator({"x": GaussianEstimator(), "c": CategoricalEstimator()})
    want = optimize(rows, est, max_its=1, delta=None, print_iter=0)

    def fit(comm: TorchComm) -> Any:
        data = rows if comm.Get_rank() == 0 else None
        with TorchRunEncodedData(data, est, comm=comm, root_only=True) as handle:
            return optimize(handle, est, max_its=1, delta=None, print_iter=0)

    for got in run_ranks(3, fit):
        assert got.fields["c"].pmap == pytest.approx(want.fields["c"].pmap, rel=1e-12)


def test_a_bad_value_on_one_rank_is_raised_on_every_rank() -> None:
    rows: list[Any] = list(RNG.normal(size=60))
    rows[50] = "bad"

    def build(comm: TorchComm) -> Any:
        return TorchRunEncodedData(rows, GaussianEstimator(), comm=comm)

    results = run_ranks(2, build)
    for err in results:
        assert isinstance(err, DataTypeError)
        assert "got string 'bad' (row 51 of 60)" in str(err)


def test_missing_torch_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    with pytest.raises(ImportError, match=r"pip install 'mixle-spark\[torch\]'"):
        require_torch_distributed()
    with pytest.raises(ImportError, match="torchrun backend needs torch"):
        encoded_data(X, GaussianEstimator(), backend="TORCHRUN")


@pytest.mark.torch
def test_outside_torchrun_the_world_group_is_refused_saying_how_to_launch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No group and no torchrun environment: one line naming torchrun and ``comm=`` (was torch's
    "environment variable RANK expected"); an inconsistent launch is refused by its topology."""
    dist = pytest.importorskip("torch.distributed")
    assert not dist.is_initialized()
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match=r"launch the job with torchrun .*, or pass comm=$"):
        world_comm()
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("GROUP_RANK", "0")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(ValueError, match="implies LOCAL_RANK=1 and GROUP_RANK=0, got LOCAL_RANK=0"):
        world_comm()
    assert not dist.is_initialized()


@pytest.mark.torch
def test_the_entry_point_under_real_torchrun(tmp_path: Any) -> None:
    """With torch installed: ``torchrun --nproc-per-node 2 -m mixle_spark.cli.fit --backend torchrun``
    fits a Parquet file like the local backend."""
    import os
    import subprocess
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    pytest.importorskip("torch.distributed")
    from mixle_spark.spec import load_model

    root = Path(__file__).resolve().parents[2]
    x = np.concatenate([RNG.normal(-2, 1, 400), RNG.normal(3, 0.5, 400)])
    pq.write_table(pa.table({"value": x}), tmp_path / "x.parquet")
    spec = {"estimator": {"type": "mixture", "k": 2, "component": {"type": "gaussian"}}}
    (tmp_path / "spec.json").write_text(__import__("json").dumps(spec))
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
        "mixle_spark.cli.fit", "--backend", "torchrun", "--input", str(tmp_path / "x.parquet"),
        "--model", str(tmp_path / "spec.json"), "--output", str(tmp_path / "out"), "--seed", "1",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    fitted = load_model(tmp_path / "out" / "model.json")
    est = MixtureEstimator([GaussianEstimator()] * 2)
    want = optimize(x, est, max_its=spec.get("max_its", 100), seed=1, print_iter=0)
    np.testing.assert_allclose(sorted(fitted.w), sorted(want.w), rtol=1e-6)


def test_ranks_with_different_rows_are_refused_and_own_rows_fits_them_whole() -> None:
    """Thread-ranks: shards passed as if every rank held all the data are refused on every rank (the
    same error); with ``own_rows=True`` the handle holds the union, rank 0's rows first."""
    y = np.random.default_rng(3).normal(size=200)
    shards = [list(y[:130]), list(y[130:])]

    def plain(comm: TorchComm) -> Any:
        return TorchRunEncodedData(shards[comm.Get_rank()], GaussianEstimator(), comm=comm)

    refused = run_ranks(2, plain)
    assert all(isinstance(err, ValueError) for err in refused)
    assert str(refused[0]) == str(refused[1]) and str(refused[0]).startswith(
        "the ranks passed different numbers of rows (rank 0: 130, rank 1: 70): with in-memory data every "
        "rank passes all the rows and keeps its share of them; pass own_rows=True"
    )

    def own(comm: TorchComm) -> Any:
        with TorchRunEncodedData(
            shards[comm.Get_rank()], GaussianEstimator(), comm=comm, own_rows=True
        ) as handle:
            return len(handle), handle.offset, optimize(handle, GaussianEstimator(), max_its=1, delta=None)

    results = run_ranks(2, own)
    want = optimize(list(y), GaussianEstimator(), max_its=1, delta=None)
    assert [(n, offset) for n, offset, _ in results] == [(200, 0), (200, 130)]
    for _, _, model in results:
        assert model.mu == pytest.approx(want.mu, rel=1e-12) and model.sigma2 == pytest.approx(
            want.sigma2, rel=1e-12
        )


def test_a_fingerprint_tells_data_apart_and_never_compares_addresses() -> None:
    from mixle_spark.parallel.backends._mpi_io import fingerprint

    table = pa.table({"x": np.arange(40.0), "c": [str(i) for i in range(40)]})
    assert fingerprint(table, 40) == fingerprint(pa.table(table.to_pydict()), 40)
    changed = table.set_column(0, "x", pa.array(np.r_[np.arange(39.0), 99.0]))
    assert fingerprint(changed, 40) != fingerprint(table, 40)  # the last row is always read
    assert fingerprint(np.arange(10.0), 10) != fingerprint(np.arange(10), 10)  # dtype counts
    assert fingerprint(np.array(["a", None], dtype=object), 2) == fingerprint(["a", None], 2)
    assert fingerprint([object(), object()], 2) is None  # shown by address: the count alone is compared
