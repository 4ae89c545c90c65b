"""Multinomial / bag of words: ``MultinomialDistribution(pmap, len_dist=None, include_coefficient=True)``.

A record is a document as a bag of tokens: a list of tokens (repeats count) or a mapping token ->
count (non-negative integers; zero counts are dropped). With ``c_v`` the count of token ``v`` and
``n = Σ_v c_v``::

    log p(x) = Σ_v c_v log p_v  +  [log n! - Σ_v log c_v!]  +  [log len_dist(n)]

* The multinomial coefficient (``include_coefficient=True``, the default) makes this the density of
  the *count vector* given ``n``; without it, the density of one particular order of the tokens (what
  ``SequenceDistribution(CategoricalDistribution(pmap))`` gives a token list). It does not depend on
  the parameters, so it changes no estimate and no mixture responsibility, only the reported
  log-likelihoods (and so whether they are comparable with another family's).
* ``len_dist`` (optional; any count family, e.g. Poisson) models the document length ``n``, as the
  length model of :mod:`~mixle_spark.stats.sequence`. Without it the density is conditional on ``n``,
  and the model cannot sample documents.

Tokens are labels as in :mod:`~mixle_spark.stats.categorical` (strings in Spark; integers and booleans
work too) coded over a sorted vocabulary that a scan learns. Arrow columns: ``list<string>`` /
``large_list`` of tokens (integer or boolean tokens too), or ``map<string, integer>`` token -> count
(integer keys, and floating counts with integral values, too). The encoder reads list / map offsets and
the flattened values without a loop over rows or tokens, merges repeated tokens of a document with one
sort, and keeps the batch as (row, token code, count) entries: a batch is scored with one gather and one
``np.bincount``, and its statistics ``Σ_rows w c_v`` are one ``np.bincount`` too. Once the vocabulary is
known, ``compact_arrow`` turns documents into ``struct<__mixle_bow_codes: map<int32, double>>`` (token
codes -> counts), which is what a Spark cache then holds instead of the strings.

Unseen tokens follow Categorical's unseen labels: by default the encoder raises
:class:`~mixle_spark.errors.UnseenLabelError`; ``MultinomialEncoder(..., unseen="zero")`` gives them code
-1, probability zero, so a document that contains one scores ``-inf``, and accumulators ignore those
tokens (the document's other tokens and its length still count). ``log_density`` likewise gives ``-inf``
for an unknown token, and for anything that is not a bag of words.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from mixle_spark.errors import (
    EmptyDataError,
    SpecError,
)
from mixle_spark.stats._accumulator import widening_target
from mixle_spark.stats._bag_of_words import (
    MultinomialBatch,
    MultinomialEncoder,
    bag_of,
)
from mixle_spark.stats._labels import (
    LabelListOptions,
    VocabularyCache,
    add_label_counts,
    align_counts,
    aligned_log_p,
    checked_pmap,
    hashable_labels,
    merge_label_counts,
    min_prob_option,
    no_vocabulary_error,
    normalize_label,
    pmap_from_spec,
    sorted_labels,
    unseen_label_error,
    widened_counts,
)
from mixle_spark.stats._lengths import LengthAccumulation, LengthModel, check_length_model, draw_lengths
from mixle_spark.stats._special import log_factorial
from mixle_spark.stats.base import (
    Accumulator,
    Distribution,
    Estimator,
    Parameter,
    RowRandom,
    Sampler,
    check_parameter,
    estimator_option,
    free_parameters,
    option,
    part,
    register_distribution,
    register_estimator,
)

__all__ = [
    "MultinomialAccumulator",
    "MultinomialBatch",
    "MultinomialDistribution",
    "MultinomialEncoder",
    "MultinomialEstimator",
]


@register_distribution("multinomial")
class MultinomialDistribution(LengthModel, Distribution):
    """Token probabilities ``pmap`` (token -> probability), an optional length model ``len_dist`` and
    whether the multinomial coefficient is part of the density (see the module docstring).

    Probabilities must be finite, non-negative and sum to 1 within 1e-9 (then renormalized exactly, so
    a model read back from its JSON has bit-identical probabilities).

    Examples
    --------
    >>> d = MultinomialDistribution({"a": 0.25, "b": 0.75})
    >>> round(d.log_density(["b", "a", "b"]), 6)  # log 3 + log 0.25 + 2 log 0.75
    -0.863046
    >>> d.log_density({"a": 1, "b": 2}) == d.log_density(["b", "a", "b"])
    True
    """

    parameters = (
        Parameter("pmap", parse=lambda v: pmap_from_spec(v, "MultinomialDistribution")),
        part("len_dist", optional=True),
        Parameter("include_coefficient", default=True),
    )
    length_name = "document length"

    def __init__(
        self,
        pmap: Mapping[Any, float],
        len_dist: Distribution | None = None,
        include_coefficient: bool = True,
    ) -> None:
        fam = "MultinomialDistribution"
        labels, p = checked_pmap(pmap, fam, "token")
        check_length_model(fam, len_dist)
        check_parameter(
            isinstance(include_coefficient, bool),
            fam,
            "include_coefficient",
            include_coefficient,
            "True or False",
        )
        self.pmap: dict[Any, float] = dict(zip(labels, (float(v) for v in p), strict=True))
        self.labels = labels
        self.len_dist = len_dist
        self.include_coefficient = include_coefficient
        self._p = p
        with np.errstate(divide="ignore"):
            self._log_p = np.log(p)
        self._aligned = VocabularyCache()

    def sampling_parts(self) -> list[Distribution]:
        return [self.sampled_lengths()]

    def draw_with(self, sampler: Sampler, size: int | None = None) -> Any:
        """A length from ``len_dist``, then that many tokens. A record is a dict token -> count
        (tokens in vocabulary order, positive counts only); a batch a list of them."""
        labels = self.labels
        lengths = draw_lengths(sampler.parts[0], 1 if size is None else size)
        rows = len(lengths)
        tokens = sampler.rng.choice(len(labels), size=int(lengths.sum()), p=self._p)
        # One sort turns the token draws of every document into (document, token) counts.
        key, counts = np.unique(
            np.repeat(np.arange(rows), lengths) * len(labels) + tokens, return_counts=True
        )
        row, code = np.divmod(key, len(labels))
        names = [labels[c] for c in code.tolist()]
        values = counts.tolist()
        bounds = np.searchsorted(row, np.arange(rows + 1)).tolist()
        out = [dict(zip(names[a:b], values[a:b], strict=True)) for a, b in itertools.pairwise(bounds)]
        return out[0] if size is None else out

    def log_density(self, x: Any) -> float:
        bag = bag_of(x)
        if bag is None:
            return -math.inf
        total, n, log_c = 0.0, 0, 0.0
        for token, c in bag.items():
            p = self.pmap.get(normalize_label(token), 0.0)
            if p <= 0:
                return -math.inf
            total += c * math.log(p)
            log_c += float(log_factorial(c))
            n += c
        if self.include_coefficient:
            total += float(log_factorial(n)) - log_c
        if self.len_dist is not None:
            total += self.len_dist.log_density(n)
        return total

    def seq_log_density(self, enc: MultinomialBatch) -> np.ndarray:
        log_p = self._aligned.get(enc.labels, lambda labels: aligned_log_p(self._log_p, self.labels, labels))
        terms = enc.counts * log_p[enc.codes]
        out = np.bincount(enc.row, weights=terms, minlength=enc.n).astype(np.float64, copy=False)
        if self.include_coefficient:
            out += enc.log_coef
        if self.len_dist is not None:
            out += self.length_log_density(enc.len_enc, enc.totals)
        return out

    def estimator(self, pseudo_count: float | None = None) -> MultinomialEstimator:
        len_est = self.length_estimator(pseudo_count)
        if pseudo_count is None:
            return MultinomialEstimator(len_estimator=len_est, include_coefficient=self.include_coefficient)
        return MultinomialEstimator(
            pseudo_count,
            self.pmap,
            len_estimator=len_est,
            include_coefficient=self.include_coefficient,
        )

    def encoder(self) -> MultinomialEncoder:
        return MultinomialEncoder(self.labels, len_encoder=self.length_encoder())

    def n_free_parameters(self) -> int:
        return self.estimator().n_free_parameters(self)


class MultinomialAccumulator(LengthAccumulation, Accumulator):
    """Weighted token counts ``Σ_rows w c_v`` over the estimator's vocabulary, the total row weight
    and the length statistics; value ``(row_weight, counts, length value or None)``.

    Batches encoded with another vocabulary (for example a mixture's union encoder) are re-aligned
    to ``labels``; a token outside it that carries weight is an UnseenLabelError.
    """

    length_name = "document length"

    def __init__(
        self, labels: tuple[Any, ...] | None = None, len_acc: Accumulator | None = None, keys: Any = None
    ) -> None:
        self.labels = labels
        self.len_acc = len_acc
        self.keys = keys
        self.row_weight = 0.0
        self.counts = np.zeros(0 if labels is None else len(labels))
        self._positions = VocabularyCache()

    def _add_counts(self, enc: MultinomialBatch, weights: np.ndarray) -> None:
        if self.labels is None:
            raise no_vocabulary_error("MultinomialEstimator")
        codes, w = enc.codes, weights[enc.row] * enc.counts
        if len(codes) and codes.min() < 0:  # unseen tokens (unseen="zero") carry no statistics
            keep = codes >= 0
            codes, w = codes[keep], w[keep]
        sums = np.bincount(codes, weights=w, minlength=len(enc.labels))
        j = add_label_counts(self.counts, sums, self.labels, enc.labels, self._positions)
        if j is not None:
            rows = enc.row[enc.codes == j]
            raise unseen_label_error(enc.labels[j], self.labels, int(rows[0]), len(enc), len(np.unique(rows)))
        self.row_weight += float(weights.sum())

    def seq_update(self, enc: MultinomialBatch, weights: np.ndarray, estimate: Any) -> None:
        self._add_counts(enc, weights)
        if self.len_acc is not None:
            len_dist = None if estimate is None else estimate.len_dist
            self.len_acc.seq_update(self.length_encoding(enc.len_enc, enc.totals), weights, len_dist)
        return None

    def seq_initialize(self, enc: MultinomialBatch, weights: np.ndarray, rng: RowRandom) -> None:
        self._add_counts(enc, weights)
        self.initialize_lengths(enc.len_enc, enc.totals, weights, rng)

    def combine(self, value: Any) -> MultinomialAccumulator:
        row_weight, counts, len_value = value
        self.counts = merge_label_counts(self.counts, self.labels, counts, "MultinomialAccumulator")
        self.row_weight += float(row_weight)
        self.combine_lengths(len_value)
        return self

    def value(self) -> tuple[float, np.ndarray, Any]:
        return (self.row_weight, self.counts.copy(), self.length_value())

    def _scale(self, factor: float) -> None:
        self.row_weight *= factor
        self.counts = factor * self.counts
        self.scale_lengths(factor)

    def widened(self, target: Accumulator) -> tuple[float, np.ndarray, Any]:
        other = widening_target(self, target)
        counts = widened_counts(self.counts, self.labels, other.labels, type(self).__name__)
        return (self.row_weight, counts, self.widened_lengths(other))

    def from_value(self, value: Any) -> MultinomialAccumulator:
        row_weight, counts, len_value = value
        self.row_weight = float(row_weight)
        self.counts = np.array(counts, dtype=np.float64)
        self.lengths_from_value(len_value)
        return self

    def make_encoder(self) -> MultinomialEncoder:
        return MultinomialEncoder(self.labels, len_encoder=self.length_encoder())

    def parts(self) -> list[Accumulator]:
        return self.length_parts()

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.labels, self.fresh_lengths(), self.keys)


@register_estimator("multinomial")
@dataclass(eq=False, repr=False)
class MultinomialEstimator(LabelListOptions, Estimator):
    """Token frequencies over all documents, smoothed by a Dirichlet prior; optionally a length model.

    Parameters
    ----------
    pseudo_count : float, optional
        Dirichlet prior weight in tokens, spread evenly over the vocabulary (``pseudo_count / V`` added
        to every token's count; ``pseudo_count = V`` is add-one smoothing), or by ``suff_stat``.
    suff_stat : mapping token -> probability, optional
        Prior token probabilities (its tokens join the vocabulary).
    labels : iterable of tokens, optional
        Fixed vocabulary; without it the encoder's scan learns the tokens of the data. With it, a token
        outside it is an UnseenLabelError.
    len_estimator : Estimator, optional
        Estimator of the document length (a count family); without it the fitted model has
        ``len_dist=None``.
    min_prob : float
        Probability floor (default 0): every probability is raised to at least ``min_prob``, then the
        vector is renormalized.
    include_coefficient : bool
        Whether fitted models include the multinomial coefficient in their density (default True;
        it does not change the estimates).
    name, keys : str, optional
        ``keys`` ties these token probabilities (and length statistics) to every site with the same key.

    The estimated pmap covers the whole vocabulary (zero probabilities included). Zero total weight
    gives uniform token probabilities.
    """

    pseudo_count: float | None = None
    suff_stat: Mapping[Any, float] | Sequence[Any] | None = None
    labels: Iterable[Any] | None = option(None, parse=hashable_labels)
    len_estimator: Estimator | None = estimator_option()
    min_prob: float = min_prob_option()
    include_coefficient: bool = option(True, lambda v: isinstance(v, bool), "True or False")
    name: str | None = None
    keys: str | None = None

    def check(self) -> None:
        fam = "MultinomialEstimator"
        if self.suff_stat is not None:
            prior_labels, prior_p = checked_pmap(
                pmap_from_spec(self.suff_stat, fam), fam + " suff_stat", "token"
            )
            self.suff_stat = dict(zip(prior_labels, prior_p.tolist(), strict=True))
        # The prior's tokens join a fixed vocabulary, so the estimate covers them.
        if self.labels is not None:
            self.labels = sorted_labels((*self.labels, *(self.suff_stat or ())))

    def accumulator_factory(self) -> MultinomialAccumulator:
        return MultinomialAccumulator(self.vocabulary, self.length_accumulator(), self.keys)

    def encoder(self) -> MultinomialEncoder:
        return MultinomialEncoder(self.vocabulary, len_encoder=self.length_encoder())

    def min_rows(self) -> int:
        return self.length_min_rows()

    def estimate(self, nobs: float | None, value: Any) -> MultinomialDistribution:
        vocab = self.vocabulary
        if vocab is None:
            raise no_vocabulary_error("MultinomialEstimator")
        if not vocab:
            raise EmptyDataError("MultinomialEstimator: no tokens in the data and no `labels` given")
        row_weight, counts, len_value = value
        counts = np.array(counts, dtype=np.float64)
        prior = cast("dict[Any, float]", self.suff_stat or {})
        if counts.shape != (len(vocab),):
            raise SpecError(
                f"MultinomialEstimator: {len(counts)} counts for a vocabulary of {len(vocab)} tokens"
            )
        pc_ = self.pseudo_count or 0.0
        if pc_ > 0:
            if prior:
                counts += pc_ * align_counts(tuple(prior), np.array(list(prior.values())), vocab)
            else:
                counts += pc_ / len(vocab)
        total = float(counts.sum())
        p = counts / total if total > 0 and math.isfinite(total) else np.full(len(vocab), 1.0 / len(vocab))
        if self.min_prob > 0:
            p = np.maximum(p, self.min_prob)
            p /= p.sum()
        return MultinomialDistribution(
            dict(zip(vocab, p.tolist(), strict=True)),
            self.length_estimate(row_weight, len_value),
            self.include_coefficient,
        )

    def _free_parameters(self, model: Any, tied: set[Any]) -> int:
        tokens = max(len(model.pmap) - 1, 0)  # the token probabilities sum to one
        return tokens + free_parameters(self.len_estimator, model.len_dist, tied)
