"""Exceptions and warnings raised by mixle_spark.

Every error about user input says *where* (the column or field path), *what* (the offending value,
or a count and an example row) and *what was expected*. Errors raised deep inside a combinator carry
a field path that each enclosing Record / Composite / Optional / Sequence extends on the way out, so
the message names the column as the user knows it:

>>> err = DataTypeError("expected a number for GaussianEstimator", value="12.5x", row=0, n_rows=2)
>>> str(err.at("spend_eur"))
"column 'spend_eur': expected a number for GaussianEstimator, got string '12.5x' (row 1 of 2)"
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from difflib import SequenceMatcher
from typing import Any

import numpy as np

__all__ = [
    "CheckpointMismatchError",
    "CheckpointStoreError",
    "ConvergenceWarning",
    "CorruptCheckpointWarning",
    "DataError",
    "DataTypeError",
    "DataValueError",
    "DegenerateComponentError",
    "EmbeddingUnavailableError",
    "EmptyDataError",
    "ExecutorError",
    "FieldError",
    "FitQualityWarning",
    "InputChangedError",
    "MixleError",
    "ModelFormatError",
    "ModelSizeWarning",
    "NonFiniteLikelihoodError",
    "OptionTypeError",
    "SchemaError",
    "SilentCorruptionError",
    "SpecError",
    "TooFewRowsError",
    "TooLargeError",
    "UnknownNameError",
    "UnsafePathError",
    "UnseenLabelError",
    "UnsupportedLocationError",
    "closest_name",
    "describe_value",
    "did_you_mean",
]


class MixleError(Exception):
    """Base class of every exception raised by mixle_spark."""


def describe_value(value: Any) -> str:
    """Render a bad value for an error message: its kind and a short repr."""
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:37] + "..."
        return f"string {text!r}"
    if value is None:
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return f"boolean {bool(value)}"
    if isinstance(value, (float, np.floating)):
        return f"{float(value)!r}"
    if isinstance(value, (int, np.integer)):
        return f"{int(value)}"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


SUGGESTION_CUTOFF = 0.6
"""How alike (:class:`difflib.SequenceMatcher` ratio) a valid name must be to a misspelt one to be
suggested."""

_SYNONYM = re.compile(r"norm(al)?")  # lognormal is log_gaussian, multivariate_normal the Gaussian


def _name_key(name: str) -> str:
    """``name`` as compared: lower case, without the separators people vary (``_``, ``-``, spaces)."""
    return re.sub(r"[\s_-]+", "", name.lower())


def closest_name(name: Any, valid: Iterable[Any]) -> str | None:
    """The valid name closest to a misspelt ``name``, or None when none is alike enough.

    Names are compared as written (in lower case), without ``_``, ``-`` and spaces, and with
    "normal" read as "gaussian" (the statisticians' synonym); the best of these
    :class:`difflib.SequenceMatcher` ratios must reach :data:`SUGGESTION_CUTOFF`. Ties go to the
    name closer as written, then to the first in sorted order.

    >>> closest_name("gausian", ["gaussian", "log_gaussian", "poisson"])
    'gaussian'
    >>> closest_name("lognormal", ["gaussian", "log_gaussian", "multinomial"])
    'log_gaussian'
    >>> closest_name("banana", ["gaussian", "poisson"]) is None
    True
    """
    text = str(name)
    key = _name_key(text)
    read = _SYNONYM.sub("gaussian", key)
    best: tuple[float, float, str] | None = None
    for candidate in sorted({str(v) for v in valid}):
        if candidate == text:
            continue
        other = _name_key(candidate)
        written = SequenceMatcher(None, text.lower(), candidate.lower()).ratio()
        score = max(
            written,
            SequenceMatcher(None, key, other).ratio(),
            SequenceMatcher(None, read, _SYNONYM.sub("gaussian", other)).ratio(),
        )
        if score >= SUGGESTION_CUTOFF and (best is None or (score, written) > best[:2]):
            best = (score, written, candidate)
    return None if best is None else best[2]


def did_you_mean(name: Any, valid: Iterable[Any]) -> str:
    """``" (did you mean 'x'?)"`` naming the valid name closest to ``name`` (:func:`closest_name`),
    or ``""``; for a list of unknown names, each one that has a close match:
    ``" (did you mean 'max_its' for 'max_iter', 'seed' for 'sed'?)"``.

    >>> did_you_mean("chanel", ["amount", "channel"])
    " (did you mean 'channel'?)"
    >>> did_you_mean(["max_iter", "sed"], ["max_its", "seed", "delta"])
    " (did you mean 'max_its' for 'max_iter', 'seed' for 'sed'?)"
    >>> did_you_mean("zzz", ["amount", "channel"])
    ''
    """
    valid = [str(v) for v in valid]
    if isinstance(name, (list, tuple, set, frozenset)):
        names = sorted(str(n) for n in name)
        if len(names) != 1:
            found = [(closest_name(n, valid), n) for n in names]
            hints = [f"{match!r} for {n!r}" for match, n in found if match is not None]
            return f" (did you mean {', '.join(hints)}?)" if hints else ""
        name = names[0]
    match = closest_name(name, valid)
    return "" if match is None else f" (did you mean {match!r}?)"


class _NoValue:
    """The "no offending value" marker of :class:`FieldError`: one object, also after unpickling
    (errors raised in Spark tasks or worker processes reach the driver pickled)."""

    def __repr__(self) -> str:
        return "NO_VALUE"

    def __reduce__(self) -> str:
        return "_NO_VALUE"


_NO_VALUE = _NoValue()


class FieldError(MixleError):
    """An error about one value of the data, located by field path and row.

    Parameters
    ----------
    detail : str
        What was expected, e.g. ``"expected a number for GaussianEstimator"``.
    value : object, optional
        The offending value (omitted from the message when ``NO_VALUE``).
    row : int, optional
        0-based index of the first offending row in the batch being encoded.
    n_rows : int, optional
        Number of rows in that batch.
    count : int, optional
        How many rows are bad, when known.
    path : tuple of str
        Field path from the outermost record inwards.
    """

    NO_VALUE: Any = _NO_VALUE

    def __init__(
        self,
        detail: str,
        *,
        value: Any = NO_VALUE,
        row: int | None = None,
        n_rows: int | None = None,
        count: int | None = None,
        path: tuple[str, ...] = (),
        scope: str | None = None,
    ) -> None:
        self.detail = detail
        self.scope = scope
        self.value = value
        self.row = row
        self.n_rows = n_rows
        self.count = count
        self.path = tuple(path)
        super().__init__(self._message())

    def _message(self) -> str:
        parts = []
        if self.path:
            parts.append(f"column {'.'.join(self.path)!r}: ")
        parts.append(self.detail)
        if self.value is not FieldError.NO_VALUE:
            parts.append(f", got {describe_value(self.value)}")
        where = []
        if self.count is not None and self.count > 1:
            where.append(f"{self.count} bad rows")
        if self.row is not None:
            row_text = f"row {self.row + 1}"
            if self.scope is not None:
                row_text += f" of {self.scope}"
            elif self.n_rows is not None:
                row_text += f" of {self.n_rows}"
            where.append(("first at " if where else "") + row_text)
        if where:
            parts.append(f" ({', '.join(where)})")
        return "".join(parts)

    def _copy(self, **changes: Any) -> FieldError:
        state = {
            "value": self.value,
            "row": self.row,
            "n_rows": self.n_rows,
            "count": self.count,
            "path": self.path,
            "scope": self.scope,
        }
        state.update(changes)
        copy = type(self)(self.detail, **state)
        if hasattr(self, "unreadable_cells"):  # see mixle_spark.stats._validate.unreadable_cells
            copy.unreadable_cells = self.unreadable_cells  # type: ignore[attr-defined]
        return copy

    def at(self, field: str) -> FieldError:
        """The same error, one field further out (``field`` is prepended to the path)."""
        return self._copy(path=(str(field), *self.path))

    def located(self, row: int | None, n_rows: int | None, count: int | None = None) -> FieldError:
        """The same error at another row / batch size (and, optionally, bad-row count)."""
        return self._copy(row=row, n_rows=n_rows, count=self.count if count is None else count)

    def in_scope(self, first_row: int, scope: str) -> FieldError:
        """The same error with its row counted from ``first_row`` within ``scope`` (for example
        ``"partition 3"`` when the batch is one of several in a Spark partition)."""
        row = None if self.row is None else first_row + self.row
        return self._copy(row=row, n_rows=None, scope=scope)

    def in_rows(self, row_index: np.ndarray | None, n_rows: int) -> FieldError:
        """Re-express the row of this error in the enclosing batch.

        ``row_index[i]`` is the enclosing row of the i-th row the inner encoder saw (for example the
        present rows under Optional, or the owning row of each element under Sequence).
        """
        row, count = self.row, self.count
        if row is not None and row_index is not None and 0 <= row < len(row_index):
            row = int(row_index[row])
        if count is not None and row_index is not None and len(row_index) > 1:
            if not bool(np.all(np.diff(row_index) > 0)):  # several inner rows per row: not a row count
                count = None
        return self._copy(row=row, count=count, n_rows=n_rows)

    def __reduce__(self) -> Any:  # keep the fields through pickling (Spark, multiprocessing)
        return (
            _rebuild_field_error,
            (type(self), self.detail, self.value, self.row, self.n_rows, self.count, self.path, self.scope),
        )


def _rebuild_field_error(
    cls: type, detail: str, value: Any, row: Any, n_rows: Any, count: Any, path: Any, scope: Any = None
) -> Any:
    return cls(detail, value=value, row=row, n_rows=n_rows, count=count, path=path, scope=scope)


class DataError(FieldError, ValueError):
    """Base of errors about the values in the data."""


class DataValueError(DataError):
    """A value of the right type but outside what the model accepts (NaN, negative count, ...)."""


class DataTypeError(FieldError, TypeError):
    """A value of the wrong type (a string in a numeric column, a list where a scalar belongs, ...)."""


class UnseenLabelError(DataError):
    """A categorical label that the model's vocabulary does not contain."""


class MalformedRowError(MixleError, ValueError):
    """A row of a text input (CSV) whose fields do not match the header: the message names the file,
    the line and the row as written."""


class SchemaError(MixleError, ValueError):
    """A DataFrame / Arrow schema that does not match the model (missing column, wrong type)."""


class EmptyDataError(MixleError, ValueError):
    """No rows to fit or score."""


class TooFewRowsError(MixleError, ValueError):
    """Fewer rows than the model needs (for example fewer rows than mixture components)."""


class TooLargeError(MixleError, ValueError):
    """A spec, model file or fit beyond a stated bound (components, nesting depth, file size, memory);
    the message names the value and the bound."""


class SpecError(MixleError, ValueError):
    """A malformed model or estimator specification (unknown key, bad parameter)."""


class OptionTypeError(SpecError, TypeError):
    """An option given a value of the wrong kind (a string for a number, a float for an integer): a
    TypeError, and a SpecError (a ValueError) as the API refused such values before each option's
    check was declared once (``except ValueError`` / ``except SpecError`` keep working)."""


class UnknownNameError(SpecError):
    """An unknown family / backend name; the message suggests the closest valid name
    (:func:`did_you_mean`) and lists them all."""

    def __init__(self, kind: str, name: Any, valid: Any) -> None:
        self.kind = kind
        self.name = name
        self.valid = sorted(str(v) for v in valid)
        hint = did_you_mean(name, self.valid)
        super().__init__(f"unknown {kind} {name!r}{hint}; expected one of: {', '.join(self.valid)}")


class ModelFormatError(MixleError, ValueError):
    """A saved model that cannot be read (wrong format, newer version, corrupt JSON)."""


class NonFiniteLikelihoodError(MixleError, ValueError):
    """EM produced a NaN or -inf log-likelihood; the message names the iteration and the component."""


class DegenerateComponentError(NonFiniteLikelihoodError):
    """An M-step could not build some mixture components (their statistics were NaN or infinite,
    e.g. squares that overflowed): raised by ``MixtureEstimator.estimate`` and handled by the EM
    driver's ``on_degenerate`` policy (``stop`` re-raises it naming the iteration).

    Attributes
    ----------
    failures : list of (component index, reason)
    components : list
        The components that could be built, None for the failed ones.
    weights : numpy array
        The new mixture weights.
    iteration : int or None
        The EM iteration whose M-step failed (set by the driver).
    last_model : Distribution or None
        The last good model (the one that iteration started from; set by the driver).
    """

    def __init__(self, failures: Any, components: Any = None, weights: Any = None, message: str = "") -> None:
        self.failures = list(failures)
        self.components = components
        self.weights = weights
        self.iteration: int | None = None
        self.last_model: Any = None
        detail = "; ".join(f"component {j}: {why}" for j, why in self.failures)
        super().__init__(message or f"M-step produced degenerate mixture components ({detail})")


class ExecutorError(MixleError, RuntimeError):
    """An E-step failed on an executor (after Spark's task retries): the partition, the remote error
    type and message. The fit stops; nothing of the failed iteration is used or written."""

    def __init__(
        self, message: str, partition: int | None = None, remote_type: str = "", remote_message: str = ""
    ):
        super().__init__(message)
        self.partition = partition
        self.remote_type = remote_type
        self.remote_message = remote_message


class InputChangedError(MixleError, RuntimeError):
    """A DataFrame gave other rows when it was read a second time (a non-deterministic plan: an
    unseeded ``rand()`` or ``sample``, a source that changed), where a result needs the same rows:
    persist the DataFrame before passing it."""


class SilentCorruptionError(MixleError, RuntimeError):
    """Two computations of the same partition's statistics disagree beyond the audit's tolerance
    (:mod:`mixle_spark.em.sdc_audit`); ``mismatches`` lists them."""

    def __init__(self, message: str, mismatches: Any = ()) -> None:
        super().__init__(message)
        self.mismatches = list(mismatches)


class CheckpointStoreError(MixleError, ValueError):
    """An unusable checkpoint store: a bad ``keep``, or a directory path that is not a directory."""


class UnsafePathError(MixleError, ValueError):
    """A path mixle_spark would write or delete through: a symbolic link, or a ``..`` after a link
    that leads somewhere other than the path as named (``mixle_spark._files.named_path``)."""


class UnsupportedLocationError(MixleError, ValueError):
    """A path or URI no filesystem here can write (``dbfs:/`` without a Spark session or the
    ``/dbfs`` mount, an unknown scheme): refused in one line naming the scheme, before any work."""


class CheckpointMismatchError(MixleError, ValueError):
    """The checkpoint directory holds checkpoints of a different fit (the message says what differs).

    ``directory`` and ``differences`` hold the same facts for a caller that words its own advice
    (the jobs name their ``--no-resume`` flag): :meth:`advising` rebuilds the message.
    """

    def __init__(self, message: str, directory: str | None = None, differences: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.directory = directory
        self.differences = tuple(differences)

    @classmethod
    def advising(
        cls, directory: str, differences: tuple[str, ...], fresh_start: str
    ) -> CheckpointMismatchError:
        """The error for ``directory`` whose checkpoints differ by ``differences``; ``fresh_start``
        says how to start afresh (``resume=False``, ``--no-resume``)."""
        return cls(
            f"checkpoint_dir {directory} holds checkpoints of a different fit ({'; '.join(differences)}); "
            f"use another checkpoint_dir, or {fresh_start} to start afresh and replace them",
            directory,
            differences,
        )


class CorruptCheckpointWarning(UserWarning):
    """A checkpoint file that failed verification and was skipped (the message names file and reason)."""


class ModelSizeWarning(UserWarning):
    """A fitted model with more free parameters than rows (the message names the field holding most)."""


class FitQualityWarning(UserWarning):
    """A fitted model describes its data badly in a way the fit could not avoid: a Gaussian variance
    on its floor, a component with no data left, the best number of components at the edge of the
    range tried (:mod:`mixle_spark.diagnostics`); the message names the field and component."""


class ConvergenceWarning(UserWarning):
    """EM stopped at ``max_its`` before the log-likelihood gain fell below ``delta``."""


class EmbeddingUnavailableError(MixleError, TypeError):
    """A family offers no numeric embedding, so ``init="kmeans||"`` cannot seed a model of it (the
    fit falls back to ``init="random"`` with a warning naming the family)."""
