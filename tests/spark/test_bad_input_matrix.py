"""Bad input on Spark, as a matrix: each case through the Python API or a job's ``main`` (in process).

Every case asserts the exception type (or the job's exit code), the whole message (the column or
path, the bad value, what was expected), and that nothing was written or lost: every file under the
test's directory (the input table, the spec, the model, an existing output) is byte-identical
afterwards, nothing new appeared there, and no Spark cache was left behind. The input table is a
Parquet file written by pyarrow (one file, so rows keep their order and row numbers are stable).

The success cases: a Spark DataFrame with empty partitions (API, and em_fit ``--partitions``) fits
exactly as the same rows do on the local backend.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.spark

pytest.importorskip("pyspark")

from pyspark.errors import PythonException  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from mixle_spark._version import __version__  # noqa: E402
from mixle_spark.errors import (  # noqa: E402
    DataTypeError,
    DataValueError,
    EmptyDataError,
    ModelFormatError,
    SchemaError,
    TooFewRowsError,
)
from mixle_spark.estimation import optimize  # noqa: E402
from mixle_spark.io import read_table, write_table  # noqa: E402
from mixle_spark.scoring import score  # noqa: E402
from mixle_spark.spec import (  # noqa: E402
    MODEL_FORMAT_VERSION,
    estimator_from_spec,
    load_model,
    model_to_dict,
    save_model,
)
from mixle_spark.stats import (  # noqa: E402
    CategoricalDistribution,
    GaussianDistribution,
    MixtureDistribution,
    PoissonDistribution,
    RecordDistribution,
)
from mixle_spark.stats.base import registered_estimators  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NAN, INF = float("nan"), float("inf")
TMP = "<tmp>"  # stands for re.escape(str(tmp_path)) in a case's message

# -- the input table: six customers; each case changes one column -------------------------------

BASE: dict[str, pa.Array] = {
    "amount": pa.array([12.5, 80.0, 15.0, 60.0, 20.0, 75.0], pa.float64()),
    "channel": pa.array(["web", "app", "store", "web", "app", "store"], pa.string()),
    "n_items": pa.array([1, 7, 2, 5, 0, 6], pa.int64()),
    "w": pa.array([1.0, 2.0, 1.0, 0.5, 1.0, 1.0], pa.float64()),
    "v": pa.array([[0.1, 0.2], [1.0, 1.5], [0.3, 0.1], [1.2, 1.1], [0.2, 0.4], [0.9, 1.3]]),
}
COLUMNS = list(BASE)


def _table(**changes: Any) -> pa.Table:
    """The base table with some columns replaced (a list keeps the base column's type if it can)."""
    columns = dict(BASE)
    for name, values in changes.items():
        columns[name] = values if isinstance(values, pa.Array) else pa.array(values)
    return pa.table(columns)


def _record(**fields: Any) -> dict[str, Any]:
    return {"type": "record", "fields": fields}


def _mixture(k: int, **fields: Any) -> dict[str, Any]:
    return {"type": "mixture", "k": k, "component": _record(**fields)}


SEGMENTS = _record(amount="gaussian", channel="categorical", n_items="poisson")


def _model() -> MixtureDistribution:
    """A fitted-looking model of SEGMENTS (vocabulary: app, store, web)."""

    def segment(mu: float, p_web: float, lam: float) -> RecordDistribution:
        channel = CategoricalDistribution({"app": 0.5 - p_web / 2, "store": 0.5 - p_web / 2, "web": p_web})
        fields = {
            "amount": GaussianDistribution(mu, 100.0),
            "channel": channel,
            "n_items": PoissonDistribution(lam),
        }
        return RecordDistribution(fields)

    return MixtureDistribution([segment(15.0, 0.6, 1.0), segment(70.0, 0.2, 6.0)], [0.5, 0.5])


def _newer_model() -> dict[str, Any]:
    payload = model_to_dict(_model())
    payload.update(format_version=MODEL_FORMAT_VERSION + 1, mixle_spark_version="99.0.0")
    return payload


# -- one case of the matrix ----------------------------------------------------------------------


@dataclass
class Context:
    """What a case acts on: the session and the files under the test's temporary directory."""

    spark: Any
    input: str
    spec: str
    model: str
    out: Path

    def df(self) -> Any:
        return read_table(self.spark, self.input)


@dataclass(frozen=True)
class Case:
    """``act`` raises (API cases) or returns a job's argv (``job`` set); ``expect`` is the exception
    type or the exit code; ``message`` is a regex for the exception text or the job's error line
    (after ``PROG: error: ``), ``<tmp>`` standing for the test's directory."""

    act: Callable[[Context], Any]
    expect: type[BaseException] | int
    message: str
    job: str | None = None
    table: pa.Table | None = field(default_factory=_table)
    spec: Any = None
    model: Any = None
    existing_output: bool = False
    csv: str | None = None  # the input as CSV text instead of the Parquet table
    raw: bytes | None = None  # the input.parquet file's bytes instead of the table


def _fit(spec: dict[str, Any], **options: Any) -> Callable[[Context], Any]:
    """The Python API: EM on the input read as a Spark DataFrame."""
    return lambda ctx: optimize(ctx.df(), estimator_from_spec(spec), max_its=2, **options)


def _em_fit(*extra: str) -> Callable[[Context], list[str]]:
    return lambda ctx: [
        *("--input", ctx.input, "--model", ctx.spec, "--output", str(ctx.out), "--quiet", *extra)
    ]


def _em_score(ctx: Context) -> list[str]:
    return ["--input", ctx.input, "--model", ctx.model, "--output", str(ctx.out)]


def _differing_lengths(ctx: Context) -> Any:
    """Length-2 vectors in one partition, length-3 ones in the other (each consistent alone)."""
    df = ctx.df()
    parts = df.filter(F.size("v") == 2).union(df.filter(F.size("v") == 3))
    # resident=False keeps the input's partitioning (the default lays the rows out for the slots,
    # mixing the lengths inside a partition, which the batch check reports instead)
    return optimize(parts, estimator_from_spec(_record(v="multivariate_gaussian")), max_its=2, resident=False)


UNSEEN = (
    r"column 'channel': label 'phone' is not in the model's vocabulary of 3 labels "
    r"\('app', 'store', 'web'\) \(row 5 of partition 0\)"
)
NEWER = (
    rf"model was written with format version {MODEL_FORMAT_VERSION + 1} \(mixle_spark 99\.0\.0\); "
    rf"this mixle_spark {re.escape(__version__)} reads versions up to {MODEL_FORMAT_VERSION}: "
    r"upgrade mixle_spark to load it"
)
DEEP_SPEC = '{"type": "optional", "estimator": ' * 1000 + '"gaussian"' + "}" * 1000
TOO_DEEP = "nests objects and arrays more than 100 deep; the limit is 100"
FAMILIES = ", ".join(sorted(registered_estimators()))  # bernoulli, binomial, ..., gaussian, ...
CASES = {
    # 1. a string column where Gaussian needs numbers: the cell that does not read, and its row
    "string-in-gaussian-column": Case(
        _fit(_record(amount="gaussian")),
        DataTypeError,
        r"^column 'amount': expected a finite number for GaussianEstimator \(Arrow type string\), "
        r"got string '12\.5x' \(row 3 of 6\)$",
        table=_table(amount=["12.5", "80.0", "12.5x", "60.0", "20.0", "75.0"]),
    ),
    # ... and when every cell reads as a number, the column's type is still wrong: refused as such
    "numbers-as-text-in-gaussian-column": Case(
        _fit(_record(amount="gaussian")),
        SchemaError,
        r"^column 'amount': expected a numeric column for GaussianEstimator, got Arrow type string$",
        table=_table(amount=["12.5", "80.0", "15.0", "60.0", "20.0", "75.0"]),
    ),
    # 2. an array column for a scalar field
    "array-column-for-categorical": Case(
        _fit(_record(channel="categorical")),
        SchemaError,
        r"^column 'channel': expected a string, large_string, integer, boolean or dictionary column "
        r"for CategoricalEstimator, got Arrow type list<element: string>$",
        table=_table(channel=[["web"], ["app"], ["store"], ["web"], ["app"], ["store"]]),
    ),
    "array-column-for-integer-categorical-em_fit": Case(
        _em_fit(),
        2,
        r"column 'n_items': expected an integer column \(or floating with integral values\) for "
        r"IntegerCategoricalEstimator, got Arrow type list<element: int64>; fix: one label per row is "
        r"read; multinomial reads a list of labels as a bag, markov_chain as a sequence",
        job="em_fit",
        table=_table(n_items=[[1], [7], [2], [5], [0], [6]]),
        spec=_record(n_items="integer_categorical"),
    ),
    # 3. a null where the model has no Optional
    "null-in-categorical-without-optional": Case(
        _fit(_record(amount="gaussian", channel="categorical")),
        DataValueError,
        r"^column 'channel': expected a label for CategoricalEstimator \(a missing value needs "
        r"OptionalEstimator\), got null \(row 4 of 6\)$",
        table=_table(channel=["web", "app", "store", None, "app", "store"]),
    ),
    "null-in-poisson-without-optional-em_fit": Case(
        _em_fit(),
        2,
        r"column 'n_items': expected a non-negative integer count for PoissonEstimator \(a missing "
        r"value needs OptionalEstimator\), got null \(2 bad rows, first at row 2 of 6\)",
        job="em_fit",
        table=_table(n_items=pa.array([1, None, 2, None, 0, 6], pa.int64())),
        spec=SEGMENTS,
    ),
    # 4. NaN in a Gaussian column
    "nan-in-gaussian": Case(
        _fit(SEGMENTS),
        DataValueError,
        r"^column 'amount': expected a finite number for GaussianEstimator, got nan \(row 4 of 6\)$",
        table=_table(amount=[12.5, 80.0, 15.0, NAN, 20.0, 75.0]),
    ),
    # 5. +inf in Exponential / Gamma columns
    "inf-in-exponential": Case(
        _fit(_record(amount="exponential")),
        DataValueError,
        r"^column 'amount': expected a non-negative finite number for ExponentialEstimator, "
        r"got inf \(row 2 of 6\)$",
        table=_table(amount=[12.5, INF, 15.0, 60.0, 20.0, 75.0]),
    ),
    "inf-in-gamma-em_fit": Case(
        _em_fit(),
        2,
        r"column 'amount': expected a positive finite number for GammaEstimator, got inf \(row 6 of 6\)",
        job="em_fit",
        table=_table(amount=[12.5, 80.0, 15.0, 60.0, 20.0, INF]),
        spec=_mixture(2, amount="gamma"),
    ),
    # 6. a negative count
    "negative-poisson-count": Case(
        _fit(SEGMENTS),
        DataValueError,
        r"^column 'n_items': expected a non-negative integer count for PoissonEstimator, "
        r"got -3\.0 \(row 3 of 6\)$",
        table=_table(n_items=[1, 7, -3, 5, 0, 6]),
    ),
    # 7. fractional counts
    "fractional-poisson-count": Case(
        _fit(SEGMENTS),
        DataValueError,
        r"^column 'n_items': expected a non-negative integer count for PoissonEstimator, "
        r"got 2\.5 \(row 4 of 6\)$",
        table=_table(n_items=[1.0, 7.0, 2.0, 2.5, 0.0, 6.0]),
    ),
    "fractional-binomial-count-em_fit": Case(
        _em_fit(),
        2,
        r"column 'n_items': expected an integer count in \[0, 10\] for BinomialEstimator, "
        r"got 0\.5 \(2 bad rows, first at row 5 of 6\)",
        job="em_fit",
        table=_table(n_items=[1.0, 7.0, 2.0, 5.0, 0.5, 6.5]),
        spec=_record(n_items={"type": "binomial", "n": 10}),
    ),
    # 9. an empty table
    "empty-table": Case(
        _fit(SEGMENTS),
        EmptyDataError,
        r"^no rows to encode: the DataFrame is empty$",
        table=_table().slice(0, 0),
    ),
    # 10. more components than rows
    "more-components-than-rows": Case(
        _fit(_mixture(8, amount="gaussian")),
        TooFewRowsError,
        r"^MixtureEstimator needs at least 8 rows \(for example one per mixture component\), "
        r"but the data has 6$",
    ),
    "more-components-than-rows-em_fit": Case(
        _em_fit(),
        2,
        r"MixtureEstimator needs at least 7 rows \(for example one per mixture component\), "
        r"but the data has 6",
        job="em_fit",
        spec={"estimator": _mixture(7, amount="gaussian"), "fit": {"max_its": 3}},
    ),
    # 11. a label the model has not seen: scoring fails (lazily, in the Spark task), no -inf score
    "unseen-label-at-scoring": Case(
        lambda ctx: score(load_model(ctx.model), ctx.df()).collect(),
        PythonException,
        r"mixle_spark\.errors\.UnseenLabelError: " + UNSEEN,
        table=_table(channel=["web", "app", "store", "web", "phone", "store"]),
        model=_model(),
    ),
    "unseen-label-at-scoring-em_score": Case(  # the job names the row of the table
        _em_score,
        2,
        UNSEEN.replace("of partition 0", "of 6"),
        job="em_score",
        table=_table(channel=["web", "app", "store", "web", "phone", "store"]),
        model=_model(),
    ),
    # 12. malformed specs
    "spec-unknown-family-em_fit": Case(
        _em_fit(),
        2,
        rf"unknown estimator family 'gausian' \(did you mean 'gaussian'\?\); expected one of: {FAMILIES}",
        job="em_fit",
        spec=_record(amount="gausian"),
    ),
    "spec-unknown-key-em_fit": Case(
        _em_fit(),
        2,
        r"unknown key 'sigma' in gaussian spec; expected one of: keys, min_var, name, pseudo_count, "
        r"scale, suff_stat, type",
        job="em_fit",
        spec=_record(amount={"type": "gaussian", "sigma": 1.0}),
    ),
    "spec-not-json-em_fit": Case(
        _em_fit(),
        2,
        rf"model spec {TMP}/spec\.json is not valid JSON: Expecting property name enclosed in double "
        r"quotes: line 1 column 2 \(char 1\)",
        job="em_fit",
        spec="{'type': 'gaussian'}",
    ),
    # 13. a model from a newer mixle_spark
    "model-newer-format-version": Case(
        lambda ctx: load_model(ctx.model), ModelFormatError, f"^{NEWER}$", model=_newer_model()
    ),
    "model-newer-format-version-em_score": Case(_em_score, 2, NEWER, job="em_score", model=_newer_model()),
    # 14. an input that does not exist
    "missing-input-em_fit": Case(
        _em_fit(),
        2,
        rf"no such file or directory: '{TMP}/input\.parquet'",
        job="em_fit",
        table=None,
        spec=SEGMENTS,
    ),
    "missing-input-em_score": Case(
        _em_score,
        2,
        rf"no such file or directory: '{TMP}/input\.parquet'",
        job="em_score",
        table=None,
        model=_model(),
    ),
    # 14b. a CSV row with more, or fewer, fields than the header: refused, naming the file and line
    "csv-row-with-an-extra-field-em_fit": Case(
        _em_fit(),
        2,
        rf"malformed CSV row in file://{TMP}/input\.csv \(line 3\): '80\.0,app,7,x' has not the header's "
        r"number of fields",
        job="em_fit",
        csv="amount,channel,n_items\n12.5,web,1\n80.0,app,7,x\n15.0,store,2\n",
        spec=_record(amount="gaussian", channel="categorical", n_items="poisson"),
    ),
    "csv-short-row-em_fit": Case(
        _em_fit(),
        2,
        rf"malformed CSV row in file://{TMP}/input\.csv \(line 4\): '15\.0,store' has not the header's "
        r"number of fields",
        job="em_fit",
        csv="amount,channel,n_items\n12.5,web,1\n80.0,app,7\n15.0,store\n60.0,web,5\n",
        spec=_record(amount="gaussian", channel="categorical", n_items="poisson"),
    ),
    # 15. an output that exists, without --overwrite / --mode overwrite: kept byte for byte
    "existing-output-em_fit": Case(
        _em_fit(),
        2,
        rf"output {TMP}/out exists; pass --overwrite to replace it",
        job="em_fit",
        spec=SEGMENTS,
        existing_output=True,
    ),
    "existing-output-em_score": Case(
        _em_score,
        2,
        rf"output {TMP}/out exists; pass --mode overwrite to replace it",
        job="em_score",
        model=_model(),
        existing_output=True,
    ),
    # 16. a negative weight
    "negative-weight": Case(
        _fit(SEGMENTS, weights="w"),
        DataValueError,
        r"^column 'w': weights must be finite and non-negative, got -0\.5 \(row 3 of 6\)$",
        table=_table(w=[1.0, 2.0, -0.5, 0.5, 1.0, 1.0]),
    ),
    "null-and-nan-weights": Case(
        _fit(SEGMENTS, weights="w"),
        DataValueError,
        r"^column 'w': weights must be finite and non-negative, got null "
        r"\(2 bad rows, first at row 2 of 6\)$",
        table=_table(w=[1.0, None, 2.0, float("nan"), 1.0, 1.0]),
    ),
    # 17. a vector of the wrong length
    "mvn-wrong-length": Case(
        _fit(_record(v={"type": "multivariate_gaussian", "dim": 2})),
        DataValueError,
        r"^column 'v': expected a vector of finite numbers for MultivariateGaussianEstimator: "
        r"expected length 2, got length 3 \(row 3 of 6\)$",
        table=_table(v=[[0.1, 0.2], [1.0, 1.5], [0.3, 0.1, 0.7], [1.2, 1.1], [0.2, 0.4], [0.9, 1.3]]),
    ),
    "mvn-wrong-length-em_fit": Case(
        _em_fit(),
        2,
        r"column 'v': expected a vector of finite numbers for MultivariateGaussianEstimator: "
        r"expected length 2( \(the most common length\))?, got length 1 \(row 5 of 6\)",
        job="em_fit",
        table=_table(v=[[0.1, 0.2], [1.0, 1.5], [0.3, 0.1], [1.2, 1.1], [0.2], [0.9, 1.3]]),
        spec=_record(v="multivariate_gaussian"),
    ),
    "mvn-lengths-differ-between-partitions": Case(
        _differing_lengths,
        DataValueError,
        r"^column 'v': expected a vector of finite numbers for MultivariateGaussianEstimator: "
        r"vectors of lengths (2 and 3|3 and 2) in one column$",
        table=_table(
            v=[[0.1, 0.2], [1.0, 1.5], [0.3, 0.1], [1.2, 1.1, 0.0], [0.2, 0.4, 0.0], [0.9, 1.3, 0.0]]
        ),
    ),
    # 17b. a table of 0 bytes (a failed upstream write): Spark's reader fails; the job names the file
    "zero-byte-parquet-em_fit": Case(
        _em_fit(),
        2,
        rf"cannot read input file file:{TMP}/input\.parquet: is not a Parquet file \(length is too low: 0\)",
        job="em_fit",
        spec=SEGMENTS,
        raw=b"",
    ),
    "zero-byte-parquet-em_score": Case(
        _em_score,
        2,
        rf"cannot read input file file:{TMP}/input\.parquet: is not a Parquet file \(length is too low: 0\)",
        job="em_score",
        model=_model(),
        raw=b"",
    ),
    # the data errors above through the jobs: the cell, the value and the row of the table
    "string-in-gaussian-column-em_fit": Case(
        _em_fit(),
        2,
        r"column 'amount': expected a finite number for GaussianEstimator \(Arrow type string\), "
        r"got string '12\.5x' \(row 3 of 6\)",
        job="em_fit",
        table=_table(amount=["12.5", "80.0", "12.5x", "60.0", "20.0", "75.0"]),
        spec=SEGMENTS,
    ),
    "string-in-gaussian-column-em_score": Case(
        _em_score,
        2,
        r"column 'amount': expected a finite number for GaussianEstimator \(Arrow type string\), "
        r"got string '12\.5x' \(row 3 of 6\)",
        job="em_score",
        table=_table(amount=["12.5", "80.0", "12.5x", "60.0", "20.0", "75.0"]),
        model=_model(),
    ),
    "nan-in-gaussian-em_fit": Case(
        _em_fit(),
        2,
        r"column 'amount': expected a finite number for GaussianEstimator, got nan \(row 4 of 6\)",
        job="em_fit",
        table=_table(amount=[12.5, 80.0, 15.0, NAN, 20.0, 75.0]),
        spec=SEGMENTS,
    ),
    "nan-in-gaussian-em_score": Case(
        _em_score,
        2,
        r"column 'amount': expected a finite number for GaussianEstimator, got nan \(row 4 of 6\)",
        job="em_score",
        table=_table(amount=[12.5, 80.0, 15.0, NAN, 20.0, 75.0]),
        model=_model(),
    ),
    "null-in-categorical-em_score": Case(
        _em_score,
        2,
        r"column 'channel': expected a label for CategoricalEstimator \(a missing value needs "
        r"OptionalEstimator\), got null \(row 4 of 6\)",
        job="em_score",
        table=_table(channel=["web", "app", "store", None, "app", "store"]),
        model=_model(),
    ),
    "negative-poisson-count-em_score": Case(
        _em_score,
        2,
        r"column 'n_items': expected a non-negative integer count for PoissonEstimator, "
        r"got -3\.0 \(row 3 of 6\); fix: filter the rows where n_items < 0, or use gaussian, which reads "
        r"any real number",
        job="em_score",
        table=_table(n_items=[1, 7, -3, 5, 0, 6]),
        model=_model(),
    ),
    "empty-table-em_fit": Case(
        _em_fit(),
        2,
        r"no rows to encode: the DataFrame is empty",
        job="em_fit",
        table=_table().slice(0, 0),
        spec=SEGMENTS,
    ),
    "csv-row-with-an-extra-field-em_score": Case(
        _em_score,
        2,
        rf"malformed CSV row in file://{TMP}/input\.csv \(line 3\): '80\.0,app,7,x' has not the header's "
        r"number of fields",
        job="em_score",
        csv="amount,channel,n_items\n12.5,web,1\n80.0,app,7,x\n15.0,store,2\n",
        model=_model(),
    ),
    # the model and the table do not fit together, or the model file is not one
    "numbers-as-text-in-gaussian-column-em_score": Case(  # every cell reads: the type is wrong
        _em_score,
        2,
        r"column 'amount': expected a numeric column for GaussianEstimator, got Arrow type string; "
        r"fix: CAST\(amount AS DOUBLE\), or categorical if it holds labels",
        job="em_score",
        table=_table(amount=["12.5", "80.0", "15.0", "60.0", "20.0", "75.0"]),
        model=_model(),
    ),
    "model-column-missing-em_score": Case(
        _em_score,
        2,
        r"column 'n_items' not found; the DataFrame has columns \['amount', 'channel'\]",
        job="em_score",
        table=_table().select(["amount", "channel"]),
        model=_model(),
    ),
    "output-column-exists-em_score": Case(
        _em_score,
        2,
        r"column 'log_likelihood' already exists; choose another output column name",
        job="em_score",
        table=_table().append_column("log_likelihood", pa.array([0.0] * 6)),
        model=_model(),
    ),
    "model-not-json-em_score": Case(
        _em_score,
        2,
        rf"model {TMP}/model\.json is not valid JSON: Expecting property name enclosed in double quotes: "
        r"line 1 column 2 \(char 1\)",
        job="em_score",
        model="{'type': 'mixture'",
    ),
    "missing-model-em_score": Case(
        _em_score, 2, rf"model file not found: {TMP}/model\.json", job="em_score", model=None
    ),
    "missing-spec-em_fit": Case(
        _em_fit(), 2, rf"model spec file not found: {TMP}/spec\.json", job="em_fit", spec=None
    ),
    # 19. bounds before allocation: a spec or model too large or too deep
    "spec-huge-k-em_fit": Case(
        _em_fit(),
        2,
        r"mixture spec: k = 1,000,000,000 is more than the 100,000 components allowed",
        job="em_fit",
        spec=_mixture(10**9, amount="gaussian"),
    ),
    "spec-nested-too-deep-em_fit": Case(
        _em_fit(),
        2,
        rf"model spec {TMP}/spec\.json {TOO_DEEP}",
        job="em_fit",
        spec=DEEP_SPEC,
    ),
    "model-nested-too-deep-em_score": Case(
        _em_score,
        2,
        rf"model {TMP}/model\.json {TOO_DEEP}",
        job="em_score",
        model='{"format": "mixle_spark.model", "format_version": 1, "model": ' + DEEP_SPEC + "}",
    ),
    # 18. a record spec naming a column the table does not have
    "record-spec-missing-column": Case(
        _fit(_record(amount="gaussian", loyalty="gaussian")),
        SchemaError,
        rf"^column 'loyalty' not found; the DataFrame has columns {re.escape(str(COLUMNS))}$",
    ),
    "record-spec-missing-struct-field-em_fit": Case(
        _em_fit(),
        2,
        r"column 'customer\.loyalty': not found; available fields: age, channel",
        job="em_fit",
        table=pa.table(
            {"customer": pa.array([{"age": 30.0 + i, "channel": c} for i, c in enumerate("abcabc")])}
        ),
        spec=_record(customer=_record(age="gaussian", loyalty="gaussian")),
    ),
    # 20. a column name given twice: refused naming it before any Spark job (a repeated name the
    # model does not read is harmless to a fit, see test_a_repeated_column_the_fit_does_not_read_...)
    "repeated-column-read-by-the-model": Case(
        lambda ctx: optimize(
            ctx.df().toDF("amount", "channel", "amount", "w", "v"),
            estimator_from_spec(_record(amount="gaussian")),
            max_its=2,
        ),
        SchemaError,
        r"^column 'amount' appears 2 times in the data \(its columns: \['amount', 'channel', 'amount', "
        r"'w', 'v'\]\); the columns read are found by name, so each must appear once: rename or drop the "
        r"copies$",
    ),
    "repeated-weight-column": Case(
        lambda ctx: optimize(
            ctx.df().toDF("amount", "channel", "w", "w", "v"),
            estimator_from_spec(_record(amount="gaussian")),
            max_its=2,
            weights="w",
        ),
        SchemaError,
        r"^column 'w' appears 2 times in the data \(its columns: \['amount', 'channel', 'w', 'w', 'v'\]\); ",
    ),
    "repeated-column-scored": Case(
        lambda ctx: score(_model(), ctx.df().toDF("amount", "channel", "n_items", "w", "w")),
        SchemaError,
        r"^column 'w' appears 2 times in the data \(its columns: \['amount', 'channel', 'n_items', 'w', "
        r"'w'\]\); the scores are added to every input column, so each name must appear once: rename or "
        r"drop the copies$",
    ),
    "repeated-column-parquet-em_fit": Case(
        _em_fit(),
        2,
        rf"column 'amount' appears more than once in input {TMP}/input\.parquet; its columns are read "
        r"by name, so each must appear once: rename the copies",
        job="em_fit",
        table=pa.Table.from_arrays(
            [BASE["amount"], BASE["channel"], BASE["amount"]], ["amount", "channel", "amount"]
        ),
        spec=SEGMENTS,
    ),
    "repeated-column-parquet-em_score": Case(
        _em_score,
        2,
        rf"column 'w' appears more than once in input {TMP}/input\.parquet; its columns are read by "
        r"name, so each must appear once: rename the copies",
        job="em_score",
        table=pa.Table.from_arrays([*BASE.values(), BASE["w"]], [*BASE, "w"]),
        model=_model(),
    ),
    "repeated-column-csv-em_fit": Case(
        _em_fit(),
        2,
        r"column 'amount' not found; the DataFrame has 'amount0', 'amount2' instead: the CSV header "
        r"names 'amount' 2 times \(Spark's CSV reader adds each copy's position to it\); rename the "
        r"copies in the header",
        job="em_fit",
        csv="amount,channel,amount\n12.5,web,1.0\n80.0,app,2.0\n",
        spec=_record(amount="gaussian"),
    ),
}


def _job(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_job_{name}", ROOT / "jobs" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes); directories as empty entries."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(root.rglob("*"))
    }


def _cached_rdds(spark: Any) -> set[int]:
    return {int(i) for i in spark.sparkContext._jsc.getPersistentRDDs().keySet()}


def _prepare(case: Case, spark: Any, tmp: Path) -> Context:
    source = tmp / ("input.csv" if case.csv is not None else "input.parquet")
    ctx = Context(spark, str(source), str(tmp / "spec.json"), str(tmp / "model.json"), tmp / "out")
    if case.csv is not None:
        source.write_text(case.csv)
    elif case.raw is not None:
        source.write_bytes(case.raw)
    elif case.table is not None:
        pq.write_table(case.table, ctx.input)
    if case.spec is not None:
        Path(ctx.spec).write_text(case.spec if isinstance(case.spec, str) else json.dumps(case.spec))
    if isinstance(case.model, str):
        Path(ctx.model).write_text(case.model)
    elif isinstance(case.model, dict):
        Path(ctx.model).write_text(json.dumps(case.model))
    elif case.model is not None:
        save_model(case.model, ctx.model)
    if case.existing_output and case.job == "em_score":
        write_table(spark.createDataFrame([(1.0, "web")], "amount double, channel string"), ctx.out)
    elif case.existing_output:
        ctx.out.mkdir()
        (ctx.out / "model.json").write_text('{"kept": true}\n')
        (ctx.out / "summary.json").write_text('{"format": "mixle_spark.fit_summary", "rows": 6}\n')
    return ctx


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_bad_input_is_refused_and_nothing_is_written(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: Case
) -> None:
    ctx = _prepare(case, spark, tmp_path)
    files, cached = _snapshot(tmp_path), _cached_rdds(spark)
    message = case.message.replace(TMP, re.escape(str(tmp_path)))
    if case.job is None:
        assert isinstance(case.expect, type)
        with pytest.raises(case.expect, match=message):
            case.act(ctx)
    else:
        capsys.readouterr()
        try:
            code = _job(case.job).main(case.act(ctx))
        except SystemExit as exited:  # refused with the arguments (a missing local input), before Spark
            code = exited.code
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith(f"{case.job}: error:")]
        assert code == case.expect, err[-2000:]
        assert len(errors) == 1 and re.fullmatch(f"{case.job}: error: {message}", errors[0]), errors
        assert err.strip().splitlines() == errors  # the failure is the one line on stderr
    assert _snapshot(tmp_path) == files  # the input, spec, model and any old output: byte for byte
    assert ctx.out.exists() == case.existing_output
    assert _cached_rdds(spark) <= cached  # a failed encoding releases what it cached


