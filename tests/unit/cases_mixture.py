from mixle_spark.stats.gaussian import GaussianDistribution, GaussianEstimator
from mixle_spark.stats.ignored import IgnoredDistribution, IgnoredEstimator
from mixle_spark.stats.mixture import MixtureDistribution, MixtureEstimator
from tests.unit._cases import FamilyCase

CASES = [
    FamilyCase(
        "mixture-gaussian",
        MixtureDistribution([GaussianDistribution(-4.0, 1.0), GaussianDistribution(3.0, 0.5)], [0.35, 0.65]),
        MixtureEstimator([GaussianEstimator()] * 2),
        n=4000,
        em_its=60,
        recovery_tol=0.02,
    ),
    FamilyCase(
        "mixture-gaussian-3-wmin",
        MixtureDistribution(
            [
                GaussianDistribution(0.0, 1.0),
                GaussianDistribution(8.0, 2.0),
                GaussianDistribution(-8.0, 0.25),
            ],
            [0.2, 0.5, 0.3],
        ),
        MixtureEstimator([GaussianEstimator()] * 3, pseudo_count=1.0, w_min=1e-3),
        n=5000,
        em_its=80,
        recovery_tol=0.03,
    ),
    FamilyCase("ignored", IgnoredDistribution(), IgnoredEstimator(), recovery_tol=1e-12),
]
