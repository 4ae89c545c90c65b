"""Choosing the number of components: ``select_k`` fits a mixture (or hidden Markov model) for every
candidate ``k`` on data encoded once and keeps the best by BIC, AIC or validation log-likelihood.

    >>> import warnings
    >>> import numpy as np
    >>> from mixle_spark.stats import GaussianEstimator, MixtureEstimator
    >>> rng = np.random.default_rng(0)
    >>> x = list(np.concatenate([rng.normal(-4, 1, 400), rng.normal(0, 1, 400), rng.normal(5, 1, 400)]))
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     found = select_k(x, MixtureEstimator([GaussianEstimator()]), ks=range(1, 6), max_its=50)
    >>> found.best_k, [row.k for row in found.table if not row.converged]
    (3, [5])
    >>> print(str(caught[0].message)[:60])
    k=5: EM did not converge in 50 iterations (tol=1e-06 per row

As mclust does on one machine, on any backend. Every candidate is a full fit from the same seed and
initialization (``init="kmeans||"`` by default); the table records each one's log-likelihood, free
parameters (:func:`mixle_spark.summary.count_free_parameters`), BIC and AIC (lower is better), the
validation log-likelihood when ``vdata`` is given, iterations and convergence. A candidate that
stops at ``max_its`` emits a :class:`~mixle_spark.errors.ConvergenceWarning` naming its ``k``, as
``optimize`` does for a single fit (more components than the data holds often converge slowly).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from mixle_spark.em._records import DECREASE_RTOL, unconverged_message
from mixle_spark.em.handles import fit_together, open_handle, release, trial_seeds, warn_model_size
from mixle_spark.em.options import TOL, FitOptions, check_trials
from mixle_spark.em.routine import fit_routine
from mixle_spark.em.statistics import collect_statistics
from mixle_spark.errors import ConvergenceWarning, FitQualityWarning, SpecError, TooFewRowsError
from mixle_spark.spec import estimator_from_spec
from mixle_spark.stats._random import seed_to_int
from mixle_spark.stats.base import Distribution, Estimator
from mixle_spark.summary import count_free_parameters, information_criteria

__all__ = [
    "CRITERIA",
    "CandidateFit",
    "KSelection",
    "parse_forms",
    "parse_ks",
    "select_k",
    "with_components",
]

CRITERIA = ("bic", "aic", "validation")
"""How ``select_k`` ranks the candidates: BIC and AIC (lowest wins) or the validation log-likelihood
(highest wins; needs ``vdata``)."""


@dataclass(frozen=True)
class CandidateFit:
    """One candidate of :func:`select_k`: ``k`` components (under covariance ``form``, when
    ``select_k`` varied it) and how its fit went."""

    k: int
    log_likelihood: float
    free_parameters: int
    bic: float
    aic: float
    validation_log_likelihood: float | None
    iterations: int
    converged: bool
    seconds: float
    """Wall-clock seconds from the fit's start to its end (candidates advance together, so they overlap)."""
    form: str | None = None
    """The covariance form (mclust's name: :mod:`mixle_spark.stats._covariance`); None when
    ``select_k`` was given no ``forms``."""
    seed: int | None = None
    """The seed of the start this fit came from."""
    starts: int = 1
    """Starts tried: ``trials``, plus :data:`RESTARTS` when the candidate stalled (:func:`stalled`)."""

    @property
    def k_form(self) -> tuple[int, str | None]:
        """``(k, form)``: the candidate's key in :attr:`KSelection.fits`."""
        return self.k, self.form


