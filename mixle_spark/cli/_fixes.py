"""What a job's error line adds to say the fix: for a column whose type the model's family does not
read, the cast (``CAST(sex AS STRING)``) and the families that read that type; for a value outside a
family's support, what to do about it (filter or shift the rows, or the family that reads them).

The messages are the encoders' own (``column 'sex': expected ... for CategoricalEstimator, got Arrow
type double``; ``column 'duration_s': expected a positive finite number for LogGaussianEstimator, got
0.0 (...)``), raised in Spark or by the early schema check (:mod:`mixle_spark.cli._early`): the fix
is appended after them, so every message keeps its text as a prefix. Only what the package offers
today is suggested.
"""

from __future__ import annotations

import re

__all__ = ["fix_for", "type_fix"]

_TYPE_MISMATCH = re.compile(
    r"^column '(?P<column>[^']+)': expected .* for (?P<family>\w+Estimator), got Arrow type (?P<type>.+)$"
)
_BAD_VALUE = re.compile(
    r"^column '(?P<column>[^']+)': expected (?P<expected>.+) for (?P<family>\w+Estimator)"
    r"(?: \(Arrow type [^)]*\))?, got (?P<value>-?[0-9][^ ]*)(?: \(.*\))?$"
)

_OFF_SPHERE = re.compile(
    r"^column '(?P<column>[^']+)': expected a unit vector .* for VonMisesFisherEstimator; the row's norm is "
)

_LABELS = ("CategoricalEstimator",)
_INTEGER_LABELS = ("IntegerCategoricalEstimator",)
_POSITIVE = (
    "LogGaussianEstimator",
    "GammaEstimator",
    "RayleighEstimator",
    "InverseGaussianEstimator",
    "ParetoEstimator",
    "InverseGammaEstimator",
    "WeibullEstimator",
    "NakagamiEstimator",
)
_NON_NEGATIVE = ("ExponentialEstimator", "HalfNormalEstimator", "GeneralizedParetoEstimator")
_COUNTS = ("PoissonEstimator", "NegativeBinomialEstimator", "BetaBinomialEstimator")
_POSITIVE_COUNTS = ("LogSeriesEstimator",)
_INTEGERS = ("SkellamEstimator",)
_SHARES = ("DirichletEstimator",)
_COUNT_VECTORS = ("DirichletMultinomialEstimator",)
_VECTORS = ("MultivariateGaussianEstimator", "DiagonalGaussianEstimator", *_SHARES, *_COUNT_VECTORS)
_NUMBERS = "gaussian for any real number, poisson for counts, bernoulli for 0/1"


def _quoted(column: str) -> str:
    """The column as Spark SQL names it (a dotted path is a struct field, each part back-quoted when
    it is not a plain name)."""
    return ".".join(p if re.fullmatch(r"[A-Za-z_]\w*", p) else f"`{p}`" for p in column.split("."))


def _kind(arrow_type: str) -> str:
    """``text``, ``float``, ``integer``, ``boolean``, ``time``, ``list`` or ``other`` for an Arrow
    type as a message shows it (``double``, ``list<element: string>``, ``timestamp[us, tz=UTC]``)."""
    if arrow_type.startswith(("list", "large_list", "fixed_size_list")):
        return "list"
    if arrow_type in ("string", "large_string", "utf8", "large_utf8"):
        return "text"
    if arrow_type in ("double", "float", "halffloat") or arrow_type.startswith("decimal"):
        return "float"
    if re.fullmatch(r"u?int(8|16|32|64)", arrow_type):
        return "integer"
    if arrow_type in ("bool", "boolean"):
        return "boolean"
    if arrow_type.startswith(("timestamp", "date", "time")):
        return "time"
    return "other"


