"""The encoder of :mod:`mixle_spark.stats.mixture`: the union of the component encoders, unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mixle_spark.stats.base import Encoder

__all__ = ["MixtureEncoder", "unwrap"]


def unwrap(encoder: Encoder) -> Encoder:
    """The innermost encoder under any number of MixtureEncoder wrappers."""
    while isinstance(encoder, MixtureEncoder):
        encoder = encoder.inner
    return encoder


class MixtureEncoder(Encoder):
    """Reads what the component encoders (their union) read; the encoding is theirs, unchanged.

    The mixture adds nothing to the encoded batch, so nested mixtures share one encoding.
    """

    def __init__(self, inner: Encoder) -> None:
        self.inner = unwrap(inner)

    def encode(self, records: Sequence[Any]) -> Any:
        return self.inner.encode(records)

    def from_arrow(self, data: Any) -> Any:
        return self.inner.from_arrow(data)

    def narrow(self, enc: Any, dtype: Any) -> Any:
        return self.inner.narrow(enc, dtype)

    def column_names(self) -> list[str] | None:
        names = getattr(self.inner, "column_names", None)
        return names() if callable(names) else None

    def check_arrow_type(self, arrow_type: Any) -> None:
        self.inner.check_arrow_type(arrow_type)

    def expected_arrow(self) -> str:
        return self.inner.expected_arrow()

    def with_unseen(self, unseen: str) -> MixtureEncoder:
        inner = self.inner.with_unseen(unseen)
        return self if inner is self.inner else MixtureEncoder(inner)

    def unseen_rows(self, enc: Any) -> Any:
        return self.inner.unseen_rows(enc)

    @property
    def compacts(self) -> bool:
        return self.inner.compacts

    def compact_arrow(self, data: Any) -> Any:
        return self.inner.compact_arrow(data)

    @property
    def needs_scan(self) -> bool:
        return self.inner.needs_scan

    def scan(self, records: Sequence[Any]) -> Any:
        return self.inner.scan(records)

    def scan_arrow(self, data: Any) -> Any:
        return self.inner.scan_arrow(data)

    def merge_scans(self, a: Any, b: Any) -> Any:
        return self.inner.merge_scans(a, b)

    @property
    def rebases(self) -> bool:
        return self.inner.rebases

    def rebase(self, enc: Any) -> Any:
        return self.inner.rebase(enc)

    def union(self, other: Encoder) -> MixtureEncoder:
        return MixtureEncoder(self.inner.union(unwrap(other)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MixtureEncoder) and self.inner == other.inner

    def __hash__(self) -> int:
        return hash(("MixtureEncoder", hash(self.inner)))

    def __repr__(self) -> str:
        return f"MixtureEncoder({self.inner!r})"

    def embedding_scales(self) -> Any:
        return self.inner.embedding_scales()

    def embedding_groups(self) -> Any:
        return self.inner.embedding_groups()

    def embed(self, enc: Any) -> Any:
        return self.inner.embed(enc)