# -- 8. empty partitions are fine ----------------------------------------------------------------


def _numbers(value: Any, path: str = "") -> dict[str, Any]:
    """A model's JSON flattened to ``{path: leaf}`` (dicts by key, lists by position)."""
    if isinstance(value, dict):
        return {k: v for key in sorted(value) for k, v in _numbers(value[key], f"{path}.{key}").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in _numbers(item, f"{path}[{i}]").items()}
    return {path: value}


def _assert_same_model(got: Any, want: Any) -> None:
    a, b = _numbers(model_to_dict(got)["model"]), _numbers(model_to_dict(want)["model"])
    assert a.keys() == b.keys()
    floats = [k for k, v in b.items() if isinstance(v, float)]
    assert floats, b
    np.testing.assert_allclose([a[k] for k in floats], [b[k] for k in floats], rtol=1e-9, atol=0)
    assert {k: a[k] for k in a if k not in floats} == {k: b[k] for k in b if k not in floats}


def test_empty_partitions_fit_like_the_same_rows_without_them(spark: Any, tmp_path: Path) -> None:
    table = _table().slice(0, 4).select(["amount", "channel", "n_items"])
    path = tmp_path / "input.parquet"
    pq.write_table(table, path)
    before = _snapshot(tmp_path)
    df = read_table(spark, str(path)).repartition(6)
    sizes = df.rdd.glom().map(len).collect()
    assert len(sizes) == 6 and sorted(sizes)[:2] == [0, 0] and sum(sizes) == 4  # empty partitions

    estimator = estimator_from_spec(_mixture(2, **SEGMENTS["fields"]))
    options = {"prev_estimate": _model(), "max_its": 2, "delta": None}
    on_spark = optimize(df, estimator, **options)
    local = optimize(table, estimator, backend="local", **options)

    assert on_spark.fit_result.history[-1].nobs == 4 and on_spark.fit_result.n_iter == 2
    assert on_spark.fit_result.log_likelihood == pytest.approx(local.fit_result.log_likelihood, rel=1e-9)
    assert math.isfinite(on_spark.fit_result.log_likelihood)
    _assert_same_model(on_spark, local)
    assert _snapshot(tmp_path) == before


