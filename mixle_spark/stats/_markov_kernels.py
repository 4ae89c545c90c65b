"""Batch kernels and the encoder of the Markov chain family: label lists -> codes, transition pairs,
counts, scores, draws (the public names are re-exported by :mod:`mixle_spark.stats.markov_chain`).

A batch of ``n`` sequences holding ``m`` labels in all is stored back to back, as Arrow list offsets
store it. Labels become int64 codes into a sorted vocabulary (``pyarrow.compute.index_in`` on the
flattened Arrow values, as the categorical family does); the transitions of the batch are then the
pairs ``(codes[j - 1], codes[j])`` for every element ``j`` that is not the first of its sequence,
found once from the offsets (:class:`MarkovChainEncoded`). Counting is one ``np.bincount`` over the
first labels and one over the flattened pair index ``prev * K + next``, each weighted by the row
weights repeated per element; scoring is two gathers and one ``np.bincount`` per batch. No loop runs
over rows, sequences or elements; the only loops are over vocabulary labels where a label -> code
table is built, and over the rows of a transition matrix where each is renormalised exactly.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mixle_spark.errors import DataTypeError, DataValueError, SchemaError, SpecError
from mixle_spark.stats._embed import label_frequencies, label_width, length_scales, scales, with_length
from mixle_spark.stats._encoder import any_unseen
from mixle_spark.stats._hmm_kernels import Layout
from mixle_spark.stats._labels import (
    CODES_FIELD,
    LabelEncoder,
    check_stored_codes,
    is_codes_array,
    label_codes,
    normalize_label,
    sorted_labels,
    unseen_label_error,
)
from mixle_spark.stats._validate import first_true, unit_sum
from mixle_spark.stats.base import Encoder, check_parameter

__all__ = [
    "EXPECTED_ARROW",
    "EXPECTED_ELEMENT",
    "EXPECTED_LIST",
    "MarkovChainEncoded",
    "MarkovChainEncoder",
    "arrow_codes",
    "arrow_labels",
    "check_unseen",
    "checked_values",
    "count_transitions",
    "exact_rows",
    "flatten_arrow",
    "is_label",
    "label_mapping",
    "normalized_rows",
    "probability_vector",
    "python_codes",
    "readable_value_type",
    "sample_chain",
    "unseen_in_vocabulary",
    "vocabulary",
]

_FAMILY = "MarkovChainDistribution"
EXPECTED_LIST = "expected a list of labels for MarkovChainEstimator"
EXPECTED_ELEMENT = "expected a label (string or integer) in every list element for MarkovChainEstimator"
EXPECTED_ARROW = "a list column of string or integer labels (list<string>, list<large_string> or list<int>)"


class MarkovChainEncoded:
    """An encoded batch of label sequences.

    ``lengths`` (n,) the sequence lengths; ``codes`` (m,) int64 codes into ``labels`` (-1 = a label
    outside the vocabulary, probability zero); ``first`` the element index of the first label of each
    non-empty sequence and ``first_owner`` its row; ``next`` the index of every element that has a
    predecessor in its sequence (its transition is ``codes[next - 1] -> codes[next]``) and
    ``pair_owner`` its row; ``len_enc`` the length encoding or None.
    """

    __slots__ = ("codes", "first", "first_owner", "labels", "len_enc", "lengths", "n", "next", "pair_owner")

    def __init__(
        self, lengths: np.ndarray, codes: np.ndarray, labels: tuple[Any, ...], len_enc: Any = None
    ) -> None:
        self.n = len(lengths)
        self.lengths = lengths
        self.codes = codes
        self.labels = labels
        self.len_enc = len_enc
        nonempty = lengths > 0
        self.first_owner = np.flatnonzero(nonempty)
        self.first = (np.cumsum(lengths) - lengths)[nonempty]
        follows = np.ones(len(codes), dtype=bool)
        follows[self.first] = False
        self.next = np.flatnonzero(follows)
        self.pair_owner = np.repeat(np.arange(self.n, dtype=np.int64), np.maximum(lengths - 1, 0))

    def __len__(self) -> int:
        return self.n


def is_label(value: Any) -> bool:
    """True for a string or a (non-boolean) integer, numpy scalars included."""
    return isinstance(value, (str, int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _owner(lengths: np.ndarray, elements: np.ndarray) -> np.ndarray:
    """The row of each element index."""
    return np.searchsorted(np.cumsum(lengths), elements, side="right")


def _element_error(
    lengths: np.ndarray, bad: np.ndarray, value: Any, detail: str = ""
) -> DataValueError | DataTypeError:
    """The error for the first bad element (``bad`` are element indices), located at its row."""
    rows = _owner(lengths, bad)
    row, n, count = int(rows[0]), len(lengths), int(np.unique(rows).size)
    if value is None:
        detail = " (a list cannot hold missing values)"
        return DataValueError(EXPECTED_ELEMENT + detail, value=None, row=row, n_rows=n, count=count)
    return DataTypeError(EXPECTED_ELEMENT + detail, value=value, row=row, n_rows=n, count=count)


def check_unseen(lengths: np.ndarray, codes: np.ndarray, labels: tuple[Any, ...], found: Any) -> None:
    """Raise UnseenLabelError for the first code -1; ``found(j)`` gives the label of element ``j``."""
    if codes.size and codes.min() < 0:
        bad = np.flatnonzero(codes < 0)
        rows = _owner(lengths, bad)
        raise unseen_label_error(
            found(int(bad[0])), labels, int(rows[0]), len(lengths), int(np.unique(rows).size)
        )


# -- Arrow -------------------------------------------------------------------------------------------
def flatten_arrow(data: Any) -> tuple[np.ndarray, pa.Array]:
    """``(lengths, values)`` of a list column (Array, ChunkedArray or one-column Table / RecordBatch);
    ``values`` are the flattened elements of exactly these rows (sliced arrays included)."""
    array = data
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        if data.num_columns != 1:
            raise SchemaError(f"expected one list column for MarkovChainEstimator, got {data.schema.names}")
        array = data.column(0)
    if isinstance(array, pa.ChunkedArray):
        array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
    if not isinstance(array, (pa.ListArray, pa.LargeListArray)):
        typ = getattr(array, "type", type(array).__name__)
        raise SchemaError(f"expected {EXPECTED_ARROW} for MarkovChainEstimator, got Arrow type {typ}")
    if array.null_count:
        mask = np.asarray(array.is_null().to_numpy(zero_copy_only=False))
        raise DataValueError(
            EXPECTED_LIST + " (a missing list needs OptionalEstimator)",
            value=None,
            row=first_true(mask),
            n_rows=len(array),
            count=int(mask.sum()),
        )
    offsets = np.asarray(array.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    start, stop = int(offsets[0]), int(offsets[-1])
    return np.diff(offsets), array.values.slice(start, stop - start)


def readable_value_type(typ: pa.DataType) -> bool:
    """Element types a list of labels may have (a dictionary of them, or the compact codes too)."""
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    return bool(
        pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_integer(typ)
        or pa.types.is_null(typ)
    )


def checked_values(lengths: np.ndarray, values: pa.Array) -> pa.Array:
    """Flattened Arrow labels (dictionaries decoded), after checking their type and that none is null."""
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if not readable_value_type(values.type):
        valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False))
        j = first_true(valid) if valid.any() else 0
        raise _element_error(lengths, np.array([j]), values[j].as_py(), f" (Arrow type list<{values.type}>)")
    if values.null_count:
        mask = np.asarray(values.is_null().to_numpy(zero_copy_only=False))
        raise _element_error(lengths, np.flatnonzero(mask), None)
    return values


def arrow_labels(lengths: np.ndarray, values: pa.Array) -> list[Any]:
    """The distinct labels of flattened Arrow labels (checked as :func:`checked_values` does)."""
    values = checked_values(lengths, values)
    return pc.unique(values).to_pylist() if len(values) else []


def arrow_codes(
    lengths: np.ndarray, values: pa.Array, labels: tuple[Any, ...] | None, strict: bool
) -> tuple[np.ndarray, tuple[Any, ...]]:
    """``(codes, vocabulary)`` of flattened Arrow labels; the vocabulary is ``labels`` or, when None,
    the sorted labels of the batch. Nulls and non-label types raise, naming the row; so does a label
    outside the vocabulary when ``strict`` (else its code is -1)."""
    if is_codes_array(values):
        codes = _compact_codes(values, labels)
        if strict:
            check_unseen(lengths, codes, labels or (), lambda j: "<unseen label>")
        return codes, labels  # type: ignore[return-value]
    values = checked_values(lengths, values)
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64), labels if labels is not None else ()
    vocab = labels if labels is not None else sorted_labels(pc.unique(values).to_pylist())
    codes = label_codes(values, vocab)
    if strict:
        check_unseen(lengths, codes, vocab, lambda j: values[j].as_py())
    return codes, vocab


def _compact_codes(values: pa.StructArray, labels: tuple[Any, ...] | None) -> np.ndarray:
    if labels is None:
        raise SpecError(
            "MarkovChainEncoder: these label codes need the vocabulary they were made with; "
            "give labels=[...] or re-encode the labels"
        )
    codes = np.asarray(values.field(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    check_stored_codes(codes, len(labels), "MarkovChainEncoder")
    return codes


# -- Python records ----------------------------------------------------------------------------------
def _flatten_records(records: Sequence[Any]) -> tuple[np.ndarray, Any]:
    n = len(records)
    for i, r in enumerate(records):
        if r is None:
            raise DataValueError(
                EXPECTED_LIST + " (a missing list needs OptionalEstimator)", value=None, row=i, n_rows=n
            )
        if (
            isinstance(r, (str, bytes, Mapping))
            or not isinstance(r, (Sequence, np.ndarray))
            or (isinstance(r, np.ndarray) and r.ndim != 1)
        ):
            raise DataTypeError(
                "expected a list (or 1-D array) of labels for MarkovChainEstimator", value=r, row=i, n_rows=n
            )
    lengths = np.fromiter((len(r) for r in records), dtype=np.int64, count=n)
    if n and all(isinstance(r, np.ndarray) for r in records):
        return lengths, np.concatenate(records)
    return lengths, list(itertools.chain.from_iterable(records))


def _as_arrow(values: Any) -> pa.Array | None:
    """Homogeneous string or integer labels as one Arrow array (None: take the general path)."""
    if isinstance(values, np.ndarray):
        if values.dtype.kind in "iu":
            return pa.array(values.astype(np.int64, copy=False), pa.int64())
        if values.dtype.kind == "U":
            return pa.array(values, pa.string())
        return None
    kinds = set(map(type, values))
    try:
        if kinds <= {str, np.str_}:
            return pa.array(values, pa.string())
        if all(issubclass(k, (int, np.integer)) and not issubclass(k, (bool, np.bool_)) for k in kinds):
            return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # integers beyond int64: the general path
        return None
    return None


def python_codes(
    records: Sequence[Any], labels: tuple[Any, ...] | None, strict: bool
) -> tuple[np.ndarray, np.ndarray, tuple[Any, ...]]:
    """``(lengths, codes, vocabulary)`` of Python records (lists / 1-D arrays of labels), as
    :func:`arrow_codes`: homogeneous labels go through Arrow, mixed strings and integers through a dict."""
    lengths, values = _flatten_records(records)
    arrow = _as_arrow(values)
    if arrow is not None:
        codes, vocab = arrow_codes(lengths, arrow, labels, strict)
        return lengths, codes, vocab
    values = list(values)
    bad = np.fromiter((not is_label(v) for v in values), dtype=bool, count=len(values))
    if bad.any():
        where = np.flatnonzero(bad)
        raise _element_error(lengths, where, values[int(where[0])])
    values = [normalize_label(v) for v in values]
    vocab = labels if labels is not None else sorted_labels(values)
    index = {k: i for i, k in enumerate(vocab)}
    codes = np.fromiter((index.get(v, -1) for v in values), dtype=np.int64, count=len(values))
    if strict:
        check_unseen(lengths, codes, vocab, values.__getitem__)
    return lengths, codes, vocab


# -- statistics ------------------------------------------------------------------------------------------
def unseen_in_vocabulary(
    enc: MarkovChainEncoded, codes: np.ndarray, weights: np.ndarray, labels: tuple[Any, ...]
) -> None:
    """Raise UnseenLabelError when a label of the batch's vocabulary that ``labels`` lacks (its
    re-aligned ``codes`` are -1, its batch code is not) occurs in a row of non-zero weight."""
    missing = (codes < 0) & (enc.codes >= 0)
    if missing.any():
        missing &= np.repeat(weights != 0, enc.lengths)
    if missing.any():
        where = np.flatnonzero(missing)
        rows = _owner(enc.lengths, where)
        label = enc.labels[int(enc.codes[where[0]])]
        raise unseen_label_error(label, labels, int(rows[0]), enc.n, int(np.unique(rows).size))


def count_transitions(
    enc: MarkovChainEncoded, codes: np.ndarray, weights: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted first-label counts (k,) and transition counts (k, k) of a batch; ``codes`` are the
    batch's codes in a k-label vocabulary, -1 (ignored, with the transitions into and out of it)."""
    first = codes[enc.first]
    w_first = weights[enc.first_owner]
    prev, nxt = codes[enc.next - 1], codes[enc.next]
    w_pair = weights[enc.pair_owner]
    if codes.size and codes.min() < 0:
        keep = first >= 0
        first, w_first = first[keep], w_first[keep]
        keep = (prev >= 0) & (nxt >= 0)
        prev, nxt, w_pair = prev[keep], nxt[keep], w_pair[keep]
    initial = np.bincount(first, weights=w_first, minlength=k).astype(np.float64, copy=False)
    flat = np.bincount(prev * k + nxt, weights=w_pair, minlength=k * k).astype(np.float64, copy=False)
    return initial, flat.reshape(k, k)


