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

import dataclasses
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from mixle_spark.errors import (
    DataValueError,
    EmptyDataError,
    SpecError,
)
from mixle_spark.stats._bag_of_words import (
    MultinomialBatch,
    MultinomialEncoder,
    bag_of,
)
from mixle_spark.stats._labels import (
    LabelOptions,
    align_counts,
    checked_pmap,
    hashable_labels,
    min_prob_option,
    no_vocabulary_error,
    normalize_label,
    pmap_from_spec,
    sorted_labels,
    unseen_label_error,
)
from mixle_spark.stats._lengths import encode_lengths
from mixle_spark.stats._product import as_record_list
from mixle_spark.stats._special import log_factorial
from mixle_spark.stats._validate import first_true
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
    "MultinomialSampler",
]


class MultinomialSampler(Sampler):
    """Draws a length from ``len_dist``, then that many tokens. A record is a dict token -> count
    (tokens in vocabulary order, positive counts only); ``sample(size)`` a list of them."""

    dist: MultinomialDistribution

    def __init__(self, dist: MultinomialDistribution, seed: int | None = None) -> None:
        if dist.len_dist is None:
            raise SpecError(
                "MultinomialDistribution: sampling needs len_dist (the distribution of the document "
                "length), got None"
            )
        super().__init__(dist, seed)
        self.lengths = dist.len_dist.sampler(self.new_seed())

    def _draw_lengths(self, size: int) -> np.ndarray:
        raw = np.asarray(as_record_list(self.lengths.sample(size)), dtype=np.float64)
        bad = (raw < 0) | (raw != np.floor(raw))
        if bad.any():
            raise DataValueError("len_dist must draw non-negative integer lengths", value=float(raw[bad][0]))
        return raw.astype(np.int64)

    def sample(self, size: int | None = None) -> Any:
        labels = self.dist.labels
        lengths = self._draw_lengths(1 if size is None else size)
        rows = len(lengths)
        tokens = self.rng.choice(len(labels), size=int(lengths.sum()), p=self.dist._p)
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


@register_distribution("multinomial")
class MultinomialDistribution(Distribution):
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
    sampler_class = MultinomialSampler

    def __init__(
        self,
        pmap: Mapping[Any, float],
        len_dist: Distribution | None = None,
        include_coefficient: bool = True,
    ) -> None:
        fam = "MultinomialDistribution"
        labels, p = checked_pmap(pmap, fam, "token")
        check_parameter(
            len_dist is None or isinstance(len_dist, Distribution),
            fam,
            "len_dist",
            len_dist,
            "a Distribution or None",
        )
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
        self._aligned: dict[tuple[Any, ...], np.ndarray] = {}

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

    def _log_p_for(self, labels: tuple[Any, ...]) -> np.ndarray:
        """Log-probabilities over ``labels`` plus a trailing -inf for code -1 (cached per vocabulary)."""
        lp = self._aligned.get(labels)
        if lp is None:
            lp = np.append(self._log_p, -math.inf)
            if labels != self.labels:
                index = {k: i for i, k in enumerate(self.labels)}
                pos = np.fromiter((index.get(k, -1) for k in labels), dtype=np.int64, count=len(labels))
                lp = np.append(lp[pos], -math.inf)  # position -1 picks the trailing -inf
            if len(self._aligned) >= 16:  # a handful of vocabularies in practice; bound the cache
                self._aligned.clear()
            self._aligned[labels] = lp
        return lp

    def seq_log_density(self, enc: MultinomialBatch) -> np.ndarray:
        terms = enc.counts * self._log_p_for(enc.labels)[enc.codes]
        out = np.bincount(enc.row, weights=terms, minlength=enc.n).astype(np.float64, copy=False)
        if self.include_coefficient:
            out += enc.log_coef
        if self.len_dist is not None:
            len_enc = (
                enc.len_enc
                if enc.len_enc is not None
                else encode_lengths(self.len_dist.encoder(), enc.totals, "document length")
            )
            out += self.len_dist.seq_log_density(len_enc)
        return out

    def estimator(self, pseudo_count: float | None = None) -> MultinomialEstimator:
        len_est = None if self.len_dist is None else self.len_dist.estimator(pseudo_count)
        if pseudo_count is None:
            return MultinomialEstimator(len_estimator=len_est, include_coefficient=self.include_coefficient)
        return MultinomialEstimator(
            pseudo_count,
            self.pmap,
            len_estimator=len_est,
            include_coefficient=self.include_coefficient,
        )

    def encoder(self) -> MultinomialEncoder:
        return MultinomialEncoder(
            self.labels, len_encoder=None if self.len_dist is None else self.len_dist.encoder()
        )

    def n_free_parameters(self) -> int:
        return self.estimator().n_free_parameters(self)


