"""Markov chains over a list column of labels: ``MarkovChainDistribution(initial, transitions, len_dist)``.

A record is a sequence of labels (strings or integers; a Python list, a 1-D numpy array, or a row of
an Arrow ``list<string>`` / ``list<large_string>`` / ``list<int*>`` column). Its log-probability is

``log p(x) = log initial[x0] + Σ_t log transitions[x_{t-1}][x_t] (+ len_dist.log_density(len(x)))``;

an empty sequence scores only its length term (0 without ``len_dist``). Scoring never raises for a
label the model does not know: a label outside the vocabulary, a zero initial probability, a zero
transition and a transition out of a label with no transition row all give ``-inf``.

Labels are encoded as in the categorical family: int64 codes into a vocabulary sorted by
``(type name, value)``, learned by the encoder's scan (merged by union) so every partition, rank and
worker encodes with one vocabulary, and the accumulator's statistics are fixed-shape count arrays over
it — weighted first-label counts (K,) and transition counts (K, K) — that merge by addition. Batches
encoded with another vocabulary (a mixture's union encoder) are re-aligned by label. All batch work is
vectorized (:mod:`mixle_spark.stats._markov_kernels`); K is the vocabulary size, and statistics and
models are dense K x K, which suits vocabularies up to a few thousand labels.

M-step: ``initial`` = first-label counts normalised; each transition row = its counts normalised.
``pseudo_count=c`` is a prior weight of ``c`` spread evenly over the vocabulary (``c / K`` added to
every initial count, and to every count of each transition row), as for Categorical, Multinomial and
HiddenMarkov. A label with no outgoing weight (never followed by another label in the data, e.g. a
terminal page) gets the **uniform** row, with or without ``pseudo_count`` (as a hidden Markov model's
unvisited state does): every fitted row is a proper distribution, so a fitted chain never turns an
unseen transition out of such a label into ``-inf`` and can always be sampled.

A user-built distribution may omit rows: a label without a row has no outgoing transitions (scores
``-inf`` when left; the sampler raises if it has to leave it).

Examples
--------
>>> mc = MarkovChainDistribution({"home": 0.8, "cart": 0.2},
...                              {"home": {"home": 0.5, "cart": 0.5}, "cart": {"home": 1.0}})
>>> round(mc.log_density(["home", "cart", "home"]), 6)
-0.916291
>>> mc.log_density(["home", "checkout"])
-inf
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import EmptyDataError, SpecError
from mixle_spark.stats._accumulator import widening_target
from mixle_spark.stats._labels import (
    LabelListOptions,
    VocabularyCache,
    label_positions,
    no_vocabulary_error,
    normalize_label,
    sorted_labels,
    widened_counts,
)
from mixle_spark.stats._lengths import LengthAccumulation, LengthModel, check_length_model
from mixle_spark.stats._markov_kernels import (
    MarkovChainEncoded,
    MarkovChainEncoder,
    count_transitions,
    exact_rows,
    label_mapping,
    normalized_rows,
    probability_vector,
    sample_chain,
    unseen_in_vocabulary,
    vocabulary,
)
from mixle_spark.stats._product import as_record_list
from mixle_spark.stats._validate import unit_sum
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
    "MarkovChainAccumulator",
    "MarkovChainDistribution",
    "MarkovChainEncoded",
    "MarkovChainEncoder",
    "MarkovChainEstimator",
]

_FAMILY = "MarkovChainDistribution"


@register_distribution("markov_chain")
class MarkovChainDistribution(LengthModel, Distribution):
    """A first-order Markov chain over labels, with an optional length model.

    Parameters
    ----------
    initial : mapping label -> float
        Probability of each first label (sums to 1 within 1e-9; renormalised exactly).
    transitions : mapping label -> (mapping label -> float)
        ``transitions[a][b]`` is the probability of ``b`` right after ``a``; each given row sums to 1
        within 1e-9. A label without a row cannot be left (probability zero).
    len_dist : Distribution, optional
        Model of the sequence length (a count family); required for sampling.

    The vocabulary ``labels`` is every label named anywhere, sorted; ``initial`` and ``transitions``
    read back as mappings (``transitions`` lists the given rows, zero entries left out), and
    ``initial_vector`` / ``transition_matrix`` as arrays over ``labels`` (rows of zeros for labels
    without a row).
    """

    parameters = (Parameter("initial"), Parameter("transitions"), part("len_dist", optional=True))

    def __init__(
        self,
        initial: Mapping[Any, float],
        transitions: Mapping[Any, Mapping[Any, float]],
        len_dist: Distribution | None = None,
    ) -> None:
        init = label_mapping(initial, "initial", "label -> probability")
        check_parameter(
            len(init) > 0, _FAMILY, "initial", initial, "a non-empty mapping label -> probability"
        )
        rows = label_mapping(transitions, "transitions", "label -> (mapping label -> probability)")
        rows = {k: label_mapping(v, f"transitions[{k!r}]", "label -> probability") for k, v in rows.items()}
        labels = sorted_labels(
            [
                *vocabulary(init, _FAMILY, "initial"),
                *vocabulary(rows, _FAMILY, "transitions"),
                *(x for k, r in rows.items() for x in vocabulary(r, _FAMILY, f"transitions[{k!r}]")),
            ]
        )
        index = {v: i for i, v in enumerate(labels)}
        k = len(labels)
        p_trans = np.zeros((k, k))
        given = np.zeros(k, dtype=bool)
        for label, row in rows.items():
            i = index[normalize_label(label)]
            p_trans[i] = probability_vector(row, index, k)
            given[i] = True
        self._setup(labels, probability_vector(init, index, k), p_trans, given, len_dist)

    @classmethod
    def from_arrays(
        cls,
        labels: Sequence[Any],
        initial: Any,
        transitions: Any,
        len_dist: Distribution | None = None,
    ) -> MarkovChainDistribution:
        """Build from arrays over ``labels``: ``initial`` (K,) and ``transitions`` (K, K), whose rows
        of zeros are labels without a row (the others sum to 1 within 1e-9)."""
        labs = vocabulary(labels, _FAMILY, "labels")
        vocab = sorted_labels(labs)
        k = len(vocab)
        given_at = {v: i for i, v in enumerate(labs)}
        order = None if labs == list(vocab) else np.fromiter((given_at[v] for v in vocab), np.int64, k)
        try:
            p_init = np.array(initial, dtype=np.float64)
            p_trans = np.array(transitions, dtype=np.float64)
        except (TypeError, ValueError):
            p_init, p_trans = np.full(k, math.nan), np.full((k, k), math.nan)
        check_parameter(p_init.shape == (k,), _FAMILY, "initial", initial, f"a vector of shape ({k},)")
        check_parameter(
            p_trans.shape == (k, k), _FAMILY, "transitions", transitions, f"a matrix of shape {(k, k)}"
        )
        if order is not None:
            p_init, p_trans = p_init[order], p_trans[np.ix_(order, order)]
        out = cls.__new__(cls)
        out._setup(vocab, p_init, p_trans, p_trans.sum(axis=1) != 0, len_dist)
        return out

    def _setup(
        self,
        labels: tuple[Any, ...],
        p_init: np.ndarray,
        p_trans: np.ndarray,
        given: np.ndarray,
        len_dist: Distribution | None,
    ) -> None:
        check_length_model(_FAMILY, len_dist)
        for name, p in (("initial", p_init), ("transitions", p_trans)):
            ok = bool(np.all(np.isfinite(p)) and np.all(p >= 0))
            check_parameter(ok, _FAMILY, name, p.tolist(), "finite non-negative probabilities")
        total = float(p_init.sum())
        check_parameter(
            abs(total - 1.0) <= 1e-9,
            _FAMILY,
            "initial",
            dict(zip(labels, p_init.tolist(), strict=True)),
            f"probabilities summing to 1 within 1e-9 (sum {total!r})",
        )
        sums = p_trans.sum(axis=1)
        bad = np.flatnonzero(given & (np.abs(sums - 1.0) > 1e-9))
        if bad.size:
            i = int(bad[0])
            row = {labels[j]: float(p_trans[i, j]) for j in np.flatnonzero(p_trans[i]).tolist()}
            expected = f"probabilities summing to 1 within 1e-9 (sum {float(sums[i])!r})"
            check_parameter(False, _FAMILY, f"transitions[{labels[i]!r}]", row, expected)
        k = len(labels)
        self.labels = labels
        self.len_dist = len_dist
        self._p_init = unit_sum(p_init)
        self._p_trans = exact_rows(p_trans, np.flatnonzero(given))
        with np.errstate(divide="ignore"):
            self._log_init = np.append(np.log(self._p_init), -math.inf)  # code -1 reads the trailing -inf
            self._log_trans = np.full((k + 1, k + 1), -math.inf)
            self._log_trans[:k, :k] = np.log(self._p_trans)
        self._positions = VocabularyCache()

    # -- parameters ------------------------------------------------------------------------------
    @property
    def initial(self) -> dict[Any, float]:
        """First-label probabilities over the whole vocabulary."""
        return dict(zip(self.labels, self._p_init.tolist(), strict=True))

    @property
    def transitions(self) -> dict[Any, dict[Any, float]]:
        """The given transition rows, their zero entries left out."""
        out: dict[Any, dict[Any, float]] = {}
        rows, cols = np.nonzero(self._p_trans)
        for i, j, p in zip(rows.tolist(), cols.tolist(), self._p_trans[rows, cols].tolist(), strict=True):
            out.setdefault(self.labels[i], {})[self.labels[j]] = p
        return out

    @property
    def initial_vector(self) -> np.ndarray:
        """``initial`` as an array of shape (K,) over ``labels``."""
        return self._p_init.copy()

    @property
    def transition_matrix(self) -> np.ndarray:
        """``transitions`` as an array of shape (K, K) over ``labels`` (zero rows: no row given)."""
        return self._p_trans.copy()

    # -- scoring -----------------------------------------------------------------------------------
    def _model_codes(self, enc: MarkovChainEncoded) -> np.ndarray:
        """The batch's codes in this model's vocabulary (-1 for labels it lacks), cached per vocabulary."""
        labels = enc.labels
        if labels is self.labels or labels == self.labels:
            return enc.codes
        return self._positions.get(labels, lambda batch: label_positions(batch, self.labels))[enc.codes]

    def _chain_ll(self, enc: MarkovChainEncoded) -> np.ndarray:
        """Per-row log-probability of the labels (first label and transitions), shape (n,)."""
        codes = self._model_codes(enc)
        steps = self._log_trans[codes[enc.next - 1], codes[enc.next]]
        ll = np.bincount(enc.pair_owner, weights=steps, minlength=enc.n).astype(np.float64, copy=False)
        ll[enc.first_owner] += self._log_init[codes[enc.first]]
        return ll

    def sampling_parts(self) -> list[Distribution]:
        return [self.sampled_lengths()]

    def draw_codes(self, sampler: Sampler, size: int) -> tuple[np.ndarray, np.ndarray]:
        """``(lengths (size,), codes (m,))``: ``size`` sequences drawn by ``sampler`` (a sampler of this
        chain), as codes into ``labels``: lengths from ``len_dist``, then the labels of all sequences
        one time step at a time (see :func:`~mixle_spark.stats._markov_kernels.sample_chain`). A
        chain that must leave a label without a transition row raises SpecError naming the label."""
        raw = np.asarray(as_record_list(sampler.parts[0].sample(size)), dtype=np.float64).reshape(-1)
        bad = (raw < 0) | (raw != np.floor(raw))
        if bad.any():
            raise SpecError(f"{_FAMILY}: len_dist drew {raw[bad][0]!r}, not a non-negative integer length")
        lengths = raw.astype(np.int64)
        return lengths, sample_chain(sampler.rng, lengths, self._p_init, self._p_trans, self.labels)

    def draw_with(self, sampler: Sampler, size: int | None = None) -> Any:
        """Lists of labels (see :meth:`draw_codes`)."""
        lengths, codes = self.draw_codes(sampler, 1 if size is None else size)
        values = np.array(self.labels, dtype=object)[codes].tolist() if codes.size else []
        ends = np.cumsum(lengths).tolist()
        out = [values[e - n : e] for e, n in zip(ends, lengths.tolist(), strict=True)]
        return out[0] if size is None else out

    def log_density(self, x: Sequence[Any]) -> float:
        return float(self.seq_log_density(self.encoder().encode([x]))[0])

    def seq_log_density(self, enc: MarkovChainEncoded) -> np.ndarray:
        return self._chain_ll(enc) + self.length_log_density(enc.len_enc, enc.lengths)

    def estimator(self, pseudo_count: float | None = None) -> MarkovChainEstimator:
        return MarkovChainEstimator(
            len_estimator=self.length_estimator(pseudo_count), pseudo_count=pseudo_count
        )

    def encoder(self) -> MarkovChainEncoder:
        """Encodes with this model's vocabulary; labels outside it get code -1 (scored ``-inf``)."""
        return MarkovChainEncoder(self.labels, self.length_encoder(), unseen="zero")

    def n_free_parameters(self) -> int:
        return self.estimator().n_free_parameters(self)


