"""The report's ranking: each field's separation of the segments (checked against closed forms), the
segment table ordered by it, fields the same in all segments on one line, and Markov chains and hidden
Markov models as their top transitions."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from mixle_spark.profile import assignment_summary, segment_profile
from mixle_spark.report import describe_parameters, report_html
from mixle_spark.report._segments import rank_fields
from mixle_spark.report.separation import SAME_THRESHOLD, discrete_separation, separation
from mixle_spark.stats import (
    CategoricalDistribution,
    GaussianDistribution,
    HiddenMarkovDistribution,
    MarkovChainDistribution,
    MixtureDistribution,
    OptionalDistribution,
    PoissonDistribution,
    RecordDistribution,
)

PLANS = {f"plan{j:02d}": (j + 1) / 820 for j in range(40)}  # 40 labels, the same in every segment


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def _segments_text(page: str) -> str:
    found = re.search(r'<section id="segments">(.*?)</section>', page, re.S)
    assert found is not None
    return found.group(1)


@pytest.fixture
def shop() -> MixtureDistribution:
    """Two segments: ``plan`` identical in both (listed first), ``spend`` far apart, ``visits`` a little
    apart."""

    def segment(mu: float, lam: float) -> RecordDistribution:
        return RecordDistribution(
            {
                "plan": CategoricalDistribution(PLANS),
                "visits": PoissonDistribution(lam),
                "spend": GaussianDistribution(mu, 1.0),
            }
        )

    return MixtureDistribution([segment(0.0, 2.0), segment(6.0, 3.0)], [0.6, 0.4])


def test_the_separation_of_labels_is_the_jensen_shannon_closed_form() -> None:
    w = np.array([0.25, 0.75])
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    want = (_entropy(w @ p) - sum(wk * _entropy(pk) for wk, pk in zip(w, p, strict=True))) / _entropy(w)
    specs = [{"type": "categorical", "pmap": [["a", a], ["b", b], ["c", c]]} for a, b, c in p]
    assert separation(specs, w) == pytest.approx(want, rel=1e-12)
    assert discrete_separation(p, w) == pytest.approx(want, rel=1e-12)
    bern = [{"type": "bernoulli", "p": 0.1}, {"type": "bernoulli", "p": 0.9}]
    h = -(0.1 * math.log(0.1) + 0.9 * math.log(0.9))
    assert separation(bern, [0.5, 0.5]) == pytest.approx((math.log(2) - h) / math.log(2), rel=1e-12)


def test_the_separation_of_gaussians_matches_an_independent_integral_and_its_bounds() -> None:
    w = [0.3, 0.7]
    specs = [{"type": "gaussian", "mu": 0.0, "sigma2": 1.0}, {"type": "gaussian", "mu": 1.5, "sigma2": 4.0}]
    x = np.linspace(-60.0, 60.0, 1_200_001)
    logs = np.array(
        [-0.5 * (x - s["mu"]) ** 2 / s["sigma2"] - 0.5 * np.log(2 * np.pi * s["sigma2"]) for s in specs]
    )
    log_m = np.logaddexp(np.log(w[0]) + logs[0], np.log(w[1]) + logs[1])
    info = sum(wk * np.trapezoid(np.exp(lk) * (lk - log_m), x) for wk, lk in zip(w, logs, strict=True))
    assert separation(specs, w) == pytest.approx(info / _entropy(np.array(w)), rel=1e-6)
    log_normal = [{**s, "type": "log_gaussian"} for s in specs]  # the same in ln x: units do not matter
    assert separation(log_normal, w) == pytest.approx(separation(specs, w), rel=1e-12)
    assert separation([specs[0], specs[0]], w) == 0.0
    far = [specs[0], {"type": "gaussian", "mu": 1e4, "sigma2": 1.0}]
    assert separation(far, w) == pytest.approx(1.0, abs=1e-9)
    assert separation([specs[0]], [1.0]) is None  # one segment separates nothing


def test_the_separation_of_counts_and_chains_and_the_fallback() -> None:
    w = [0.5, 0.5]
    lam = [2.0, 3.0]
    k = np.arange(0, 200)
    pmf = np.array([np.exp(k * math.log(v) - v - np.array([math.lgamma(i + 1) for i in k])) for v in lam])
    want = discrete_separation(pmf, w)
    assert separation([{"type": "poisson", "lam": v} for v in lam], w) == pytest.approx(want, rel=1e-9)
    big = [{"type": "poisson", "lam": 2e5}, {"type": "poisson", "lam": 2e5 + 500}]  # pmfs far below 1e-300
    normal = [{"type": "gaussian", "mu": s["lam"], "sigma2": s["lam"]} for s in big]
    assert separation(big, w) == pytest.approx(separation(normal, w), rel=1e-3)
    assert 0.1 < separation(big, w) < 0.3
    one = MarkovChainDistribution({"a": 1.0}, {"a": {"a": 0.5, "b": 0.5}})
    two = MarkovChainDistribution({"a": 1.0}, {"a": {"a": 0.5, "b": 0.5}, "b": {"a": 1.0}})
    # first two labels: (a, a) and (a, b) at 1/2 each in both: nothing to tell them apart by
    assert separation([one.to_dict(), two.to_dict()], w) == pytest.approx(0.0, abs=1e-12)
    three = MarkovChainDistribution({"a": 1.0}, {"a": {"a": 0.9, "b": 0.1}})
    pairs = np.array([[0.5, 0.5], [0.9, 0.1]])
    assert separation([one.to_dict(), three.to_dict()], w) == pytest.approx(discrete_separation(pairs, w))
    hmm = HiddenMarkovDistribution([GaussianDistribution(0.0, 1.0)] * 2, [0.5, 0.5], [[0.9, 0.1], [0.2, 0.8]])
    other = HiddenMarkovDistribution(
        [GaussianDistribution(0.0, 1.0)] * 2, [0.5, 0.5], [[0.5, 0.5], [0.2, 0.8]]
    )
    assert separation([hmm.to_dict(), hmm.to_dict()], w) == 0.0  # no closed form: equal parameters only
    assert separation([hmm.to_dict(), other.to_dict()], w) is None


def test_the_report_ranks_the_separating_field_first_and_collapses_the_same_one(
    shop: MixtureDistribution,
) -> None:
    profile = segment_profile(shop)
    scores = {row["field"]: row["separation"] for row in profile["fields"]}
    assert [row["field"] for row in profile["fields"]] == ["plan", "visits", "spend"]  # the model's order
    assert scores["plan"] == 0.0  # the same parameters: exactly
    assert scores["spend"] > 0.95 and SAME_THRESHOLD < scores["visits"] < 0.2
    ranked, same, unscored = rank_fields(profile["fields"])
    assert [r["field"] for r in ranked] == ["spend", "visits"]
    assert [r["field"] for r in same] == ["plan"] and unscored == []

    text = _segments_text(report_html(shop))
    table_fields = re.findall(r"<tr><td>([a-z]+)<br><small>", text)
    assert table_fields == ["spend", "visits"]  # plan is not repeated per segment column
    assert f"<td class=num>{scores['spend']:.3f}<div" in text
    assert f"<td class=num>{scores['visits']:.3f}<div" in text
    line = re.search(r'<p class="same">(.*?)</p>', text)
    assert line is not None
    assert line.group(1) == "<strong>Same in all segments:</strong> plan: mostly plan39 (5%)"
    assert "plan00" not in text  # none of its 40 labels is listed


def test_a_field_missing_in_some_rows_is_scored_among_the_rows_that_have_it() -> None:
    def segment(p: float, mu: float) -> RecordDistribution:
        return RecordDistribution({"x": OptionalDistribution(GaussianDistribution(mu, 1.0), p=p)})

    model = MixtureDistribution([segment(0.0, 0.0), segment(1.0, 9.0)], [0.5, 0.5])  # 2: x always missing
    rows = {row["field"]: row["separation"] for row in segment_profile(model)["fields"]}
    assert rows["x (missing rate)"] == pytest.approx(1.0)
    assert rows["x"] is None  # present in one segment only: nothing to compare among present rows


def test_markov_chains_and_hidden_markov_models_show_their_top_transitions() -> None:
    def visitor(checkout: float) -> RecordDistribution:
        rest = 1.0 - checkout
        chain = MarkovChainDistribution(
            {"home": 0.7, "cart": 0.3},
            {
                "home": {"home": 0.08141041183907949, "cart": 0.9185895881609205},
                "cart": {"checkout": checkout, "home": rest * 0.6, "cart": rest * 0.3, "help": rest * 0.1},
            },
            len_dist=PoissonDistribution(4.0),
        )
        return RecordDistribution({"path": chain})

    model = MixtureDistribution([visitor(0.42), visitor(0.05)], [0.5, 0.5])
    spec = model.components[0].fields["path"].to_dict()
    assert describe_parameters(spec) == (
        "initial home 0.70, cart 0.30; transitions cart -> checkout 0.42, cart -> home 0.35, "
        "cart -> cart 0.17, …, home -> cart 0.92, home -> home 0.08; len_dist lam 4"
    )
    page = report_html(model)
    text = _segments_text(page)
    assert "cart -&gt; checkout 0.42, cart -&gt; home 0.35" in text
    assert "cart -&gt; home 0.57" in text  # the other segment's
    assert "0.0814104" not in page and "[[" not in text
    assert "len_dist" not in text and "Same in all segments:</strong> path (length): mean 4 (sd 2)" in text
    hmm = HiddenMarkovDistribution(
        [GaussianDistribution(0.0, 1.0), GaussianDistribution(3.0, 1.0)],
        [0.25, 0.75],
        [[0.9, 0.1], [0.2, 0.8]],
    )
    assert describe_parameters(hmm.to_dict()) == (
        "emissions[0] mu 0; emissions[0] sigma2 1; emissions[1] mu 3; emissions[1] sigma2 1; "
        "initial 1 0.75, 0 0.25; transitions 0 -> 0 0.90, 0 -> 1 0.10, 1 -> 1 0.80, 1 -> 0 0.20"
    )


def test_a_summary_written_before_the_ranking_is_ranked_from_the_model(shop: MixtureDistribution) -> None:
    old = segment_profile(shop, assignment_summary(np.array([[0.9, 0.1], [0.2, 0.8], [0.7, 0.3]])))
    for row in old["fields"]:
        del row["separation"]
    text = _segments_text(report_html(shop, summary={"segments": old}))
    assert re.findall(r"<tr><td>([a-z]+)<br><small>", text) == ["spend", "visits"]
    assert "Same in all segments:</strong> plan:" in text
    assert "<td class=num>2</td><td class=num>66.7%</td>" in text  # the rows the summary counted