class MultinomialAccumulator(Accumulator):
    """Weighted token counts ``Σ_rows w c_v`` over the estimator's vocabulary, the total row weight
    and the length statistics; value ``(row_weight, counts, length value or None)``.

    Batches encoded with another vocabulary (for example a mixture's union encoder) are re-aligned
    to ``labels``; a token outside it that carries weight is an UnseenLabelError.
    """

    def __init__(
        self, labels: tuple[Any, ...] | None = None, len_acc: Accumulator | None = None, keys: Any = None
    ) -> None:
        self.labels = labels
        self.len_acc = len_acc
        self.keys = keys
        self.row_weight = 0.0
        self.counts = np.zeros(0 if labels is None else len(labels))
        self._maps: dict[tuple[Any, ...], np.ndarray] = {}

    def _positions(self, labels: tuple[Any, ...]) -> np.ndarray:
        """Position in ``self.labels`` of each of ``labels`` (-1 when absent), cached per vocabulary."""
        pos = self._maps.get(labels)
        if pos is None:
            index = {k: i for i, k in enumerate(self.labels or ())}
            pos = self._maps[labels] = np.fromiter(
                (index.get(k, -1) for k in labels), dtype=np.int64, count=len(labels)
            )
        return pos

    def _add_counts(self, enc: MultinomialBatch, weights: np.ndarray) -> None:
        if self.labels is None:
            raise no_vocabulary_error("MultinomialEstimator")
        codes, w = enc.codes, weights[enc.row] * enc.counts
        if len(codes) and codes.min() < 0:  # unseen tokens (unseen="zero") carry no statistics
            keep = codes >= 0
            codes, w = codes[keep], w[keep]
        sums = np.bincount(codes, weights=w, minlength=len(enc.labels))
        if enc.labels is self.labels or enc.labels == self.labels:
            self.counts += sums
            return
        pos = self._positions(enc.labels)
        missing = (pos < 0) & (sums != 0)
        if missing.any():
            j = first_true(missing)
            rows = enc.row[enc.codes == j]
            raise unseen_label_error(enc.labels[j], self.labels, int(rows[0]), len(enc), len(np.unique(rows)))
        present = pos >= 0
        self.counts[pos[present]] += sums[present]

    def _len_enc(self, enc: MultinomialBatch) -> Any:
        if enc.len_enc is not None:
            return enc.len_enc
        return encode_lengths(self.len_acc.make_encoder(), enc.totals, "document length")  # type: ignore[union-attr]

    def seq_update(self, enc: MultinomialBatch, weights: np.ndarray, estimate: Any) -> None:
        self._add_counts(enc, weights)
        self.row_weight += float(weights.sum())
        if self.len_acc is not None:
            len_dist = None if estimate is None else estimate.len_dist
            self.len_acc.seq_update(self._len_enc(enc), weights, len_dist)
        return None

    def seq_initialize(self, enc: MultinomialBatch, weights: np.ndarray, rng: RowRandom) -> None:
        self._add_counts(enc, weights)
        self.row_weight += float(weights.sum())
        if self.len_acc is not None:
            self.len_acc.seq_initialize(self._len_enc(enc), weights, rng.child("len"))

    def combine(self, value: Any) -> MultinomialAccumulator:
        row_weight, counts, len_value = value
        counts = np.array(counts, dtype=np.float64)
        if len(self.counts) == 0 and self.labels is None:
            self.counts = counts
        elif counts.shape != self.counts.shape:
            raise SpecError(
                f"MultinomialAccumulator: cannot combine {len(counts)} counts into {len(self.counts)} "
                "(different vocabularies)"
            )
        else:
            self.counts += counts
        self.row_weight += float(row_weight)
        if self.len_acc is not None:
            self.len_acc.combine(len_value)
        return self

    def value(self) -> tuple[float, np.ndarray, Any]:
        return (self.row_weight, self.counts.copy(), None if self.len_acc is None else self.len_acc.value())

    def from_value(self, value: Any) -> MultinomialAccumulator:
        row_weight, counts, len_value = value
        self.row_weight = float(row_weight)
        self.counts = np.array(counts, dtype=np.float64)
        if self.len_acc is not None:
            self.len_acc.from_value(len_value)
        return self

    def make_encoder(self) -> MultinomialEncoder:
        return MultinomialEncoder(
            self.labels, len_encoder=None if self.len_acc is None else self.len_acc.make_encoder()
        )

    def parts(self) -> list[Accumulator]:
        return [] if self.len_acc is None else [self.len_acc]

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.labels, None if self.len_acc is None else self.len_acc.make(), self.keys)


@register_estimator("multinomial")
@dataclass(eq=False, repr=False)
class MultinomialEstimator(LabelOptions, Estimator):
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
        len_acc = None if self.len_estimator is None else self.len_estimator.accumulator()
        return MultinomialAccumulator(self.vocabulary, len_acc, self.keys)

    def encoder(self) -> MultinomialEncoder:
        len_encoder = None if self.len_estimator is None else self.len_estimator.encoder()
        return MultinomialEncoder(self.vocabulary, len_encoder=len_encoder)

    def with_scan(self, scan: Any) -> MultinomialEstimator:
        if scan is None:
            return self
        tokens, len_scan = scan
        labels = self.labels if tokens is None else (*(self.labels or ()), *tokens)
        len_est = self.len_estimator
        if len_scan is not None and len_est is not None:
            len_est = len_est.with_scan(len_scan)
        return dataclasses.replace(self, labels=labels, len_estimator=len_est)

    def min_rows(self) -> int:
        return 1 if self.len_estimator is None else self.len_estimator.min_rows()

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
        len_dist = (
            None if self.len_estimator is None else self.len_estimator.estimate(float(row_weight), len_value)
        )
        return MultinomialDistribution(
            dict(zip(vocab, p.tolist(), strict=True)), len_dist, self.include_coefficient
        )

    def _free_parameters(self, model: Any, tied: set[Any]) -> int:
        tokens = max(len(model.pmap) - 1, 0)  # the token probabilities sum to one
        return tokens + free_parameters(self.len_estimator, model.len_dist, tied)
