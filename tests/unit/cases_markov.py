"""Contract-suite cases for Markov chains over label lists (see tests/unit/_cases.py).

Every case has a length model: the suite samples records from the true model, and sequences can only
be sampled with a length distribution.
"""

import pyarrow as pa

from mixle_spark.stats.categorical import CategoricalDistribution, CategoricalEstimator
from mixle_spark.stats.integer_categorical import IntegerCategoricalDistribution, IntegerCategoricalEstimator
from mixle_spark.stats.markov_chain import MarkovChainDistribution, MarkovChainEstimator
from mixle_spark.stats.mixture import MixtureDistribution, MixtureEstimator
from mixle_spark.stats.poisson import PoissonDistribution, PoissonEstimator
from tests.unit._cases import FamilyCase

# A clickstream: "cart" never starts a session and "search" never leads to "cart" (zero entries).
PAGES = MarkovChainDistribution(
    {"home": 0.6, "search": 0.3, "product": 0.1, "cart": 0.0},
    {
        "home": {"home": 0.1, "search": 0.5, "product": 0.4},
        "search": {"search": 0.2, "product": 0.7, "home": 0.1},
        "product": {"product": 0.3, "cart": 0.3, "home": 0.2, "search": 0.2},
        "cart": {"home": 0.5, "product": 0.5},
    },
    PoissonDistribution(6.0),
)

STICKY = MarkovChainDistribution(
    {"a": 0.7, "b": 0.2, "c": 0.1},
    {"a": {"a": 0.85, "b": 0.1, "c": 0.05}, "b": {"b": 0.8, "a": 0.2}, "c": {"c": 0.9, "a": 0.1}},
    PoissonDistribution(8.0),
)
CYCLING = MarkovChainDistribution(
    {"a": 0.1, "b": 0.3, "c": 0.6},
    {"a": {"b": 0.9, "a": 0.1}, "b": {"c": 0.9, "b": 0.1}, "c": {"a": 0.8, "c": 0.2}},
    PoissonDistribution(12.0),
)

CASES = [
    FamilyCase(
        "markov-chain-strings",
        PAGES,
        MarkovChainEstimator(len_estimator=PoissonEstimator()),
    ),
    FamilyCase(
        "markov-chain-int-labels",
        MarkovChainDistribution(
            {3: 0.5, 7: 0.3, 11: 0.2},
            {3: {7: 0.6, 11: 0.4}, 7: {3: 0.3, 7: 0.3, 11: 0.4}, 11: {3: 1.0}},
            IntegerCategoricalDistribution(1, [0.2, 0.3, 0.3, 0.2]),
        ),
        MarkovChainEstimator(len_estimator=IntegerCategoricalEstimator()),
        to_arrow=lambda records: pa.array(records, pa.list_(pa.int32())),
    ),
    FamilyCase(
        "markov-chain-pseudo-count-empty-sequences",
        MarkovChainDistribution(
            {"x": 0.5, "y": 0.5},
            {"x": {"y": 0.8, "z": 0.2}, "y": {"x": 0.5, "y": 0.5}, "z": {"x": 1.0}},
            CategoricalDistribution({0: 0.1, 2: 0.3, 5: 0.6}),  # a tenth of the sequences are empty
        ),
        MarkovChainEstimator(len_estimator=CategoricalEstimator(), pseudo_count=0.5),
        to_arrow=lambda records: pa.array(records, pa.list_(pa.large_string())),
    ),
    FamilyCase(
        "markov-chain-mixture",
        MixtureDistribution([STICKY, CYCLING], [0.4, 0.6]),
        MixtureEstimator([MarkovChainEstimator(len_estimator=PoissonEstimator())] * 2),
        n=3000,
        em_its=100,
        recovery_tol=0.05,
    ),
]
