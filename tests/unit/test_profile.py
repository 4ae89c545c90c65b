"""mixle_spark.profile: segment profiles in the data's units (checked against each family's closed
forms), hard assignments and their certainty, and the report's profile and projection built on them."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mixle_spark.cli.fit import REPORT_SAMPLE_ROWS, report_sample
from mixle_spark.estimation import optimize
from mixle_spark.profile import CERTAINTY_BINS, assignment_summary, merge_assignments, segment_profile
from mixle_spark.report import report_html
from mixle_spark.scoring import assignment_counts
from mixle_spark.stats import (
    BernoulliDistribution,
    CategoricalDistribution,
    DiagonalGaussianDistribution,
    ExponentialDistribution,
    GaussianDistribution,
    GaussianEstimator,
    IntegerCategoricalDistribution,
    LogGaussianDistribution,
    MixtureDistribution,
    MixtureEstimator,
    NegativeBinomialDistribution,
    OptionalDistribution,
    OptionalEstimator,
    PoissonDistribution,
    RecordDistribution,
    RecordEstimator,
    SequenceDistribution,
)

Z = 0.6744897501960817  # the standard normal's upper quartile
LABELS = [f"label{j}" for j in range(8)]


def _component(shift: float, top: int) -> RecordDistribution:
    pmap = {label: (0.51 if j == top else 0.07) for j, label in enumerate(LABELS)}
    return RecordDistribution(
        {
            "spend": LogGaussianDistribution(5.5 + shift, 0.09 + shift / 10),
            "channel": CategoricalDistribution(pmap),
            "days": OptionalDistribution(ExponentialDistribution(10.0 + 5 * shift), p=0.2 + shift / 10),
            "tags": SequenceDistribution(
                CategoricalDistribution({"a": 0.7 - shift / 10, "b": 0.3 + shift / 10}),
                len_dist=PoissonDistribution(2.0 + shift),
            ),
            "member": BernoulliDistribution(0.25 + shift / 10),
            "stars": IntegerCategoricalDistribution(1, [0.1, 0.2, 0.3, 0.4]),
            "visits": NegativeBinomialDistribution(3.0, 0.4),
            "pos": DiagonalGaussianDistribution([shift, -shift], [1.0 + shift, 4.0]),
        }
    )


@pytest.fixture(scope="module")
def mixed() -> MixtureDistribution:
    return MixtureDistribution([_component(0.0, 0), _component(1.0, 5)], [0.7, 0.3])


def _row(profile: dict[str, Any], field: str) -> dict[str, Any]:
    return next(row for row in profile["fields"] if row["field"] == field)


def test_every_field_is_described_in_the_data_units(mixed: MixtureDistribution) -> None:
    profile = segment_profile(mixed)
    assert [row["field"] for row in profile["fields"]] == [
        "spend",
        "channel",
        "days (missing rate)",
        "days",
        "tags (length)",
        "tags (elements)",
        "member",
        "stars",
        "visits",
        "pos[0]",
        "pos[1]",
    ]
    assert [c["weight"] for c in profile["components"]] == [0.7, 0.3]
    for k, comp in enumerate(mixed.components):
        fields = comp.to_dict()["fields"]
        mu, s2 = fields["spend"]["mu"], fields["spend"]["sigma2"]
        spend = _row(profile, "spend")["cells"][k]
        assert spend["median"] == pytest.approx(math.exp(mu), rel=1e-12)
        assert spend["q1"] == pytest.approx(math.exp(mu - Z * math.sqrt(s2)), rel=1e-12)
        assert spend["q3"] == pytest.approx(math.exp(mu + Z * math.sqrt(s2)), rel=1e-12)
        assert spend["mean"] == pytest.approx(math.exp(mu + s2 / 2), rel=1e-12)
        assert spend["text"].startswith(f"median {math.exp(mu):.4g} (IQR ")
        # an optional field: its missing rate, labelled, then the present values (exponential: mean beta)
        assert _row(profile, "days (missing rate)")["cells"][k]["share"] == pytest.approx(fields["days"]["p"])
        assert _row(profile, "days (missing rate)")["cells"][k]["text"].endswith("% missing")
        beta = fields["days"]["dist"]["beta"]
        days = _row(profile, "days")["cells"][k]
        assert days["mean"] == pytest.approx(beta) and days["median"] == pytest.approx(beta * math.log(2))
        assert _row(profile, "tags (length)")["cells"][k]["mean"] == pytest.approx(
            fields["tags"]["len_dist"]["lam"]
        )
        assert _row(profile, "member")["cells"][k]["share"] == pytest.approx(fields["member"]["p"])
        visits = _row(profile, "visits")["cells"][k]
        assert visits["mean"] == pytest.approx(3.0 * 0.6 / 0.4) and visits["sd"] == pytest.approx(
            math.sqrt(3.0 * 0.6 / 0.4**2)
        )
        pos = _row(profile, "pos[0]")["cells"][k]
        assert pos["mean"] == pytest.approx(fields["pos"]["mu"][0])
        assert pos["sd"] == pytest.approx(math.sqrt(fields["pos"]["covar"][0]))


def test_labels_are_all_shown_in_one_order_across_components(mixed: MixtureDistribution) -> None:
    channel = _row(segment_profile(mixed), "channel")
    # label0 leads overall (0.7 x 0.51 + 0.3 x 0.07), then label5, then the rest by name
    assert channel["labels"][:2] == ["label0", "label5"] and sorted(channel["labels"]) == LABELS
    for k, comp in enumerate(mixed.components):
        pmap = dict(comp.to_dict()["fields"]["channel"]["pmap"])
        cell = channel["cells"][k]
        assert [label for label, _ in cell["labels"]] == channel["labels"]
        assert {label: p for label, p in cell["labels"]} == pytest.approx(pmap)
    stars = _row(segment_profile(mixed), "stars")
    assert sorted(stars["labels"]) == [1, 2, 3, 4] and stars["labels"][0] == 4


def test_the_report_shows_the_profile_with_every_label(mixed: MixtureDistribution) -> None:
    page = report_html(mixed)
    section = re.search(r'<section id="segments">(.*?)</section>\n<section', page, re.S)
    assert section is not None
    text = section.group(1)
    for label in LABELS:
        assert f"<td>{label}</td>" in text
    assert "more)" not in text and "% missing" in text
    assert f"median {math.exp(5.5):.4g}" in text and f"median {math.exp(6.5):.4g}" in text


def test_assignments_count_hard_assignments_and_certainty() -> None:
    proba = np.array([[0.9, 0.1], [0.2, 0.8], [0.55, 0.45], [0.99, 0.01]])
    one = assignment_summary(proba[:2], "a")
    two = assignment_summary(proba[2:], "a")
    whole = assignment_summary(proba, "a")
    merged = merge_assignments([one, two])
    assert merged["rows"] == whole["rows"] and merged["certainty_histogram"] == whole["certainty_histogram"]
    assert merged["certainty_sum"] == pytest.approx(whole["certainty_sum"], rel=1e-15)
    assert whole["rows"] == [3, 1]
    assert whole["certainty_sum"] == pytest.approx([0.9 + 0.55 + 0.99, 0.8])
    hist = whole["certainty_histogram"]
    assert len(hist) == CERTAINTY_BINS and sum(hist) == 4
    assert hist[int(0.55 * CERTAINTY_BINS)] == 1 and hist[CERTAINTY_BINS - 1] == 1


def _three_segments(n: int = 20_000) -> tuple[MixtureDistribution, pa.Table]:
    """A table of three well-separated segments with weights 0.6 / 0.3 / 0.1, sorted by segment, an
    unmodelled id column of large variance and a modelled field missing for 20% of the rows."""
    rng = np.random.default_rng(4)
    sizes = [int(0.6 * n), int(0.3 * n), n - int(0.6 * n) - int(0.3 * n)]
    x = np.concatenate([rng.normal(m, 1.0, s) for m, s in zip([-8.0, 0.0, 8.0], sizes, strict=True)])
    y = np.concatenate([rng.normal(m, 1.0, s) for m, s in zip([5.0, -5.0, 5.0], sizes, strict=True)])
    y[rng.random(n) < 0.2] = np.nan
    ids = rng.permutation(n).astype(np.float64) * 1000.0
    table = pa.table({"id": ids, "x": x, "y": pa.array(y, from_pandas=True)})
    comp = RecordEstimator({"x": GaussianEstimator(), "y": OptionalEstimator(GaussianEstimator())})
    model = optimize(table, MixtureEstimator([comp] * 3), max_its=100, delta=1e-8, seed=1, backend="local")
    return model, table


@pytest.fixture(scope="module")
def segments() -> tuple[MixtureDistribution, pa.Table]:
    return _three_segments()


def test_the_projection_uses_the_modelled_fields_and_keeps_every_segment_share(
    segments: tuple[MixtureDistribution, pa.Table],
) -> None:
    model, table = segments
    sample = report_sample(table, float(table.num_rows))
    assert sample.num_rows == REPORT_SAMPLE_ROWS
    page = report_html(model, sample=sample)
    projection = re.search(r'<section id="projection">(.*?)</section>', page, re.S)
    assert projection is not None
    text = projection.group(1)
    loading_table = text[text.index("PC1 loading") :]
    loadings = dict(
        re.findall(r"<tr><td>([^<]+)</td><td class=num>(-?[\d.]+)</td><td class=num>", loading_table)
    )
    assert set(loadings) == {"x", "y"}  # never the id column, though it has the most variance
    assert f"{REPORT_SAMPLE_ROWS} rows with finite values" in text  # rows missing y are shown, not dropped
    missing = int(np.isnan(sample.column("y").to_numpy(zero_copy_only=False)).sum())
    assert missing > 0.1 * REPORT_SAMPLE_ROWS and f"{missing} rows with a missing value are shown" in text
    shares = {
        int(k): float(v)
        for k, v in re.findall(r"<tr><td>(\d+)</td><td class=num>\d+</td><td class=num>([\d.]+)%", text)
    }
    weights = model.to_dict()["w"]
    assert len(shares) == 3
    for k, w in enumerate(weights):
        assert abs(shares[k] - 100 * w) < 2.0, (shares, weights)


def test_assignment_counts_over_a_table_equal_the_model_predictions(
    segments: tuple[MixtureDistribution, pa.Table],
) -> None:
    model, table = segments
    counts = assignment_counts(model, table)
    assert counts is not None and counts["basis"] == "the whole table"
    predicted = np.bincount(model.predict(table), minlength=3)
    assert counts["rows"] == predicted.tolist()
    proba = model.predict_proba(table)
    assert sum(counts["certainty_sum"]) == pytest.approx(proba.max(axis=1).sum(), rel=1e-12)
    assert assignment_counts(GaussianDistribution(0.0, 1.0), table) is None  # not a mixture


def test_an_spmd_input_path_is_counted_batch_by_batch(
    segments: tuple[MixtureDistribution, pa.Table], tmp_path: Any
) -> None:
    import pyarrow.parquet as pq

    from mixle_spark.cli.fit import path_dataset

    model, table = segments
    for i, start in enumerate(range(0, table.num_rows, 7000)):
        pq.write_table(table.slice(start, 7000), tmp_path / f"part-{i}.parquet", row_group_size=3000)
    counts = assignment_counts(model, path_dataset(str(tmp_path)))
    assert counts is not None and counts["rows"] == np.bincount(model.predict(table), minlength=3).tolist()
    sample = report_sample(str(tmp_path), float(table.num_rows))
    assert sample.num_rows == REPORT_SAMPLE_ROWS and set(sample.column_names) == {"id", "x", "y"}


def test_numbers_beyond_float_range_stay_out_of_the_json() -> None:
    """A Student-t with 2 degrees of freedom has no finite sd; a log-normal with a huge sigma2 no finite
    mean: the profile (and em_fit's strict-JSON summary) leaves them out and says so in the text."""
    import json

    from mixle_spark.stats import StudentTDistribution

    model = MixtureDistribution(
        [
            RecordDistribution(
                {"t": StudentTDistribution(1.0, 2.0, 1.5), "v": LogGaussianDistribution(700.0, 50.0)}
            ),
            RecordDistribution(
                {"t": StudentTDistribution(5.0, 1.0, 8.0), "v": LogGaussianDistribution(1.0, 0.5)}
            ),
        ],
        [0.5, 0.5],
    )
    profile = segment_profile(model)
    json.dumps(profile, allow_nan=False)  # strict JSON: no inf, no NaN
    t = _row(profile, "t")["cells"]
    assert "sd" not in t[0] and t[1]["sd"] == pytest.approx(math.sqrt(8 / 6))
    v = _row(profile, "v")["cells"]
    assert "mean" not in v[0] and "inf" in v[0]["text"] and v[1]["median"] == pytest.approx(math.e)
    assert "segments" in report_html(model)
