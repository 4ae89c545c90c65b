"""Hidden Markov models on Spark: a whole fit equals the local one, and scoring adds the Viterbi path
(one ``states`` column, or one ``FIELD_states`` per hidden Markov field of a record)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.estimation import optimize
from mixle_spark.scoring import score
from mixle_spark.stats import (
    CategoricalDistribution,
    CategoricalEstimator,
    GaussianDistribution,
    HiddenMarkovDistribution,
    HiddenMarkovEstimator,
    PoissonDistribution,
    PoissonEstimator,
    RecordDistribution,
)
from tests.unit._cases import assert_models_close as _assert_models_close

pytestmark = pytest.mark.spark

TRUTH = HiddenMarkovDistribution(
    [
        CategoricalDistribution({"home": 0.6, "search": 0.3, "cart": 0.1}),
        CategoricalDistribution({"home": 0.1, "search": 0.2, "cart": 0.7}),
    ],
    initial=[0.8, 0.2],
    transitions=[[0.85, 0.15], [0.3, 0.7]],
    len_dist=PoissonDistribution(9.0),
)


def _table(n: int, seed: int) -> pa.Table:
    seqs = TRUTH.sampler(seed).sample(n)
    return pa.table({"id": np.arange(n), "clicks": pa.array(seqs, pa.list_(pa.string()))})


def test_hmm_fit_on_spark_equals_local_and_scores_states(spark: Any) -> None:
    table = _table(3000, seed=4)
    est = HiddenMarkovEstimator(
        [CategoricalEstimator()] * 2, len_estimator=PoissonEstimator(), pseudo_count=1.0
    )
    local = optimize(table.select(["clicks"]), est, max_its=25, delta=None, seed=5)
    df = spark.createDataFrame(table)  # row order kept: the random start is keyed by row
    remote = optimize(df.select("clicks"), est, max_its=25, delta=None, seed=5, num_chunks=3)
    _assert_models_close(remote, local)
    np.testing.assert_allclose(
        [r.log_likelihood for r in remote.fit_result.history],
        [r.log_likelihood for r in local.fit_result.history],
        rtol=1e-9,
    )

    scored = score(remote, df.repartition(3), column="clicks").orderBy("id").toArrow()
    assert scored.column_names == ["id", "clicks", "log_likelihood", "states"]
    enc = remote.encoder().from_arrow(table.column("clicks"))
    want_states, _ = remote.seq_viterbi(enc)
    got = scored.column("states").combine_chunks()
    assert pa.types.is_list(got.type) and got.type.value_type == pa.int32()
    np.testing.assert_array_equal(np.diff(got.offsets.to_numpy()), enc.lengths)
    np.testing.assert_array_equal(got.values.to_numpy(), want_states)
    np.testing.assert_allclose(
        scored.column("log_likelihood").to_numpy(), remote.seq_log_density(enc), rtol=1e-12
    )
    none = score(remote, df, column="clicks", states_col=None)
    assert "states" not in none.columns


def test_a_record_with_hidden_markov_fields_gets_one_states_column_per_field(spark: Any) -> None:
    table = _table(400, seed=8)
    table = table.append_column("again", table.column("clicks"))
    model = RecordDistribution({"clicks": TRUTH, "id": GaussianDistribution(200.0, 1e4), "again": TRUTH})
    scored = score(model, spark.createDataFrame(table).repartition(2)).orderBy("id").toArrow()
    assert scored.column_names == ["id", "clicks", "again", "log_likelihood", "clicks_states", "again_states"]
    want, _ = TRUTH.seq_viterbi(TRUTH.encoder().from_arrow(table.column("clicks")))
    for name in ("clicks_states", "again_states"):
        np.testing.assert_array_equal(scored.column(name).combine_chunks().values.to_numpy(), want)
    assert "clicks_states" not in score(model, spark.createDataFrame(table), states_col=None).columns