def type_fix(column: str, family: str, arrow_type: str) -> str | None:
    """The fix for ``column`` of ``arrow_type`` (as Arrow prints it) under ``family`` (an estimator's
    class name), or None when there is none to say.

    >>> type_fix("sex", "CategoricalEstimator", "double")[:60]
    'fix: CAST(sex AS STRING), or CAST(sex AS INT) for whole-numb'
    >>> type_fix("amount", "GaussianEstimator", "string")
    'fix: CAST(amount AS DOUBLE), or categorical if it holds labels'
    """
    kind, name = _kind(arrow_type), _quoted(column)
    if family in _LABELS + _INTEGER_LABELS:
        if kind == "float":
            labels = "integer_categorical (reads whole numbers as labels), " if family in _LABELS else ""
            return (
                f"fix: CAST({name} AS STRING), or CAST({name} AS INT) for whole-number codes, or "
                f"{labels}or a family that reads numbers ({_NUMBERS})"
            )
        if kind in ("text", "boolean", "time"):
            return f"fix: CAST({name} AS INT), or categorical (reads string, integer and boolean labels)"
        if kind == "list":
            return (
                "fix: one label per row is read; multinomial reads a list of labels as a bag, "
                "markov_chain as a sequence"
            )
        return None
    if kind == "text":
        return f"fix: CAST({name} AS DOUBLE), or categorical if it holds labels"
    if kind == "boolean":
        return f"fix: CAST({name} AS INT), or bernoulli"
    if kind == "time":
        return f"fix: CAST({name} AS DOUBLE) (a timestamp's seconds), or unix_date({name}) (a date's days)"
    if kind == "list" and family not in _VECTORS:
        return "fix: one number per row is read; multivariate_gaussian and diagonal_gaussian read lists"
    return None


def value_fix(column: str, family: str, value: float) -> str | None:
    """The fix for a value outside ``family``'s support (a zero or negative number for a positive
    family, a negative or fractional count), or None."""
    name = _quoted(column)
    if family in _POSITIVE and value <= 0:
        return (
            f"fix: filter the rows where {name} <= 0 (WHERE {name} > 0), or shift the column "
            f"({name} + 1 for counts or durations), or use gaussian, which reads any real number"
        )
    if family in _NON_NEGATIVE and value < 0:
        return f"fix: filter the rows where {name} < 0, or use gaussian, which reads any real number"
    if family in _COUNTS and value < 0:
        return f"fix: filter the rows where {name} < 0, or use gaussian, which reads any real number"
    if family in _SHARES and value <= 0:
        return (
            f"fix: every share of {name} must be positive: filter the rows with a zero share, or add a "
            "small amount to every share and divide by the row's sum"
        )
    if family in _COUNT_VECTORS and (value < 0 or value != int(value)):
        return f"fix: every entry of {name} must be a count (a non-negative integer): filter or round them"
    if family in _POSITIVE_COUNTS and value < 1:
        return (
            f"fix: filter the rows where {name} < 1 (WHERE {name} >= 1), or shift the column ({name} + 1), "
            "or use poisson, which reads counts from 0"
        )
    if family in _COUNTS + _POSITIVE_COUNTS + _INTEGERS and value != int(value):
        return f"fix: ROUND({name}) if these are counts, or gaussian for real numbers"
    if family == "TruncatedEstimator":
        return (
            "fix: filter the rows outside the bounds, or use censored, which reads a value at or beyond a "
            "bound as censored there"
        )
    return None


def fix_for(line: str) -> str:
    """``"; fix: ..."`` for an error line of a type mismatch or a value outside a family's support
    (the encoders' messages), else ``""``."""
    found = _TYPE_MISMATCH.match(line)
    if found is not None:
        fix = type_fix(found["column"], found["family"], found["type"])
        return f"; {fix}" if fix else ""
    found = _BAD_VALUE.match(line)
    if found is not None:
        try:
            value = float(found["value"])
        except ValueError:
            return ""
        fix = value_fix(found["column"], found["family"], value)
        return f"; {fix}" if fix else ""
    found = _OFF_SPHERE.match(line)
    if found is not None:
        name = _quoted(found["column"])
        return (
            f"; fix: divide each vector by its norm (transform({name}, v -> v / "
            f"sqrt(aggregate({name}, 0D, (s, u) -> s + u * u)))), or multivariate_gaussian for any vector"
        )
    return ""
