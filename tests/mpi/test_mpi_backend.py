"""The mpi backend under mpiexec (SPMD: every rank runs every test, in the same order).

Each test fits on every rank with the local backend and with the mpi backend from the same data and
seed, and requires the same estimates to 1e-9 relative (the local fit is the reference).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mixle_spark.errors import DataTypeError, SchemaError
from mixle_spark.estimation import best_of, initialize, optimize
from mixle_spark.parallel.backends.local import LocalEncodedData
from mixle_spark.parallel.backends.mpi import MPIEncodedData, make_mpi
from mixle_spark.parallel.backends.registry import UnsupportedControlError
from mixle_spark.stats import (
    CategoricalEstimator,
    GaussianEstimator,
    MixtureEstimator,
    MultivariateGaussianEstimator,
    RecordEstimator,
)
from tests.mpi._launch import spmd

pytestmark = [pytest.mark.mpi, spmd]

RTOL = 1e-9


def _flat(value: Any, path: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{path}.{k}"))
        return out
    if isinstance(value, list | tuple | np.ndarray):
        out = {}
        for i, v in enumerate(value):
            out.update(_flat(v, f"{path}[{i}]"))
        return out
    return {path: value}


def assert_same_model(a: Any, b: Any, rtol: float = RTOL) -> None:
    fa, fb = _flat(a.to_dict()), _flat(b.to_dict())
    assert fa.keys() == fb.keys()
    for key, va in fa.items():
        vb = fb[key]
        if isinstance(va, float | int) and not isinstance(va, bool):
            assert vb == pytest.approx(va, rel=rtol, abs=1e-12), key
        else:
            assert va == vb, key


def _gaussian_data(n: int = 1500) -> list[float]:
    rng = np.random.default_rng(11)
    return list(np.concatenate([rng.normal(-3, 1, n // 2), rng.normal(3, 0.7, n - n // 2)]))


def _records(n: int = 1200) -> pa.Table:
    rng = np.random.default_rng(5)
    z = rng.integers(0, 2, n)
    labels = np.where(z == 0, rng.choice(["a", "b", "c"], n), rng.choice(["c", "d", "e"], n))
    order = np.argsort(labels, kind="stable")  # ranks see different vocabularies
    return pa.table({"amount": rng.normal(np.where(z == 0, -2.0, 2.0))[order], "channel": labels[order]})


def _record_estimator() -> MixtureEstimator:
    component = RecordEstimator(
        {"amount": GaussianEstimator(), "channel": CategoricalEstimator(pseudo_count=0.5)}
    )
    return MixtureEstimator([component] * 2)


def test_gaussian_mixture_equals_local(comm: Any) -> None:
    data, est = _gaussian_data(), MixtureEstimator([GaussianEstimator()] * 3)
    local = optimize(data, est, max_its=15, delta=None, seed=3)
    with MPIEncodedData(data, est, comm=comm, chunk_size=97, sub_chunks=2) as handle:
        assert len(handle) == len(data)
        assert comm.allgather(handle.offset) == [
            len(data) * r // comm.Get_size() for r in range(comm.Get_size())
        ]
        model = optimize(handle, est, max_its=15, delta=None, seed=3)
    assert_same_model(local, model)
    assert model.fit_result.log_likelihood == pytest.approx(local.fit_result.log_likelihood, rel=RTOL)
    assert len({repr(m) for m in comm.allgather(model.to_dict())}) == 1  # the same model on every rank


def test_initialization_equals_local_for_a_seed(comm: Any) -> None:
    data, est = _gaussian_data(), MixtureEstimator([GaussianEstimator()] * 4)
    for seed in (0, 9):
        for init in ("kmeans||", "random"):
            with MPIEncodedData(data, est, comm=comm, num_chunks=3) as handle:
                want = initialize(data, est, seed=seed, init=init)
                assert_same_model(want, initialize(handle, est, seed=seed, init=init))


def test_best_of_trials_share_passes_and_equal_local(comm: Any) -> None:
    data, est = _gaussian_data(), MixtureEstimator([GaussianEstimator()] * 3)
    _ll, local = best_of(data, est, trials=3, max_its=10, delta=None, seed=6)
    with MPIEncodedData(data, est, comm=comm, chunk_size=211) as handle:
        _ll, model = best_of(handle, est, trials=3, max_its=10, delta=None, seed=6)
    assert_same_model(local, model)
    assert len({repr(m) for m in comm.allgather(model.to_dict())}) == 1


@pytest.mark.parametrize("init", ["random", "kmeans||"])
def test_weighted_initialization_and_step_equal_local(comm: Any, init: str) -> None:
    from tests.unit.test_backends_agree import EST, flat, weighted_table

    table = weighted_table()
    local_start = initialize(table, EST, seed=3, init=init, weights="w", column="x")
    local_step = optimize(table, EST, max_its=1, delta=None, seed=3, init=init, weights="w", column="x")
    with MPIEncodedData(table, EST, comm=comm, weights="w", column="x") as handle:
        start = initialize(handle, EST, seed=3, init=init)
        step = optimize(handle, EST, max_its=1, delta=None, seed=3, init=init)
    np.testing.assert_allclose(flat(start), flat(local_start), rtol=1e-12)
    np.testing.assert_allclose(flat(step), flat(local_step), rtol=1e-10)


def test_record_with_categorical_merges_vocabularies_across_ranks(comm: Any) -> None:
    table, est = _records(), _record_estimator()
    local = optimize(table, est, max_its=12, delta=None, seed=1)
    with MPIEncodedData(table, est, comm=comm) as handle:
        seen = comm.allgather(
            sorted(
                set(table.column("channel").to_pylist()[handle.offset : handle.offset + handle.local_rows])
            )
        )
        assert seen[0] != seen[-1]
        model = optimize(handle, est, max_its=12, delta=None, seed=1)
    assert_same_model(local, model)


def test_full_covariance_mixture_from_a_starting_model(comm: Any) -> None:
    rng = np.random.default_rng(2)
    cov = np.array([[1.0, 0.5, 0.0], [0.5, 2.0, -0.3], [0.0, -0.3, 0.7]])
    x = np.concatenate([rng.multivariate_normal(m, cov, 400) for m in ([0, 0, 0], [3, -2, 1])])
    data = [row for row in x]
    est = MixtureEstimator([MultivariateGaussianEstimator()] * 2)
    start = initialize(data, est, seed=4)
    local = optimize(data, est, max_its=10, delta=None, prev_estimate=start)
    with MPIEncodedData(data, est, comm=comm, chunk_size=64) as handle:
        model = optimize(handle, est, max_its=10, delta=None, prev_estimate=start)
    assert_same_model(local, model)


def test_missing_coordinates_a_covariance_form_and_labels_equal_local(comm: Any) -> None:
    # what issue 32 added lives in the statistics and the encoding: the mpi backend needs no change
    from tests.unit.test_missing_coordinates import breadth_case

    table, est = breadth_case()
    local = optimize(table, est, max_its=6, delta=None, seed=3, backend="local")
    with MPIEncodedData(table, est, comm=comm, chunk_size=128) as handle:
        model = optimize(handle, est, max_its=6, delta=None, seed=3)
    assert_same_model(local, model)
    assert model.covariance == "EEE"


def test_weights_and_root_only_scatter(comm: Any) -> None:
    data, est = _gaussian_data(600), MixtureEstimator([GaussianEstimator()] * 2)
    w = np.random.default_rng(8).uniform(0.2, 3.0, len(data))
    with LocalEncodedData(data, est, weights=w) as handle:
        local = optimize(handle, est, max_its=8, delta=None, seed=2)
    root = comm.Get_size() - 1
    mine = (data, w) if comm.Get_rank() == root else (None, None)
    with MPIEncodedData(mine[0], est, comm=comm, root=root, root_only=True, weights=mine[1]) as handle:
        assert comm.allreduce(handle.local_rows) == len(data)
        model = optimize(handle, est, max_its=8, delta=None, seed=2)
    assert_same_model(local, model)
    assert model.fit_result.history[-1].nobs == pytest.approx(w.sum(), rel=1e-12)


def test_parquet_directory_read_in_shares(comm: Any, shared_dir: Path) -> None:
    table, est = _records(), _record_estimator()
    weights = np.linspace(0.5, 1.5, table.num_rows)
    table = table.append_column("w", pa.array(weights))
    if comm.Get_rank() == 0:
        pq.write_table(table.slice(0, 500), shared_dir / "part-0.parquet", row_group_size=128)
        pq.write_table(table.slice(500), shared_dir / "part-1.parquet", row_group_size=300)
        (shared_dir / "_SUCCESS").write_text("")
    comm.Barrier()
    with LocalEncodedData(table, est, weights="w") as handle:
        local = optimize(handle, est, max_its=10, delta=None, seed=6)
    with make_mpi(str(shared_dir), est, comm=comm, weights="w") as handle:
        assert handle.local_rows < table.num_rows
        model = optimize(handle, est, max_its=10, delta=None, seed=6)
    assert_same_model(local, model)


def test_delta_table_snapshot_is_read_without_spark(comm: Any, shared_dir: Path) -> None:
    import json

    data, est = _gaussian_data(900), MixtureEstimator([GaussianEstimator()] * 2)
    table = pa.table({"x": data})
    if comm.Get_rank() == 0:
        log = shared_dir / "_delta_log"
        log.mkdir()
        for i, (a, b) in enumerate(((0, 400), (400, 900), (0, 50))):
            pq.write_table(table.slice(a, b - a), shared_dir / f"part-{i}.parquet")
        meta = {
            "metaData": {
                "id": "t",
                "format": {"provider": "parquet"},
                "schemaString": "{}",
                "partitionColumns": [],
            }
        }
        commits = [
            [
                {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                meta,
                {"add": {"path": "part-0.parquet"}},
            ],
            [{"add": {"path": "part-2.parquet"}}, {"add": {"path": "part-1.parquet"}}],
            [{"remove": {"path": "part-2.parquet"}}],
        ]
        for v, actions in enumerate(commits):
            (log / f"{v:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    comm.Barrier()
    local = optimize(data, est, max_its=6, delta=None, seed=1)
    with MPIEncodedData(str(shared_dir), est, comm=comm) as handle:
        assert len(handle) == 900
        model = optimize(handle, est, max_its=6, delta=None, seed=1)
    assert_same_model(local, model)


def test_bad_value_on_one_rank_raises_the_same_error_everywhere(comm: Any) -> None:
    data: list[Any] = _gaussian_data(300)
    data[-1] = "12.5x"  # only the last rank's share holds it
    est = GaussianEstimator()
    with pytest.raises(DataTypeError) as local_err:
        LocalEncodedData(data, est)
    with pytest.raises(DataTypeError, match=r"12\.5x.*row 300 of 300") as mpi_err:
        MPIEncodedData(data, est, comm=comm)
    assert str(mpi_err.value) == str(local_err.value)
    assert mpi_err.value.mpi_rank == comm.Get_size() - 1


def test_an_e_step_failure_on_one_rank_is_raised_everywhere(comm: Any) -> None:
    data, est = _gaussian_data(200), GaussianEstimator()
    real = optimize(data, est, max_its=2, delta=None)

    class FailsOnRankOne:  # a model whose log-density fails on one rank only
        def seq_log_density(self, enc: Any) -> Any:
            if comm.Get_rank() == 1:
                raise SchemaError("boom on rank 1")
            return real.seq_log_density(enc)

    with MPIEncodedData(data, est, comm=comm) as handle:
        with pytest.raises(SchemaError, match="boom on rank 1"):
            handle.pysp_seq_log_density_sum(FailsOnRankOne())  # type: ignore[arg-type]
        nobs, ll = handle.pysp_seq_log_density_sum(real)  # the handle still works afterwards
    assert nobs == 200
    assert ll == pytest.approx(real.fit_result.log_likelihood, rel=RTOL)


def test_refused_controls_are_named(comm: Any) -> None:
    with pytest.raises(UnsupportedControlError, match="placement='p'"):
        make_mpi([1.0], GaussianEstimator(), comm=comm, placement="p")
    with pytest.raises(ValueError, match="root must be a rank"):
        MPIEncodedData([1.0], GaussianEstimator(), comm=comm, root=comm.Get_size())


def test_model_parallel_estimator_over_mpi_equals_the_plain_local_fit() -> None:
    from mixle_spark.parallel import ModelParallelEstimator

    est = MixtureEstimator([GaussianEstimator()] * 2)
    data = _gaussian_data()
    want = optimize(data, est, max_its=5, delta=None, seed=3, print_iter=0)
    wrapped = ModelParallelEstimator(est, num_workers=2)
    got = optimize(data, wrapped, max_its=5, delta=None, seed=3, print_iter=0, backend="mpi")
    assert_same_model(got, want)
    via_control = optimize(
        data, est, max_its=5, delta=None, seed=3, print_iter=0, backend="mpi", num_workers=2
    )
    assert_same_model(via_control, want)


def _own_bounds(n: int, size: int) -> list[int]:
    """Uneven shard boundaries (rank r holds about r + 1 parts; rank 0 holds none when ranks > 2)."""
    parts = np.cumsum([0, *[(r + 1) if (size < 3 or r) else 0 for r in range(size)]])
    return [int(n * p // parts[-1]) for p in parts]


def test_own_rows_fit_equals_local_on_the_rows_in_rank_order(comm: Any) -> None:
    """Each rank passes only its own (uneven) shard and its weights: the fit is the local fit of the
    rows in rank order; the records' vocabularies differ per rank and are merged."""
    table, est = _records(), _record_estimator()
    w = np.random.default_rng(4).uniform(0.2, 2.0, table.num_rows)
    with LocalEncodedData(table, est, weights=w) as handle:
        local = optimize(handle, est, max_its=8, delta=None, seed=5)
    bounds = _own_bounds(table.num_rows, comm.Get_size())
    start, stop = bounds[comm.Get_rank()], bounds[comm.Get_rank() + 1]
    mine = table.slice(start, stop - start)
    with MPIEncodedData(mine, est, comm=comm, own_rows=True, weights=w[start:stop]) as handle:
        assert handle.local_rows == stop - start and len(handle) == table.num_rows
        model = optimize(handle, est, max_its=8, delta=None, seed=5)
    assert_same_model(local, model)