class MarkovChainAccumulator(LengthAccumulation, Accumulator):
    """Weighted counts over the estimator's vocabulary ``labels`` (K labels).

    Value: ``(initial counts (K,), transition counts (K, K), length value or None, row weight)``.
    Batches encoded with another vocabulary are re-aligned by label; a label outside ``labels`` in
    a row of non-zero weight is an UnseenLabelError. Labels with code -1 count nothing (nor do the
    transitions into and out of them).
    """

    def __init__(
        self, labels: tuple[Any, ...] | None = None, len_acc: Accumulator | None = None, keys: Any = None
    ) -> None:
        k = 0 if labels is None else len(labels)
        self.labels = labels
        self.len_acc = len_acc
        self.keys = keys
        self.initial = np.zeros(k)
        self.transitions = np.zeros((k, k))
        self.row_weight = 0.0
        self._positions = VocabularyCache()

    def _codes(self, enc: MarkovChainEncoded, weights: np.ndarray) -> np.ndarray:
        if self.labels is None:
            raise no_vocabulary_error("MarkovChainEstimator")
        if enc.labels is self.labels or enc.labels == self.labels:
            return enc.codes
        vocabulary = self.labels
        codes = self._positions.get(enc.labels, lambda batch: label_positions(batch, vocabulary))[enc.codes]
        unseen_in_vocabulary(enc, codes, weights, vocabulary)
        return codes

    def _count(self, enc: MarkovChainEncoded, weights: np.ndarray) -> None:
        codes = self._codes(enc, weights)
        initial, transitions = count_transitions(enc, codes, weights, len(self.labels or ()))
        self.initial += initial
        self.transitions += transitions
        self.row_weight += float(weights.sum())

    def seq_update(self, enc: MarkovChainEncoded, weights: np.ndarray, estimate: Any) -> np.ndarray | None:
        weights = np.asarray(weights, dtype=np.float64)
        self._count(enc, weights)
        len_dist = None if estimate is None else estimate.len_dist
        len_ll = self.update_lengths(enc.len_enc, enc.lengths, weights, len_dist)
        return None if estimate is None else estimate._chain_ll(enc) + len_ll

    def seq_initialize(self, enc: MarkovChainEncoded, weights: np.ndarray, rng: RowRandom) -> None:
        """The plain weighted counts: a chain has no latent variables, so the randomness of an initial
        model comes through ``weights`` (a mixture draws them per row from its row-keyed ``rng``); the
        length model initializes from ``rng.child("len")``."""
        weights = np.asarray(weights, dtype=np.float64)
        self._count(enc, weights)
        self.initialize_lengths(enc.len_enc, enc.lengths, weights, rng)

    def _arrays(self, value: Any) -> tuple[np.ndarray, np.ndarray, Any, float]:
        initial, transitions, len_value, row_weight = value
        initial = np.array(initial, dtype=np.float64)
        transitions = np.array(transitions, dtype=np.float64)
        k = len(self.initial)
        if initial.shape != (k,) or transitions.shape != (k, k):
            raise SpecError(
                f"MarkovChainAccumulator: cannot combine statistics over {len(initial)} labels with "
                f"statistics over {k} (different vocabularies)"
            )
        return initial, transitions, len_value, float(row_weight)

    def combine(self, value: Any) -> MarkovChainAccumulator:
        initial, transitions, len_value, row_weight = self._arrays(value)
        self.initial += initial
        self.transitions += transitions
        self.combine_lengths(len_value)
        self.row_weight += row_weight
        return self

    def value(self) -> tuple[np.ndarray, np.ndarray, Any, float]:
        return (self.initial.copy(), self.transitions.copy(), self.length_value(), self.row_weight)

    def _scale(self, factor: float) -> None:
        self.initial = factor * self.initial
        self.transitions = factor * self.transitions
        self.row_weight *= factor
        self.scale_lengths(factor)

    def widened(self, target: Accumulator) -> tuple[np.ndarray, np.ndarray, Any, float]:
        other = widening_target(self, target)
        owner = type(self).__name__
        initial = widened_counts(self.initial, self.labels, other.labels, owner)
        transitions = widened_counts(self.transitions, self.labels, other.labels, owner)
        return (initial, transitions, self.widened_lengths(other), self.row_weight)

    def from_value(self, value: Any) -> MarkovChainAccumulator:
        self.initial, self.transitions, len_value, self.row_weight = self._arrays(value)
        self.lengths_from_value(len_value)
        return self

    def make_encoder(self) -> MarkovChainEncoder:
        return MarkovChainEncoder(self.labels, self.length_encoder())

    def parts(self) -> list[Accumulator]:
        return self.length_parts()

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.labels, self.fresh_lengths(), self.keys)


