"""Sampling draws stay what they were: for a broad set of models (every family, and combinators
nested several deep), a seeded sampler's sequence of ``sample()`` / ``sample(n)`` calls gives exactly
the records, with the same Python and numpy types, that the release recorded below.

The records are reduced to a canonical form (type names, dtypes, shapes and values; floats to 12
significant digits, so that a last-bit difference of a platform's ``exp`` or ``cos`` does not count)
and hashed. ``python -m tests.unit.test_sampler_draws`` prints the hashes of the current code.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle_spark import stats
from mixle_spark.spec import load_model
from mixle_spark.stats import Distribution, Sampler, distribution_from_dict
from mixle_spark.stats.gaussian import GaussianDistribution

MODEL_FILES = Path(__file__).resolve().parents[1] / "data" / "models" / "0.1.0"


def _g(mu: float, sigma2: float) -> dict[str, Any]:
    return {"type": "gaussian", "mu": mu, "sigma2": sigma2}


def _poisson(lam: float) -> dict[str, Any]:
    return {"type": "poisson", "lam": lam}


def _cat(*pairs: Any) -> dict[str, Any]:
    return {"type": "categorical", "pmap": [list(p) for p in pairs]}


_CHAIN = {
    "type": "markov_chain",
    "initial": [["a", 0.6], ["b", 0.4]],
    "transitions": [["a", [["a", 0.3], ["b", 0.7]]], ["b", [["a", 0.5], ["b", 0.5]]]],
    "len_dist": _poisson(3.0),
}
_HMM = {
    "type": "hidden_markov",
    "emissions": [_cat(("x", 0.9), ("y", 0.1)), _cat(("x", 0.2), ("y", 0.8))],
    "initial": [0.5, 0.5],
    "transitions": [[0.8, 0.2], [0.3, 0.7]],
    "len_dist": {"type": "integer_categorical", "min_val": 0, "p_vec": [0.1, 0.3, 0.3, 0.3]},
}
_BAG = {"type": "multinomial", "pmap": [["u", 0.5], ["v", 0.3], ["w", 0.2]], "len_dist": _poisson(4.0)}


def _visit(mu: float, p_missing: float) -> dict[str, Any]:
    return {
        "type": "record",
        "fields": {
            "amount": _g(mu, 2.0),
            "channel": {"type": "optional", "dist": _cat(("app", 0.3), ("web", 0.7)), "p": p_missing},
            "clicks": {"type": "sequence", "dist": _poisson(2.0), "len_dist": _poisson(2.5)},
            "path": _CHAIN,
            "states": _HMM,
            "words": _BAG,
            "pair": {
                "type": "composite",
                "components": [
                    {"type": "bernoulli", "p": 0.4},
                    {"type": "von_mises", "mu": 0.5, "kappa": 3.0},
                ],
            },
            "note": {"type": "ignored"},
        },
    }


_MVG = {"type": "multivariate_gaussian", "mu": [0.0, 1.0], "covar": [[1.0, 0.3], [0.3, 2.0]]}
NESTED: dict[str, dict[str, Any]] = {
    "mixture-of-records": {
        "type": "mixture",
        "components": [_visit(0.0, 0.2), _visit(9.0, 0.0)],
        "w": [0.4, 0.6],
    },
    "mixture-of-mvg": {"type": "mixture", "components": [_MVG, {**_MVG, "mu": [5.0, 5.0]}], "w": [0.5, 0.5]},
    "mixture-of-counts": {
        "type": "mixture",
        "components": [_poisson(2.0), {"type": "geometric", "p": 0.3}],
        "w": [0.3, 0.7],
    },
    "mixture-float-and-int": {
        "type": "mixture",
        "components": [_g(0.0, 1.0), _poisson(5.0)],
        "w": [0.5, 0.5],
    },
    "mixture-of-labels": {
        "type": "mixture",
        "components": [_cat(("a", 1.0)), _cat(("b", 0.5), ("c", 0.5))],
        "w": [0.2, 0.8],
    },
    "mixture-of-mixtures": {
        "type": "mixture",
        "components": [
            {"type": "mixture", "components": [_g(0.0, 1.0), _g(3.0, 1.0)], "w": [0.5, 0.5]},
            {"type": "mixture", "components": [_g(-3.0, 1.0), _g(6.0, 1.0)], "w": [0.9, 0.1]},
        ],
        "w": [0.5, 0.5],
    },
    "optional-no-p": {"type": "optional", "dist": _poisson(3.0)},
    "optional-record": {
        "type": "optional",
        "dist": {"type": "record", "fields": {"x": _g(1.0, 1.0)}},
        "p": 0.5,
    },
    "sequence-of-records": {
        "type": "sequence",
        "dist": {"type": "record", "fields": {"x": _g(1.0, 1.0), "k": _cat((1, 0.5), (2, 0.5))}},
        "len_dist": _poisson(2.0),
    },
    "sequence-of-mvg": {"type": "sequence", "dist": _MVG, "len_dist": _cat((0, 0.2), (2, 0.8))},
    "sequence-of-optional-sequences": {
        "type": "sequence",
        "dist": {
            "type": "optional",
            "dist": {"type": "sequence", "dist": _g(0.0, 1.0), "len_dist": _poisson(1.0)},
            "p": 0.3,
        },
        "len_dist": _poisson(2.0),
    },
    "composite-of-combinators": {
        "type": "composite",
        "components": [
            {"type": "sequence", "dist": {"type": "exponential", "beta": 2.0}, "len_dist": _poisson(2.0)},
            {
                "type": "optional",
                "dist": {"type": "diagonal_gaussian", "mu": [0.0, 1.0], "covar": [1.0, 4.0]},
                "p": 0.4,
            },
            {"type": "mixture", "components": [_CHAIN, _CHAIN], "w": [0.5, 0.5]},
            _BAG,
        ],
    },
    "hmm-of-mixtures": {
        "type": "hidden_markov",
        "emissions": [
            {"type": "mixture", "components": [_g(0.0, 1.0), _g(2.0, 1.0)], "w": [0.5, 0.5]},
            {"type": "mixture", "components": [_g(10.0, 1.0), _g(12.0, 1.0)], "w": [0.3, 0.7]},
        ],
        "initial": [0.5, 0.5],
        "transitions": [[0.9, 0.1], [0.1, 0.9]],
        "len_dist": _poisson(5.0),
    },
    "von-mises-uniform": {"type": "von_mises", "mu": 1.0, "kappa": 1e-9},
    "von-mises-wrapped-normal": {"type": "von_mises", "mu": -3.0, "kappa": 1e7},
    "multinomial-int-tokens": {
        "type": "multinomial",
        "pmap": [[1, 0.5], [2, 0.5]],
        "len_dist": _poisson(1.0),
    },
    "binomial-large": {"type": "binomial", "n": 1000, "p": 0.5},
    "integer-categorical-wide": {"type": "integer_categorical", "min_val": -5, "p_vec": [0.1] * 10},
}


def _models() -> dict[str, Distribution]:
    models: dict[str, Distribution] = {
        p.stem: load_model(p) for p in sorted(MODEL_FILES.glob("*.json")) if p.name != "scores.json"
    }
    models.update({name: distribution_from_dict(spec) for name, spec in NESTED.items()})
    return models


def canonical(value: Any) -> Any:
    """``value`` as plain JSON data naming every type along the way (floats to 12 digits)."""
    if isinstance(value, np.ndarray):
        return ["ndarray", value.dtype.str, list(value.shape), [canonical(v) for v in value.tolist()]]
    if isinstance(value, np.generic):
        return ["numpy", value.dtype.str, canonical(value.item())]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return ["float", f"{value:.12g}"]
    if isinstance(value, int):
        return ["int", value]
    if isinstance(value, str):
        return ["str", value]
    if isinstance(value, list | tuple):
        return [type(value).__name__, [canonical(v) for v in value]]
    if isinstance(value, dict):
        return ["dict", [[canonical(k), canonical(v)] for k, v in value.items()]]
    raise TypeError(f"no canonical form for {type(value).__name__}")


def draws(model: Distribution, seed: int) -> list[Any]:
    """One seeded sampler's draws: one record, a batch, another record, an empty batch, a batch of 1."""
    sampler = model.sampler(seed)
    return [sampler.sample(), sampler.sample(6), sampler.sample(), sampler.sample(0), sampler.sample(1)]


