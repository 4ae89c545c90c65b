"""The dask backend equals the local backend: every family's contract case, one and several
partitions; initialization from one seed; a worker killed between E-steps; bad input and controls."""

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

pytestmark = pytest.mark.dask

MIX = MixtureDistribution([GaussianDistribution(-3.0, 1.0), GaussianDistribution(2.0, 0.5)], [0.4, 0.6])
EST = MixtureEstimator([GaussianEstimator()] * 2)


def _dask_frame(table: pa.Table, partitions: int) -> Any:
    import dask.dataframe as dd
    import pandas as pd

    return dd.from_pandas(table.to_pandas(types_mapper=pd.ArrowDtype), npartitions=partitions, sort=False)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_em_step_equals_local_for_every_family(dask_client: Any, case: Any) -> None:
    table = case_table(case, 300, seed=21)
    local = LocalEncodedData(table, estimator=case.estimator)
    want_n, want_ll, want = local.pysp_em_step(case.estimator, case.dist)
    for partitions in (1, 3):
        frame = _dask_frame(table, partitions)
        with encoded_data(frame, case.estimator, client=dask_client) as handle:
            assert len(handle) == 300 and len(handle.partition_ids()) == partitions
            n, ll, got = handle.pysp_em_step(case.estimator, case.dist)
            assert n == want_n
            assert ll == pytest.approx(want_ll, rel=1e-9)
            assert_models_close(got, want)


@pytest.mark.parametrize("case", [c for c in CASES if c.em_its], ids=[c.id for c in CASES if c.em_its])
def test_initialization_equals_local(dask_client: Any, case: Any) -> None:
    table = case_table(case, 400, seed=22)
    want = initialize(table, case.estimator, seed=9, p=0.3)
    got = initialize(_dask_frame(table, 4), case.estimator, seed=9, p=0.3, client=dask_client)
    assert_models_close(got, want, rtol=1e-10)


def _mixture_table(n: int = 2000) -> pa.Table:
    return pa.table({"x": np.asarray(MIX.sampler(5).sample(n), dtype=np.float64)})


def test_optimize_picks_dask_for_a_dask_frame_and_matches_local(dask_client: Any) -> None:
    table = _mixture_table()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = optimize(table, EST, max_its=8, delta=None, seed=4)
        got = optimize(_dask_frame(table, 5), EST, max_its=8, delta=None, seed=4, client=dask_client)
    assert_models_close(got, want)
    # a pandas frame or Arrow table goes to the cluster when asked for
    handle = encoded_data(table, EST, backend="dask", client=dask_client)
    assert len(handle) == 2000 and len(handle.partition_ids()) == 2
    handle.close()


def test_a_worker_killed_between_e_steps_gives_the_same_model(dask_client: Any) -> None:
    import os
    import signal

    table = _mixture_table(3000)
    local = LocalEncodedData(table, estimator=EST)
    handle = encoded_data(_dask_frame(table, 4), EST, client=dask_client)
    model, want_model = MIX, MIX
    for step in range(4):
        if step == 2:  # one worker process exits: its partitions are recomputed elsewhere or anew
            victim = sorted(dask_client.scheduler_info()["workers"])[0]
            pid = dask_client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)
        _, ll, model = handle.pysp_em_step(EST, model)
        if step == 2:
            assert victim not in dask_client.scheduler_info()["workers"]  # it is gone, not restarted in place
        _, want_ll, want_model = local.pysp_em_step(EST, want_model)
        assert ll == pytest.approx(want_ll, rel=1e-9)
        assert_models_close(model, want_model)
    handle.close()
    dask_client.wait_for_workers(2, timeout=60)


