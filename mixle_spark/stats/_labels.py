"""Label handling shared by the label families (categorical, multinomial, Markov chain): vocabulary
order, lookups, batches coded over another vocabulary, error messages.

A vocabulary is a tuple of distinct labels sorted by ``(type name, value)``, so every backend learns
the same vocabulary from the same set of labels. A batch is coded over the vocabulary its encoder had
(a mixture's union vocabulary, or a partition's before the scan was complete): models and accumulators
re-align it by label through a :class:`VocabularyCache`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mixle_spark.errors import DataTypeError, DataValueError, SpecError, UnseenLabelError
from mixle_spark.stats._lengths import LengthEncoding, LengthEstimation
from mixle_spark.stats._validate import first_true, unit_sum
from mixle_spark.stats.base import Encoder, check_parameter, option

__all__ = [
    "EXPECTED_LABEL",
    "LabelEncoder",
    "LabelListOptions",
    "LabelOptions",
    "VocabularyCache",
    "add_label_counts",
    "align_counts",
    "aligned_log_p",
    "check_stored_codes",
    "checked_pmap",
    "hashable_label",
    "hashable_labels",
    "label_positions",
    "lookup_label",
    "merge_label_counts",
    "min_prob_option",
    "no_vocabulary_error",
    "normalize_label",
    "null_label_error",
    "pmap_from_spec",
    "readable_label_type",
    "sorted_labels",
    "unseen_label_error",
    "widened_counts",
]

EXPECTED_LABEL = "expected a label for CategoricalEstimator"


CODES_FIELD = "__mixle_codes"
"""The one field of the struct column that carries label codes in a compact cache."""


def is_codes_array(array: Any) -> bool:
    """True for ``struct<__mixle_codes: int>``: label codes made by ``compact_arrow``."""
    typ = array.type
    return bool(pa.types.is_struct(typ) and typ.num_fields == 1 and typ.field(0).name == CODES_FIELD)


def normalize_label(label: Any) -> Any:
    """numpy scalars -> Python scalars (so np.str_('a') and 'a' are one label with one sort key)."""
    return label.item() if isinstance(label, np.generic) else label


def _sort_key(label: Any) -> tuple[str, Any]:
    return (type(label).__name__, label)


def sorted_labels(labels: Iterable[Any]) -> tuple[Any, ...]:
    """The deterministic vocabulary order: distinct labels sorted by ``(type name, value)``."""
    distinct = list(dict.fromkeys(normalize_label(v) for v in labels))
    try:
        return tuple(sorted(distinct, key=_sort_key))
    except TypeError:  # values of one type that do not compare (e.g. mixed tuples): order by repr
        return tuple(sorted(distinct, key=lambda v: (type(v).__name__, repr(v))))


def _preview(vocab: tuple[Any, ...], limit: int = 10) -> str:
    shown = ", ".join(repr(v) for v in vocab[:limit])
    return f"({shown}{', ...' if len(vocab) > limit else ''})"


def unseen_label_error(
    label: Any, vocab: tuple[Any, ...], row: int, n_rows: int, count: int
) -> UnseenLabelError:
    return UnseenLabelError(
        f"label {label!r} is not in the model's vocabulary of {len(vocab)} labels {_preview(vocab)}",
        row=row,
        n_rows=n_rows,
        count=count,
    )


def null_label_error(row: int, n_rows: int, count: int) -> DataValueError:
    return DataValueError(
        EXPECTED_LABEL + " (a missing value needs OptionalEstimator)",
        value=None,
        row=row,
        n_rows=n_rows,
        count=count,
    )


def hashable_label(label: Any) -> Any:
    return tuple(hashable_label(v) for v in label) if isinstance(label, list) else label


def pmap_from_spec(pairs: Any, fam: str) -> dict[Any, float]:
    if isinstance(pairs, Mapping):
        return dict(pairs)
    ok = isinstance(pairs, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs)
    check_parameter(ok, fam, "pmap", pairs, "a list of [label, probability] pairs")
    return {hashable_label(k): v for k, v in pairs}


def readable_label_type(typ: pa.DataType) -> bool:
    return (
        pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_integer(typ)
        or pa.types.is_boolean(typ)
    )


def label_codes(values: pa.Array, vocab: tuple[Any, ...], cache: dict[str, Any] | None = None) -> np.ndarray:
    """Label -> code of every value of an Arrow array (-1 where ``vocab`` lacks it), vectorized with
    ``pyarrow.compute.index_in``; ``cache`` keeps the value set per Arrow type of a fixed vocabulary."""
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if pa.types.is_integer(values.type):
        values = pc.cast(values, pa.int64())
    typ = values.type
    cached = None if cache is None else cache.get(str(typ))
    if cached is None:
        if pa.types.is_boolean(typ):
            positions = [i for i, v in enumerate(vocab) if isinstance(v, bool)]
        elif pa.types.is_integer(typ):
            positions = [i for i, v in enumerate(vocab) if isinstance(v, int) and not isinstance(v, bool)]
        else:
            positions = [i for i, v in enumerate(vocab) if isinstance(v, str)]
        value_set = pa.array([vocab[i] for i in positions], type=typ)
        cached = (value_set, np.append(np.asarray(positions, dtype=np.int64), -1))
        if cache is not None:
            cache[str(typ)] = cached
    value_set, lookup = cached
    found = pc.index_in(values, value_set=value_set).fill_null(-1)
    return lookup[np.asarray(found.to_numpy(zero_copy_only=False), dtype=np.int64)]  # type: ignore[no-any-return]


def lookup_label(index: dict[Any, int], value: Any, row: int, n: int) -> int:
    """Code of ``value`` (-1 when absent); None and unhashable values are errors."""
    if value is None:
        raise null_label_error(row, n, 1)
    try:
        return index.get(value, -1)
    except TypeError:
        raise DataTypeError(EXPECTED_LABEL + " (a hashable value)", value=value, row=row, n_rows=n) from None


def align_counts(labels: tuple[Any, ...], values: np.ndarray, vocab: tuple[Any, ...]) -> np.ndarray:
    """``values`` indexed by ``labels`` re-expressed over ``vocab`` (a superset), zeros elsewhere."""
    if labels == vocab:
        return np.array(values, dtype=np.float64)
    index = {k: i for i, k in enumerate(vocab)}
    out = np.zeros(len(vocab))
    out[np.fromiter((index[k] for k in labels), dtype=np.int64, count=len(labels))] = values
    return out


def label_positions(source: tuple[Any, ...], target: tuple[Any, ...]) -> np.ndarray:
    """Position in ``target`` of each label of ``source`` (-1 when absent), with a trailing -1 so that
    ``label_positions(...)[codes]`` maps code -1 to -1 too."""
    index = {k: i for i, k in enumerate(target)}
    pos = np.fromiter((index.get(k, -1) for k in source), dtype=np.int64, count=len(source))
    return np.append(pos, -1)


def widened_counts(
    counts: np.ndarray, labels: tuple[Any, ...] | None, vocab: tuple[Any, ...] | None, owner: str
) -> np.ndarray:
    """``counts`` indexed by ``labels`` along every axis (a count vector, a transition matrix)
    re-expressed over ``vocab``, a superset: zeros for the labels ``labels`` lacks. A SpecError
    names ``owner`` and the first label of ``labels`` that ``vocab`` lacks."""
    source, target = labels or (), vocab or ()
    counts = np.array(counts, dtype=np.float64)
    if source == target:
        return counts
    # Typed keys: True and 1 are one dict key but two labels.
    index = {(type(k).__name__, k): i for i, k in enumerate(target)}
    pos = np.fromiter(
        (index.get((type(k).__name__, k), -1) for k in source), dtype=np.int64, count=len(source)
    )
    if (pos < 0).any():
        label = source[first_true(pos < 0)]
        raise SpecError(
            f"{owner}: cannot widen statistics to a vocabulary without label {label!r}: the target's "
            f"{len(target)} labels {_preview(target)} must contain this accumulator's {len(source)}"
        )
    out = np.zeros((len(target),) * counts.ndim)
    out[np.ix_(*([pos] * counts.ndim))] = counts
    return out


class VocabularyCache:
    """Arrays made from a batch's vocabulary (where its labels stand in a model's or an accumulator's
    vocabulary, log-probabilities aligned to it), made once per vocabulary met. A model meets a
    handful of vocabularies in practice, so at most 16 are kept; the last one is found by identity,
    without hashing its labels."""

    def __init__(self) -> None:
        self._arrays: dict[tuple[Any, ...], np.ndarray] = {}
        self._last: tuple[tuple[Any, ...], np.ndarray] | None = None

    def get(self, labels: tuple[Any, ...], make: Callable[[tuple[Any, ...]], np.ndarray]) -> np.ndarray:
        """The array of vocabulary ``labels``, made by ``make(labels)`` the first time."""
        last = self._last
        if last is not None and last[0] is labels:
            return last[1]
        array = self._arrays.get(labels)
        if array is None:
            if len(self._arrays) >= 16:
                self._arrays.clear()
            array = self._arrays[labels] = make(labels)
        self._last = (labels, array)
        return array


def aligned_log_p(log_p: np.ndarray, vocabulary: tuple[Any, ...], labels: tuple[Any, ...]) -> np.ndarray:
    """Log-probabilities ``log_p`` (over ``vocabulary``) over the batch vocabulary ``labels`` (-inf for
    a label outside ``vocabulary``), plus a trailing -inf that code -1 (an unseen label) reads."""
    extended = np.append(log_p, -math.inf)
    return extended if labels == vocabulary else extended[label_positions(labels, vocabulary)]


def add_label_counts(
    counts: np.ndarray,
    sums: np.ndarray,
    vocabulary: tuple[Any, ...],
    labels: tuple[Any, ...],
    positions: VocabularyCache,
) -> int | None:
    """Add ``sums`` (weights over the batch vocabulary ``labels``) into ``counts`` (over ``vocabulary``,
    the positions cached in ``positions``). Returns the batch code of the first label outside
    ``vocabulary`` that carries weight (nothing is added then), else None."""
    if labels is vocabulary or labels == vocabulary:
        counts += sums
        return None
    pos = positions.get(labels, lambda batch: label_positions(batch, vocabulary))[:-1]
    missing = (pos < 0) & (sums != 0)
    if missing.any():
        return first_true(missing)
    present = pos >= 0
    counts[pos[present]] += sums[present]
    return None


def merge_label_counts(counts: np.ndarray, vocabulary: Any, value: Any, owner: str) -> np.ndarray:
    """``counts`` plus another accumulator's count vector ``value`` (``value`` itself when ``counts``
    belongs to an accumulator without a vocabulary and is empty); a SpecError naming ``owner`` when
    the two differ in size."""
    other = np.array(value, dtype=np.float64)
    if len(counts) == 0 and vocabulary is None:
        return other
    if other.shape != counts.shape:
        raise SpecError(
            f"{owner}: cannot combine {len(other)} counts into {len(counts)} (different vocabularies)"
        )
    counts += other
    return counts


def no_vocabulary_error(family: str = "CategoricalEstimator") -> SpecError:
    return SpecError(
        f"{family} has no vocabulary: give labels=[...] or apply the encoder's scan "
        "with estimator.with_scan(scan) before fitting"
    )


def check_stored_codes(codes: np.ndarray, k: int, encoder: str, what: str = "label") -> None:
    """Raise SpecError unless the codes of a compact cache index a vocabulary of ``k`` ``what`` s."""
    if len(codes) and (codes.max() >= k or codes.min() < -1):
        raise SpecError(
            f"{encoder}: {what} codes outside [-1, {k}) for a vocabulary of {k} {what}s; "
            "the codes were made with another vocabulary (re-encode the data)"
        )


def checked_pmap(pmap: Any, fam: str, what: str = "label") -> tuple[tuple[Any, ...], np.ndarray]:
    """The vocabulary (sorted) and probabilities (summing to 1 exactly, see ``unit_sum``) of a
    ``what`` -> probability mapping, validated; errors name ``fam`` and ``pmap``."""
    check_parameter(
        isinstance(pmap, Mapping) and len(pmap) > 0,
        fam,
        "pmap",
        pmap,
        f"a non-empty mapping {what} -> probability",
    )
    labels = sorted_labels(pmap.keys())
    check_parameter(len(labels) == len(pmap), fam, "pmap", pmap, f"free of duplicate {what}s")
    raw = {normalize_label(k): v for k, v in pmap.items()}
    try:
        p = np.array([float(raw[k]) for k in labels])
    except (TypeError, ValueError):
        p = np.array([math.nan])
    check_parameter(
        bool(np.all(np.isfinite(p)) and np.all(p >= 0)),
        fam,
        "pmap",
        pmap,
        "finite non-negative probabilities",
    )
    total = float(p.sum())
    check_parameter(
        abs(total - 1.0) <= 1e-9, fam, "pmap", pmap, f"probabilities summing to 1 (sum {total!r})"
    )
    return labels, unit_sum(p)


def hashable_labels(labels: Iterable[Any]) -> list[Any]:
    """Labels read back from JSON (lists -> tuples), as an estimator's ``labels`` option."""
    return [hashable_label(k) for k in labels]