def test_em_fit_with_empty_partitions_writes_the_local_backends_model(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, spec = tmp_path / "input.parquet", tmp_path / "spec.json"
    pq.write_table(_table().slice(0, 4).select(["amount", "channel", "n_items"]), path)
    fit = {"max_its": 2, "delta": 0, "seed": 3, "trials": 1}
    spec.write_text(json.dumps({"estimator": _mixture(2, **SEGMENTS["fields"]), "fit": fit}))
    job = _job("em_fit")
    common = ["--input", str(path), "--model", str(spec), "--quiet"]
    # 4 rows in 5 partitions: at least one is empty (more partitions cost ~1 s per iteration each)
    assert job.main([*common, "--output", str(tmp_path / "spark"), "--partitions", "5"]) == 0
    assert job.main([*common, "--output", str(tmp_path / "local"), "--backend", "local"]) == 0
    assert "error" not in capsys.readouterr().err

    _assert_same_model(
        load_model(tmp_path / "spark" / "model.json"), load_model(tmp_path / "local" / "model.json")
    )
    on_spark, local = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("spark", "local"))
    assert on_spark["rows"] == local["rows"] == 4
    assert on_spark["iterations"] == local["iterations"] >= 1
    assert on_spark["log_likelihood"] == pytest.approx(local["log_likelihood"], rel=1e-9)


