from mixle_spark.stats.gaussian import GaussianDistribution, GaussianEstimator
from tests.unit._cases import FamilyCase

CASES = [
    FamilyCase("gaussian", GaussianDistribution(3.0, 2.0), GaussianEstimator()),
    FamilyCase("gaussian-large-offset", GaussianDistribution(1e6, 0.25), GaussianEstimator()),
    FamilyCase(
        "gaussian-prior",
        GaussianDistribution(-1.0, 0.5),
        GaussianEstimator(pseudo_count=1.0, suff_stat=(0.0, 1.0)),
    ),
]
