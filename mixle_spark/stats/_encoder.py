"""The encoder contract (records or Arrow columns -> an encoded batch, with scans, rebasing, compact
Arrow forms, unseen labels and the seeding embedding), and helpers for the rows holding unseen labels."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mixle_spark.errors import EmbeddingUnavailableError

__all__ = ["Encoded", "Encoder", "any_unseen", "narrow_floats", "unseen_owners"]

Encoded = Any
"""An encoded batch: whatever a family's encoder produces and its ``seq_*`` methods read."""


def any_unseen(masks: Iterable[np.ndarray | None]) -> np.ndarray | None:
    """The rows unseen in any of ``masks`` (None entries skipped; None when all are None)."""
    out: np.ndarray | None = None
    for mask in masks:
        if mask is not None:
            out = mask if out is None else out | mask
    return out


def unseen_owners(element_mask: np.ndarray | None, owner: np.ndarray, n: int) -> np.ndarray | None:
    """Rows (of ``n``) owning an unseen element: ``owner[j]`` is the row of element ``j``."""
    if element_mask is None:
        return None
    return np.bincount(owner[element_mask], minlength=n) > 0


def narrow_floats(value: Any, dtype: Any) -> Any:
    """``value`` (an array, or a tuple of arrays as a scalar family packs its batch) with every float64
    array stored in ``dtype``; integer arrays and other values are kept.

    >>> x, codes = narrow_floats((np.array([0.5, 1.5]), np.array([1, 2])), np.float32)
    >>> x.dtype.name, codes.dtype.name
    ('float32', 'int64')
    """
    if isinstance(value, np.ndarray):
        return value.astype(dtype) if value.dtype == np.float64 else value
    if type(value) is tuple:
        return tuple(narrow_floats(v, dtype) for v in value)
    return value


class Encoder(ABC):
    """Turns records into an encoded batch; declares the Arrow types it reads.

    Encoders compare equal when they produce the same encoding (drivers use this to decide whether
    encoded data can be reused). A scan (for vocabularies / ranges) is a plain, picklable,
    mergeable value; encoders that need none keep the defaults.
    """

    @abstractmethod
    def encode(self, records: Sequence[Any]) -> Encoded:
        """Encode a sequence of Python records (validated; errors name the bad value and row)."""

    @abstractmethod
    def from_arrow(self, data: Any) -> Encoded:
        """Encode an Arrow column (Array / ChunkedArray), or a RecordBatch / Table for records.

        Zero-copy where Arrow allows it (primitive float64 buffers without nulls, list offsets).
        """

    def column_names(self) -> list[str] | None:
        """The top-level columns a table-reading encoder (Record) reads; None for one-column models."""
        return None

    def narrow(self, enc: Encoded, dtype: np.dtype) -> Encoded:
        """``enc`` with its floating values stored in ``dtype`` (float32: half the bytes, and the
        compute engines' kernels run in it). The default keeps ``enc``: a family that computes in
        float64 only (its kernels would upcast anyway) stores float64."""
        return enc

    def check_arrow_type(self, arrow_type: Any) -> None:  # noqa: B027 (optional hook)
        """Raise :class:`~mixle_spark.errors.SchemaError` when a column of ``arrow_type`` cannot be
        read; the enclosing Record prefixes the column name. The default accepts anything."""

    def expected_arrow(self) -> str:
        """Human-readable description of the accepted Arrow type(s), for error messages."""
        return "any"

    # -- scans: learning vocabularies / ranges before the first E-step -------------------------
    @property
    def needs_scan(self) -> bool:
        """True when :meth:`encode` needs a vocabulary / range that a scan must provide first."""
        return False

    def scan(self, records: Sequence[Any]) -> Any:
        """What this batch of records tells about vocabularies / ranges (None when nothing)."""
        return None

    def scan_arrow(self, data: Any) -> Any:
        """As :meth:`scan`, from Arrow data."""
        return None

    def merge_scans(self, a: Any, b: Any) -> Any:
        """Merge two scan results (associative and commutative)."""
        return None

    # -- rebasing: a batch encoded under the scan of part of the data, as the whole data's encoder
    #    encodes it (a Spark partition encodes its rows in the pass that scans them) -------------
    @property
    def rebases(self) -> bool:
        """True when :meth:`rebase` can take any batch this family's encoder made under the scan of
        part of the data (for example one partition's vocabulary) to what the encoder made from the
        scan of all of it makes of the same rows. A property of the family, whatever this encoder's
        scan: true for families without a scan; families with one that implement :meth:`rebase`
        (and composites of such) say so."""
        return type(self).scan_arrow is Encoder.scan_arrow

    def rebase(self, enc: Encoded) -> Encoded:
        """``enc`` (a batch of this family, encoded under another scan of the same column) as this
        encoder encodes the same rows: equal, array for array, to ``self.from_arrow`` of them. The
        batch says which vocabulary or range it was made with; only called when :attr:`rebases`. The
        default, for families without a scan, returns it unchanged."""
        return enc

    # -- compact Arrow form: data encoded once and read every iteration (e.g. a Spark cache) ------
    @property
    def compacts(self) -> bool:
        """True when :meth:`compact_arrow` gives a cheaper column than its input (labels -> codes)."""
        return False

    def compact_arrow(self, data: Any) -> Any:
        """``data`` (already accepted by :meth:`from_arrow`) in a compact Arrow form that
        :meth:`from_arrow` reads back to the same encoding; the default returns it unchanged."""
        return data

    # -- unseen labels at scoring: a label outside a fitted vocabulary ------------------------------
    def with_unseen(self, unseen: str) -> Encoder:
        """This encoder with every vocabulary under it treating a label outside it by ``unseen``:
        "error" raises :class:`~mixle_spark.errors.UnseenLabelError` naming the row, "zero" gives it
        code -1 (see :meth:`unseen_rows`). Encoders without a vocabulary return themselves."""
        return self

    def unseen_rows(self, enc: Encoded) -> np.ndarray | None:
        """For a batch encoded by ``with_unseen("zero")``: a bool mask of the rows holding a label
        outside a vocabulary, or None when this encoder has no vocabulary (no row can)."""
        return None

    # -- seeding: a numeric embedding for init="kmeans||" (see stats._embed) ---------------------
    def embedding_scales(self) -> np.ndarray:
        """One flag per column of :meth:`embed`: True for a number the seeding standardizes, False
        for a column already on a comparable scale (one-hot, frequencies). Raises
        :class:`~mixle_spark.errors.EmbeddingUnavailableError` when the family has no embedding."""
        raise EmbeddingUnavailableError(f"{type(self).__name__} has no numeric embedding for seeding")

    def embedding_groups(self) -> np.ndarray:
        """One integer per column of :meth:`embed`: columns with the same number are the coordinates of
        one vector, in one unit, which the seeding may scale together (keeping its rotations) rather
        than one by one. Default: every column on its own."""
        return np.arange(len(self.embedding_scales()))

    def embed(self, enc: Encoded) -> np.ndarray:
        """The batch as a float64 array of shape (n, m), m = ``len(embedding_scales())``; NaN = missing."""
        raise EmbeddingUnavailableError(f"{type(self).__name__} has no numeric embedding for seeding")

    def union(self, other: Encoder) -> Encoder:
        """An encoder that can encode whatever ``self`` and ``other`` can (used by mixtures of models
        whose vocabularies differ). The default requires the two to be equal."""
        if self == other:
            return self
        raise TypeError(f"cannot combine encoders {self!r} and {other!r}")

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash(type(self).__name__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