@dataclass
class KSelection:
    """What :func:`select_k` found: the best ``k`` (and covariance form, ``best_form``, when it varied
    forms) under ``criterion``, its model and the whole table. ``models`` holds the best fit of each
    ``k`` (over the forms), ``fits`` every candidate's by ``(k, form)`` (form None without ``forms``)."""

    criterion: str
    best_k: int
    model: Distribution
    table: list[CandidateFit]
    models: dict[int, Distribution] = field(repr=False, default_factory=dict)
    best_form: str | None = None
    fits: dict[tuple[int, str | None], Distribution] = field(repr=False, default_factory=dict)

    def scores(self) -> list[float]:
        """The criterion of every candidate, in table order (BIC / AIC: lower wins; validation: higher)."""
        return [_score(row, self.criterion) for row in self.table]

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the fit summary's ``model_selection`` entry)."""
        out = {"criterion": self.criterion, "best_k": self.best_k, "table": [asdict(r) for r in self.table]}
        if self.best_form is not None:
            out["best_form"] = self.best_form
        return out

    def to_pandas(self) -> Any:
        """The table as a pandas DataFrame, one row per candidate."""
        import pandas as pd

        return pd.DataFrame([asdict(r) for r in self.table])

    def __str__(self) -> str:
        forms = self.best_form is not None
        head = f"{'k':>4} {'log-likelihood':>16} {'params':>7} {'BIC':>14} {'AIC':>14} {'its':>5}  converged"
        best = f"best k = {self.best_k}" + (f", form {self.best_form}" if forms else "")
        lines = [f"select_k by {self.criterion}: {best}", ("form " if forms else "") + head]
        for r in self.table:
            mark = " <" if (r.k, r.form) == (self.best_k, self.best_form) else ""
            lines.append(
                (f"{r.form:<4} " if forms else "")
                + f"{r.k:>4} {r.log_likelihood:>16.6f} {r.free_parameters:>7} {r.bic:>14.3f} {r.aic:>14.3f} "
                f"{r.iterations:>5}  {r.converged}{mark}"
            )
        return "\n".join(lines)


def _chosen(table: list[CandidateFit], criterion: str) -> CandidateFit:
    """The row the criterion picks (on a tie, the one with fewer free parameters, then the smaller k)."""
    scores = [_score(r, criterion) for r in table]
    if criterion == "validation":
        best = max(range(len(table)), key=lambda i: (scores[i], -table[i].free_parameters, -table[i].k))
    else:
        best = min(
            range(len(table)),
            key=lambda i: (
                scores[i] if math.isfinite(scores[i]) else math.inf,
                table[i].free_parameters,
                table[i].k,
            ),
        )
    return table[best]


def _score(row: CandidateFit, criterion: str) -> float:
    if criterion == "validation":
        return float(row.validation_log_likelihood)  # type: ignore[arg-type]
    return float(getattr(row, criterion))


def parse_ks(ks: Any) -> list[int]:
    """The candidate ``k`` values from an iterable of ints or a string ``"2:12"`` (inclusive) /
    ``"2,4,8"``; sorted, without repeats. Raises SpecError for anything else, naming it."""
    if isinstance(ks, str):
        text = ks.strip()
        try:
            if ":" in text:
                low, high = (int(p) for p in text.split(":", 1))
                values: list[Any] = list(range(low, high + 1))
            else:
                values = [int(p) for p in text.split(",") if p.strip()]
        except ValueError:
            raise SpecError(
                f"ks: expected 'LOW:HIGH' or a comma-separated list of integers, got {ks!r}"
            ) from None
    elif isinstance(ks, Iterable):
        values = list(ks)
    else:
        raise SpecError(f"ks: expected integers (e.g. range(1, 13) or '2:12'), got {ks!r}")
    if not values:
        raise SpecError(f"ks: no candidate number of components in {ks!r}")
    for k in values:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise SpecError(f"ks: every k must be an integer >= 1, got {k!r} in {ks!r}")
    return sorted(set(values))


def parse_forms(forms: Any) -> list[str]:
    """Covariance forms to try, as mclust names, in :data:`~mixle_spark.stats._covariance.FORMS` order
    (fewest free parameters first), from ``"all"``, a comma-separated string (``"EII,VVV"``,
    ``"tied,full"``) or an iterable of names; SpecError naming anything else."""
    from mixle_spark.stats._covariance import FORMS, covariance_form

    if isinstance(forms, str):
        names: list[Any] = list(FORMS) if forms.strip().lower() == "all" else forms.split(",")
    elif isinstance(forms, Iterable):
        names = list(forms)
    else:
        raise SpecError(f"forms: expected 'all', 'EII,VVV' or a list of covariance forms, got {forms!r}")
    chosen = {covariance_form(name, "forms: every form") for name in names}
    if not chosen:
        raise SpecError(f"forms: no covariance form in {forms!r}")
    return [f for f in FORMS if f in chosen]


