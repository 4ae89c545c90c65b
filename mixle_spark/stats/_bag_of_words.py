"""The bag-of-words encoder of :mod:`mixle_spark.stats.multinomial` and its encoded batch.

Documents arrive as Python lists / mappings or Arrow ``list<token>`` / ``map<token, count>`` columns;
:class:`MultinomialEncoder` turns a batch into a :class:`MultinomialBatch` of (document, token code,
count) entries without a loop over rows or tokens (see the multinomial module for the model).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mixle_spark.errors import (
    DataTypeError,
    DataValueError,
    SchemaError,
)
from mixle_spark.stats._embed import label_frequencies, label_width, length_scales, scales, with_length
from mixle_spark.stats._encoder import any_unseen, unseen_owners
from mixle_spark.stats._labels import (
    LabelEncoder,
    check_stored_codes,
    label_codes,
    no_vocabulary_error,
    normalize_label,
    readable_label_type,
    sorted_labels,
    unseen_label_error,
)
from mixle_spark.stats._special import log_factorial
from mixle_spark.stats._validate import as_arrow_array, first_true
from mixle_spark.stats.base import (
    Encoder,
)

__all__ = [
    "CODES_FIELD",
    "MultinomialBatch",
    "MultinomialEncoder",
    "bag_of",
]

EXPECTED_BAG = "expected a bag of words (a list of tokens, or a map token -> count) for MultinomialEstimator"
EXPECTED_TOKEN = "expected a token (string, integer or boolean) for MultinomialEstimator"
EXPECTED_COUNT = "expected a non-negative integer count for MultinomialEstimator"
CODES_FIELD = "__mixle_bow_codes"
"""The one field of the struct column that carries (token code -> count) maps in a compact cache."""


def _is_codes_type(typ: pa.DataType) -> bool:
    """True for ``struct<__mixle_bow_codes: map<int, double>>``: documents made by ``compact_arrow``."""
    return bool(pa.types.is_struct(typ) and typ.num_fields == 1 and typ.field(0).name == CODES_FIELD)


def _is_codes_array(array: Any) -> bool:
    return _is_codes_type(array.type)


def _token_type_ok(typ: pa.DataType) -> bool:
    return readable_label_type(typ.value_type if pa.types.is_dictionary(typ) else typ)


def _count_type_ok(typ: pa.DataType) -> bool:
    return pa.types.is_integer(typ) or pa.types.is_floating(typ)


class MultinomialBatch:
    """An encoded batch of ``n`` documents as ``m`` (document, token) entries, one per distinct token of
    a document, sorted by (row, code).

    ``row`` (int64, shape (m,)): document of each entry; ``codes`` (int64, shape (m,)): token code into
    ``labels`` (-1 = unseen); ``counts`` (float64, shape (m,)): positive counts; ``totals`` (float64,
    shape (n,)): document lengths; ``log_coef`` (shape (n,)): ``log n! - Σ log c!``; ``len_enc``: the
    length encoding, or None.
    """

    __slots__ = ("codes", "counts", "labels", "len_enc", "log_coef", "n", "row", "totals")

    def __init__(
        self,
        n: int,
        row: np.ndarray,
        codes: np.ndarray,
        counts: np.ndarray,
        totals: np.ndarray,
        log_coef: np.ndarray,
        labels: tuple[Any, ...],
        len_enc: Any,
    ) -> None:
        self.n, self.row, self.codes, self.counts = n, row, codes, counts
        self.totals, self.log_coef, self.labels, self.len_enc = totals, log_coef, labels, len_enc

    def __len__(self) -> int:
        return self.n


class MultinomialEncoder(LabelEncoder):
    """Bags of words -> a :class:`MultinomialBatch` over a sorted vocabulary.

    Parameters
    ----------
    labels : iterable of tokens, optional
        The vocabulary. Without it the encoder needs a scan; a batch encoded before one uses its own
        tokens as the vocabulary.
    unseen : {"error", "zero"}
        A token outside the vocabulary raises UnseenLabelError ("error") or gets code -1, probability
        zero ("zero"), as in :class:`~mixle_spark.stats.categorical.CategoricalEncoder`.
    len_encoder : Encoder, optional
        Encoder of the document lengths (the length model's), applied to the token totals.
    """

    length_name = "document length"
    noun = "tokens"

    def __init__(
        self, labels: Iterable[Any] | None = None, unseen: str = "error", len_encoder: Encoder | None = None
    ) -> None:
        super().__init__(labels, unseen, len_encoder)
        self._value_sets: dict[str, tuple[pa.Array, np.ndarray]] = {}

    def rebuilt(self, labels: Iterable[Any] | None, unseen: str, len_encoder: Encoder | None) -> LabelEncoder:
        return MultinomialEncoder(labels, unseen, len_encoder)

    # -- Python records ----------------------------------------------------------------------------
    @staticmethod
    def _python_entries(records: Sequence[Any]) -> tuple[int, np.ndarray, list[Any], np.ndarray]:
        """(n, row of each entry, tokens, counts) of Python records, validated."""
        n = len(records)
        lengths = np.zeros(n, dtype=np.int64)
        tokens: list[Any] = []
        counts: list[float] = []
        for i, r in enumerate(records):
            if r is None:
                raise DataValueError(
                    EXPECTED_BAG + " (a missing value needs OptionalEstimator)", value=None, row=i, n_rows=n
                )
            if isinstance(r, Mapping):
                for token, c in r.items():
                    counts.append(_python_count(token, c, i, n))
                tokens.extend(r.keys())
                lengths[i] = len(r)
            elif isinstance(r, (Sequence, np.ndarray)) and not isinstance(r, (str, bytes)):
                tokens.extend(r)
                counts.extend(itertools.repeat(1.0, len(r)))
                lengths[i] = len(r)
            else:
                raise DataTypeError(EXPECTED_BAG, value=r, row=i, n_rows=n)
        row = np.repeat(np.arange(n, dtype=np.int64), lengths)
        for j, token in enumerate(tokens):
            if token is None:
                raise DataValueError(
                    EXPECTED_TOKEN + " (a null token)", value=None, row=int(row[j]), n_rows=n
                )
            try:
                hash(token)
            except TypeError:
                raise DataTypeError(EXPECTED_TOKEN, value=token, row=int(row[j]), n_rows=n) from None
        return n, row, tokens, np.asarray(counts, dtype=np.float64)

    def encode(self, records: Sequence[Any]) -> MultinomialBatch:
        n, row, tokens, counts = self._python_entries(records)
        positive = counts > 0
        vocab = self.labels
        if vocab is None:
            vocab = sorted_labels(t for t, keep in zip(tokens, positive.tolist(), strict=True) if keep)
        index = {k: i for i, k in enumerate(vocab)}
        codes = np.fromiter((index.get(t, -1) for t in tokens), dtype=np.int64, count=len(tokens))
        return self._finish(n, row, codes, counts, vocab, lambda j: tokens[j])

    # -- Arrow --------------------------------------------------------------------------------------
    @staticmethod
    def _arrow_entries(data: Any) -> tuple[int, np.ndarray, pa.Array, np.ndarray]:
        """(n, row of each entry, tokens (Arrow), counts) of a list or map column, validated."""
        array = as_arrow_array(data)
        typ, n = array.type, len(array)
        is_map = pa.types.is_map(typ)
        if not (is_map or pa.types.is_list(typ) or pa.types.is_large_list(typ)):
            valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False))
            i = first_true(valid) if valid.any() else 0
            value = array[i].as_py() if n else None
            raise DataTypeError(f"{EXPECTED_BAG} (Arrow type {typ})", value=value, row=i, n_rows=n)
        if array.null_count:
            mask = np.asarray(array.is_null().to_numpy(zero_copy_only=False))
            raise DataValueError(
                EXPECTED_BAG + " (a missing value needs OptionalEstimator)",
                value=None,
                row=first_true(mask),
                n_rows=n,
                count=int(mask.sum()),
            )
        offsets = np.asarray(array.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        start, stop = int(offsets[0]), int(offsets[-1])
        row = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
        # ``values`` / ``keys`` / ``items`` ignore the slice of a sliced array; ``offsets`` do not.
        tokens = (array.keys if is_map else array.values).slice(start, stop - start)
        if not _token_type_ok(tokens.type):
            raise DataTypeError(
                f"{EXPECTED_TOKEN} (Arrow type {tokens.type})",
                value=tokens[0].as_py() if len(tokens) else None,
                row=int(row[0]) if len(row) else 0,
                n_rows=n,
            )
        if tokens.null_count:
            _raise_at(tokens.is_null(), row, n, EXPECTED_TOKEN + " (a null token)", lambda j: None)
        if not is_map:
            return n, row, tokens, np.ones(len(tokens))
        items = array.items.slice(start, stop - start)
        if not _count_type_ok(items.type):
            raise DataTypeError(
                f"{EXPECTED_COUNT} (Arrow type {items.type})",
                value=items[0].as_py() if len(items) else None,
                row=int(row[0]) if len(row) else 0,
                n_rows=n,
            )
        if items.null_count:
            _raise_at(items.is_null(), row, n, _count_message(tokens), lambda j: None)
        counts = np.asarray(items.to_numpy(zero_copy_only=False), dtype=np.float64)
        bad = ~np.isfinite(counts)
        bad[~bad] = (counts[~bad] < 0) | (counts[~bad] != np.floor(counts[~bad]))
        if bad.any():
            _raise_at(bad, row, n, _count_message(tokens), lambda j: items[j].as_py())
        return n, row, tokens, counts

    def _arrow_codes(self, tokens: pa.Array, vocab: tuple[Any, ...]) -> np.ndarray:
        return label_codes(tokens, vocab, self._value_sets if vocab is self.labels else None)

    @staticmethod
    def _arrow_tokens(tokens: pa.Array, counts: np.ndarray) -> list[Any]:
        """The distinct tokens with a positive count."""
        if pa.types.is_dictionary(tokens.type):
            tokens = tokens.dictionary_decode()
        if not counts.all():
            tokens = tokens.filter(pa.array(counts > 0))
        return pc.unique(tokens).to_pylist()

    def from_arrow(self, data: Any) -> MultinomialBatch:
        array = as_arrow_array(data)
        if _is_codes_array(array):
            return self._from_codes(array)
        n, row, tokens, counts = self._arrow_entries(array)
        vocab = self.labels if self.labels is not None else sorted_labels(self._arrow_tokens(tokens, counts))
        codes = self._arrow_codes(tokens, vocab)
        return self._finish(n, row, codes, counts, vocab, lambda j: tokens[j].as_py())

    def _finish(
        self,
        n: int,
        row: np.ndarray,
        codes: np.ndarray,
        counts: np.ndarray,
        vocab: tuple[Any, ...],
        token_at: Callable[[int], Any],
    ) -> MultinomialBatch:
        """Drop zero counts, check unseen tokens, merge repeated tokens of a document, add totals."""
        if len(counts) and not counts.all():
            keep = counts > 0
            index = np.flatnonzero(keep)
            row, codes, counts = row[keep], codes[keep], counts[keep]
        else:
            index = None
        if self.unseen == "error" and len(codes) and codes.min() < 0:
            bad = codes < 0
            j = first_true(bad)
            count = len(np.unique(row[bad]))
            raise unseen_label_error(
                token_at(j if index is None else int(index[j])), vocab, int(row[j]), n, count
            )
        totals = np.bincount(row, weights=counts, minlength=n).astype(np.float64, copy=False)
        width = len(vocab) + 1
        key = row * width + (codes + 1)
        if len(key) > 1 and not np.all(key[1:] > key[:-1]):  # not yet one sorted entry per token
            key, inverse = np.unique(key, return_inverse=True)
            counts = np.bincount(inverse.reshape(-1), weights=counts)
            row, code1 = np.divmod(key, width)
            codes = code1 - 1
        log_coef = log_factorial(totals) - np.bincount(row, weights=log_factorial(counts), minlength=n)
        len_enc = self.encoded_lengths(totals)
        return MultinomialBatch(n, row, codes, counts, totals, log_coef, vocab, len_enc)

    # -- compact Arrow form ---------------------------------------------------------------------------
    def compact_arrow(self, data: Any) -> Any:
        """Documents -> ``struct<__mixle_bow_codes: map<int32, double>>``: each document's token codes
        in this encoder's vocabulary and their counts (what the Spark cache then holds)."""
        if self.labels is None or _is_codes_array(as_arrow_array(data)):
            return data
        enc = self.from_arrow(data)
        offsets = np.concatenate(([0], np.cumsum(np.bincount(enc.row, minlength=enc.n))))
        maps = pa.MapArray.from_arrays(
            pa.array(offsets, type=pa.int32()),
            pa.array(enc.codes.astype(np.int32), type=pa.int32()),
            pa.array(enc.counts, type=pa.float64()),
        )
        out = pa.StructArray.from_arrays([maps], names=[CODES_FIELD])
        if isinstance(data, (pa.Table, pa.RecordBatch)):
            return type(data).from_arrays([out], names=[data.schema.names[0]])
        return out

    def _from_codes(self, array: pa.StructArray) -> MultinomialBatch:
        if self.labels is None:
            raise no_vocabulary_error("MultinomialEstimator")
        maps = array.field(0)
        n = len(array)
        offsets = np.asarray(maps.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        start, stop = int(offsets[0]), int(offsets[-1])
        row = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
        codes = np.asarray(
            maps.keys.slice(start, stop - start).to_numpy(zero_copy_only=False), dtype=np.int64
        )
        counts = np.asarray(
            maps.items.slice(start, stop - start).to_numpy(zero_copy_only=False), dtype=np.float64
        )
        check_stored_codes(codes, len(self.labels), "MultinomialEncoder", "token")
        return self._finish(n, row, codes, counts, self.labels, lambda j: "<unseen token>")

    def check_arrow_type(self, arrow_type: Any) -> None:
        ok = _is_codes_type(arrow_type)
        if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
            ok = _token_type_ok(arrow_type.value_type)
        elif pa.types.is_map(arrow_type):
            ok = _token_type_ok(arrow_type.key_type) and _count_type_ok(arrow_type.item_type)
        if not ok:
            raise SchemaError(
                f"expected {self.expected_arrow()} for MultinomialEstimator, got Arrow type {arrow_type}"
            )

    def expected_arrow(self) -> str:
        return (
            "a list column of tokens (list<string>; integer or boolean tokens too) or a map column "
            "token -> count (map<string, integer>)"
        )

    # -- scans -----------------------------------------------------------------------------------------
    def _scan(self, tokens: Callable[[], list[Any]], n: int, row: np.ndarray, counts: np.ndarray) -> Any:
        if not self.needs_scan:
            return None
        vocab = None if self.labels is not None else frozenset(normalize_label(t) for t in tokens())
        totals = (
            np.bincount(row, weights=counts, minlength=n).astype(np.int64) if self.lengths_need_scan else None
        )
        return (vocab, None if totals is None else self.scan_lengths(totals))

    def scan(self, records: Sequence[Any]) -> Any:
        """The tokens with a positive count (and the length scan of the length encoder, if it has one)."""
        n, row, tokens, counts = self._python_entries(records)
        return self._scan(
            lambda: [t for t, c in zip(tokens, counts.tolist(), strict=True) if c > 0], n, row, counts
        )

    def scan_arrow(self, data: Any) -> Any:
        n, row, tokens, counts = self._arrow_entries(data)
        return self._scan(lambda: self._arrow_tokens(tokens, counts), n, row, counts)

    def merge_scans(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        vocab = a[0] if b[0] is None else b[0] if a[0] is None else frozenset(a[0]) | frozenset(b[0])
        return (vocab, self.merge_length_scans(a[1], b[1]))

    def unseen_rows(self, enc: MultinomialBatch) -> np.ndarray | None:
        tokens = unseen_owners(enc.codes < 0, enc.row, enc.n)
        return any_unseen((tokens, self.unseen_lengths(enc.len_enc)))

    def __getstate__(self) -> dict[str, Any]:
        state = dict(vars(self))
        state["_value_sets"] = {}  # a per-process lookup cache; shipped encoders rebuild it
        return state

    def embedding_scales(self) -> np.ndarray:
        return length_scales(scales(False, label_width(self.labels)), self.len_encoder is not None)

    def embed(self, enc: Any) -> np.ndarray:
        """Normalized token frequencies, then ``log1p(document length)`` with a length model."""
        out = label_frequencies(enc.n, enc.row, enc.codes, enc.counts, label_width(self.labels))
        return with_length(out, None if self.len_encoder is None else enc.totals)


def _python_count(token: Any, c: Any, row: int, n: int) -> float:
    message = f"{EXPECTED_COUNT} (token {token!r})"
    if c is None:
        raise DataValueError(message, value=None, row=row, n_rows=n)
    if isinstance(c, (bool, np.bool_, str, bytes)) or not isinstance(c, (int, float, np.number)):
        raise DataTypeError(message, value=c, row=row, n_rows=n)
    value = float(c)
    if not (math.isfinite(value) and value >= 0 and value == math.floor(value)):
        raise DataValueError(message, value=c, row=row, n_rows=n)
    return value


def _count_message(tokens: pa.Array) -> Callable[[int], str]:
    return lambda j: f"{EXPECTED_COUNT} (token {tokens[j].as_py()!r})"


def _raise_at(
    bad: Any, row: np.ndarray, n: int, message: str | Callable[[int], str], value_at: Callable[[int], Any]
) -> None:
    """Raise DataValueError for the first bad entry (``bad``: numpy or Arrow boolean, per entry)."""
    mask = np.asarray(bad if isinstance(bad, np.ndarray) else bad.to_numpy(zero_copy_only=False), dtype=bool)
    j = first_true(mask)
    detail = message(j) if callable(message) else message
    raise DataValueError(
        detail, value=value_at(j), row=int(row[j]), n_rows=n, count=len(np.unique(row[mask]))
    )


def bag_of(x: Any) -> dict[Any, int] | None:
    """A record as token -> positive count, or None when it is not a bag of words."""
    if isinstance(x, Mapping):
        items: Iterable[tuple[Any, Any]] = x.items()
    elif isinstance(x, (Sequence, np.ndarray)) and not isinstance(x, (str, bytes)):
        items = ((t, 1) for t in x)
    else:
        return None
    bag: dict[Any, int] = {}
    try:
        for token, c in items:
            if token is None or isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, float, np.number)):
                return None
            if not (math.isfinite(c) and c >= 0 and c == math.floor(c)):
                return None
            if c > 0:
                bag[token] = bag.get(token, 0) + int(c)
    except TypeError:  # an unhashable token
        return None
    return bag