def test_own_rows_reads_each_ranks_own_path(comm: Any, shared_dir: Path) -> None:
    data, est = _gaussian_data(900), MixtureEstimator([GaussianEstimator()] * 2)
    bounds = _own_bounds(len(data), comm.Get_size())
    rank = comm.Get_rank()
    path = shared_dir / f"rank-{rank}.parquet"
    pq.write_table(pa.table({"x": np.asarray(data[bounds[rank] : bounds[rank + 1]])}), path)
    local = optimize(data, est, max_its=6, delta=None, seed=1)
    with MPIEncodedData(str(path), est, comm=comm, own_rows=True) as handle:
        assert len(handle) == 900
        model = optimize(handle, est, max_its=6, delta=None, seed=1)
    assert_same_model(local, model)


def test_ranks_passing_their_own_rows_without_own_rows_are_refused_on_every_rank(comm: Any) -> None:
    """Without ``own_rows`` each rank would keep its share of different data (a fit of a fraction of
    the rows, silently): refused alike on every rank, whether the counts differ or only the values."""
    data, est = _gaussian_data(600), GaussianEstimator()
    size, rank = comm.Get_size(), comm.Get_rank()
    bounds = _own_bounds(len(data), size)
    with pytest.raises(ValueError, match=r"^the ranks passed different numbers of rows \(rank 0: ") as uneven:
        MPIEncodedData(data[bounds[rank] : bounds[rank + 1]], est, comm=comm)
    counts = ", ".join(f"rank {r}: {bounds[r + 1] - bounds[r]:,}" for r in range(size))
    assert f"({counts}): with in-memory data every rank passes all the rows" in str(uneven.value)
    assert str(uneven.value).endswith("pass own_rows=True when each rank holds only its own rows")
    even = np.asarray(data[rank * 100 : (rank + 1) * 100])
    with pytest.raises(ValueError, match=r"different rows \(100 each, with different values\)"):
        MPIEncodedData(even, est, comm=comm)
    with pytest.raises(ValueError, match=r"root_only=True .* or own_rows=True .*, not both"):
        MPIEncodedData(data, est, comm=comm, root_only=True, own_rows=True)


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_each_rank_stores_its_share_at_the_precision_asked_and_fits_as_local(
    comm: Any, precision: str
) -> None:
    from tests.unit.test_covariance_forms import blobs, sklearn_start

    x = blobs(seed=5, d=3, k=3, per=300)
    est = MixtureEstimator([MultivariateGaussianEstimator(dim=3)] * 3)
    start = sklearn_start(x, "full")[1]
    with LocalEncodedData(x, est, compute=None if precision == "float64" else _float32()) as handle:
        local = optimize(handle, est, max_its=6, delta=None, prev_estimate=start)
    with make_mpi(x, est, comm=comm, precision=precision, num_chunks=2) as handle:
        assert {str(getattr(enc, "dtype", enc.x.dtype)) for enc, _w, _ids in handle.chunks} == {precision}
        model = optimize(handle, est, max_its=6, delta=None, prev_estimate=start)
    rtol = 1e-5 if precision == "float32" else RTOL
    assert model.fit_result.log_likelihood == pytest.approx(local.fit_result.log_likelihood, rel=rtol)
    assert_same_model(local, model, rtol=rtol)


def _float32() -> Any:
    from mixle_spark.engines import resolve_compute

    return resolve_compute("numpy", "float32")