def test_weights_column_and_global_rows_in_errors(dask_client: Any) -> None:
    table = _mixture_table(600).append_column("w", pa.array(np.linspace(0.5, 1.5, 600)))
    want = LocalEncodedData(table, estimator=EST, weights="w", column="x").pysp_em_step(EST, MIX)
    with encoded_data(_dask_frame(table, 3), EST, client=dask_client, weights="w", column="x") as handle:
        got = handle.pysp_em_step(EST, MIX)
    assert got[0] == pytest.approx(want[0], rel=1e-12) and got[1] == pytest.approx(want[1], rel=1e-9)
    assert_models_close(got[2], want[2])
    counts = pa.table({"k": pa.array(np.r_[np.arange(450), -3, np.arange(149)], type=pa.int64())})
    with pytest.raises(DataValueError) as local_error:
        LocalEncodedData(counts, estimator=PoissonEstimator())
    with pytest.raises(DataValueError, match=r"got -3.0 \(row 451 of 600\)") as info:
        encoded_data(_dask_frame(counts, 3), PoissonEstimator(), client=dask_client)
    assert str(info.value) == str(local_error.value) and info.value.value == -3


def test_bad_input_gives_the_local_errors(dask_client: Any) -> None:
    table = pa.table({"x": [1.0, 2.0], "y": [3.0, 4.0]})
    with pytest.raises(SchemaError, match=r"the model reads one column but the data has 2"):
        encoded_data(_dask_frame(table, 2), GaussianEstimator(), client=dask_client)
    with pytest.raises(SchemaError, match=r"column 'z' not found"):
        encoded_data(_dask_frame(table, 2), GaussianEstimator(), client=dask_client, column="z")
    with pytest.raises(EmptyDataError, match=r"no rows to encode"):
        encoded_data(_dask_frame(table.slice(0, 0), 1), GaussianEstimator(), client=dask_client, column="x")
    labels = pa.table({"c": ["a", None, "b"]})
    with pytest.raises(DataValueError) as local_error:
        LocalEncodedData(labels, estimator=CategoricalEstimator())
    with pytest.raises(DataValueError, match=r"row 2 of 3") as info:
        encoded_data(_dask_frame(labels, 2), CategoricalEstimator(), client=dask_client)
    assert str(info.value) == str(local_error.value)
    with pytest.raises(UnsupportedControlError, match=r"the 'dask' backend cannot honour num_workers=2"):
        encoded_data(_dask_frame(table, 1), GaussianEstimator(), client=dask_client, num_workers=2)


def test_score_adds_the_spark_columns_lazily_and_keeps_the_input(dask_client: Any) -> None:
    from mixle_spark.scoring import score

    table = _mixture_table(500).append_column("id", pa.array(np.arange(500)))
    frame = _dask_frame(table, 3)
    scored = score(MIX, frame, column="x")
    assert list(scored.columns) == ["x", "id", "log_likelihood", "prediction", "probability"]
    got = scored.compute()
    enc = MIX.encoder().from_arrow(table.column("x"))
    np.testing.assert_allclose(
        got["log_likelihood"].to_numpy(dtype=float), MIX.seq_log_density(enc), rtol=1e-12
    )
    post = MIX.seq_posterior(enc)
    np.testing.assert_array_equal(got["prediction"].to_numpy(dtype=int), post.argmax(axis=1))
    np.testing.assert_allclose(np.vstack(got["probability"].to_numpy()), post, rtol=1e-12)
    np.testing.assert_array_equal(got["id"].to_numpy(), np.arange(500))
    with pytest.raises(SchemaError, match=r"column 'x' already exists"):
        score(MIX, frame, column="x", log_likelihood_col="x")


def test_score_on_unseen_null_and_bad_values(dask_client: Any) -> None:
    from mixle_spark.errors import UnseenLabelError
    from mixle_spark.scoring import score

    model = CategoricalDistribution({"a": 0.75, "b": 0.25})
    frame = _dask_frame(pa.table({"c": ["a", "b", "z", "a"]}), 2)
    got = score(model, frame, on_unseen="null").compute()
    ll = got["log_likelihood"]
    assert ll.isna().tolist() == [False, False, True, False]
    np.testing.assert_allclose(ll.dropna().to_numpy(dtype=float), np.log([0.75, 0.25, 0.75]), rtol=1e-12)
    with pytest.raises(UnseenLabelError, match=r"'z'.*partition 1"):
        score(model, frame).compute()
    with pytest.raises(SchemaError, match=r"the model reads one column but the data has 2"):
        score(MIX, _dask_frame(pa.table({"x": [1.0], "y": [2.0]}), 1))


