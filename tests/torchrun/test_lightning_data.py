"""lightning_data: mini-batch EM over rank shards of a Lightning DataModule, on a real process group."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mixle_spark.stats import GaussianEstimator, MixtureEstimator

pytestmark = pytest.mark.torchrun

RNG = np.random.default_rng(8)
X = np.concatenate([RNG.normal(-3, 1, 1500), RNG.normal(2, 0.7, 1500)])


def test_the_minibatches_of_an_epoch_partition_the_rows_over_the_ranks(dist: Any) -> None:
    from mixle_spark.parallel.training.lightning_data import encoded_datamodule

    module = encoded_datamodule(X, batch_size=400, seed=3)
    assert (module.rank, module.world_size) == (dist.get_rank(), dist.get_world_size())
    mine = np.concatenate(list(module.minibatches(epoch=1)))
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine.tolist())
    assert sorted(v for part in everyone for v in part) == sorted(X.tolist())


def test_distributed_minibatch_em_equals_one_process_and_lands_near_the_full_fit(dist: Any) -> None:
    from mixle_spark.em.minibatch import minibatch_em
    from mixle_spark.estimation import optimize
    from mixle_spark.parallel.training.lightning_data import encoded_datamodule

    est = MixtureEstimator([GaussianEstimator()] * 2)
    # From scratch: the ranks' fit of the first mini-batch and their stepwise updates equal one process's.
    got = minibatch_em(encoded_datamodule(X, batch_size=500, seed=3), est, epochs=3, seed=1)
    alone = minibatch_em(
        encoded_datamodule(X, batch_size=500, seed=3, rank=0, world_size=1), est, epochs=3, seed=1
    )
    np.testing.assert_allclose(got.w, alone.w, rtol=1e-9)
    for a, b in zip(got.components, alone.components, strict=True):
        np.testing.assert_allclose([a.mu, a.sigma2], [b.mu, b.sigma2], rtol=1e-9)
    assert got.statistics.rows == alone.statistics.rows
    assert got.statistics.updates == 3 * 6 - 1  # 6 mini-batches an epoch; the first one is fitted

    # It lands near the full-data fit.
    full = optimize(X, est, seed=1, print_iter=0)
    order, want = np.argsort([c.mu for c in got.components]), np.argsort([c.mu for c in full.components])
    mus = [got.components[i].mu for i in order]
    np.testing.assert_allclose(mus, [full.components[i].mu for i in want], atol=0.1)
    np.testing.assert_allclose(np.asarray(got.w)[order], np.asarray(full.w)[want], atol=0.03)
