"""Shared machinery of the product combinators (Record, Composite): a record is a fixed set of
labelled fields, each scored by its own child model, and the log-density is the sum over fields.

The pieces here know nothing of how a field is addressed (a dict key / column name for Record, a
position for Composite); the subclasses in ``record.py`` and ``composite.py`` supply that.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.errors import FieldError, SchemaError
from mixle_spark.stats._accumulator import widened_parts, widening_target
from mixle_spark.stats._encoder import any_unseen
from mixle_spark.stats._validate import as_arrow_array
from mixle_spark.stats.base import (
    Accumulator,
    Encoder,
    RowRandom,
    Sampler,
    seq_update_with_ll,
)

__all__ = ["as_record_list", "draw_columns", "schema_error", "schema_error_at"]


def schema_error(path: tuple[str, ...], detail: str) -> SchemaError:
    """A SchemaError ``"column 'a.b': detail"`` that remembers its path so outer fields can extend it."""
    err = SchemaError(f"column {'.'.join(path)!r}: {detail}" if path else detail)
    err.field_path = path  # type: ignore[attr-defined]
    err.field_detail = detail  # type: ignore[attr-defined]
    return err


def schema_error_at(err: SchemaError, label: str) -> SchemaError:
    """``err`` one field further out (``label`` prepended to its column path)."""
    path = getattr(err, "field_path", ())
    detail = getattr(err, "field_detail", str(err))
    return schema_error((str(label), *path), detail)


def reraise_at(err: Exception, label: str) -> Exception:
    """The child error ``err`` re-expressed with ``label`` prepended to its path."""
    if isinstance(err, FieldError):
        return err.at(label)
    if isinstance(err, SchemaError):
        return schema_error_at(err, label)
    return err


def as_record_list(draws: Any) -> list[Any]:
    """A child's ``sample(size)`` output as a list of per-record values (numpy scalars -> Python)."""
    if isinstance(draws, np.ndarray):
        return draws.tolist() if draws.ndim == 1 else list(draws)
    return list(draws)


def draw_columns(samplers: Sequence[Sampler], size: int) -> list[list[Any]]:
    """``size`` draws of each field's sampler, one list per field (a product's columns)."""
    return [as_record_list(s.sample(size)) for s in samplers]


class ProductEncoder(Encoder):
    """Encodes each field with its child encoder; the encoding is a tuple in field order.

    Subclasses provide ``_columns(records)`` (Python records -> one list per field) and
    ``_arrow_columns(data)`` (Arrow data -> one column per field), and scan packing.
    """

    labels: tuple[str, ...]
    children: tuple[Encoder, ...]

    def _columns(self, records: Sequence[Any]) -> list[Any]:
        raise NotImplementedError

    def _arrow_columns(self, data: Any) -> list[Any]:
        raise NotImplementedError

    def _arrow_names(self, data: Any) -> list[str]:
        """The names of the columns / struct fields that ``_arrow_columns(data)`` returns."""
        raise NotImplementedError

    def _pack_scan(self, scans: list[Any]) -> Any:
        raise NotImplementedError

    def _unpack_scan(self, scan: Any) -> list[Any]:
        raise NotImplementedError

    def _rebuild(self, children: list[Encoder]) -> ProductEncoder:
        raise NotImplementedError

    def _each(self, method: str, columns: list[Any]) -> list[Any]:
        out = []
        for label, child, column in zip(self.labels, self.children, columns, strict=True):
            try:
                out.append(getattr(child, method)(column))
            except (FieldError, SchemaError) as err:
                raise reraise_at(err, label) from err
        return out

    def encode(self, records: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(self._each("encode", self._columns(records)))

    def from_arrow(self, data: Any) -> tuple[Any, ...]:
        return tuple(self._each("from_arrow", self._arrow_columns(data)))

    def narrow(self, enc: tuple[Any, ...], dtype: Any) -> tuple[Any, ...]:
        """Each field's batch narrowed by its own encoder (a field whose family computes in float64
        only keeps float64; codes and lengths stay integers)."""
        return tuple(child.narrow(e, dtype) for child, e in zip(self.children, enc, strict=True))

    def with_unseen(self, unseen: str) -> ProductEncoder:
        children = [child.with_unseen(unseen) for child in self.children]
        if all(a is b for a, b in zip(children, self.children, strict=True)):
            return self
        return self._rebuild(children)

    def unseen_rows(self, enc: tuple[Any, ...]) -> np.ndarray | None:
        return any_unseen(child.unseen_rows(e) for child, e in zip(self.children, enc, strict=True))

    @property
    def compacts(self) -> bool:
        return any(child.compacts for child in self.children)

    def compact_arrow(self, data: Any) -> Any:
        """The same table / struct with every field in its child's compact form."""
        if not self.compacts:
            return data
        columns = self._arrow_columns(data)
        out = []
        for label, child, column in zip(self.labels, self.children, columns, strict=True):
            try:
                out.append(as_arrow_array(child.compact_arrow(column) if child.compacts else column))
            except (FieldError, SchemaError) as err:
                raise reraise_at(err, label) from err
        names = self._arrow_names(data)
        if isinstance(data, pa.Table):
            return pa.Table.from_arrays(out, names=names)
        if isinstance(data, pa.RecordBatch):
            return pa.RecordBatch.from_arrays(out, names=names)
        return pa.StructArray.from_arrays(out, names=names)

    @property
    def needs_scan(self) -> bool:
        return any(child.needs_scan for child in self.children)

    def _scan_with(self, method: str, columns: list[Any]) -> Any:
        scans: list[Any] = [None] * len(self.children)
        for i, (label, child) in enumerate(zip(self.labels, self.children, strict=True)):
            if child.needs_scan:
                try:
                    scans[i] = getattr(child, method)(columns[i])
                except (FieldError, SchemaError) as err:
                    raise reraise_at(err, label) from err
        return self._pack_scan(scans)

    def scan(self, records: Sequence[Any]) -> Any:
        if not self.needs_scan:
            return None
        return self._scan_with("scan", self._columns(records))

    def scan_arrow(self, data: Any) -> Any:
        if not self.needs_scan:
            return None
        return self._scan_with("scan_arrow", self._arrow_columns(data))

    def merge_scans(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        merged = []
        scans = zip(self.labels, self.children, self._unpack_scan(a), self._unpack_scan(b), strict=True)
        for label, child, sa, sb in scans:
            try:
                merged.append(sb if sa is None else sa if sb is None else child.merge_scans(sa, sb))
            except (FieldError, SchemaError) as err:  # scans of two partitions disagree
                raise reraise_at(err, label) from err
        return self._pack_scan(merged)

    @property
    def rebases(self) -> bool:
        return all(child.rebases for child in self.children)

    def rebase(self, enc: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(child.rebase(e) for child, e in zip(self.children, enc, strict=True))

    def union(self, other: Encoder) -> Encoder:
        if type(other) is not type(self) or other.labels != self.labels:  # type: ignore[attr-defined]
            raise TypeError(f"cannot combine encoders {self!r} and {other!r}")
        return self._rebuild([a.union(b) for a, b in zip(self.children, other.children, strict=True)])  # type: ignore[attr-defined]

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and other.labels == self.labels  # type: ignore[attr-defined]
            and other.children == self.children
        )  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.labels))

    def __repr__(self) -> str:
        inner = ", ".join(
            f"{label}={child!r}" for label, child in zip(self.labels, self.children, strict=True)
        )
        return f"{type(self).__name__}({inner})"

    def embedding_scales(self) -> np.ndarray:
        parts = [child.embedding_scales() for child in self.children]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)

    def embedding_groups(self) -> np.ndarray:
        parts, offset = [], 0
        for child in self.children:
            groups = np.asarray(child.embedding_groups(), dtype=np.int64)
            parts.append(groups + offset)
            offset += int(groups.max()) + 1 if len(groups) else 0
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def embed(self, enc: Any) -> np.ndarray:
        parts = [child.embed(e) for child, e in zip(self.children, enc, strict=True)]
        return np.hstack(parts) if parts else np.zeros((0, 0))