def test_a_repeated_column_the_fit_does_not_read_is_harmless(spark: Any) -> None:
    table = _table().select(["amount", "channel", "n_items"])
    df = spark.createDataFrame(table.to_pandas()).toDF("amount", "x", "x")
    estimator = estimator_from_spec(_mixture(2, amount="gaussian"))
    options = {"prev_estimate": _model_of_amounts(), "max_its": 2, "delta": None}
    on_spark = optimize(df, estimator, **options)
    local = optimize(table.select(["amount"]), estimator, backend="local", **options)
    assert on_spark.fit_result.history[-1].nobs == 6
    _assert_same_model(on_spark, local)


def _model_of_amounts() -> MixtureDistribution:
    parts = [RecordDistribution({"amount": GaussianDistribution(mu, 100.0)}) for mu in (15.0, 70.0)]
    return MixtureDistribution(parts, [0.5, 0.5])


def test_a_scoring_error_names_the_partition_and_its_row(spark: Any) -> None:
    """Scoring is lazy over any DataFrame (no global row ids), so an error names the partition and
    the row within it rather than a row of one Arrow batch."""
    from pyspark.errors import PythonException

    good = spark.createDataFrame(_table().to_pandas()).repartition(1)
    bad = spark.createDataFrame(_table(channel=["web", "app", "store", "web", "phone", "store"]).to_pandas())
    df = good.union(bad.repartition(1))  # partition 0: six good rows; partition 1: 'phone' at row 5
    assert df.rdd.getNumPartitions() == 2
    with pytest.raises(PythonException, match=r"label 'phone' .* \(row 5 of partition 1\)"):
        score(_model(), df).collect()


