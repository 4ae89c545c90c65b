"""The torchrun EM backend on a real gloo process group: fits equal the local backend's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mixle_spark.errors import DataTypeError
from mixle_spark.estimation import optimize
from mixle_spark.stats import (
    CategoricalEstimator,
    GaussianEstimator,
    MixtureEstimator,
    MultivariateGaussianEstimator,
    RecordEstimator,
)

pytestmark = pytest.mark.torchrun

RNG = np.random.default_rng(21)
X = np.concatenate([RNG.normal(-2, 1, (700, 2)), RNG.normal(3, 0.5, (500, 2))])


def test_a_fit_equals_the_local_backend_on_every_rank(dist: Any) -> None:
    est = MixtureEstimator([MultivariateGaussianEstimator(dim=2)] * 2)
    want = optimize(X, est, max_its=8, delta=None, seed=4, print_iter=0)
    got = optimize(X, est, max_its=8, delta=None, seed=4, print_iter=0, backend="torchrun", num_chunks=2)
    np.testing.assert_allclose(got.w, want.w, rtol=1e-9)
    for a, b in zip(got.components, want.components, strict=True):
        np.testing.assert_allclose(a.mu, b.mu, rtol=1e-9)
        np.testing.assert_allclose(a.covar, b.covar, rtol=1e-9)
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, got.to_dict())
    assert all(d == everyone[0] for d in everyone)


def test_root_only_data_is_scattered_and_vocabularies_merge(dist: Any) -> None:
    from mixle_spark.parallel.backends.torchrun import TorchRunEncodedData

    rows = [{"x": float(i % 7), "c": "abcdef"[i * 6 // 300]} for i in range(300)]
    est = RecordEstimator({"x": GaussianEstimator(), "c": CategoricalEstimator()})
    want = optimize(rows, est, max_its=1, delta=None, print_iter=0)
    with TorchRunEncodedData(rows if dist.get_rank() == 0 else None, est, root_only=True) as handle:
        got = optimize(handle, est, max_its=1, delta=None, print_iter=0)
    assert got.fields["c"].pmap == pytest.approx(want.fields["c"].pmap, rel=1e-12)


def test_a_bad_value_on_one_rank_is_raised_on_every_rank(dist: Any) -> None:
    from mixle_spark.parallel.backends.torchrun import TorchRunEncodedData

    rows: list[Any] = list(RNG.normal(size=60))
    rows[59] = "bad"  # in the last rank's share
    with pytest.raises(DataTypeError, match=r"got string 'bad' \(row 60 of 60\)"):
        TorchRunEncodedData(rows, GaussianEstimator())


def test_each_rank_passes_its_own_shard_with_own_rows(dist: Any) -> None:
    """The shard a DDP-style loader gives each rank (rows r::w, padded loaders aside) is fitted whole
    with ``own_rows=True`` (the local fit of the ranks' rows in rank order); passed without it, the
    ranks' different data is refused on every rank instead of fitting a fraction of it silently."""
    est = MixtureEstimator([MultivariateGaussianEstimator(dim=2)] * 2)
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = X[rank::world]
    in_rank_order = np.concatenate([X[r::world] for r in range(world)])
    want = optimize(in_rank_order, est, max_its=8, delta=None, seed=4, print_iter=0)
    got = optimize(mine, est, max_its=8, delta=None, seed=4, print_iter=0, backend="torchrun", own_rows=True)
    np.testing.assert_allclose(got.w, want.w, rtol=1e-9)
    for a, b in zip(got.components, want.components, strict=True):
        np.testing.assert_allclose(a.mu, b.mu, rtol=1e-9)
        np.testing.assert_allclose(a.covar, b.covar, rtol=1e-9)
    with pytest.raises(ValueError, match=r"^the ranks passed different (numbers of rows|rows \(\d+ each)"):
        optimize(mine, est, max_its=2, delta=None, seed=4, print_iter=0, backend="torchrun")
