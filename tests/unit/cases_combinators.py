"""Contract cases of the combinators: Record, Composite, Optional, Sequence."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from mixle_spark.stats.censored import CensoredDistribution, CensoredEstimator
from mixle_spark.stats.composite import CompositeDistribution, CompositeEstimator
from mixle_spark.stats.exponential import ExponentialDistribution, ExponentialEstimator
from mixle_spark.stats.gamma import GammaDistribution, GammaEstimator
from mixle_spark.stats.gaussian import GaussianDistribution, GaussianEstimator
from mixle_spark.stats.hurdle import HurdleDistribution, HurdleEstimator
from mixle_spark.stats.integer_categorical import (
    IntegerCategoricalDistribution,
    IntegerCategoricalEstimator,
)
from mixle_spark.stats.negative_binomial import NegativeBinomialDistribution, NegativeBinomialEstimator
from mixle_spark.stats.optional import OptionalDistribution, OptionalEstimator
from mixle_spark.stats.poisson import PoissonDistribution, PoissonEstimator
from mixle_spark.stats.record import RecordDistribution, RecordEstimator
from mixle_spark.stats.sequence import SequenceDistribution, SequenceEstimator
from mixle_spark.stats.truncated import TruncatedDistribution, TruncatedEstimator
from mixle_spark.stats.zero_inflated import ZeroInflatedDistribution, ZeroInflatedEstimator
from tests.unit._cases import FamilyCase


def composite_to_arrow(records: list[Any]) -> pa.StructArray:
    """Tuples -> a struct column with fields "0", "1", ... (read by position)."""
    columns = list(zip(*records, strict=True))
    return pa.StructArray.from_arrays(
        [pa.array(c) for c in columns], names=[str(i) for i in range(len(columns))]
    )


# record-mixed: scans (integer ranges) run through Optional and through Sequence's length model.
CASES = [
    FamilyCase(
        "record-gaussian",
        RecordDistribution(
            {
                "amount": GaussianDistribution(3.0, 2.0),
                "inner": RecordDistribution({"x": GaussianDistribution(-1.0, 0.5)}),
            }
        ),
        RecordEstimator(
            {"amount": GaussianEstimator(), "inner": RecordEstimator({"x": GaussianEstimator()})}
        ),
    ),
    FamilyCase(
        "composite-gaussian",
        CompositeDistribution((GaussianDistribution(0.0, 1.0), GaussianDistribution(10.0, 4.0))),
        CompositeEstimator([GaussianEstimator(), GaussianEstimator()]),
        to_arrow=composite_to_arrow,
    ),
    FamilyCase(
        "optional-p",
        OptionalDistribution(GaussianDistribution(2.0, 1.0), p=0.3),
        OptionalEstimator(GaussianEstimator()),
    ),
    FamilyCase(
        "optional-marginalized",
        OptionalDistribution(GaussianDistribution(2.0, 1.0), p=None),
        OptionalEstimator(GaussianEstimator(), model_missing=False),
        # The sampler never draws a missing value when p is None; one with p drives the test data.
        extra={"note": "p=None samples have no missing values"},
    ),
    FamilyCase(
        "sequence-poisson-length",
        SequenceDistribution(GaussianDistribution(1.0, 2.0), PoissonDistribution(3.0)),
        SequenceEstimator(GaussianEstimator(), PoissonEstimator()),
    ),
    FamilyCase(
        "record-mixed",
        RecordDistribution(
            {
                "amount": GaussianDistribution(50.0, 9.0),
                "channel": OptionalDistribution(IntegerCategoricalDistribution(1, [0.7, 0.3]), p=0.1),
                "visits": SequenceDistribution(
                    PoissonDistribution(2.0), IntegerCategoricalDistribution(0, [0.2, 0.3, 0.3, 0.2])
                ),
            }
        ),
        RecordEstimator(
            {
                "amount": GaussianEstimator(),
                "channel": OptionalEstimator(IntegerCategoricalEstimator()),
                "visits": SequenceEstimator(PoissonEstimator(), IntegerCategoricalEstimator()),
            }
        ),
    ),
    FamilyCase(
        "zero_inflated-poisson",
        ZeroInflatedDistribution(PoissonDistribution(3.0), 0.3),
        ZeroInflatedEstimator(PoissonEstimator()),
        em_its=60,
    ),
    FamilyCase(
        "zero_inflated-gamma-prior",
        ZeroInflatedDistribution(GammaDistribution(2.0, 1.5), 0.2),
        ZeroInflatedEstimator(GammaEstimator(), pseudo_count=1.0),
    ),
    FamilyCase(
        "hurdle-poisson",
        HurdleDistribution(PoissonDistribution(1.5), 0.3),
        HurdleEstimator(PoissonEstimator()),
        em_its=60,
    ),
    FamilyCase(
        "hurdle-gamma-prior",
        HurdleDistribution(GammaDistribution(2.0, 1.5), 0.25),
        HurdleEstimator(GammaEstimator(), pseudo_count=1.0),
    ),
    FamilyCase(
        "truncated-poisson",
        TruncatedDistribution(PoissonDistribution(4.0), low=2.0, high=7.0),
        TruncatedEstimator(PoissonEstimator(), low=2.0, high=7.0),
        em_its=60,
    ),
    FamilyCase(
        "truncated-gamma",
        TruncatedDistribution(GammaDistribution(2.0, 1.5), low=1.0, high=5.0),
        TruncatedEstimator(GammaEstimator(), low=1.0, high=5.0),
        em_its=60,
    ),
    FamilyCase(
        "censored-exponential",
        CensoredDistribution(ExponentialDistribution(2.0), high=3.0),
        CensoredEstimator(ExponentialEstimator(), high=3.0),
        em_its=60,
    ),
    FamilyCase(
        "censored-negative_binomial",
        CensoredDistribution(NegativeBinomialDistribution(3.0, 0.4), low=1.0, high=8.0),
        CensoredEstimator(NegativeBinomialEstimator(), low=1.0, high=8.0),
        em_its=60,
    ),
]