def normalized_rows(counts: np.ndarray) -> np.ndarray:
    """Each row of ``counts`` (a vector or a matrix) divided by its sum; a row with no (or a
    non-finite) total becomes uniform."""
    rows = np.atleast_2d(np.asarray(counts, dtype=np.float64))
    k = rows.shape[-1]
    totals = rows.sum(axis=1)
    ok = (totals > 0) & np.isfinite(totals)
    out = np.full_like(rows, 1.0 / k)
    out[ok] = rows[ok] / totals[ok, None]
    return out.reshape(np.shape(counts))


def exact_rows(p: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``p`` with each of ``rows`` rescaled by :func:`unit_sum` (exact, idempotent sums of 1); the
    loop is over the rows because an exact sum (``math.fsum``) is one row at a time."""
    out = np.array(p, dtype=np.float64)
    for i in rows.tolist():
        out[i] = unit_sum(out[i])
    return out


def label_mapping(value: Any, name: str, what: str) -> dict[Any, Any]:
    """A mapping, or a list of ``[key, value]`` pairs (the JSON form), as a dict."""
    if isinstance(value, Mapping):
        return dict(value)
    ok = isinstance(value, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value)
    check_parameter(ok, _FAMILY, name, value, f"a mapping {what} (or a list of [label, value] pairs)")
    out = {k: v for k, v in value}
    check_parameter(len(out) == len(value), _FAMILY, name, value, "free of duplicate labels")
    return out


def probability_vector(pmap: Mapping[Any, Any], index: dict[Any, int], k: int) -> np.ndarray:
    """``pmap`` (label -> probability) as a vector over the labels of ``index`` (NaN if not numbers)."""
    p = np.zeros(k)
    try:
        for label, v in pmap.items():
            p[index[normalize_label(label)]] = float(v)
    except (TypeError, ValueError):
        p[:] = math.nan
    return p


def sample_chain(
    rng: np.random.Generator, lengths: np.ndarray, p_init: np.ndarray, p_trans: np.ndarray, labels: Any
) -> np.ndarray:
    """Codes (m,) of sequences of ``lengths`` drawn from the chain ``(p_init, p_trans)``, one time step
    at a time for all running sequences (time-major :class:`~mixle_spark.stats._hmm_kernels.Layout`).

    Row ``i``'s cumulative probabilities shifted by ``i`` make one sorted array, so one
    ``searchsorted`` draws every running sequence's next label (no (sequences, K) temporaries); the
    draws are clipped to each row's first and last positive entry against rounding at row ends.
    """
    k = len(p_init)
    shifted = (np.cumsum(p_trans, axis=1) + np.arange(k)[:, None]).ravel()
    totals = p_trans.sum(axis=1)
    positive = p_trans > 0
    lo, hi = positive.argmax(axis=1), k - 1 - positive[:, ::-1].argmax(axis=1)
    cum_init = np.cumsum(p_init)
    starts = np.flatnonzero(p_init > 0)
    layout = Layout.of(lengths)
    codes_tm = np.zeros(int(lengths.sum()), dtype=np.int64)
    current = np.zeros(len(lengths), dtype=np.int64)
    for t in range(len(layout.active)):
        c = int(layout.active[t])
        u = rng.random(c)
        if t == 0:
            drawn = np.searchsorted(cum_init, u * cum_init[-1], side="right")
            current[:c] = np.clip(drawn, starts[0], starts[-1])
        else:
            prev = current[:c]
            stuck = totals[prev] == 0
            if stuck.any():
                label = labels[int(prev[stuck][0])]
                raise SpecError(f"{_FAMILY}: cannot sample past label {label!r}: it has no transition row")
            drawn = np.searchsorted(shifted, prev + u * totals[prev], side="right") - prev * k
            current[:c] = np.clip(drawn, lo[prev], hi[prev])
        codes_tm[layout.block(t)] = current[:c]
    return codes_tm[layout.position]


def vocabulary(values: Iterable[Any], fam: str, name: str) -> list[Any]:
    """Labels normalised and checked to be strings or integers, without duplicates."""
    out = [normalize_label(v) for v in values]
    for v in out:
        check_parameter(is_label(v), fam, f"{name} label", v, "a string or an integer")
    check_parameter(len(set(out)) == len(out), fam, name, out, "free of duplicate labels")
    return out


# -- the encoder ---------------------------------------------------------------------------------------
class MarkovChainEncoder(LabelEncoder):
    """Lists of labels -> :class:`MarkovChainEncoded` (codes into a sorted vocabulary).

    Parameters
    ----------
    labels : iterable of labels, optional
        The vocabulary; without it the encoder needs a scan (a batch encoded before one uses its own
        labels as the vocabulary).
    len_encoder : Encoder, optional
        Encoder of the lengths (the length model's).
    unseen : {"error", "zero"}
        A label outside ``labels`` raises UnseenLabelError ("error", for fitting) or gets code -1,
        scored as probability zero ("zero", a model's encoder for scoring).
    """

    def __init__(
        self, labels: Iterable[Any] | None = None, len_encoder: Encoder | None = None, unseen: str = "error"
    ) -> None:
        super().__init__(
            None if labels is None else vocabulary(labels, "MarkovChainEncoder", "labels"),
            unseen,
            len_encoder,
        )

    def rebuilt(self, labels: Iterable[Any] | None, unseen: str, len_encoder: Encoder | None) -> LabelEncoder:
        return MarkovChainEncoder(labels, len_encoder, unseen)

    def _finish(self, lengths: np.ndarray, codes: np.ndarray, vocab: tuple[Any, ...]) -> MarkovChainEncoded:
        len_enc = self.encoded_lengths(lengths)
        return MarkovChainEncoded(lengths, codes, vocab, len_enc)

    @property
    def _strict(self) -> bool:
        return self.unseen == "error" and self.labels is not None

    def unseen_rows(self, enc: MarkovChainEncoded) -> np.ndarray | None:
        bad = np.flatnonzero(enc.codes < 0)
        rows = np.zeros(enc.n, dtype=bool)
        rows[_owner(enc.lengths, bad)] = True
        return any_unseen((rows, self.unseen_lengths(enc.len_enc)))

    def encode(self, records: Sequence[Any]) -> MarkovChainEncoded:
        return self._finish(*python_codes(records, self.labels, self._strict))

    def from_arrow(self, data: Any) -> MarkovChainEncoded:
        lengths, values = flatten_arrow(data)
        codes, vocab = arrow_codes(lengths, values, self.labels, self._strict)
        return self._finish(lengths, codes, vocab)

    def compact_arrow(self, data: Any) -> Any:
        """The same lists with labels replaced by their int32 codes, as ``list<struct<__mixle_codes>>``."""
        if self.labels is None:
            return data
        lengths, values = flatten_arrow(data)
        if is_codes_array(values):
            return data
        codes, _ = arrow_codes(lengths, values, self.labels, self._strict)
        struct = pa.StructArray.from_arrays(
            [pa.array(codes.astype(np.int32), pa.int32())], names=[CODES_FIELD]
        )
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        large = offsets[-1] > np.iinfo(np.int32).max
        lists = (pa.LargeListArray if large else pa.ListArray).from_arrays(
            pa.array(offsets, pa.int64() if large else pa.int32()), struct
        )
        if isinstance(data, (pa.Table, pa.RecordBatch)):
            return type(data).from_arrays([lists], names=[data.schema.names[0]])
        return lists

    def check_arrow_type(self, arrow_type: Any) -> None:
        ok = pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)
        if ok:
            vt = arrow_type.value_type
            codes = pa.types.is_struct(vt) and vt.num_fields == 1 and vt.field(0).name == CODES_FIELD
            ok = readable_value_type(vt) or codes
        if not ok:
            raise SchemaError(
                f"expected {EXPECTED_ARROW} for MarkovChainEstimator, got Arrow type {arrow_type}"
            )

    def expected_arrow(self) -> str:
        return EXPECTED_ARROW

    # -- scans: the vocabulary (a frozenset of labels) and the length model's ----------------------
    def _scan(self, lengths: np.ndarray, labels: Any) -> Any:
        if not self.needs_scan:
            return None
        return (None if self.labels is not None else frozenset(labels()), self.scan_lengths(lengths))

    def scan(self, records: Sequence[Any]) -> Any:
        lengths, _codes, vocab = python_codes(records, None, False)
        return self._scan(lengths, lambda: vocab)

    def scan_arrow(self, data: Any) -> Any:
        lengths, values = flatten_arrow(data)
        if is_codes_array(values):
            return self._scan(lengths, lambda: self.labels or ())
        return self._scan(lengths, lambda: arrow_labels(lengths, values))

    def merge_scans(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a

        labels = b[0] if a[0] is None else a[0] if b[0] is None else frozenset.union(a[0], b[0])
        return (labels, self.merge_length_scans(a[1], b[1]))

    def embedding_scales(self) -> np.ndarray:
        return length_scales(scales(False, label_width(self.labels)), self.len_encoder is not None)

    def embed(self, enc: Any) -> np.ndarray:
        """Normalized label frequencies of each chain, then ``log1p(length)`` with a length model."""
        lengths = np.asarray(enc.lengths, dtype=np.int64)
        owner = np.repeat(np.arange(len(lengths)), lengths)
        out = label_frequencies(len(lengths), owner, enc.codes, None, label_width(self.labels))
        return with_length(out, None if self.len_encoder is None else lengths)
