"""Records and rules of the EM loop (private; re-exported by :mod:`mixle_spark.estimation`).

``IterationRecord`` / ``FitResult`` (what a fit did), the convergence and decrease rules, the initial
sample fraction, the fused E-/M-step call and the error for a non-finite log-likelihood.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import IO, Any

from mixle_spark.errors import NonFiniteLikelihoodError, TooFewRowsError, TooLargeError
from mixle_spark.parallel.backends.contract import EMStep, EncodedData, FoldSize, RowDiagnosis
from mixle_spark.stats.base import Distribution, Estimator
from mixle_spark.stats.hidden_markov import HiddenMarkovEstimator
from mixle_spark.stats.mixture import MixtureEstimator

__all__ = [
    "BYTES_PER_SCORE",
    "DECREASE_RTOL",
    "DELTA",
    "FLOOR_WEIGHT",
    "MAX_RESEEDS",
    "ON_DEGENERATE",
    "ON_OTHER_DATA",
    "PRECISION_RTOL",
    "TOL",
    "FitResult",
    "IterationRecord",
    "Progress",
    "check_memory",
    "check_rows",
    "em_step",
    "has_converged",
    "has_decreased",
    "init_fraction",
    "nonfinite_error",
    "not_converged_message",
    "rounding_rtol",
]

logger = logging.getLogger("mixle_spark.estimation")

DECREASE_RTOL = 1e-9
"""A log-likelihood drop smaller than this (relative to |ll|, or absolute below 1) is rounding."""


@dataclass(frozen=True)
class IterationRecord:
    """One scored model: ``iteration`` counts the M-steps that produced it (0 = initial model)."""

    iteration: int
    log_likelihood: float
    gain: float | None
    nobs: float
    seconds: float


@dataclass
class FitResult:
    """What ``optimize`` did; attached to the returned model as ``model.fit_result``."""

    converged: bool
    n_iter: int
    log_likelihood: float
    seed: int
    delta: float | None
    max_its: int
    history: list[IterationRecord] = field(default_factory=list)
    validation_log_likelihood: float | None = None
    seconds: float = 0.0
    stopped_because: str = ""
    trace: Any = None
    """The per-iteration :class:`~mixle_spark.em.observability.EMTrace`."""
    resumed_from: int | None = None
    """The iteration of the checkpoint this fit resumed from, if it did."""
    resumed_written_at: str | None = None
    """When that checkpoint was written (ISO 8601, UTC; None when not resumed, or unknown)."""
    checkpoint_refit: str | None = None
    """Why the checkpoints found were not resumed but replaced by this fit from scratch (they were of
    other data, ``on_other_data="refit"``); None otherwise."""
    seeding_seconds: float = 0.0
    """Seconds spent building the starting model (part of :attr:`seconds`; 0 when a starting model
    was given or the fit resumed from a checkpoint). Runs advancing together (``best_of``,
    ``select_k``) seed in the same passes, so each one's figure is the wall time of that shared step."""
    free_parameters: int | None = None
    """The fitted model's free parameters as its estimator fits it (fixed ones not counted, tied ones
    once): what BIC and AIC count (:meth:`~mixle_spark.stats.base.Estimator.n_free_parameters`)."""
    tol: float | None = None
    """The stopping rule's gain per unit of row weight, when the fit stopped on one (then ``delta``
    did not count)."""


def not_converged_message(
    max_its: int,
    delta: float | None,
    gain: float | None,
    tol: float | None = None,
    weight: float | None = None,
) -> str:
    """The text of the ConvergenceWarning of a fit that stopped at ``max_its`` with ``gain`` (the
    last log-likelihood gain, over rows of total ``weight``) still above ``tol`` per unit of weight
    when ``tol`` is given, else above ``delta``."""
    if tol is None:
        return (
            f"EM did not converge in {max_its} iterations (delta={delta}, last gain={gain}); "
            "raise max_its or delta"
        )
    per_row = None if gain is None or not weight else gain / weight
    return (
        f"EM did not converge in {max_its} iterations (tol={tol} per row, last gain={per_row:.3g} per row "
        f"over {weight:.6g} rows); raise max_its or tol"
        if per_row is not None
        else f"EM did not converge in {max_its} iterations (tol={tol} per row); raise max_its or tol"
    )


def unconverged_message(result: FitResult) -> str | None:
    """The ConvergenceWarning text of a finished fit that stopped at ``max_its`` with its gain still
    above ``delta``; None for a fit that converged, ran without ``delta`` or stopped otherwise. For
    fits that advance together (``best_of``, ``select_k``), whose own warnings cannot say which fit
    they come from: the caller names it."""
    stops = result.tol is not None or result.delta is not None
    if not stops or result.converged or result.stopped_because != "max_its":
        return None
    last = result.history[-1] if result.history else None
    gain, weight = (None, None) if last is None else (last.gain, last.nobs)
    return not_converged_message(result.max_its, result.delta, gain, result.tol, weight)


def check_rows(handle: EncodedData, estimator: Estimator) -> None:
    need = estimator.min_rows()
    if len(handle) < need:
        raise TooFewRowsError(
            f"{type(estimator).__name__} needs at least {need} rows (for example one per mixture "
            f"component), but the data has {len(handle)}"
        )


BYTES_PER_SCORE = 64
"""Peak bytes a mixture's E-step or seeding pass holds per row and component of the fold it scores
(the scores, posteriors and their temporaries; measured ~40 for a mixture of records, ~64 for a
full-covariance Gaussian mixture)."""


