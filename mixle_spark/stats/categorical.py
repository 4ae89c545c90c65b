"""Categorical distribution over arbitrary labels: ``CategoricalDistribution(pmap)`` (label -> prob).

Labels are any hashable values (strings in Spark; ints and bools work too). Labels are compared with
Python equality, so ``1``, ``1.0`` and ``True`` are one label: use one type per column. For JSON, a
model stores its pmap as a list of ``[label, prob]`` pairs, so labels must be JSON scalars (str,
int, float, bool) to round-trip.

Encoding maps labels to int64 codes over a *vocabulary*: a tuple of labels sorted by
``(type name, value)``, so every backend learns the same vocabulary from the same set of labels.
Estimators without fixed ``labels`` learn it with a scan (a frozenset of labels, merged by union).
Statistics are count vectors over the vocabulary; a model scores batches encoded with any vocabulary
by aligning its pmap to the batch's vocabulary (cached per vocabulary).

Unseen labels: by default an encoder raises :class:`~mixle_spark.errors.UnseenLabelError`;
``CategoricalEncoder(..., unseen="zero")`` maps them to code -1, which every model scores ``-inf``
(probability zero) and accumulators ignore.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mixle_spark.errors import (
    DataTypeError,
    EmptyDataError,
    SchemaError,
    SpecError,
)
from mixle_spark.stats._accumulator import widening_target
from mixle_spark.stats._embed import label_width, one_hot, scales
from mixle_spark.stats._labels import (
    CODES_FIELD,
    EXPECTED_LABEL,
    LabelEncoder,
    LabelOptions,
    VocabularyCache,
    add_label_counts,
    align_counts,
    aligned_log_p,
    check_stored_codes,
    checked_pmap,
    hashable_labels,
    is_codes_array,
    label_codes,
    lookup_label,
    merge_label_counts,
    min_prob_option,
    no_vocabulary_error,
    normalize_label,
    null_label_error,
    pmap_from_spec,
    readable_label_type,
    sorted_labels,
    unseen_label_error,
    widened_counts,
)
from mixle_spark.stats._validate import as_arrow_array, first_true
from mixle_spark.stats.base import (
    Accumulator,
    Distribution,
    Encoder,
    Estimator,
    Parameter,
    option,
    register_distribution,
    register_estimator,
)

__all__ = [
    "CategoricalAccumulator",
    "CategoricalBatch",
    "CategoricalDistribution",
    "CategoricalEncoder",
    "CategoricalEstimator",
    "sorted_labels",
]


class CategoricalBatch:
    """An encoded batch: ``codes`` (int64, shape (n,); -1 = unseen) into the vocabulary ``labels``."""

    __slots__ = ("codes", "labels")

    def __init__(self, codes: np.ndarray, labels: tuple[Any, ...]) -> None:
        self.codes = codes
        self.labels = labels

    def __len__(self) -> int:
        return len(self.codes)


@register_distribution("categorical")
class CategoricalDistribution(Distribution):
    """Probability ``pmap[label]`` for each label; labels outside ``pmap`` have probability zero.

    Probabilities must be finite, non-negative and sum to 1 within 1e-9 (they are then renormalized
    exactly). ``pmap`` is kept in vocabulary order.

    Examples
    --------
    >>> d = CategoricalDistribution({"a": 0.25, "b": 0.75})
    >>> round(d.log_density("b"), 6)
    -0.287682
    """

    parameters = (Parameter("pmap", parse=lambda v: pmap_from_spec(v, "CategoricalDistribution")),)

    def __init__(self, pmap: Mapping[Any, float]) -> None:
        labels, p = checked_pmap(pmap, "CategoricalDistribution")
        self.pmap: dict[Any, float] = dict(zip(labels, (float(v) for v in p), strict=True))
        self.labels = labels
        self._p = p
        with np.errstate(divide="ignore"):
            self._log_p = np.log(p)
        self._aligned = VocabularyCache()

    def draw(self, rng: np.random.Generator, size: int | None = None) -> Any:
        """One record is a label; a batch a list of labels."""
        idx = rng.choice(len(self.labels), size=1 if size is None else size, p=self._p)
        labels = self.labels
        return labels[int(idx[0])] if size is None else [labels[int(i)] for i in idx]

    def log_density(self, x: Any) -> float:
        try:
            p = self.pmap.get(normalize_label(x), 0.0)
        except TypeError:  # unhashable: not a label this model knows
            return -math.inf
        return math.log(p) if p > 0 else -math.inf

    def seq_log_density(self, enc: CategoricalBatch) -> np.ndarray:
        log_p = self._aligned.get(enc.labels, lambda labels: aligned_log_p(self._log_p, self.labels, labels))
        return log_p[enc.codes]

    def estimator(self, pseudo_count: float | None = None) -> CategoricalEstimator:
        if pseudo_count is None:
            return CategoricalEstimator()
        return CategoricalEstimator(pseudo_count=pseudo_count, suff_stat=self.pmap)

    def encoder(self) -> CategoricalEncoder:
        return CategoricalEncoder(self.labels)

    def n_free_parameters(self) -> int:
        return max(len(self.pmap) - 1, 0)  # the probabilities sum to one


class CategoricalEncoder(LabelEncoder):
    """Labels -> int64 codes into a sorted vocabulary.

    Parameters
    ----------
    labels : iterable of labels, optional
        The vocabulary (sorted by ``(type name, value)``). Without it the encoder needs a scan; a
        batch encoded before one uses its own labels as the vocabulary.
    unseen : {"error", "zero"}
        A label outside the vocabulary raises UnseenLabelError ("error") or gets code -1, scored as
        probability zero ("zero").
    """

    def __init__(self, labels: Iterable[Any] | None = None, unseen: str = "error") -> None:
        super().__init__(labels, unseen)

    def rebuilt(self, labels: Iterable[Any] | None, unseen: str, len_encoder: Encoder | None) -> LabelEncoder:
        return CategoricalEncoder(labels, unseen)

    # -- Python records ----------------------------------------------------------------------------
    def encode(self, records: Sequence[Any]) -> CategoricalBatch:
        n = len(records)
        values = [normalize_label(v) for v in records]
        vocab = self.labels if self.labels is not None else self._batch_vocab(values)
        index = {k: i for i, k in enumerate(vocab)}
        codes = np.empty(n, dtype=np.int64)
        for i, v in enumerate(values):
            code = lookup_label(index, v, i, n)
            if code < 0 and self.unseen == "error":
                bad = sum(1 for u in values if lookup_label(index, u, 0, n) < 0)
                raise unseen_label_error(v, vocab, i, n, bad)
            codes[i] = code
        return CategoricalBatch(codes, vocab)

    @staticmethod
    def _batch_vocab(values: list[Any]) -> tuple[Any, ...]:
        for i, v in enumerate(values):
            lookup_label({}, v, i, len(values))  # raises for None / unhashable
        return sorted_labels(values)

    # -- Arrow --------------------------------------------------------------------------------------
    def from_arrow(self, data: Any) -> CategoricalBatch:
        array = as_arrow_array(data)
        n = len(array)
        if is_codes_array(array):
            return self._from_codes(array)
        self._check_array(array)
        if array.null_count:
            mask = np.asarray(array.is_null().to_numpy(zero_copy_only=False))
            raise null_label_error(first_true(mask), n, int(mask.sum()))
        vocab = self.labels if self.labels is not None else sorted_labels(self._arrow_labels(array))
        if pa.types.is_dictionary(array.type):
            dict_codes = label_codes(array.dictionary, vocab)
            codes = dict_codes[np.asarray(array.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]
        else:
            codes = label_codes(array, vocab)
        if self.unseen == "error" and n and (codes < 0).any():
            bad = codes < 0
            i = first_true(bad)
            raise unseen_label_error(array[i].as_py(), vocab, i, n, int(bad.sum()))
        return CategoricalBatch(codes, vocab)

    def unseen_rows(self, enc: CategoricalBatch) -> np.ndarray:
        return enc.codes < 0

    def compact_arrow(self, data: Any) -> Any:
        """Labels -> their int32 codes in this encoder's vocabulary, as ``struct<__mixle_codes: int>``
        (the struct tells codes from integer labels; Spark stores it, unlike Arrow dictionaries)."""
        if self.labels is None or is_codes_array(as_arrow_array(data)):
            return data
        codes = pa.array(self.from_arrow(data).codes.astype(np.int32), type=pa.int32())
        return pa.StructArray.from_arrays([codes], names=[CODES_FIELD])

    def _from_codes(self, array: pa.StructArray) -> CategoricalBatch:
        n = len(array)
        if self.labels is None:
            raise no_vocabulary_error()
        if array.null_count:
            mask = np.asarray(array.is_null().to_numpy(zero_copy_only=False))
            raise null_label_error(first_true(mask), n, int(mask.sum()))
        codes = np.asarray(array.field(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        check_stored_codes(codes, len(self.labels), "CategoricalEncoder")
        if self.unseen == "error" and n and (codes < 0).any():
            bad = codes < 0
            raise unseen_label_error("<unseen label>", self.labels, first_true(bad), n, int(bad.sum()))
        return CategoricalBatch(codes, self.labels)

    @staticmethod
    def _check_array(array: pa.Array) -> None:
        typ = array.type
        value_type = typ.value_type if pa.types.is_dictionary(typ) else typ
        if not readable_label_type(value_type):
            valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False))
            i = first_true(valid) if valid.any() else 0
            raise DataTypeError(
                f"{EXPECTED_LABEL} (string, integer or boolean; Arrow type {typ})",
                value=array[i].as_py() if len(array) else None,
                row=i,
                n_rows=len(array),
            )

    @staticmethod
    def _arrow_labels(array: pa.Array) -> list[Any]:
        if pa.types.is_dictionary(array.type):
            array = array.dictionary.take(pc.unique(array.indices.drop_null()))
        return pc.unique(array.drop_null()).to_pylist()

    def check_arrow_type(self, arrow_type: Any) -> None:
        value_type = arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type
        if not readable_label_type(value_type):
            raise SchemaError(
                f"expected {self.expected_arrow()} for CategoricalEstimator, got Arrow type {arrow_type}"
            )

    def expected_arrow(self) -> str:
        return "a string, large_string, integer, boolean or dictionary column"

    # -- scans -----------------------------------------------------------------------------------------
    def scan(self, records: Sequence[Any]) -> frozenset[Any]:
        """The labels of ``records`` (None entries are skipped: encode reports them)."""
        n = len(records)
        out = set()
        for i, v in enumerate(records):
            if v is not None:
                lookup_label({}, v, i, n)  # raises for an unhashable value
                out.add(normalize_label(v))
        return frozenset(out)

    def scan_arrow(self, data: Any) -> frozenset[Any]:
        array = as_arrow_array(data)
        self._check_array(array)
        return frozenset(self._arrow_labels(array))

    def merge_scans(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        return frozenset(a) | frozenset(b)

    @property
    def rebases(self) -> bool:
        return True

    def rebase(self, enc: CategoricalBatch) -> CategoricalBatch:
        """The batch's codes moved from its own vocabulary into this encoder's (a superset)."""
        if self.labels is None or enc.labels == self.labels:
            return enc if self.labels is None else CategoricalBatch(enc.codes, self.labels)
        index = {(type(v).__name__, v): i for i, v in enumerate(self.labels)}
        # one more slot maps code -1 (an unseen label, with unseen="zero") to -1
        moved = np.array([index[(type(v).__name__, v)] for v in enc.labels] + [-1], dtype=np.int64)
        return CategoricalBatch(moved[enc.codes], self.labels)

    def embedding_scales(self) -> np.ndarray:
        return scales(False, label_width(self.labels))

    def embed(self, enc: Any) -> np.ndarray:
        return one_hot(enc.codes, label_width(self.labels))


class CategoricalAccumulator(Accumulator):
    """Weighted label counts over the estimator's vocabulary ``labels``; value: the count vector.

    Batches encoded with another vocabulary (for example a mixture's union encoder) are re-aligned
    to ``labels``; a label outside it that carries weight is an UnseenLabelError.
    """

    def __init__(self, labels: tuple[Any, ...] | None = None, keys: Any = None) -> None:
        self.keys = keys
        self.labels = labels
        self.counts = np.zeros(0 if labels is None else len(labels))
        self._positions = VocabularyCache()

    def seq_update(self, enc: CategoricalBatch, weights: np.ndarray, estimate: Any) -> None:
        if self.labels is None:
            raise no_vocabulary_error()
        codes = enc.codes
        if len(codes) and codes.min() < 0:  # unseen labels (unseen="zero") carry no statistics
            keep = codes >= 0
            codes, weights = codes[keep], weights[keep]
        counts = np.bincount(codes, weights=weights, minlength=len(enc.labels))
        j = add_label_counts(self.counts, counts, self.labels, enc.labels, self._positions)
        if j is not None:
            row = first_true(enc.codes == j)
            raise unseen_label_error(enc.labels[j], self.labels, row, len(enc), int((enc.codes == j).sum()))
        return None

    def combine(self, value: Any) -> CategoricalAccumulator:
        self.counts = merge_label_counts(self.counts, self.labels, value, "CategoricalAccumulator")
        return self

    def value(self) -> np.ndarray:
        return self.counts.copy()

    def _scale(self, factor: float) -> None:
        self.counts = factor * self.counts

    def widened(self, target: Accumulator) -> np.ndarray:
        vocabulary = widening_target(self, target).labels
        return widened_counts(self.counts, self.labels, vocabulary, type(self).__name__)

    def from_value(self, value: Any) -> CategoricalAccumulator:
        self.counts = np.array(value, dtype=np.float64)
        return self

    def make_encoder(self) -> CategoricalEncoder:
        return CategoricalEncoder(self.labels)

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.labels, self.keys)


@register_estimator("categorical")
@dataclass(eq=False, repr=False)
class CategoricalEstimator(LabelOptions, Estimator):
    """Label frequencies, optionally smoothed.

    Parameters
    ----------
    pseudo_count : float, optional
        Prior weight, spread evenly over the vocabulary, or by ``suff_stat`` when given.
    suff_stat : mapping label -> probability, optional
        Prior pmap (its labels join the vocabulary).
    labels : iterable of labels, optional
        Fixed vocabulary; without it the encoder's scan learns the labels of the data.
    min_prob : float
        Probability floor (default 0): every probability is raised to at least ``min_prob``, then
        the vector is renormalized.
    keys : str, optional
        Tie this categorical's parameters to every other site with the same key.

    The estimated pmap covers the whole vocabulary (zero probabilities included), so its encoder
    accepts every label the data had. Zero total weight gives the uniform distribution.
    """

    pseudo_count: float | None = None
    suff_stat: Mapping[Any, float] | Sequence[Any] | None = None
    labels: Iterable[Any] | None = option(None, parse=hashable_labels)
    min_prob: float = min_prob_option()
    name: str | None = None
    keys: str | None = None

    def check(self) -> None:
        if self.suff_stat is not None:
            prior = pmap_from_spec(self.suff_stat, "CategoricalEstimator")
            self.suff_stat = CategoricalDistribution(prior).pmap
        # The prior's labels join a fixed vocabulary, so the estimate covers them.
        if self.labels is not None:
            self.labels = sorted_labels((*self.labels, *(self.suff_stat or ())))

    def accumulator_factory(self) -> CategoricalAccumulator:
        return CategoricalAccumulator(self.vocabulary, self.keys)

    def encoder(self) -> CategoricalEncoder:
        return CategoricalEncoder(self.vocabulary)

    def with_scan(self, scan: Any) -> CategoricalEstimator:
        return self if scan is None else dataclasses.replace(self, labels=(*(self.labels or ()), *scan))

    def estimate(self, nobs: float | None, value: Any) -> CategoricalDistribution:
        vocab = self.vocabulary
        if vocab is None:
            raise no_vocabulary_error()
        if not vocab:
            raise EmptyDataError("CategoricalEstimator: no labels in the data and no `labels` given")
        counts = np.array(value, dtype=np.float64)
        if counts.shape != (len(vocab),):
            raise SpecError(
                f"CategoricalEstimator: {len(counts)} counts for a vocabulary of {len(vocab)} labels"
            )
        prior = cast(dict[Any, float], self.suff_stat or {})
        pc = self.pseudo_count or 0.0
        if pc > 0:
            if prior:
                counts += pc * align_counts(tuple(prior), np.array(list(prior.values())), vocab)
            else:
                counts += pc / len(vocab)
        total = float(counts.sum())
        if total > 0 and math.isfinite(total):
            p = counts / total
        else:
            p = np.full(len(vocab), 1.0 / len(vocab))
        if self.min_prob > 0:
            p = np.maximum(p, self.min_prob)
            p /= p.sum()
        return CategoricalDistribution(dict(zip(vocab, p.tolist(), strict=True)))
