"""Contract-suite cases for the multivariate Student-t and von Mises-Fisher families (see _cases.py)."""

import numpy as np
import pyarrow as pa

from mixle_spark.stats.multivariate_student_t import (
    MultivariateStudentTDistribution,
    MultivariateStudentTEstimator,
)
from mixle_spark.stats.von_mises_fisher import VonMisesFisherDistribution, VonMisesFisherEstimator
from tests.unit._cases import FamilyCase

_SIGMA = np.array([[2.0, 0.6, -0.3], [0.6, 1.0, 0.2], [-0.3, 0.2, 0.5]])


def _fixed_size(records):
    return pa.array([list(map(float, r)) for r in records], type=pa.list_(pa.float64(), len(records[0])))


CASES = [
    # EM families (the accumulator reads the current model): em_its runs optimize to convergence.
    FamilyCase(
        "multivariate_student_t",
        MultivariateStudentTDistribution([0.5, -1.0, 3.0], _SIGMA, 5.0),
        MultivariateStudentTEstimator(),
        em_its=400,
    ),
    FamilyCase(
        "multivariate_student_t-heavy-prior",
        MultivariateStudentTDistribution([1e3, 0.0, -5.0], 1e-2 * _SIGMA, 1.5),
        MultivariateStudentTEstimator(pseudo_count=1.0, suff_stat=([1e3, 0.0, -5.0], 1e-2 * np.eye(3), 2.0)),
        to_arrow=_fixed_size,
        em_its=400,
    ),
    FamilyCase(
        "von_mises_fisher", VonMisesFisherDistribution([0.6, 0.0, 0.8], 12.0), VonMisesFisherEstimator()
    ),
    # a tight cluster in 5 dimensions, read from fixed-size lists, with a prior
    FamilyCase(
        "von_mises_fisher-tight-prior",
        VonMisesFisherDistribution([0.5, -0.5, 0.5, -0.5, 0.0], 2e4),
        VonMisesFisherEstimator(pseudo_count=1.0, suff_stat=([0.5, -0.5, 0.5, -0.5, 0.0], 1e4)),
        to_arrow=_fixed_size,
    ),
]
