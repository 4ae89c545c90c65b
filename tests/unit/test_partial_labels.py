"""Partly labelled mixtures (``MixtureEstimator(label_column=...)``): labelled rows keep their
component in every E-step and at the start, 5% of labels rescue a fit that goes wrong without them,
backends agree, the fitted model reads no label column, and bad labels are one-line errors."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.errors import DataTypeError, DataValueError, SchemaError, SpecError
from mixle_spark.estimation import optimize
from mixle_spark.model_selection import select_k
from mixle_spark.spec import estimator_from_spec
from mixle_spark.stats import (
    GaussianDistribution,
    GaussianEstimator,
    MixtureDistribution,
    MixtureEstimator,
    MultivariateGaussianEstimator,
    RecordEstimator,
)
from tests.unit.test_seeding import _ari


def stripes(seed: int, labelled: float = 0.05) -> tuple[np.ndarray, np.ndarray, pa.Table]:
    """Three long, thin, parallel clusters on a diagonal (a hard mixture: a start that cuts across the
    stripes stays there), the true components, and the table with ``labelled`` of them known."""
    rng = np.random.default_rng(seed)
    cov = np.array([[25.0, 0.0], [0.0, 0.25]])
    rot = np.array([[1.0, -1.0], [1.0, 1.0]]) / np.sqrt(2.0)
    x = np.concatenate([rng.multivariate_normal([0.0, 2.0 * j], cov, 600) for j in range(3)]) @ rot.T
    z = np.repeat(np.arange(3), 600)
    order = rng.permutation(len(x))
    x, z = x[order], z[order]
    known = rng.random(len(x)) < labelled
    table = pa.table(
        {
            "x": pa.array(list(x), pa.list_(pa.float64())),
            "segment": pa.array([int(v) if k else None for v, k in zip(z, known, strict=True)], pa.int64()),
        }
    )
    return x, z, table


LABELLED = MixtureEstimator([MultivariateGaussianEstimator()] * 3, label_column="segment", data_column="x")
PLAIN = MixtureEstimator([MultivariateGaussianEstimator()] * 3)


def test_five_percent_of_labels_beat_the_unlabelled_fit_on_a_hard_mixture() -> None:
    plain, labelled = [], []
    for seed in range(4):
        x, z, table = stripes(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the unlabelled fits that go wrong converge slowly
            a = optimize(table, PLAIN, max_its=300, seed=seed, column="x")
            b = optimize(table, LABELLED, max_its=300, seed=seed)
        enc = a.encoder().encode(list(x))  # the fitted model reads the data alone
        plain.append(_ari(z, a.seq_posterior(enc).argmax(axis=1)))
        labelled.append(_ari(z, b.seq_posterior(enc).argmax(axis=1)))
    assert min(labelled) > 0.9, labelled
    assert np.mean(labelled) > np.mean(plain) + 0.15, (plain, labelled)
    assert all(b >= a - 0.01 for a, b in zip(plain, labelled, strict=True)), (plain, labelled)


def test_a_labelled_row_keeps_its_component_in_the_e_step() -> None:
    # one EM step: each component's statistics are the posterior for unlabelled rows, one-hot else
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(-2, 1, 100), rng.normal(2, 1, 100)])
    labels = [None] * 200
    labels[0], labels[1], labels[150] = 1, 1, 0  # rows far on the other side of their component
    start = MixtureDistribution([GaussianDistribution(-2.0, 1.0), GaussianDistribution(2.0, 1.0)], [0.5, 0.5])
    est = MixtureEstimator([GaussianEstimator()] * 2, label_column="y", data_column="x")
    table = pa.table({"x": x, "y": pa.array(labels, pa.int64())})
    got = optimize(table, est, max_its=1, delta=None, prev_estimate=start)
    resp = start.seq_posterior(start.encoder().encode(list(x)))
    for i, lab in enumerate(labels):
        if lab is not None:
            resp[i] = np.eye(2)[lab]
    n = resp.sum(axis=0)
    np.testing.assert_allclose(got.w, n / 200, rtol=1e-12)
    for j, comp in enumerate(got.components):
        mean = resp[:, j] @ x / n[j]
        assert comp.mu == pytest.approx(mean, rel=1e-12)
        assert comp.sigma2 == pytest.approx(resp[:, j] @ (x - mean) ** 2 / n[j], rel=1e-10)
    # the fit's log-likelihood is the labelled one: log w_y + log p_y(x) for the labelled rows
    history = got.fit_result.history[0].log_likelihood
    joint = np.log(0.5) + np.array([[GaussianDistribution(-2.0, 1.0).log_density(v) for v in x],
                                    [GaussianDistribution(2.0, 1.0).log_density(v) for v in x]])  # fmt: skip
    want = np.logaddexp(joint[0], joint[1])
    for i, lab in enumerate(labels):
        if lab is not None:
            want[i] = joint[lab, i]
    assert history == pytest.approx(want.sum(), rel=1e-12)


def test_labels_from_memory_records_and_a_record_model_and_on_other_backends() -> None:
    x, _z, table = stripes(1)
    want = optimize(table, LABELLED, max_its=6, delta=None, seed=5)
    pairs = list(zip(x, table.column("segment").to_pylist(), strict=True))
    got = optimize(pairs, LABELLED, max_its=6, delta=None, seed=5)  # (record, label) pairs
    np.testing.assert_allclose(got.w, want.w, rtol=1e-12)
    for backend, extra in (("mp", {"num_workers": 2}), ("local", {"num_chunks": 4})):
        other = optimize(table, LABELLED, max_its=6, delta=None, seed=5, backend=backend, **extra)
        np.testing.assert_allclose(other.w, want.w, rtol=1e-9)
        for a, b in zip(other.components, want.components, strict=True):
            np.testing.assert_allclose(a.mu, b.mu, rtol=1e-9)
    # a record's components read their own columns; the label column is read beside them
    record = MixtureEstimator(
        [RecordEstimator({"a": GaussianEstimator(), "b": GaussianEstimator()})] * 3, label_column="segment"
    )
    columns = pa.table({"a": x[:, 0], "b": x[:, 1], "segment": table.column("segment")})
    fitted = optimize(columns, record, max_its=6, delta=None, seed=5)
    assert len(fitted.components) == 3 and fitted.covariance is None
    assert fitted.encoder().column_names() == ["a", "b"]  # scoring reads no label column


def test_the_spec_round_trips_and_select_k_needs_every_label_below_k() -> None:
    spec = {"type": "mixture", "k": 3, "component": "multivariate_gaussian", "label_column": "segment",
            "data_column": "x"}  # fmt: skip
    est = estimator_from_spec(spec)
    assert (est.label_column, est.data_column) == ("segment", "x")
    assert estimator_from_spec(est.to_dict()).label_column == "segment"
    _x, _z, table = stripes(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = select_k(table, est, ks=[3, 4], max_its=20, seed=1)
    assert found.best_k in (3, 4)
    with pytest.raises(SpecError, match=r"label 2 names a component of a mixture of 2 .*fit at least 3"):
        select_k(table, est, ks=[2, 3], max_its=5, seed=1)


@pytest.mark.parametrize(
    ("labels", "error", "match"),
    [
        (pa.array([0, 1, 3, None]), DataValueError, r"column 'segment': expected a component index in 0\.\.2 "
         r"or null \(unknown\), got 3 \(row 3 of 4\)"),
        (pa.array([0.0, 1.5, None, 2.0]), DataValueError, r"got 1\.5 \(row 2 of 4\)"),
        (pa.array([0, -2, None, 1]), DataValueError, r"got -2 \(row 2 of 4\)"),
        (pa.array(["a", "b", None, "a"]), DataTypeError, r"expected a component index in 0\.\.2 or null "
         r"\(unknown\) \(Arrow type string\), got string 'a' \(row 1 of 4\)"),
    ],
)  # fmt: skip
def test_bad_labels_are_one_line_errors_naming_column_value_and_row(
    labels: Any, error: type, match: str
) -> None:
    table = pa.table({"x": pa.array([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0], [3.0, 1.0]]), "segment": labels})
    with pytest.raises(error, match=match) as caught:
        optimize(table, LABELLED, max_its=1)
    assert "\n" not in str(caught.value)


def test_unknown_markers_and_missing_names_are_handled() -> None:
    from mixle_spark.stats._partial_labels import label_codes

    assert label_codes(pa.array([0.0, float("nan"), -1.0, None, 2.0]), "s", 3).tolist() == [0, -1, -1, -1, 2]
    assert label_codes([1, None, -1], "s", 2).tolist() == [1, -1, -1]
    with pytest.raises(
        DataTypeError, match=r"column 's': expected a component index .* got string 'b' \(row 2 of 2\)"
    ):
        label_codes([1, "b"], "s", 2)
    unnamed = MixtureEstimator([MultivariateGaussianEstimator()] * 2, label_column="segment")
    with pytest.raises(SchemaError, match=r"label_column='segment': the components read one unnamed column; "
                       r"name it with data_column"):  # fmt: skip
        optimize(pa.table({"x": [[0.0], [1.0]], "segment": [0, 1]}), unnamed, max_its=1)
    with pytest.raises(
        SpecError, match=r"data_column='x' names the data beside label_column, which is not set"
    ):
        MixtureEstimator([GaussianEstimator()] * 2, data_column="x")
