"""The scalar Gaussian's variance floor is relative to the column's variance in the data (learnt by the
encoding scan, as the vector Gaussians' floors are), so a column measured in tiny units is fitted as
the same column in larger ones; a degenerate column is still named."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import FitQualityWarning
from mixle_spark.estimation import optimize
from mixle_spark.spec import estimator_from_dict
from mixle_spark.stats import GaussianEstimator, MixtureEstimator, RecordEstimator

MIX = MixtureEstimator([GaussianEstimator()] * 2)


def _two_modes(unit: float, n: int = 4000) -> np.ndarray:
    """40% around 100 with sd 2, 60% around 120 with sd 4, in ``unit``."""
    rng = np.random.default_rng(0)
    first = rng.random(n) < 0.4
    return np.where(first, rng.normal(100.0, 2.0, n), rng.normal(120.0, 4.0, n)) * unit


def _fit(x: np.ndarray, **options: object) -> tuple[list[tuple[float, float]], float]:
    with warnings.catch_warnings():
        warnings.simplefilter("error", FitQualityWarning)
        model = optimize(list(x), MIX, seed=1, max_its=300, print_iter=0, **options)
    parts = sorted((c.mu, c.sigma2**0.5) for c in model.components)
    return parts, model.fit_result.log_likelihood / len(x)


@pytest.mark.parametrize("unit", [1e-6, 1.0, 1e6])
def test_a_column_in_any_unit_is_fitted_alike(unit: float) -> None:
    """In micro-units the variances (4e-12, 1.6e-11) are far below the absolute 1e-8 of before, which
    held both components at sd 1e-4 and called them floored."""
    parts, ll = _fit(_two_modes(unit))
    reference, ll_one = _fit(_two_modes(1.0))
    np.testing.assert_allclose(np.array(parts) / unit, reference, rtol=1e-6)
    assert ll == pytest.approx(ll_one - np.log(unit), rel=1e-9, abs=1e-9)  # the density's unit only
    assert reference[0] == pytest.approx((100.0, 2.0), rel=0.05)
    assert reference[1] == pytest.approx((120.0, 4.0), rel=0.05)


def test_the_floor_is_min_var_times_the_scanned_variance() -> None:
    x = np.r_[np.full(200, 3.0), np.random.default_rng(1).normal(-10.0, 2.0, 800)]
    bound = MIX.with_scan(MIX.encoder().scan(list(x)))
    scale = bound.estimators[0].scale
    assert scale == pytest.approx(np.var(x), rel=1e-12)
    assert bound.estimators[0].variance_floor == pytest.approx(1e-8 * np.var(x), rel=1e-12)
    with pytest.warns(FitQualityWarning, match="the Gaussian variance sits on its floor in component"):
        model = optimize(list(x), MIX, seed=1, max_its=300, tol=1e-10, print_iter=0)
    collapsed = min(model.components, key=lambda c: c.sigma2)
    assert collapsed.mu == pytest.approx(3.0) and collapsed.sigma2 == pytest.approx(1e-8 * np.var(x))
    # the same rows in chunks: the scans merge to the same variance, so the same fit
    with pytest.warns(FitQualityWarning):
        chunked = optimize(list(x), MIX, seed=1, max_its=300, tol=1e-10, print_iter=0, num_chunks=7)
    np.testing.assert_allclose(
        [c.sigma2 for c in chunked.components], [c.sigma2 for c in model.components], rtol=1e-9
    )


def test_without_a_scan_the_floor_is_absolute_and_a_given_scale_round_trips() -> None:
    assert GaussianEstimator().variance_floor == 1e-8 and GaussianEstimator().encoder().needs_scan
    fixed = GaussianEstimator(min_var=1e-6, scale=4.0)
    assert fixed.variance_floor == pytest.approx(4e-6) and not fixed.encoder().needs_scan
    assert estimator_from_dict(fixed.to_dict()).to_dict() == {
        "type": "gaussian",
        "min_var": 1e-6,
        "scale": 4.0,
    }
    assert GaussianEstimator(scale=0.0).variance_floor == 1e-8  # a constant column: the absolute floor
    with pytest.raises(ValueError, match="scale"):
        GaussianEstimator(scale=-1.0)
    # the encoder reads the same values whether it scans or not
    assert GaussianEstimator().encoder() == GaussianEstimator(scale=1.0).encoder()


@pytest.mark.parametrize("ones", [1.0, 1000.0])
def test_a_two_valued_column_is_still_named_whatever_its_unit(ones: float) -> None:
    """Every component sits on 0 or on ``ones``: with the relative floor a 0/1000 column's floored
    variance is 2.5e-3, not below 1e-8, and the spread of the component means names it."""
    rng = np.random.default_rng(2)
    n = 3000
    y = rng.normal(0.0, 1.0, n)
    flag = np.where(rng.random(n) < 0.5, ones, 0.0)
    est = MixtureEstimator([RecordEstimator({"y": GaussianEstimator(), "flag": GaussianEstimator()})] * 2)
    with pytest.warns(
        FitQualityWarning, match=r"field 'flag'.*sits on its floor in component 0, component 1"
    ):
        optimize(pa.table({"y": y, "flag": flag}), est, seed=3, max_its=100, tol=1e-8, print_iter=0)
