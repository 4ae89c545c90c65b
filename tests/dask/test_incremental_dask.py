"""Kept statistics and incremental updates on the dask backend equal the local backend's (1e-9
relative): a fit with ``keep_statistics=True`` over a Dask DataFrame, then ``update`` (incremental and
stepwise, with decay, a label the fit did not see arriving; the scenario is
tests/spark/test_incremental_spark.py's)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from mixle_spark.estimation import optimize
from tests.spark.test_incremental_spark import (
    EST,
    FIT,
    assert_same_model,
    assert_same_update,
    tables,
    updates,
)

pytestmark = pytest.mark.dask


def _dask_frame(table: pa.Table, partitions: int) -> Any:
    import dask.dataframe as dd
    import pandas as pd

    return dd.from_pandas(table.to_pandas(types_mapper=pd.ArrowDtype), npartitions=partitions, sort=False)


def test_a_fit_and_its_updates_equal_the_local_ones(dask_client: Any) -> None:
    old, new = tables()
    want = optimize(old, EST, **FIT)
    got = optimize(_dask_frame(old, 3), EST, client=dask_client, **FIT)
    assert got.statistics.rows == 2000
    assert_same_model(got, want)
    # the new rows are sorted by label: the partitions see different vocabularies, the last "z" only
    frame = _dask_frame(new, 3)
    labels = [sorted(set(frame.get_partition(i)["c"].compute())) for i in range(3)]
    assert "z" not in labels[0] and "z" in labels[-1]
    want_updated = updates(want, new)
    for method, updated in updates(got, frame, client=dask_client).items():
        assert_same_update(updated, want_updated[method])
