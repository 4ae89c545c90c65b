"""Tuple of independent parts: ``CompositeDistribution((dist, ...))``.

Like :mod:`~mixle_spark.stats.record` but positional: a record is a tuple (or list) whose i-th entry
is scored by ``components[i]``. In Arrow, a StructArray / RecordBatch / Table is read by position.
Field paths in error messages use the index as a string (``column 'pair.1': ...``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.errors import DataTypeError, DataValueError, SchemaError
from mixle_spark.stats._product import (
    ProductAccumulator,
    ProductEncoder,
    draw_columns,
    reraise_at,
)
from mixle_spark.stats._validate import as_arrow_array, first_true
from mixle_spark.stats.base import (
    Distribution,
    Encoder,
    Estimator,
    Sampler,
    check_parameter,
    estimators_option,
    parts,
    register_distribution,
    register_estimator,
)

__all__ = [
    "CompositeAccumulator",
    "CompositeDistribution",
    "CompositeEncoder",
    "CompositeEstimator",
]


def _check_components(components: Any, family: str, kind: type) -> tuple[Any, ...]:
    ok = isinstance(components, (list, tuple)) and len(components) > 0
    check_parameter(ok, family, "components", components, f"a non-empty tuple of {kind.__name__}")
    for i, child in enumerate(components):
        check_parameter(isinstance(child, kind), family, f"components[{i}]", child, f"a {kind.__name__}")
    return tuple(components)


@register_distribution("composite")
class CompositeDistribution(Distribution):
    """Independent positional parts; ``log p(x) = Σ_i components[i].log_density(x[i])``.

    Examples
    --------
    >>> from mixle_spark.stats.gaussian import GaussianDistribution
    >>> d = CompositeDistribution((GaussianDistribution(0.0, 1.0), GaussianDistribution(1.0, 1.0)))
    >>> round(d.log_density((0.0, 1.0)), 6)
    -1.837877
    """

    parameters = (parts("components"),)

    def __init__(self, components: Sequence[Distribution]) -> None:
        self.components = _check_components(components, "CompositeDistribution", Distribution)

    def child_distributions(self) -> tuple[Distribution, ...]:
        return self.components

    def sampling_parts(self) -> list[Distribution]:
        return list(self.components)

    def draw_with(self, sampler: Sampler, size: int | None = None) -> Any:
        """Tuples."""
        if size is None:
            return tuple(s.sample() for s in sampler.parts)
        return list(zip(*draw_columns(sampler.parts, size), strict=True))

    def log_density(self, x: Sequence[Any]) -> float:
        if len(x) != len(self.components):
            raise DataTypeError(f"expected a tuple of {len(self.components)} values", value=x)
        return float(sum(d.log_density(v) for d, v in zip(self.components, x, strict=True)))

    def seq_log_density(self, enc: tuple[Any, ...]) -> np.ndarray:
        total = np.array(self.components[0].seq_log_density(enc[0]), dtype=np.float64)
        for dist, e in zip(self.components[1:], enc[1:], strict=True):
            total += dist.seq_log_density(e)
        return total

    def estimator(self, pseudo_count: float | None = None) -> CompositeEstimator:
        return CompositeEstimator([d.estimator(pseudo_count) for d in self.components])

    def encoder(self) -> CompositeEncoder:
        return CompositeEncoder([d.encoder() for d in self.components])

    def n_free_parameters(self) -> int:
        return self.estimator().n_free_parameters(self)


class CompositeEncoder(ProductEncoder):
    """Reads tuples / lists by position, or Arrow by position: a StructArray, RecordBatch or Table
    with exactly one field per component."""

    def __init__(self, components: Sequence[Encoder]) -> None:
        self.children = tuple(components)
        self.labels = tuple(str(i) for i in range(len(self.children)))

    def _rebuild(self, children: list[Encoder]) -> CompositeEncoder:
        return CompositeEncoder(children)

    def _pack_scan(self, scans: list[Any]) -> Any:
        return None if all(s is None for s in scans) else tuple(scans)

    def _unpack_scan(self, scan: Any) -> list[Any]:
        return list(scan)

    def _columns(self, records: Sequence[Any]) -> list[Any]:
        n, k = len(records), len(self.children)
        for i, r in enumerate(records):
            if (
                isinstance(r, (str, bytes, Mapping))
                or not isinstance(r, (Sequence, np.ndarray))
                or len(r) != k
            ):
                raise DataTypeError(f"expected a tuple of {k} values", value=r, row=i, n_rows=n)
        return [[r[j] for r in records] for j in range(k)]

    def _arrow_columns(self, data: Any) -> list[Any]:
        k = len(self.children)
        if isinstance(data, (pa.Table, pa.RecordBatch)):
            names = data.schema.names
            if len(names) != k:
                raise SchemaError(f"expected {k} columns for CompositeEstimator, got {len(names)}: {names}")
            return [data.column(j) for j in range(k)]
        if isinstance(data, pa.ChunkedArray):
            data = as_arrow_array(data)
        if not isinstance(data, pa.StructArray):
            typ = getattr(data, "type", type(data).__name__)
            raise SchemaError(
                f"expected a struct column, record batch or table for CompositeEstimator, got {typ}"
            )
        if data.type.num_fields != k:
            raise SchemaError(f"expected a struct of {k} fields for CompositeEstimator, got {data.type}")
        if data.null_count:
            mask = np.asarray(data.is_null().to_numpy(zero_copy_only=False))
            raise DataValueError(
                "expected a tuple (a missing value needs OptionalEstimator)",
                value=None,
                row=first_true(mask),
                n_rows=len(data),
                count=int(mask.sum()),
            )
        return [data.field(j) for j in range(k)]

    def _arrow_names(self, data: Any) -> list[str]:
        k = len(self.children)
        if isinstance(data, (pa.Table, pa.RecordBatch)):
            return list(data.schema.names[:k])
        return [as_arrow_array(data).type.field(j).name for j in range(k)]

    def check_arrow_type(self, arrow_type: Any) -> None:
        if not isinstance(arrow_type, (pa.Schema, pa.StructType)):
            raise SchemaError(
                f"expected a struct type or schema for CompositeEstimator, got Arrow type {arrow_type}"
            )
        types = [f.type for f in arrow_type]
        if len(types) != len(self.children):
            raise SchemaError(
                f"expected {len(self.children)} fields for CompositeEstimator, got {arrow_type}"
            )
        for label, child, typ in zip(self.labels, self.children, types, strict=True):
            try:
                child.check_arrow_type(typ)
            except SchemaError as err:
                raise reraise_at(err, label) from err

    def expected_arrow(self) -> str:
        parts = ", ".join(c.expected_arrow() for c in self.children)
        return f"a struct of {len(self.children)} fields ({parts})"


class CompositeAccumulator(ProductAccumulator):
    """Child accumulators by position; value is the tuple of child values."""

    def make_encoder(self) -> CompositeEncoder:
        return CompositeEncoder([acc.make_encoder() for acc in self.children])


@register_estimator("composite")
@dataclass(eq=False, repr=False)
class CompositeEstimator(Estimator):
    """Fits each part with its own estimator.

    Parameters
    ----------
    components : sequence of Estimator
    name : str, optional
    keys : str, optional
        Tie the whole tuple's statistics to every other site with the same key.
    """

    components: Sequence[Estimator] = estimators_option()
    name: str | None = None
    keys: str | None = None

    def check(self) -> None:
        self.components = _check_components(self.components, "CompositeEstimator", Estimator)

    def accumulator_factory(self) -> CompositeAccumulator:
        return CompositeAccumulator(
            [e.accumulator() for e in self.components], list(range(len(self.components))), self.keys
        )

    def estimate(self, nobs: float | None, value: Any) -> CompositeDistribution:
        return CompositeDistribution(
            [e.estimate(nobs, v) for e, v in zip(self.components, value, strict=True)]
        )

    def encoder(self) -> CompositeEncoder:
        return CompositeEncoder([e.encoder() for e in self.components])

    def with_scan(self, scan: Any) -> CompositeEstimator:
        if scan is None:
            return self
        comps = [e if s is None else e.with_scan(s) for e, s in zip(self.components, scan, strict=True)]
        return dataclasses.replace(self, components=comps)

    def min_rows(self) -> int:
        return max(e.min_rows() for e in self.components)

    def _free_parameters(self, model: Any, tied: set[Any]) -> int:
        return sum(
            e.n_free_parameters(d, tied) for e, d in zip(self.components, model.components, strict=True)
        )
