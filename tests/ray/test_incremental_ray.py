"""Kept statistics and incremental updates on the ray backend equal the local backend's (1e-9
relative): a fit with ``keep_statistics=True`` over a Ray Dataset, then ``update`` (incremental and
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

pytestmark = pytest.mark.ray


def _dataset(table: pa.Table, blocks: int) -> Any:
    import ray.data

    return ray.data.from_arrow(table).repartition(blocks)


def test_a_fit_and_its_updates_equal_the_local_ones(ray_runtime: Any) -> None:
    old, new = tables()
    want = optimize(old, EST, **FIT)
    got = optimize(_dataset(old, 3), EST, num_workers=2, **FIT)
    assert got.statistics.rows == 2000
    assert_same_model(got, want)
    # the new rows are sorted by label: the two actors' ranges see different vocabularies ("z" last)
    want_updated = updates(want, new)
    for method, updated in updates(got, _dataset(new, 3), num_workers=2).items():
        assert_same_update(updated, want_updated[method])
