"""The length model of the list families (sequence, hidden Markov, Markov chain, multinomial): the
optional ``len_encoder`` that encodes each row's length, with its scan, unseen rows and union."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from mixle_spark.errors import FieldError
from mixle_spark.stats.base import Encoder

__all__ = ["LengthEncoding", "encode_lengths"]


def encode_lengths(len_encoder: Encoder, lengths: Any, what: str = "sequence length") -> Any:
    """The lengths (an array, or an encoded batch's ``lengths``) encoded by ``len_encoder``; an
    error names ``what`` was being read."""
    lengths = np.asarray(getattr(lengths, "lengths", lengths)).astype(np.int64)
    try:
        return len_encoder.from_arrow(pa.array(lengths, type=pa.int64()))
    except FieldError as err:
        raise type(err)(
            f"{what}: {err.detail}",
            value=err.value,
            row=err.row,
            n_rows=err.n_rows,
            count=err.count,
            path=err.path,
        ) from err


class LengthEncoding:
    """Mixin of the encoders with an optional length encoder (``len_encoder``)."""

    len_encoder: Encoder | None
    length_name: ClassVar[str] = "sequence length"

    def encoded_lengths(self, lengths: Any) -> Any:
        return (
            None if self.len_encoder is None else encode_lengths(self.len_encoder, lengths, self.length_name)
        )

    @property
    def lengths_need_scan(self) -> bool:
        return self.len_encoder is not None and self.len_encoder.needs_scan

    def scan_lengths(self, lengths: np.ndarray) -> Any:
        if not self.lengths_need_scan:
            return None
        return self.len_encoder.scan_arrow(pa.array(lengths, type=pa.int64()))  # type: ignore[union-attr]

    def merge_length_scans(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        return self.len_encoder.merge_scans(a, b)  # type: ignore[union-attr]

    def lengths_with_unseen(self, unseen: str) -> Encoder | None:
        return None if self.len_encoder is None else self.len_encoder.with_unseen(unseen)

    def unseen_lengths(self, len_enc: Any) -> np.ndarray | None:
        return None if self.len_encoder is None else self.len_encoder.unseen_rows(len_enc)

    def union_lengths(self, other: LengthEncoding) -> Encoder | None:
        if self.len_encoder is None or other.len_encoder is None:
            return self.len_encoder or other.len_encoder
        return self.len_encoder.union(other.len_encoder)