# -- 11b. --on-unseen null: rows with an unseen label scored null, counted, the others as always --


def test_em_score_on_unseen_null_writes_every_row_and_counts_the_unseen_ones(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _table(channel=["web", "phone", "store", "web", "tablet", "store"])
    ctx = _prepare(Case(_em_score, 0, "", job="em_score", table=table, model=_model()), spark, tmp_path)
    capsys.readouterr()
    assert _job("em_score").main([*_em_score(ctx), "--on-unseen", "null"]) == 0
    out, err = capsys.readouterr()
    assert [line for line in err.splitlines() if not line.startswith("em_score: timings: ")] == []
    assert out.splitlines()[0] == (
        f"wrote 6 rows to the Delta table {ctx.out} (amount, channel, n_items, w, v, log_likelihood, "
        "prediction, probability); 2 of them hold a label the model has not seen: scored null"
    )
    rows = {r["amount"]: r for r in read_table(spark, str(ctx.out), format="delta").collect()}
    assert len(rows) == 6
    for amount in (80.0, 20.0):  # 'phone' and 'tablet'
        row = rows[amount]
        assert (row["log_likelihood"], row["prediction"], row["probability"]) == (None, None, None)
    model, seen = _model(), table.filter(pa.array([True, False, True, True, False, True]))
    enc = model.encoder().from_arrow(seen.select(["amount", "channel", "n_items"]))
    want_ll, want_post = model.seq_log_density(enc), model.seq_posterior(enc)
    got = [rows[a] for a in seen.column("amount").to_pylist()]
    np.testing.assert_allclose([r["log_likelihood"] for r in got], want_ll, rtol=1e-12)
    np.testing.assert_allclose([r["probability"] for r in got], want_post, rtol=1e-12)
    assert [r["prediction"] for r in got] == want_post.argmax(axis=1).tolist()


def test_score_on_unseen(spark: Any) -> None:
    """The API: nullable output columns with "null", the schema unchanged otherwise; a bad value named;
    a Markov chain's unseen label is an error by default too (its model alone scores it -inf)."""
    df = spark.createDataFrame(_table(channel=["web", "app", "store", "web", "phone", "store"]).to_pandas())
    nulls = score(_model(), df, on_unseen="null")
    assert [nulls.schema[c].nullable for c in ("log_likelihood", "prediction", "probability")] == [True] * 3
    assert nulls.filter(F.col("log_likelihood").isNull()).count() == 1
    strict = score(_model(), df.filter(F.col("channel") != "phone"))
    assert [strict.schema[c].nullable for c in ("log_likelihood", "prediction", "probability")] == [False] * 3
    with pytest.raises(ValueError, match=r"^on_unseen must be 'error' or 'null', got 'drop'$"):
        score(_model(), df, on_unseen="drop")

    from mixle_spark.stats.markov_chain import MarkovChainDistribution

    chain = MarkovChainDistribution({"a": 0.5, "b": 0.5}, {"a": {"a": 0.5, "b": 0.5}, "b": {"b": 1.0}})
    paths = spark.createDataFrame([(["a", "b"],), (["a", "c", "b"],), (["b"],)], "path array<string>")
    paths = paths.coalesce(1)
    with pytest.raises(
        PythonException,
        match=r"UnseenLabelError: column 'path': label 'c' is not in the model's vocabulary of 2 labels "
        r"\('a', 'b'\) \(row 2 of partition 0\)",
    ):
        score(chain, paths).collect()
    lls = [r["log_likelihood"] for r in score(chain, paths, on_unseen="null").collect()]
    assert (
        lls[1] is None
        and lls[0] == pytest.approx(2 * math.log(0.5))
        and lls[2] == pytest.approx(math.log(0.5))
    )