def min_prob_option() -> Any:
    """The ``min_prob`` option of the label families: a probability floor in [0, 1), default 0."""
    return option(0.0, lambda v: 0.0 <= v < 1.0, "in [0, 1)", read=float)


class LabelOptions:
    """What the label families' estimators share: :attr:`vocabulary`, the ``labels`` option as the
    sorted tuple the constructor made of it (None until a scan or the user fixes it)."""

    labels: Any

    @property
    def vocabulary(self) -> tuple[Any, ...] | None:
        return cast("tuple[Any, ...] | None", self.labels)


class LabelListOptions(LabelOptions, LengthEstimation):
    """What the estimators of label lists (Markov chain, multinomial) share: the vocabulary, an optional
    length estimator, and the scan ``(labels, length scan)`` their encoders make."""

    def with_scan(self, scan: Any) -> Any:
        if scan is None:
            return self
        label_scan, len_scan = scan
        # One copy of a label both had: a scan may add labels to a vocabulary it overlaps.
        labels = self.labels if label_scan is None else sorted_labels((*(self.labels or ()), *label_scan))
        return dataclasses.replace(
            cast(Any, self), labels=labels, len_estimator=self.length_with_scan(len_scan)
        )


class LabelEncoder(LengthEncoding, Encoder):
    """What the label encoders share (categorical, multinomial, Markov chain): a sorted vocabulary
    ``labels`` (None until a scan fixes it), what a label outside it does (``unseen``) and, for the
    list families, a length encoder. Subclasses rebuild themselves with :meth:`rebuilt`."""

    noun: ClassVar[str] = "labels"

    def __init__(self, labels: Iterable[Any] | None, unseen: str, len_encoder: Encoder | None = None) -> None:
        name = type(self).__name__
        check_parameter(unseen in ("error", "zero"), name, "unseen", unseen, "'error' or 'zero'")
        self.labels = None if labels is None else sorted_labels(labels)
        self.unseen = unseen
        self.len_encoder = len_encoder

    def rebuilt(self, labels: Iterable[Any] | None, unseen: str, len_encoder: Encoder | None) -> LabelEncoder:
        raise NotImplementedError

    def with_unseen(self, unseen: str) -> LabelEncoder:
        len_encoder = self.lengths_with_unseen(unseen)
        if unseen == self.unseen and len_encoder is self.len_encoder:
            return self
        return self.rebuilt(self.labels, unseen, len_encoder)

    @property
    def compacts(self) -> bool:
        return self.labels is not None

    @property
    def needs_scan(self) -> bool:
        return self.labels is None or self.lengths_need_scan

    def union(self, other: Encoder) -> Encoder:
        if self == other:
            return self
        if not isinstance(other, type(self)):
            raise TypeError(f"cannot combine encoders {self!r} and {other!r}")
        labels = (
            None
            if self.labels is None or other.labels is None
            else sorted_labels((*self.labels, *other.labels))
        )
        unseen = "zero" if "zero" in (self.unseen, other.unseen) else "error"
        return self.rebuilt(labels, unseen, self.union_lengths(other))

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and self.labels == other.labels  # type: ignore[attr-defined]
            and self.unseen == other.unseen  # type: ignore[attr-defined]
            and self.len_encoder == other.len_encoder  # type: ignore[attr-defined]
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.labels, self.unseen))

    def __repr__(self) -> str:
        size = "?" if self.labels is None else len(self.labels)
        lengths = "" if self.len_encoder is None else f", len_encoder={self.len_encoder!r}"
        return f"{type(self).__name__}(<{size} {self.noun}>, unseen={self.unseen!r}{lengths})"