def with_components(
    estimator: Estimator | Mapping[str, Any] | str, k: int, form: str | None = None
) -> Estimator:
    """``estimator`` (a mixture of identical components or a hidden Markov model, possibly threaded by
    ``ModelParallelEstimator``, or its spec) with ``k`` components / states, its other options kept
    (and, given a ``form``, the mixture's covariance form set to it)."""
    if not isinstance(estimator, Estimator):
        estimator = estimator_from_spec(estimator)  # type: ignore[arg-type]
    inner = getattr(estimator, "inner", None)
    if inner is not None:  # a wrapper (ModelParallelEstimator) rebuilds itself around the new inner one
        return estimator.with_inner(with_components(inner, k, form))  # type: ignore[attr-defined]
    spec = estimator.to_dict()
    key = {"mixture": "components", "hidden_markov": "estimators"}.get(str(spec.get("type")))
    if key is None:
        raise SpecError(
            f"select_k varies the components of a mixture or the states of a hidden Markov model; "
            f"got {type(estimator).__name__}"
        )
    parts = spec[key]
    if any(p != parts[0] for p in parts[1:]):
        raise SpecError(
            f"select_k needs a {spec['type']} whose {key} are all alike (it repeats the first one k "
            f"times); this one has {len(parts)} different ones"
        )
    if spec.get("keys") is not None and k != len(parts):
        raise SpecError(f"select_k cannot vary the components of a {spec['type']} with tied keys")
    if form is not None:
        if key != "components":
            raise SpecError(
                f"select_k varies the covariance forms of Gaussian mixtures, not of a {spec['type']}"
            )
        spec = {**spec, "covariance": form}
    return type(estimator).from_dict({**spec, key: [parts[0]] * k})


RESTARTS = 3
"""New starts :func:`select_k` gives a candidate that stalled (:func:`stalled`)."""
STALL_RATIO = 10.0
STALL_PER_ROW = 1e-2


def stalled(
    log_likelihoods: Mapping[tuple[int, str | None], float], n: float
) -> list[tuple[int, str | None]]:
    """The candidates ``(k, form)`` whose fit looks stuck in a poor start: with the same form, some
    larger k gains more than :data:`STALL_RATIO` times as much log-likelihood per added component
    over it as it gained over the next smaller k, and more than :data:`STALL_PER_ROW` per row and
    component. Log-likelihood grows with k with diminishing returns when each fit reaches its
    optimum; a k whose extra component added almost nothing while more components find structure
    it missed has merged two clusters that a better start separates. The smallest and the largest
    k of a form cannot be judged."""
    by_form: dict[str | None, list[int]] = {}
    for k, form in log_likelihoods:
        by_form.setdefault(form, []).append(k)
    out = []
    for form, ks in by_form.items():
        ks = sorted(ks)
        ll = [log_likelihoods[k, form] for k in ks]
        for i in range(1, len(ks) - 1):
            if not all(math.isfinite(v) for v in ll[i - 1 :]):
                continue
            gain = max(ll[i] - ll[i - 1], 0.0) / (ks[i] - ks[i - 1])
            later = max((ll[j] - ll[i]) / (ks[j] - ks[i]) for j in range(i + 1, len(ks)))
            if later > max(STALL_RATIO * gain, STALL_PER_ROW * n):
                out.append((ks[i], form))
    return out


def _keep_best(
    fits: dict[tuple[int, str | None], Any],
    won: dict[tuple[int, str | None], int],
    owners: list[tuple[tuple[int, str | None], int]],
    fitted: list[Any],
) -> None:
    """Keep in ``fits`` each candidate's highest log-likelihood fit (the first of those equal within
    rounding, as ``best_of`` keeps: the same fit on every backend), and in ``won`` the seed it
    started from."""
    for (pair, seed), model in zip(owners, fitted, strict=True):
        ll = model.fit_result.log_likelihood
        if pair not in fits:
            fits[pair], won[pair] = model, seed
            continue
        kept = fits[pair].fit_result.log_likelihood
        if ll > kept + DECREASE_RTOL * max(1.0, abs(kept)):
            fits[pair], won[pair] = model, seed


def _label(k: int, form: str | None) -> str:
    """How a candidate is named in lines and warnings: ``k=3`` or ``k=3 EEE``."""
    return f"k={k}" if form is None else f"k={k} {form}"


def _warn_at_the_edge(best_k: int, ks: list[int], criterion: str) -> None:
    """A :class:`~mixle_spark.errors.FitQualityWarning` when the best number of components is the
    largest tried (more may fit better), or the smallest tried above 1 (fewer may)."""
    if len(ks) < 2 or best_k not in (ks[0], ks[-1]) or (best_k == ks[0] and best_k == 1):
        return
    largest = best_k == ks[-1]
    warnings.warn(
        f"the best number of components by {criterion} is {best_k}, the "
        f"{'largest' if largest else 'smallest'} of those tried ({ks[0]}..{ks[-1]}): "
        f"{'more' if largest else 'fewer'} components may fit better; try "
        f"{'larger' if largest else 'smaller'} k",
        FitQualityWarning,
        stacklevel=3,
    )


