"""The ray backend equals the local backend: every family's contract case, one and several actors
and blocks; initialization from one seed; an actor killed between E-steps; bad input and controls."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import DataValueError, EmptyDataError, SchemaError
from mixle_spark.estimation import initialize, optimize
from mixle_spark.parallel import LocalEncodedData, UnsupportedControlError, encoded_data
from mixle_spark.stats import (
    CategoricalDistribution,
    CategoricalEstimator,
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
    PoissonEstimator,
)
from tests.unit._cases import assert_models_close, case_table
from tests.unit.test_contracts import CASES, IDS

pytestmark = pytest.mark.ray

MIX = MixtureDistribution([GaussianDistribution(-3.0, 1.0), GaussianDistribution(2.0, 0.5)], [0.4, 0.6])
EST = MixtureEstimator([GaussianEstimator()] * 2)


def _dataset(table: pa.Table, blocks: int) -> Any:
    import ray.data

    return ray.data.from_arrow(table).repartition(blocks)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_em_step_equals_local_for_every_family(ray_runtime: Any, case: Any) -> None:
    table = case_table(case, 300, seed=21)
    local = LocalEncodedData(table, estimator=case.estimator)
    want_n, want_ll, want = local.pysp_em_step(case.estimator, case.dist)
    for blocks, actors in ((1, 1), (3, 2), (4, 3)):  # ranges cut across blocks
        with encoded_data(_dataset(table, blocks), case.estimator, num_workers=actors) as handle:
            assert len(handle) == 300 and len(handle.partition_ids()) == actors
            n, ll, got = handle.pysp_em_step(case.estimator, case.dist)
            assert n == want_n
            assert ll == pytest.approx(want_ll, rel=1e-9)
            assert_models_close(got, want)


@pytest.mark.parametrize("case", [c for c in CASES if c.em_its], ids=[c.id for c in CASES if c.em_its])
def test_initialization_equals_local(ray_runtime: Any, case: Any) -> None:
    table = case_table(case, 400, seed=22)
    want = initialize(table, case.estimator, seed=9, p=0.3)
    got = initialize(_dataset(table, 4), case.estimator, seed=9, p=0.3)
    assert_models_close(got, want, rtol=1e-10)


def _mixture_table(n: int = 2000) -> pa.Table:
    return pa.table({"x": np.asarray(MIX.sampler(5).sample(n), dtype=np.float64)})


def test_optimize_picks_ray_for_a_dataset_and_matches_local(ray_runtime: Any) -> None:
    table = _mixture_table()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = optimize(table, EST, max_its=8, delta=None, seed=4)
        got = optimize(_dataset(table, 5), EST, max_its=8, delta=None, seed=4)
    assert_models_close(got, want)
    # a pandas frame or Arrow table goes to the actors when asked for; one actor per CPU slot
    with encoded_data(table.to_pandas(), EST, backend="ray") as handle:
        assert len(handle) == 2000 and len(handle.partition_ids()) == 2
        assert handle.pysp_em_step(EST, MIX)[1] == pytest.approx(
            LocalEncodedData(table, estimator=EST).pysp_em_step(EST, MIX)[1], rel=1e-9
        )


def test_a_dataset_read_from_parquet_keeps_its_order(ray_runtime: Any, tmp_path: Any) -> None:
    import pyarrow.parquet as pq
    import ray.data

    table = _mixture_table(3000)
    for i, (a, b) in enumerate([(0, 2000), (2000, 2100), (2100, 3000)]):  # unequal files
        pq.write_table(table.slice(a, b - a), tmp_path / f"part-{i}.parquet")
    want = initialize(table, EST, seed=3, p=0.2)
    got = initialize(ray.data.read_parquet(str(tmp_path)), EST, seed=3, p=0.2)
    assert_models_close(got, want, rtol=1e-10)


def test_an_actor_killed_between_e_steps_gives_the_same_model(ray_runtime: Any) -> None:
    import os
    import signal

    table = _mixture_table(3000)
    local = LocalEncodedData(table, estimator=EST)
    handle = encoded_data(_dataset(table, 4), EST)
    model, want_model = MIX, MIX
    for step in range(4):
        if step == 2:  # one actor process dies: its rows are encoded again on a new actor
            victim = handle.actor_pids()[0]
            os.kill(victim, signal.SIGKILL)
        _, ll, model = handle.pysp_em_step(EST, model)
        if step == 2:
            assert victim not in handle.actor_pids()  # a new process holds the rows
        _, want_ll, want_model = local.pysp_em_step(EST, want_model)
        assert ll == pytest.approx(want_ll, rel=1e-9)
        assert_models_close(model, want_model)
    handle.close()
    with pytest.raises(ValueError, match=r"handle is closed"):
        handle.pysp_em_step(EST, MIX)


def test_handles_share_the_actors_and_closing_one_keeps_the_other(ray_runtime: Any) -> None:
    table = _mixture_table(1000)
    want = LocalEncodedData(table, estimator=EST).pysp_em_step(EST, MIX)
    first = encoded_data(_dataset(table, 2), EST)
    second = encoded_data(_dataset(table.slice(0, 500), 2), EST)
    assert first.actor_pids() == second.actor_pids()  # no new processes for a second fit
    second.close()
    got = first.pysp_em_step(EST, MIX)
    assert got[1] == pytest.approx(want[1], rel=1e-9)
    first.close()


def test_weights_column_and_global_rows_in_errors(ray_runtime: Any) -> None:
    table = _mixture_table(600).append_column("w", pa.array(np.linspace(0.5, 1.5, 600)))
    want = LocalEncodedData(table, estimator=EST, weights="w", column="x").pysp_em_step(EST, MIX)
    with encoded_data(_dataset(table, 3), EST, weights="w", column="x") as handle:
        got = handle.pysp_em_step(EST, MIX)
    assert got[0] == pytest.approx(want[0], rel=1e-12) and got[1] == pytest.approx(want[1], rel=1e-9)
    assert_models_close(got[2], want[2])
    counts = pa.table({"k": pa.array(np.r_[np.arange(450), -3, np.arange(149)], type=pa.int64())})
    with pytest.raises(DataValueError) as local_error:
        LocalEncodedData(counts, estimator=PoissonEstimator())
    with pytest.raises(DataValueError, match=r"got -3.0 \(row 451 of 600\)") as info:
        encoded_data(_dataset(counts, 3), PoissonEstimator())
    assert str(info.value) == str(local_error.value) and info.value.value == -3


def test_bad_input_gives_the_local_errors(ray_runtime: Any) -> None:
    table = pa.table({"x": [1.0, 2.0], "y": [3.0, 4.0]})
    with pytest.raises(SchemaError, match=r"the model reads one column but the data has 2"):
        encoded_data(_dataset(table, 2), GaussianEstimator())
    with pytest.raises(SchemaError, match=r"column 'z' not found"):
        encoded_data(_dataset(table, 2), GaussianEstimator(), column="z")
    with pytest.raises(EmptyDataError, match=r"no rows to encode"):
        encoded_data(_dataset(table.slice(0, 0), 1), GaussianEstimator(), column="x")
    labels = pa.table({"c": ["a", None, "b"]})
    with pytest.raises(DataValueError) as local_error:
        LocalEncodedData(labels, estimator=CategoricalEstimator())
    with pytest.raises(DataValueError, match=r"row 2 of 3") as info:
        encoded_data(_dataset(labels, 2), CategoricalEstimator())
    assert str(info.value) == str(local_error.value)
    with pytest.raises(UnsupportedControlError, match=r"the 'ray' backend cannot honour sub_chunks=2"):
        encoded_data(_dataset(table, 1), GaussianEstimator(), sub_chunks=2)
    with pytest.raises(ValueError, match=r"num_workers must be None or an integer >= 1, got 0"):
        encoded_data(_dataset(table, 1), GaussianEstimator(), column="x", num_workers=0)
    with pytest.raises(TypeError, match=r"the ray backend reads a Ray Dataset .* got list"):
        encoded_data([1.0, 2.0], GaussianEstimator(), backend="ray")


def test_score_adds_the_spark_columns_lazily_and_keeps_the_input(ray_runtime: Any) -> None:
    from mixle_spark.scoring import score

    table = _mixture_table(500).append_column("id", pa.array(np.arange(500)))
    scored = score(MIX, _dataset(table, 3), column="x")
    assert scored.columns() == ["x", "id", "log_likelihood", "prediction", "probability"]
    got = pa.concat_tables(_tables(scored)).sort_by("id")
    enc = MIX.encoder().from_arrow(table.column("x"))
    np.testing.assert_allclose(got["log_likelihood"].to_numpy(), MIX.seq_log_density(enc), rtol=1e-12)
    post = MIX.seq_posterior(enc)
    np.testing.assert_array_equal(got["prediction"].to_numpy(), post.argmax(axis=1))
    np.testing.assert_allclose(np.vstack(got["probability"].to_pylist()), post, rtol=1e-12)
    np.testing.assert_array_equal(got["x"].to_numpy(), table["x"].to_numpy())
    with pytest.raises(SchemaError, match=r"column 'x' already exists"):
        score(MIX, _dataset(table, 1), column="x", log_likelihood_col="x")


def _tables(dataset: Any) -> list[pa.Table]:
    import ray

    return list(ray.get(dataset.to_arrow_refs()))


def test_score_on_unseen_null_and_bad_values(ray_runtime: Any) -> None:
    from mixle_spark.errors import UnseenLabelError
    from mixle_spark.scoring import score

    model = CategoricalDistribution({"a": 0.75, "b": 0.25})
    dataset = _dataset(pa.table({"c": ["a", "b", "z", "a"]}), 1)
    got = pa.concat_tables(_tables(score(model, dataset, on_unseen="null")))
    assert got["log_likelihood"].is_null().to_pylist() == [False, False, True, False]
    np.testing.assert_allclose(
        got["log_likelihood"].drop_null().to_numpy(), np.log([0.75, 0.25, 0.75]), rtol=1e-12
    )
    message = r"label 'z' is not in the model's vocabulary.*\(row 3 of a block of the dataset\)"
    with pytest.raises(Exception, match=message):  # Ray Data wraps a UDF's error by default
        _tables(score(model, dataset))
    scored = score(model, _dataset(pa.table({"c": ["a", "b", "z", "a"]}), 1))
    scored.context.raise_original_map_exception = True  # the dataset's own context (a copy)
    with pytest.raises(UnseenLabelError, match=message):
        _tables(scored)
    with pytest.raises(SchemaError, match=r"the model reads one column but the data has 2"):
        score(MIX, _dataset(pa.table({"x": [1.0], "y": [2.0]}), 1))


def test_resources_from_ray_feed_plan_and_the_handle(ray_runtime: Any) -> None:
    from mixle_spark.parallel import Resources, plan

    resources = Resources.from_ray()
    assert [d.name.rsplit(":", 1)[1] for d in resources.devices] == ["0", "1"]
    assert all(d.name.startswith("ray:") and d.memory_bytes for d in resources.devices)
    table = _mixture_table(1000)
    dataset = _dataset(table, 5)
    placement = plan(dataset, estimator=EST, resources=resources)
    assert placement.backend == "ray" and placement.total_rows == 1000 and placement.fits
    assert len(placement.shards) == 2 and placement.encoded_row_bytes >= 8
    want = LocalEncodedData(table, estimator=EST).pysp_em_step(EST, MIX)
    with encoded_data(dataset, EST, resources=Resources.local(3)) as handle:
        assert len(handle.partition_ids()) == 3  # one range per device
        got = handle.pysp_em_step(EST, MIX)
    assert got[1] == pytest.approx(want[1], rel=1e-9)
    assert_models_close(got[2], want[2])


def test_best_of_and_select_k_on_ray_equal_local(ray_runtime: Any) -> None:
    from mixle_spark.estimation import best_of
    from mixle_spark.model_selection import select_k

    table = _mixture_table(1500)
    dataset = _dataset(table, 3)
    one = MixtureEstimator([GaussianEstimator()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want_ll, want = best_of(table, EST, trials=3, max_its=6, delta=None, seed=11, print_iter=0)
        got_ll, got = best_of(dataset, EST, trials=3, max_its=6, delta=None, seed=11, print_iter=0)
        assert got_ll == pytest.approx(want_ll, rel=1e-9)
        assert_models_close(got, want)
        want_k = select_k(table, one, ks=[1, 2, 3], max_its=8, seed=2)
        got_k = select_k(dataset, one, ks=[1, 2, 3], max_its=8, seed=2)
    assert got_k.best_k == want_k.best_k == 2
    np.testing.assert_allclose(got_k.scores(), want_k.scores(), rtol=1e-9)


def test_missing_coordinates_a_covariance_form_and_labels_equal_local(ray_runtime: Any) -> None:
    from tests.unit.test_missing_coordinates import breadth_case

    table, est = breadth_case()
    want = optimize(table, est, max_its=6, delta=None, seed=3)
    got = optimize(_dataset(table, 3), est, max_its=6, delta=None, seed=3)
    assert_models_close(got, want)
    assert got.covariance == "EEE"


def test_a_dataset_is_known_by_its_rows(ray_runtime: Any) -> None:
    """What a checkpoint records of a Ray Dataset: its rows, whatever the blocks (as for the table)."""
    from mixle_spark._identity import content_digest
    from mixle_spark.parallel.backends.registry import data_identity

    table = _mixture_table()
    assert data_identity(_dataset(table, 2)) == data_identity(_dataset(table, 5)) == content_digest(table)
    changed = table.set_column(0, "x", pa.array(np.r_[table.column(0).to_numpy()[:-1], 1e6]))
    assert data_identity(_dataset(changed, 2)) != content_digest(table)


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_actors_store_their_rows_at_the_precision_asked_and_fit_as_local(
    ray_runtime: Any, precision: str
) -> None:
    from tests._precision import MVN, START, TOLERANCE, VECTORS, assert_same_fit, local_fit, vector_fit

    data = _dataset(pa.table({"x": pa.array(list(VECTORS))}), 3)
    got, handle = vector_fit(data, precision, num_workers=2)
    assert handle.compute is None or handle.compute.precision == precision == "float32"
    assert_same_fit(got, local_fit(VECTORS, MVN, precision, prev_estimate=START), TOLERANCE[precision])
    with encoded_data(data, MVN, precision=precision, num_workers=2) as handle:

        def dtypes(actor: Any, token: int) -> list[str]:  # the chunks as the actor holds them
            return sorted({str(getattr(enc, "dtype", enc.x.dtype)) for enc, _w, _ids in actor.held[token][1]})

        held = ray_runtime.get([a.__ray_call__.remote(dtypes, handle._token) for a in handle._actors])
        assert held == [[precision], [precision]]