@register_estimator("markov_chain")
@dataclass(eq=False, repr=False)
class MarkovChainEstimator(LabelListOptions, Estimator):
    """Maximum-likelihood (optionally smoothed) Markov chain.

    Parameters
    ----------
    len_estimator : Estimator, optional
        Length model estimator (a count family); without it the fitted model has ``len_dist=None``.
    pseudo_count : float, optional
        Prior weight spread evenly over the vocabulary of ``K`` labels: ``pseudo_count / K`` is added to
        every initial count and to every count of each transition row.
    name : str, optional
    keys : str, optional
        Tie this chain (initial, transitions and length statistics) to every site with the same key.
    labels : iterable of labels, optional
        Fixed vocabulary (no scan; a label outside it is an UnseenLabelError). Without it the
        encoder's scan learns the labels of the data.

    A label never followed by another one gets the uniform transition row; the initial
    probabilities are uniform when no sequence has a first label (all empty). With no labels at all
    the estimate is an EmptyDataError.
    """

    len_estimator: Estimator | None = estimator_option()
    pseudo_count: float | None = option(None, read=float)
    name: str | None = None
    keys: str | None = None
    labels: Iterable[Any] | None = option(
        None, read=lambda v: sorted_labels(vocabulary(v, "MarkovChainEstimator", "labels"))
    )

    def accumulator_factory(self) -> MarkovChainAccumulator:
        return MarkovChainAccumulator(self.vocabulary, self.length_accumulator(), self.keys)

    def encoder(self) -> MarkovChainEncoder:
        return MarkovChainEncoder(self.vocabulary, self.length_encoder())

    def estimate(self, nobs: float | None, value: Any) -> MarkovChainDistribution:
        if self.vocabulary is None:
            raise no_vocabulary_error("MarkovChainEstimator")
        if not self.vocabulary:
            raise EmptyDataError("MarkovChainEstimator: no labels in the data (every sequence is empty)")
        initial, transitions, len_value, row_weight = value
        initial = np.array(initial, dtype=np.float64)
        transitions = np.array(transitions, dtype=np.float64)
        k = len(self.vocabulary)
        if initial.shape != (k,) or transitions.shape != (k, k):
            raise SpecError(
                f"MarkovChainEstimator: statistics of shapes {initial.shape} and {transitions.shape} "
                f"for a vocabulary of {k} labels"
            )
        pc = (self.pseudo_count or 0.0) / max(k, 1)
        return MarkovChainDistribution.from_arrays(
            self.vocabulary,
            normalized_rows(initial + pc),
            normalized_rows(transitions + pc),
            self.length_estimate(row_weight, len_value),
        )

    def _free_parameters(self, model: Any, tied: set[Any]) -> int:
        k = len(model.initial)  # the initial (k - 1) and each transition row (k - 1) sum to one
        return k * k - 1 + free_parameters(self.len_estimator, model.len_dist, tied)