def _warn_not_converged(fits: Mapping[tuple[int, str | None], Distribution]) -> None:
    """A ConvergenceWarning for every candidate that stopped at ``max_its``, naming its ``k`` (and
    form) (the fits' own warnings, raised while they advance together, cannot say which candidate
    they are)."""
    for (k, form), model in fits.items():
        message = unconverged_message(model.fit_result)
        if message is not None:
            warnings.warn(f"{_label(k, form)}: {message}", ConvergenceWarning, stacklevel=3)


def select_k(
    data: Any,
    estimator: Estimator | Mapping[str, Any] | str,
    ks: Any = range(1, 13),
    criterion: str = "bic",
    *,
    forms: Any = None,
    vdata: Any = None,
    trials: int = 1,
    options: FitOptions | None = None,
    on_encoded: Callable[[Any], None] | None = None,
    **keywords: Any,
) -> KSelection:
    """Fit every candidate number of components and keep the best.

    Parameters
    ----------
    data : anything ``optimize`` accepts
        Encoded once (``encoded_data(data, ..., **options)``) and shared by every candidate.
    estimator : Estimator or spec
        A mixture of identical components (``MixtureEstimator([comp])`` will do) or a hidden Markov
        model; its component / state is repeated ``k`` times.
    ks : iterable of int or str
        Candidate numbers of components (``range(1, 13)``, ``[2, 4, 8]``, ``"2:12"``).
    criterion : {"bic", "aic", "validation"}
        Lowest BIC / AIC, or highest log-likelihood on ``vdata`` (on a tie, the candidate with fewer
        free parameters).
    forms : str or iterable of str, optional
        Covariance forms to try with every ``k`` (``"all"``, ``"EII,VVV"``, ``["tied", "full"]``;
        :mod:`mixle_spark.stats._covariance`), as mclust chooses form and k together; the estimator
        must be a mixture of ``multivariate_gaussian`` components (or ``diagonal_gaussian`` ones for
        diagonal forms only). Every (k, form) candidate advances in the same data passes. None: the
        estimator's own form.
    vdata : optional
        Validation data (required by ``criterion="validation"``; scored for every candidate).
    trials : int
        Restarts per candidate (``best_of``); 1 runs ``optimize``. Whatever ``trials``, a candidate
        whose fit stalled in a poor start (:func:`stalled`) is fitted again from :data:`RESTARTS`
        new seeds and keeps its best fit (its table row's ``seed`` and ``starts`` say so).
    options : FitOptions, optional
        ``optimize``'s options (:class:`~mixle_spark.em.options.FitOptions`), each also accepted as a
        keyword; here ``max_its`` defaults to 100, ``tol`` to 1e-6 per row
        (:data:`~mixle_spark.em.options.TOL`; ``delta`` when given replaces it) and ``print_iter``
        to 0 (``out``
        gets one line per candidate, and EM progress every ``print_iter`` iterations when > 0); every
        candidate starts from the same ``seed``. ``checkpoint_dir`` and ``trace_path`` belong to a
        single fit and are refused.
    on_encoded : callable, optional
        Called with the encoded-data handle once ``data`` is encoded (as :func:`optimize`'s).
    **keywords
        FitOptions fields, and the backend's options (``backend``, ``num_chunks``, ...).

    Returns
    -------
    KSelection
        ``best_k`` (and ``best_form`` with ``forms``), ``model`` (the best fit, with its
        ``fit_result``), ``table`` (a :class:`CandidateFit` per candidate), ``models`` (the best fit
        of each k) and ``fits`` (every candidate's, by ``(k, form)``).

    Warns
    -----
    ConvergenceWarning
        One per candidate that stopped at ``max_its`` before its gain fell below ``tol`` (``delta``), naming
        its ``k`` (and form), the iterations and the last gain (its table row says ``converged=False``).
    """

    candidates = parse_ks(ks)
    form_list: list[str | None] = [None] if forms is None else list(parse_forms(forms))
    if criterion not in CRITERIA:
        raise SpecError(f"unknown criterion {criterion!r}; valid criteria: {', '.join(map(repr, CRITERIA))}")
    if criterion == "validation" and vdata is None:
        raise SpecError("criterion='validation' needs vdata (the held-out rows to score every candidate on)")
    trials = check_trials(trials)
    defaults = FitOptions(max_its=100, tol=TOL, print_iter=0) if options is None else options
    fit, backend_options = FitOptions.gather(defaults, keywords)
    single = [name for name in ("checkpoint_dir", "trace_path") if getattr(fit, name) is not None]
    if single:
        raise SpecError(f"select_k fits several models; {' and '.join(single)} apply to a single fit")
    out = fit.out
    quiet = dataclasses.replace(fit, out=out if fit.print_iter else None, keep_statistics=False)
    pairs = [(k, form) for k in candidates for form in form_list]
    estimators = {(k, form): with_components(estimator, k, form) for k, form in pairs}

    handle, owned = open_handle(data, estimators[pairs[-1]], backend_options, on_encoded)
    vhandle, vowned = None, False
    try:
        n = len(handle)
        if candidates[-1] > n:
            raise TooFewRowsError(
                f"ks: k={candidates[-1]} components need at least as many rows, but the data has {n}"
            )
        if vdata is not None:
            vhandle, vowned = open_handle(vdata, estimators[pairs[-1]], {})
        seeds = trial_seeds(fit.seed, trials) if trials > 1 else [seed_to_int(fit.seed)]
        runs, owners = [], []
        for k, form in pairs:
            for t, trial_seed in enumerate(seeds):
                label = _label(k, form) + ("" if trials == 1 else f" trial {t}") + ": "
                runs.append(fit_routine(quiet, estimators[k, form], seed=trial_seed, label=label))
                owners.append(((k, form), trial_seed))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fitted = fit_together(handle, runs, shared=fit.sdc_audit is None)
        fits: dict[tuple[int, str | None], Distribution] = {}
        won: dict[tuple[int, str | None], int] = {}
        _keep_best(fits, won, owners, fitted)
        starts = dict.fromkeys(pairs, len(seeds))
        again = stalled({pair: model.fit_result.log_likelihood for pair, model in fits.items()}, n)
        if again:  # one more round: every stalled candidate from RESTARTS new seeds, in shared passes
            more = trial_seeds(fit.seed, len(seeds) + RESTARTS)[len(seeds) :]
            runs, owners = [], []
            for pair in again:
                starts[pair] += RESTARTS
                for r, restart_seed in enumerate(more):
                    label = f"{_label(*pair)} restart {r + 1}: "
                    runs.append(fit_routine(quiet, estimators[pair], seed=restart_seed, label=label))
                    owners.append((pair, restart_seed))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                _keep_best(fits, won, owners, fit_together(handle, runs, shared=fit.sdc_audit is None))
        table: list[CandidateFit] = []
        for k, form in pairs:
            model = fits[k, form]
            result = model.fit_result
            params = count_free_parameters(model)
            ic = information_criteria(result.log_likelihood, params, float(n))
            vll = None if vhandle is None else float(vhandle.pysp_seq_log_density_sum(model)[1])
            row = CandidateFit(
                k=k,
                log_likelihood=float(result.log_likelihood),
                free_parameters=params,
                bic=ic["bic"],
                aic=ic["aic"],
                validation_log_likelihood=vll,
                iterations=int(result.n_iter),
                converged=bool(result.converged),
                seconds=float(result.seconds),
                form=form,
                seed=won[k, form],
                starts=starts[k, form],
            )
            table.append(row)
            if out is not None:
                extra = "" if vll is None else f"  validation {vll:.6f}"
                out.write(
                    f"{_label(k, form)}: log-likelihood {row.log_likelihood:.6f}  BIC {row.bic:.3f}  "
                    f"AIC {row.aic:.3f}{extra}  {row.iterations} iterations"
                    f"{'' if row.converged else ' (not converged)'}"
                    f"{f' (best of {row.starts} starts: it stalled)' if row.starts > len(seeds) else ''}\n"
                )
        chosen = _chosen(table, criterion)
        best_k, best_form = chosen.k, chosen.form
        models = {k: fits[_chosen([r for r in table if r.k == k], criterion).k_form] for k in candidates}
        if fit.keep_statistics:  # of the model returned only: one more pass over the data
            best = fits[best_k, best_form]
            best.statistics = collect_statistics(handle, estimators[best_k, best_form], best)
    finally:
        release(handle, owned)
        release(vhandle, vowned)
    _warn_not_converged(fits)
    warn_model_size(fits[best_k, best_form], n)
    if fits[best_k, best_form].fit_result.converged:  # else the warnings above say what to do first
        _warn_at_the_edge(best_k, sorted(candidates), criterion)
    return KSelection(criterion, best_k, fits[best_k, best_form], table, models, best_form, fits)