def test_resources_from_dask_feed_plan_and_the_handle(dask_client: Any) -> None:
    from mixle_spark.parallel import Resources, plan

    resources = Resources.from_dask(dask_client)
    # the cluster of conftest.py speaks TLS
    assert [d.name.split("://")[0] for d in resources.devices] == ["dask:tls", "dask:tls"]
    table = _mixture_table(1000)
    frame = _dask_frame(table, 5)
    placement = plan(frame, estimator=EST, resources=resources)
    assert placement.backend == "dask" and placement.total_rows == 1000 and placement.fits
    assert len(placement.shards) == 2 and placement.encoded_row_bytes >= 8
    want = LocalEncodedData(table, estimator=EST).pysp_em_step(EST, MIX)
    with encoded_data(frame, EST, resources=resources, client=dask_client) as handle:
        assert len(handle.partition_ids()) == 2  # one partition per device
        got = handle.pysp_em_step(EST, MIX)
    assert got[1] == pytest.approx(want[1], rel=1e-9)
    assert_models_close(got[2], want[2])


def test_best_of_and_select_k_on_dask_equal_local(dask_client: Any) -> None:
    from mixle_spark.estimation import best_of
    from mixle_spark.model_selection import select_k

    table = _mixture_table(1500)
    frame = _dask_frame(table, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want_ll, want = best_of(table, EST, trials=3, max_its=6, delta=None, seed=11, print_iter=0)
        got_ll, got = best_of(
            frame, EST, trials=3, max_its=6, delta=None, seed=11, print_iter=0, client=dask_client
        )
        assert got_ll == pytest.approx(want_ll, rel=1e-9)
        assert_models_close(got, want)
        want_k = select_k(table, MixtureEstimator([GaussianEstimator()]), ks=[1, 2, 3], max_its=8, seed=2)
        got_k = select_k(
            frame,
            MixtureEstimator([GaussianEstimator()]),
            ks=[1, 2, 3],
            max_its=8,
            seed=2,
            client=dask_client,
        )
    assert got_k.best_k == want_k.best_k == 2
    np.testing.assert_allclose(got_k.scores(), want_k.scores(), rtol=1e-9)


def test_missing_coordinates_a_covariance_form_and_labels_equal_local(dask_client: Any) -> None:
    from tests.unit.test_missing_coordinates import breadth_case

    table, est = breadth_case()
    want = optimize(table, est, max_its=6, delta=None, seed=3)
    got = optimize(_dask_frame(table, 3), est, max_its=6, delta=None, seed=3, client=dask_client)
    assert_models_close(got, want)
    assert got.covariance == "EEE"


def test_a_dask_frame_is_known_by_its_rows(dask_client: Any) -> None:
    """What a checkpoint records of a Dask frame: its rows, whatever the partitions."""
    from mixle_spark.parallel.backends.registry import data_identity

    table = _mixture_table()
    digest = data_identity(_dask_frame(table, 2))
    assert data_identity(_dask_frame(table, 5)) == digest
    changed = table.set_column(0, "x", pa.array(np.r_[table.column(0).to_numpy()[:-1], 1e6]))
    assert data_identity(_dask_frame(changed, 2)) != digest


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_workers_store_their_partitions_at_the_precision_asked_and_fit_as_local(
    dask_client: Any, precision: str
) -> None:
    from tests._precision import MVN, START, TOLERANCE, VECTORS, assert_same_fit, local_fit, vector_fit

    frame = _dask_frame(pa.table({"x": pa.array(list(VECTORS))}), 2)
    got, handle = vector_fit(frame, precision, client=dask_client)
    assert handle.compute is None or handle.compute.precision == precision == "float32"
    assert_same_fit(got, local_fit(VECTORS, MVN, precision, prev_estimate=START), TOLERANCE[precision])
    with encoded_data(frame, MVN, client=dask_client, precision=precision) as handle:
        held = dask_client.gather(handle._parts)  # the chunks as the workers hold them
        assert {str(getattr(enc, "dtype", enc.x.dtype)) for part in held for enc, _w, _ids in part} == {
            precision
        }
