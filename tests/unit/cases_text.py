"""Contract cases of the bag-of-words family (Multinomial), in its Arrow encodings.

Every case has a length model: the suite samples records from the true model, and documents can only
be sampled with a length distribution (the no-length-model path is covered in test_multinomial.py).
"""

from typing import Any

import pyarrow as pa

from mixle_spark.stats.integer_categorical import IntegerCategoricalDistribution, IntegerCategoricalEstimator
from mixle_spark.stats.mixture import MixtureDistribution, MixtureEstimator
from mixle_spark.stats.multinomial import MultinomialDistribution, MultinomialEstimator
from mixle_spark.stats.poisson import PoissonDistribution, PoissonEstimator
from tests.unit._cases import FamilyCase

STRING = pa.string()
WORDS = {"apple": 0.3, "banana": 0.25, "cherry": 0.2, "date": 0.15, "elder": 0.07, "fig": 0.03}


def token_lists(records: list[dict[Any, int]], token_type: pa.DataType = STRING) -> pa.Array:
    """Documents (token -> count) as a ``list<token>`` column, each token repeated ``count`` times."""
    lists = [[t for t, c in r.items() for _ in range(c)] for r in records]
    return pa.array(lists, type=pa.list_(token_type))


def token_maps(records: list[dict[Any, int]], token_type: pa.DataType = STRING) -> pa.Array:
    """Documents as a ``map<token, int64>`` column."""
    return pa.array([list(r.items()) for r in records], type=pa.map_(token_type, pa.int64()))


def _topic(heavy: str) -> dict[str, float]:
    return {w: (0.6 if w == heavy else 0.4 / (len(WORDS) - 1)) for w in WORDS}


CASES = [
    FamilyCase(
        "multinomial-list",
        MultinomialDistribution(WORDS, PoissonDistribution(8.0)),
        MultinomialEstimator(len_estimator=PoissonEstimator()),
        to_arrow=token_lists,
    ),
    FamilyCase(
        "multinomial-map",
        MultinomialDistribution(WORDS, PoissonDistribution(12.0)),
        MultinomialEstimator(len_estimator=PoissonEstimator()),
        to_arrow=token_maps,
    ),
    FamilyCase(
        "multinomial-int-tokens-prior-no-coefficient",
        MultinomialDistribution(
            {3: 0.5, 7: 0.3, 11: 0.2}, PoissonDistribution(5.0), include_coefficient=False
        ),
        MultinomialEstimator(
            pseudo_count=3.0,
            suff_stat={3: 0.4, 7: 0.4, 11: 0.2},
            len_estimator=PoissonEstimator(),
            include_coefficient=False,
        ),
        to_arrow=lambda records: token_lists(records, pa.int64()),
    ),
    FamilyCase(
        # The length model's estimator learns its range with a scan inside the multinomial's scan.
        "multinomial-integer-categorical-length",
        MultinomialDistribution(WORDS, IntegerCategoricalDistribution(2, [0.2, 0.3, 0.3, 0.2])),
        MultinomialEstimator(pseudo_count=1.0, len_estimator=IntegerCategoricalEstimator()),
        to_arrow=token_maps,
    ),
    FamilyCase(
        "multinomial-mixture",
        MixtureDistribution(
            [
                MultinomialDistribution(_topic("apple"), PoissonDistribution(10.0)),
                MultinomialDistribution(_topic("date"), PoissonDistribution(20.0)),
            ],
            [0.4, 0.6],
        ),
        MixtureEstimator([MultinomialEstimator(pseudo_count=0.5, len_estimator=PoissonEstimator())] * 2),
        n=3000,
        em_its=100,
        to_arrow=token_lists,
        recovery_tol=0.03,
    ),
]
