"""One full-data EM fit over a handle, and the warnings about a fitted model (private).

:func:`run_fit` is what every fit routine runs when the data is not served in mini-batches (an
:class:`~mixle_spark.em._run.EMRun`, with its statistics when kept); an update's refit and a
mini-batch fit's first mini-batch run it too, which is why it lives below
:mod:`mixle_spark.em.routine` (the routine chooses between it and mini-batch EM).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from mixle_spark.diagnostics import fit_warnings
from mixle_spark.em._run import EMRun, FitInputs
from mixle_spark.errors import FitQualityWarning, ModelSizeWarning
from mixle_spark.parallel.backends.contract import EncodedData
from mixle_spark.stats.base import Distribution, Estimator
from mixle_spark.summary import count_free_parameters, parameters_warning

if TYPE_CHECKING:
    from mixle_spark.em.options import FitOptions

__all__ = ["run_fit", "warn_model_size"]


def run_fit(
    handle: EncodedData, estimator: Estimator, options: FitOptions, inputs: FitInputs | None = None
) -> Distribution:
    """The model of one EM fit of ``estimator`` over every row of ``handle`` (with
    ``model.statistics`` when ``options.keep_statistics``)."""
    fit = EMRun(handle, estimator, options, FitInputs() if inputs is None else inputs)
    model = fit.run()
    if options.keep_statistics:
        model.statistics = fit.statistics(model)
    return model


def warn_model_size(model: Distribution, rows: int) -> None:
    """A :class:`~mixle_spark.errors.ModelSizeWarning` (for the caller of the public function) when
    the fitted ``model`` has more free parameters than ``rows``; a
    :class:`~mixle_spark.errors.FitQualityWarning` for each thing it says about its own fit
    (:func:`mixle_spark.diagnostics.fit_warnings`: variances on their floor, empty components)."""
    note = parameters_warning(model, count_free_parameters(model), rows)
    if note is not None:
        warnings.warn(note, ModelSizeWarning, stacklevel=3)
    for line in fit_warnings(model, rows):
        warnings.warn(line, FitQualityWarning, stacklevel=3)