def _memory_text(nbytes: float) -> str:
    return f"{nbytes / 2**30:,.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:,.0f} MiB"


def check_memory(handle: EncodedData, estimator: Estimator) -> None:
    """Refuse, before the first pass, a mixture (or hidden Markov model) whose E-step cannot fit in a
    worker's memory: ``BYTES_PER_SCORE`` x components x the most rows a fold scores at once."""
    if not isinstance(handle, FoldSize):
        return
    memory = handle.worker_memory()
    inner = getattr(estimator, "inner", estimator)  # a ModelParallelEstimator threads its inner one
    if memory is None or not isinstance(inner, MixtureEstimator | HiddenMarkovEstimator):
        return
    rows, k = handle.fold_rows(), len(inner.estimators)
    need = BYTES_PER_SCORE * k * rows
    if need > memory:
        raise TooLargeError(
            f"{type(inner).__name__} with {k:,} components needs about {_memory_text(need)} to score a "
            f"fold of {rows:,} rows ({BYTES_PER_SCORE} bytes per row and component), more than the "
            f"{_memory_text(memory)} of memory a worker has; use fewer components"
        )


def init_fraction(init_p: float | None, estimator: Estimator, n: int) -> float:
    """The row-selection probability for the initial model.

    ``init_p`` (values <= 0 or None mean the default 0.1; values >= 1 mean every row), bounded by
    the estimator's preferred initial sample size when it has one (mixtures: a few rows per
    component, so the starting components differ).
    """
    p = 0.1 if init_p is None or init_p <= 0 else min(float(init_p), 1.0)
    bounds = estimator.init_sample_size()
    if bounds is not None:
        fewest, most = bounds
        p = min(max(p, fewest / n), most / n, 1.0)
    return p


def em_step(
    handle: EncodedData, estimator: Estimator, model: Distribution
) -> tuple[float, float, Distribution]:
    if isinstance(handle, EMStep):
        return handle.pysp_em_step(estimator, model)
    # A reference-style handle without the fused pass: score, then estimate (two passes).
    nobs, ll = handle.pysp_seq_log_density_sum(model)
    return nobs, ll, handle.pysp_seq_estimate(estimator, model)


def nonfinite_error(
    iteration: int, ll: float, model: Distribution, handle: EncodedData
) -> NonFiniteLikelihoodError:
    parts = [f"log-likelihood is {ll} at iteration {iteration}"]
    bad = model.nonfinite_parameters()
    if bad:
        parts.append(f"non-finite parameters: {', '.join(bad[:5])}")
    found = handle.first_nonfinite_row(model) if isinstance(handle, RowDiagnosis) else None
    if found is not None:
        parts.append(
            f"row {found[0] + 1} has log-density {found[1]} under the model "
            "(zero density under every component)"
        )
    return NonFiniteLikelihoodError("; ".join(parts))


class Progress:
    """Per-iteration progress: every line logged at INFO, every ``print_iter``-th written to ``out``."""

    def __init__(self, out: IO[str] | None, print_iter: int, label: str = "") -> None:
        self.out = out
        self.print_iter = max(int(print_iter or 0), 0)
        self.label = label

    def __call__(self, line: str, iteration: int, note: bool = False) -> None:
        line = self.label + line
        logger.info(line)
        if self.out is not None and self.print_iter and (iteration % self.print_iter == 0 or note):
            self.out.write(line + "\n")
            self.out.flush()


PRECISION_RTOL = {"float64": DECREASE_RTOL, "float32": 1e-6, "bfloat16": 1e-3}
"""The rounding of a total log-likelihood computed at each precision (``precision="float32"``: its
E-step's log-densities carry ~1e-8 relative noise): a drop within it is rounding, not a decrease."""


def rounding_rtol(handle: Any) -> float:
    """The relative drop of the log-likelihood that is rounding for ``handle``'s precision (its
    ``compute``; :data:`DECREASE_RTOL` for float64)."""
    compute = getattr(handle, "compute", None)
    return PRECISION_RTOL.get(getattr(compute, "precision", "float64"), DECREASE_RTOL)


def has_converged(gain: float | None, ll: float, delta: float, rtol: float = DECREASE_RTOL) -> bool:
    """``0 <= gain < delta``, a drop within rounding (``rtol`` relative) counting as 0."""
    return gain is not None and -rtol * max(1.0, abs(ll)) <= gain < delta


def has_decreased(ll: float, best_ll: float, rtol: float = DECREASE_RTOL) -> bool:
    return ll < best_ll - rtol * max(1.0, abs(best_ll))


DELTA = 1e-9
"""``optimize``'s default ``delta`` (the reference's): a gain of the total log-likelihood."""
TOL = 1e-6
"""The default ``tol`` (a gain per unit of row weight, as scikit-learn's ``tol``) of the surfaces that
stop on one by default: ``select_k``, the fit job (a spec without a stopping rule), ``update`` and
``MixleEstimator``."""

ON_DEGENERATE = ("stop", "floor", "reseed")
"""What the EM driver does when an M-step degenerates a mixture component (see ``optimize``)."""

ON_OTHER_DATA = ("raise", "refit")
"""What a checkpoint of this fit on other data does: raise, or a fit from scratch replacing it
(:mod:`mixle_spark.em.resilient`)."""

MAX_RESEEDS = 3
"""How often ``on_degenerate="reseed"`` restarts one component in a fit before the fit stops."""

FLOOR_WEIGHT = 1e-6
"""The weight a floored component keeps (``on_degenerate="floor"``), before renormalisation."""