def fingerprint(model: Distribution, seed: int) -> str:
    text = json.dumps(canonical(draws(model, seed)), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


MODELS = _models()
SEED = 20240607

RECORDED: dict[str, str] = {
    "bernoulli": "5c7e588cb3e3568e",
    "bernoulli-bool": "29f14a0f45b5d115",
    "beta": "99d4d8d8a62a4bf7",
    "beta-small-shapes": "734aed88cbbb5afa",
    "beta_binomial": "a822affb2fc0ec6a",
    "beta_binomial-scan-prior": "a68fbe0f29ca60f5",
    "binomial": "49a46b2ffad2c4c7",
    "binomial-large": "f7c354dc40c5d846",
    "binomial-scan": "80e098d1ed88f95f",
    "categorical": "08f7a46896ef3254",
    "categorical-int-prior": "3806219e2b4c98bd",
    "censored-exponential": "c752903ca765bab3",
    "censored-negative_binomial": "5be0c3ea7152c44b",
    "composite-gaussian": "78da0ca91bdc4cfd",
    "composite-of-combinators": "93c00ebfdfb1a95d",
    "diagonal-gaussian": "a384966938151e7b",
    "dirichlet": "da25bc6e27e0789d",
    "dirichlet-multinomial": "739fd928ed3762e7",
    "dirichlet-multinomial-prior": "2d19a0b00d1bde66",
    "dirichlet-prior": "4d7968f595d86148",
    "ex_gaussian": "b073de7819486d36",
    "ex_gaussian-prior": "0f7373e46ebf9736",
    "exponential": "8eb110e7373d82df",
    "exponential-prior": "ab284b2a91cc6b48",
    "gamma": "147c8f403997864c",
    "gamma-small-shape": "25803e5d7157a861",
    "gaussian": "37acad515a5ab3a3",
    "gaussian-large-offset": "b0dd6873132fa279",
    "gaussian-prior": "8174d9136647803e",
    "generalized_extreme_value": "1eaf4297d607dc3a",
    "generalized_extreme_value-prior": "e34b89dca0f10e0d",
    "generalized_pareto": "62936a84d0d9749f",
    "generalized_pareto-prior": "d1d7d021ef225451",
    "geometric": "790424c8523802e7",
    "geometric-prior": "0e7cbd553a5bf184",
    "gumbel": "f5ca98023e7c8d58",
    "gumbel-far-prior": "dc9b25573181d23d",
    "half_normal": "1e72332ff543fdde",
    "half_normal-prior": "e0be02b3342975bd",
    "hmm-categorical": "f7e267c6675d1b3c",
    "hmm-diagonal-gaussian": "4189a1608dd148ae",
    "hmm-gaussian": "4ea5e167f65e58fb",
    "hmm-of-mixtures": "2dbef3c04e5b62af",
    "hmm-record": "62f212c2822511a5",
    "hurdle-gamma-prior": "bc33bda2ca3193d3",
    "hurdle-poisson": "c61f7c8b905ac207",
    "ignored": "910129e53544ef73",
    "integer-categorical": "1ced32e46a3bba6c",
    "integer-categorical-prior": "59c1cf1d2439eb14",
    "integer-categorical-wide": "f224e83cc216adb8",
    "inverse_gamma": "3227c7ed027699b9",
    "inverse_gamma-small-shape-prior": "934070eb907b35bb",
    "inverse_gaussian": "4a298d36a4ea5431",
    "inverse_gaussian-prior": "8c980cbd0ed9a029",
    "laplace": "a9518b50ae92b4cb",
    "laplace-far-prior": "8e222742fe2020ed",
    "log_gaussian": "bd4bfdac97412d08",
    "log_gaussian-prior": "c0e01ed0ff6123cb",
    "log_series": "8f64321ae8bb8897",
    "log_series-heavy-prior": "31ecd09823b1d7de",
    "logistic": "d92e185825b872df",
    "logistic-wide-prior": "e1afa2cb4903d789",
    "markov-chain-int-labels": "ddcfb8b4a6be8343",
    "markov-chain-mixture": "8adc45d552067270",
    "markov-chain-pseudo-count-empty-sequences": "f982d535ca6179cc",
    "markov-chain-strings": "6d078276ea768aaa",
    "mixture-float-and-int": "6ecfc512ef30105d",
    "mixture-gaussian": "be042b8bffcd3e86",
    "mixture-gaussian-3-wmin": "242e59c44c512cfb",
    "mixture-of-counts": "80a28733577bb300",
    "mixture-of-labels": "e8f1fbfb2028dea7",
    "mixture-of-mixtures": "8baab91316e0377a",
    "mixture-of-mvg": "5fe85807b8bb60aa",
    "mixture-of-records": "3f4709722532ccde",
    "multinomial-int-tokens": "07e20d58bca8e849",
    "multinomial-int-tokens-prior-no-coefficient": "c6dfefea89e97d62",
    "multinomial-integer-categorical-length": "97174502bdacaa7b",
    "multinomial-list": "064712bb4c914e01",
    "multinomial-map": "29be8dc89c287018",
    "multinomial-mixture": "013e5961ac29726a",
    "multivariate-gaussian": "781aaf4803193c52",
    "multivariate-gaussian-fixed-size": "5c4d61c6ee7fd737",
    "multivariate_student_t": "cd49a8d47c0c2634",
    "multivariate_student_t-heavy-prior": "319460ff86081eec",
    "nakagami": "5f53c111787d74c2",
    "nakagami-small-shape-prior": "f827780b9ac449c8",
    "negative_binomial": "8601696f97381b01",
    "negative_binomial-prior": "ff7144a9cd457342",
    "optional-marginalized": "df457fbaaed248a7",
    "optional-no-p": "b19f270ac30be476",
    "optional-p": "0a5455ed4653da21",
    "optional-record": "4d37500c7cfd5f13",
    "pareto": "aef7e7b7bf12b49d",
    "pareto-heavy-prior": "92be4258908b56b8",
    "point_mass": "ecfab140d0de2733",
    "point_mass-negative-prior": "909afc9d50a33ccb",
    "poisson": "cc049a231dd2aa7a",
    "poisson-large": "b9911ddf5390774a",
    "rayleigh": "6aa60c34c003a9ca",
    "rayleigh-prior": "c622050313f03456",
    "record-gaussian": "cd97b0a2c16d10c4",
    "record-mixed": "ea212304b7861e0d",
    "sequence-of-mvg": "91ddc7be0a0ccb79",
    "sequence-of-optional-sequences": "4f243a289c210f9c",
    "sequence-of-records": "27a479983b66a0b0",
    "sequence-poisson-length": "1a185c34747e3080",
    "skellam": "17b07c95e270ce73",
    "skellam-large-prior": "39a0ef485db2fc59",
    "skew_normal": "259d39b8741886b4",
    "skew_normal-prior": "0f9226e628456a0c",
    "student_t": "0188b8a499b493ee",
    "student_t-cauchy-prior": "5c774e8494338a67",
    "truncated-gamma": "c753715ca841185a",
    "truncated-poisson": "4861dee5a21266a2",
    "uniform": "bc87da73be25fb91",
    "uniform-narrow-prior": "da6608ece32d7ad2",
    "von-mises-uniform": "8473fd7065b7e658",
    "von-mises-wrapped-normal": "79aafdd1e31054a6",
    "von_mises": "5ec1eebfd423bb50",
    "von_mises-concentrated": "bec8dc524f2e092b",
    "von_mises_fisher": "999dae504a056dd9",
    "von_mises_fisher-tight-prior": "a193c7b437b33ae0",
    "weibull": "b1c1a9378f082ddf",
    "weibull-small-shape-prior": "56a8ead4089282fe",
    "zero_inflated-gamma-prior": "bc33bda2ca3193d3",
    "zero_inflated-poisson": "14bb36a9faecbf3f",
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_seeded_sampler_draws_what_it_drew(name: str) -> None:
    assert fingerprint(MODELS[name], SEED) == RECORDED[name]


def test_every_model_has_recorded_draws() -> None:
    assert sorted(RECORDED) == sorted(MODELS)


def test_the_sampler_names_of_earlier_releases_are_the_generic_sampler() -> None:
    names = [name for name in stats.__all__ if name.endswith("Sampler") and name != "Sampler"]
    assert len(names) == 25
    assert [name for name in names if getattr(stats, name) is not Sampler] == []
    model = MODELS["mixture-of-records"]
    old_style = stats.MixtureSampler(model, 4)
    assert json.dumps(canonical(old_style.sample(5))) == json.dumps(canonical(model.sampler(4).sample(5)))


def test_a_sampler_holds_one_seeded_sampler_per_part() -> None:
    sampler = MODELS["hmm-of-mixtures"].sampler(2)
    assert [type(part.dist).__name__ for part in sampler.parts] == [
        "PoissonDistribution",
        "MixtureDistribution",
        "MixtureDistribution",
    ]
    assert [len(part.parts) for part in sampler.parts] == [0, 2, 2]


class _NoDraw(GaussianDistribution):
    """A family that does not implement sampling."""

    draw = Distribution.draw  # type: ignore[assignment]


def test_a_family_without_draw_has_no_sampler() -> None:
    with pytest.raises(NotImplementedError, match="_NoDraw has no sampler"):
        _NoDraw(0.0, 1.0).sampler(0)
    with pytest.raises(NotImplementedError, match="_NoDraw has no sampler"):
        _NoDraw(0.0, 1.0).draw(np.random.default_rng(0))


if __name__ == "__main__":
    for name in sorted(MODELS):
        print(f"    {name!r}: {fingerprint(MODELS[name], SEED)!r},")
