"""Record of named fields: ``RecordDistribution({name: dist})``.

The primary combinator: a record is a dict whose keys are DataFrame column names, each field scored
by its own model, and the log-density is the sum over fields (fields are independent given the
model; put a Record inside a Mixture for dependence through the latent class). A nested Record is a
struct column. Errors raised by a field's encoder are re-raised with the column name prepended, so
a bad value deep inside reads ``column 'outer.inner': expected ..., got ... (row 3 of 10)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from mixle_spark.errors import DataTypeError, DataValueError, SchemaError, did_you_mean
from mixle_spark.stats._product import (
    ProductAccumulator,
    ProductEncoder,
    draw_columns,
    reraise_at,
    schema_error,
)
from mixle_spark.stats._tables import repeated_columns
from mixle_spark.stats._validate import as_arrow_array, first_true
from mixle_spark.stats.base import (
    Distribution,
    Encoder,
    Estimator,
    Parameter,
    Sampler,
    check_parameter,
    distribution_from_dict,
    estimator_from_dict,
    option,
    register_distribution,
    register_estimator,
)

__all__ = [
    "RecordAccumulator",
    "RecordDistribution",
    "RecordEncoder",
    "RecordEstimator",
]


def _check_fields(fields: Any, family: str, kind: type) -> dict[str, Any]:
    check_parameter(
        isinstance(fields, Mapping) and len(fields) > 0,
        family,
        "fields",
        fields,
        f"a non-empty dict of column name -> {kind.__name__}",
    )
    for name, child in fields.items():
        check_parameter(isinstance(name, str), family, "field name", name, "a string (a column name)")
        check_parameter(isinstance(child, kind), family, f"field {name!r}", child, f"a {kind.__name__}")
    return dict(fields)


def _field_specs(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {name: part.to_dict() for name, part in fields.items()}


def _field_distributions(specs: Any) -> dict[str, Distribution]:
    if not isinstance(specs, Mapping):
        raise TypeError("a dict of column name -> distribution spec")
    return {name: distribution_from_dict(spec) for name, spec in specs.items()}


def _field_estimators(specs: Any) -> dict[str, Estimator]:
    if not isinstance(specs, Mapping):
        raise TypeError("a dict of column name -> estimator spec")
    return {name: estimator_from_dict(spec) for name, spec in specs.items()}


@register_distribution("record")
class RecordDistribution(Distribution):
    """Independent named fields; ``log p(x) = Σ_name fields[name].log_density(x[name])``.

    Parameters
    ----------
    fields : dict of str -> Distribution
        One model per column, in column order (the order of the encoded tuple).

    Examples
    --------
    >>> from mixle_spark.stats.gaussian import GaussianDistribution
    >>> d = RecordDistribution({"a": GaussianDistribution(0.0, 1.0), "b": GaussianDistribution(1.0, 1.0)})
    >>> round(d.log_density({"a": 0.0, "b": 1.0}), 6)
    -1.837877
    """

    parameters = (Parameter("fields", parse=_field_distributions, write=_field_specs),)

    def __init__(self, fields: Mapping[str, Distribution]) -> None:
        self.fields = _check_fields(fields, "RecordDistribution", Distribution)

    def child_distributions(self) -> tuple[Distribution, ...]:
        return tuple(self.fields.values())

    def sampling_parts(self) -> list[Distribution]:
        return list(self.child_distributions())

    def draw_with(self, sampler: Sampler, size: int | None = None) -> Any:
        """Dicts ``{name: value}``."""
        names = list(self.fields)
        if size is None:
            return {name: s.sample() for name, s in zip(names, sampler.parts, strict=True)}
        columns = draw_columns(sampler.parts, size)
        return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]

    def log_density(self, x: Mapping[str, Any]) -> float:
        total = 0.0
        for name, dist in self.fields.items():
            if name not in x:
                raise DataValueError("missing from the record", path=(name,))
            total += dist.log_density(x[name])
        return total

    def seq_log_density(self, enc: tuple[Any, ...]) -> np.ndarray:
        total = np.array(self.child_distributions()[0].seq_log_density(enc[0]), dtype=np.float64)
        for dist, e in zip(self.child_distributions()[1:], enc[1:], strict=True):
            total += dist.seq_log_density(e)
        return total

    def estimator(self, pseudo_count: float | None = None) -> RecordEstimator:
        return RecordEstimator({name: d.estimator(pseudo_count) for name, d in self.fields.items()})

    def encoder(self) -> RecordEncoder:
        return RecordEncoder({name: d.encoder() for name, d in self.fields.items()})

    def n_free_parameters(self) -> int:
        return self.estimator().n_free_parameters(self)


def _not_found(name: str, available: Iterable[str], what: str) -> SchemaError:
    """The error for a column (or struct field) the record reads but the data lacks: the closest
    name, then every name there is."""
    names = list(available)
    return schema_error(
        (name,), f"not found{did_you_mean(name, names)}; available {what}: {', '.join(names)}"
    )


class RecordEncoder(ProductEncoder):
    """Reads dicts (by key), or Arrow columns by name: a Table / RecordBatch, or a StructArray
    (a struct column, for a nested Record). Keys / columns the model does not name are ignored."""

    def __init__(self, fields: Mapping[str, Encoder]) -> None:
        self.fields = dict(fields)
        self.labels = tuple(self.fields)
        self.children = tuple(self.fields.values())

    def _rebuild(self, children: list[Encoder]) -> RecordEncoder:
        return RecordEncoder(dict(zip(self.labels, children, strict=True)))

    def _pack_scan(self, scans: list[Any]) -> Any:
        return {name: s for name, s in zip(self.labels, scans, strict=True) if s is not None}

    def _unpack_scan(self, scan: Any) -> list[Any]:
        return [scan.get(name) for name in self.labels]

    def encode(self, records: Sequence[Any]) -> tuple[Any, ...]:
        if _is_pandas_frame(records):
            return self.from_arrow(pa.Table.from_pandas(records, preserve_index=False))
        return super().encode(records)

    def _columns(self, records: Sequence[Any]) -> list[Any]:
        n = len(records)
        for i, r in enumerate(records):
            if not isinstance(r, Mapping):
                raise DataTypeError("expected a dict (a record of named fields)", value=r, row=i, n_rows=n)
        columns = []
        for name in self.labels:
            try:
                columns.append([r[name] for r in records])
            except KeyError:
                i = next(i for i, r in enumerate(records) if name not in r)
                keys = ", ".join(repr(k) for k in records[i])
                raise DataValueError(
                    f"missing from the record (its keys: {keys})", row=i, n_rows=n, path=(name,)
                ) from None
        return columns

    def _arrow_columns(self, data: Any) -> list[Any]:
        if isinstance(data, (pa.Table, pa.RecordBatch)):
            available = data.schema.names
            for name in self.labels:
                if name not in available:
                    raise _not_found(name, available, "columns")
            repeated = repeated_columns(available, self.labels)
            if repeated is not None:
                raise repeated
            return [data.column(name) for name in self.labels]
        if isinstance(data, pa.ChunkedArray):
            data = as_arrow_array(data)
        if not isinstance(data, pa.StructArray):
            typ = getattr(data, "type", type(data).__name__)
            raise SchemaError(
                f"expected a table, record batch or struct column for RecordEstimator, got {typ}"
            )
        if data.null_count:
            mask = np.asarray(data.is_null().to_numpy(zero_copy_only=False))
            raise DataValueError(
                "expected a record (a missing struct value needs OptionalEstimator)",
                value=None,
                row=first_true(mask),
                n_rows=len(data),
                count=int(mask.sum()),
            )
        available = [f.name for f in data.type]
        for name in self.labels:
            if name not in available:
                raise _not_found(name, available, "fields")
        return [data.field(name) for name in self.labels]

    def _arrow_names(self, data: Any) -> list[str]:
        return list(self.labels)

    def column_names(self) -> list[str]:
        """The columns this record reads from a table (extra columns are ignored)."""
        return list(self.labels)

    def check_arrow_type(self, arrow_type: Any) -> None:
        if isinstance(arrow_type, pa.Schema):
            types = {f.name: f.type for f in arrow_type}
            what = "columns"
        elif isinstance(arrow_type, pa.StructType):
            types = {f.name: f.type for f in arrow_type}
            what = "fields"
        else:
            raise SchemaError(
                f"expected a schema or a struct type for RecordEstimator, got Arrow type {arrow_type}"
            )
        for name, child in self.fields.items():
            if name not in types:
                raise _not_found(name, types, what)
            try:
                child.check_arrow_type(types[name])
            except SchemaError as err:
                raise reraise_at(err, name) from err

    def expected_arrow(self) -> str:
        inner = ", ".join(f"{name}: {child.expected_arrow()}" for name, child in self.fields.items())
        return f"columns (or struct fields) {{{inner}}}"


def _is_pandas_frame(records: Any) -> bool:
    return type(records).__name__ == "DataFrame" and hasattr(records, "columns") and hasattr(records, "iloc")


class RecordAccumulator(ProductAccumulator):
    """Child accumulators by field; value is the tuple of child values in field order."""

    def make_encoder(self) -> RecordEncoder:
        return RecordEncoder(
            {name: acc.make_encoder() for name, acc in zip(self.streams, self.children, strict=True)}
        )


@register_estimator("record")
@dataclass(eq=False, repr=False)
class RecordEstimator(Estimator):
    """Fits each field with its own estimator.

    Parameters
    ----------
    fields : dict of str -> Estimator
        One estimator per column.
    name : str, optional
    keys : str, optional
        Tie the whole record's statistics to every other site with the same key.
    """

    fields: Mapping[str, Estimator] = option(dataclasses.MISSING, write=_field_specs, parse=_field_estimators)
    name: str | None = None
    keys: str | None = None

    def check(self) -> None:
        self.fields = _check_fields(self.fields, "RecordEstimator", Estimator)

    def accumulator_factory(self) -> RecordAccumulator:
        return RecordAccumulator(
            [e.accumulator() for e in self.fields.values()], list(self.fields), self.keys
        )

    def estimate(self, nobs: float | None, value: Any) -> RecordDistribution:
        return RecordDistribution(
            {name: est.estimate(nobs, v) for (name, est), v in zip(self.fields.items(), value, strict=True)}
        )

    def encoder(self) -> RecordEncoder:
        return RecordEncoder({name: e.encoder() for name, e in self.fields.items()})

    def with_scan(self, scan: Any) -> RecordEstimator:
        if not scan:
            return self
        fields = {
            name: (e.with_scan(scan[name]) if scan.get(name) is not None else e)
            for name, e in self.fields.items()
        }
        return dataclasses.replace(self, fields=fields)

    def min_rows(self) -> int:
        return max(e.min_rows() for e in self.fields.values())

    def _free_parameters(self, model: Any, tied: set[Any]) -> int:
        return sum(e.n_free_parameters(model.fields[name], tied) for name, e in self.fields.items())