class ProductAccumulator(Accumulator):
    """Child accumulators side by side; value is the tuple of child values in field order.

    ``streams`` name each child's random stream at initialization (``rng.child(stream)``), so a
    field's initial statistics do not depend on which other fields the record has.
    """

    def __init__(self, children: list[Accumulator], streams: list[Any], keys: Any = None) -> None:
        self.children = children
        self.streams = streams
        self.keys = keys

    def _child_estimates(self, estimate: Any) -> tuple[Any, ...]:
        return tuple(estimate.child_distributions())

    def seq_update(self, enc: tuple[Any, ...], weights: np.ndarray, estimate: Any) -> np.ndarray | None:
        if estimate is None:
            for acc, e in zip(self.children, enc, strict=True):
                acc.seq_update(e, weights, None)
            return None
        total: np.ndarray | None = None
        for acc, e, d in zip(self.children, enc, self._child_estimates(estimate), strict=True):
            ll = seq_update_with_ll(acc, e, weights, d)
            total = np.array(ll, dtype=np.float64) if total is None else total + ll
        return total

    def seq_initialize(self, enc: tuple[Any, ...], weights: np.ndarray, rng: RowRandom) -> None:
        for acc, e, stream in zip(self.children, enc, self.streams, strict=True):
            acc.seq_initialize(e, weights, rng.child(stream))

    def seq_initialize_assigned(
        self, enc: tuple[Any, ...], weights: np.ndarray, rng: RowRandom, field: int, resp: np.ndarray
    ) -> None:
        """:meth:`seq_initialize`, except that child ``field`` (a mixture) starts from the
        responsibilities ``resp`` (n, k) (``seq_assign``) rather than random ones."""
        for i, (acc, e, stream) in enumerate(zip(self.children, enc, self.streams, strict=True)):
            if i == field:
                acc.seq_assign(e, weights, resp, rng.child(stream))  # type: ignore[attr-defined]
            else:
                acc.seq_initialize(e, weights, rng.child(stream))

    def combine(self, value: Any) -> ProductAccumulator:
        for acc, v in zip(self.children, value, strict=True):
            acc.combine(v)
        return self

    def value(self) -> tuple[Any, ...]:
        return tuple(acc.value() for acc in self.children)

    def _scale(self, factor: float) -> None:
        for acc in self.children:
            acc._scale(factor)

    def widened(self, target: Accumulator) -> tuple[Any, ...]:
        return widened_parts(self, self.children, widening_target(self, target).children)

    def from_value(self, value: Any) -> ProductAccumulator:
        for acc, v in zip(self.children, value, strict=True):
            acc.from_value(v)
        return self

    def parts(self) -> list[Accumulator]:
        return self.children

    def fresh_args(self) -> tuple[Any, ...]:
        return ([c.make() for c in self.children], list(self.streams), self.keys)
