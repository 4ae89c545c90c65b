"""Contract-suite cases for hidden Markov models (see tests/unit/_cases.py)."""

import pyarrow as pa

from mixle_spark.stats import (
    CategoricalDistribution,
    CategoricalEstimator,
    DiagonalGaussianDistribution,
    DiagonalGaussianEstimator,
    GaussianDistribution,
    GaussianEstimator,
    HiddenMarkovDistribution,
    HiddenMarkovEstimator,
    PoissonDistribution,
    PoissonEstimator,
    RecordDistribution,
    RecordEstimator,
)
from tests.unit._cases import FamilyCase

_T2 = [[0.9, 0.1], [0.2, 0.8]]
_T3 = [[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.3, 0.0, 0.7]]  # a zero transition


CASES = [
    FamilyCase(
        "hmm-gaussian",
        HiddenMarkovDistribution(
            [GaussianDistribution(-1.0, 0.5), GaussianDistribution(2.0, 1.0)],
            [0.7, 0.3],
            _T2,
            PoissonDistribution(12.0),
        ),
        HiddenMarkovEstimator([GaussianEstimator()] * 2, len_estimator=PoissonEstimator()),
        n=3000,
        em_its=100,
        recovery_tol=0.05,
        to_arrow=lambda records: pa.array(records, pa.list_(pa.float64())),
    ),
    FamilyCase(
        "hmm-categorical",
        HiddenMarkovDistribution(
            [
                CategoricalDistribution({"a": 0.8, "b": 0.1, "c": 0.1}),
                CategoricalDistribution({"a": 0.05, "b": 0.1, "c": 0.85}),
                CategoricalDistribution({"a": 0.1, "b": 0.8, "c": 0.1}),
            ],
            [0.5, 0.3, 0.2],
            _T3,
            PoissonDistribution(20.0),
        ),
        HiddenMarkovEstimator(
            [CategoricalEstimator()] * 3, len_estimator=PoissonEstimator(), pseudo_count=1.0
        ),
        n=3000,
        em_its=400,
        recovery_tol=0.1,
    ),
    FamilyCase(
        "hmm-diagonal-gaussian",
        HiddenMarkovDistribution(
            [
                DiagonalGaussianDistribution([0.0, 0.0], [1.0, 0.5]),
                DiagonalGaussianDistribution([3.0, -2.0], [0.5, 1.0]),
            ],
            [0.5, 0.5],
            _T2,
            PoissonDistribution(8.0),
        ),
        HiddenMarkovEstimator([DiagonalGaussianEstimator()] * 2, len_estimator=PoissonEstimator()),
        n=2000,
        em_its=100,
        recovery_tol=0.05,
        to_arrow=lambda records: pa.array(
            [[list(map(float, v)) for v in r] for r in records], pa.list_(pa.list_(pa.float64()))
        ),
    ),
    FamilyCase(
        "hmm-record",
        HiddenMarkovDistribution(
            [
                RecordDistribution(
                    {
                        "x": GaussianDistribution(0.0, 1.0),
                        "page": CategoricalDistribution({"home": 0.8, "cart": 0.2}),
                    }
                ),
                RecordDistribution(
                    {
                        "x": GaussianDistribution(4.0, 1.0),
                        "page": CategoricalDistribution({"home": 0.1, "cart": 0.9}),
                    }
                ),
            ],
            [0.6, 0.4],
            _T2,
            PoissonDistribution(10.0),
        ),
        HiddenMarkovEstimator(
            [RecordEstimator({"x": GaussianEstimator(), "page": CategoricalEstimator()})] * 2,
            len_estimator=PoissonEstimator(),
        ),
        n=2000,
        em_its=100,
        recovery_tol=0.05,
        to_arrow=lambda records: pa.array(
            records, pa.list_(pa.struct([("x", pa.float64()), ("page", pa.string())]))
        ),
    ),
]
