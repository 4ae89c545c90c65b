"""How an EM fit runs: :class:`FitOptions`, the one options object of ``optimize``, ``best_of`` and
``select_k``.

Each of them accepts ``options=FitOptions(...)`` and the same names as keywords (a keyword overrides
the object's value); keywords that are not fit options go to ``encoded_data`` (``backend``,
``num_chunks``, ...). The options are data: the fit routine every one of them runs, once per fit,
is :func:`mixle_spark.em.routine.fit_routine`, which reads them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mixle_spark._checks import Check, check_fields, checked, field_check, integer, number, one_of
from mixle_spark._locations import scheme_of
from mixle_spark.em._checkpoint_store import checkpoint_key
from mixle_spark.em._records import DELTA, ON_DEGENERATE, ON_OTHER_DATA, TOL
from mixle_spark.em.seeding import INIT_MODES, Seeding
from mixle_spark.errors import SpecError
from mixle_spark.stats.base import Estimator

__all__ = ["DELTA", "TOL", "TRIALS", "FitOptions", "check_trials", "option_check"]


def _is_audit(value: Any) -> bool:
    """None, True / False (the default audit, none) or an audit (``select`` and ``check``)."""
    return value is None or isinstance(value, bool) or (hasattr(value, "select") and hasattr(value, "check"))


def _is_seed(value: Any) -> bool:
    return value is None or isinstance(value, str) or integer(0).kind(value)


def _seed_value(value: Any) -> int | str | None:
    return value if value is None or isinstance(value, str) else int(value)


TRIALS = integer(1)
"""The check of ``trials``, the restarts of ``best_of`` and ``select_k`` (a spec's fit section, the
job's ``--trials``; not a :class:`FitOptions` field: a fit runs once)."""


def check_trials(trials: Any) -> int:
    """``trials`` (the restarts of ``best_of``, ``select_k``, a spec's fit section) as an int,
    checked by :data:`TRIALS`: a whole number >= 1 (``2.0`` is 2); refused with a SpecError."""
    if TRIALS.fault(trials) is not None:
        raise SpecError(f"trials must be {TRIALS.expected}, got {trials!r}")
    return int(trials)


@dataclass(frozen=True)
class FitOptions:
    """The options of one EM fit, validated when made: a checked field declares its
    :class:`~mixle_spark._checks.Check` beside its default, the one declaration that ``optimize``,
    ``best_of``, ``select_k``, a spec's fit section (:func:`~mixle_spark.spec.load_spec`), the fit
    job's flags and the ML Params (:func:`option_check`) are checked by. A value is kept as the
    check normalizes it (``max_its=5.0`` is 5).

    Attributes
    ----------
    max_its : int
        Most EM iterations (each one E-step and one M-step, one pass over the data).
    delta : float or None
        Stop when the gain of the *total* (weighted) log-likelihood is in ``[0, delta)``; None runs
        exactly ``max_its``. The reference's rule, kept where a call or spec file gives it; its
        meaning grows with the data (``1e-6`` is strict on 5,000 rows and unreachable on 1e7).
    tol : float, optional
        Stop when the gain *per unit of row weight* (per row, for unweighted data) is in
        ``[0, tol)``, as scikit-learn's ``tol``: the same rule on any number of rows. When given it
        replaces ``delta``; giving both (``delta`` other than its default) is refused.
    init_p : float
        Fraction of rows used for a random initial model (``init="random"``), in (0, 1]. (The
        reference read a value <= 0 as 0.1 and one > 1 as 1; both are refused here: ``10`` meant as
        10% would have fitted every row.)
    seed : int, optional
        Seed of the initialization (None means 0: an unseeded fit is deterministic).
    init_estimator : Estimator, optional
        Estimator used only for the initial model (e.g. one with pseudo-counts).
    out : text stream, optional
        Where per-iteration progress lines go (they are always logged at INFO too).
    print_iter : int
        Print every ``print_iter``-th iteration.
    checkpoint_dir : path or URI, optional
        Write a checkpoint there every ``checkpoint_every`` iterations and resume from the newest
        valid one (:mod:`mixle_spark.em.resilient`): an interrupted fit re-run with the same
        arguments continues where it stopped and gives the uninterrupted run's estimates.
    checkpoint_every : int
        Iterations between checkpoints (>= 1).
    resume : bool
        False ignores and replaces existing checkpoints in ``checkpoint_dir``.
    on_other_data : {"raise", "refit"}
        What checkpoints of this fit on *other data* (another content with the same settings:
        yesterday's table in today's run) do: ``raise`` a
        :class:`~mixle_spark.errors.CheckpointMismatchError` naming it (default), or ``refit`` from
        scratch, replacing them (what a scheduled job wants; the fit job's choice), the result saying
        why (``fit_result.checkpoint_refit``). Never resumed either way.
    on_degenerate : {"stop", "floor", "reseed"}
        When an M-step cannot build a mixture component (its statistics are NaN or infinite, e.g.
        squares that overflowed) — caught at that iteration, never passed on: ``stop`` raises
        :class:`~mixle_spark.errors.DegenerateComponentError` naming the iteration and the component
        (``err.last_model`` is the model it started from); ``floor`` keeps the component's previous
        parameters with at least ``FLOOR_WEIGHT`` weight; ``reseed`` restarts it from a fresh random
        sample of rows (drawn from the seed, the iteration and the component) with weight ``1/K``, at
        most ``MAX_RESEEDS`` times per component (then the fit stops as with ``stop``). A component
        left with weight 0 (no rows) is reported in the trace; ``floor`` gives it ``FLOOR_WEIGHT``,
        ``reseed`` restarts it.
    audit : SDCAudit or True, optional
        Silent-corruption audit (:class:`~mixle_spark.em.sdc_audit.SDCAudit`; True = defaults):
        recompute a sample of partitions by an independent pass and compare.
    trace_path : path, optional
        Write the EM trace there as JSON lines while the fit runs (one line per iteration).
    mlflow : bool, optional
        Log per-iteration metrics to MLflow; None (default) does when mlflow is installed and a run
        is active.
    init : {"kmeans||", "random"} or Seeding
        How the starting model is made when no starting model is given
        (:mod:`mixle_spark.em.seeding`). ``"kmeans||"`` (default) seeds mixtures and hidden Markov
        models by distributed k-means|| over a numeric embedding of the records, then builds each
        component from the rows nearest its centre (a few passes over the data); ``"random"`` uses
        random responsibilities over a row sample of fraction ``init_p``. Other models start alike
        either way.
    init_steps : int, optional
        k-means|| rounds (pyspark.ml ``initSteps``; default 2).
    keep_statistics : bool
        Attach to the model the sufficient statistics of its E-step over the data
        (``model.statistics``, saved inside its JSON; taken from the pass that scores the last
        model, so one more pass only when an earlier, better model is returned), so that
        :func:`~mixle_spark.em.incremental.update` can fold new rows into it later.
    checkpoint_key : bytes or str, optional
        Authenticate the checkpoints with this key (HMAC-SHA256, at least 16 bytes): only checkpoints
        written with it are resumed from. Default: the environment variable
        ``MIXLE_SPARK_CHECKPOINT_KEY`` when set; without a key a checkpoint's sha256 finds damage,
        not tampering (see :mod:`mixle_spark.em._checkpoint_store`).
    """

    max_its: int = checked(integer(0), 10)
    delta: float | None = checked(number(0, optional=True), DELTA)
    tol: float | None = checked(number(0, optional=True), None)
    init_p: float = checked(number(0, 1, low_open=True), 0.1)
    seed: int | str | None = checked(
        Check("None, an integer or a string", _is_seed, normal=_seed_value, parse=int), None
    )
    init_estimator: Estimator | None = None
    out: IO[str] | None = None
    print_iter: int = checked(integer(0), 1)
    checkpoint_dir: str | os.PathLike[str] | None = None
    checkpoint_every: int = checked(integer(1), 1)
    resume: bool = checked(Check("True or False", lambda v: type(v) is bool), True)
    on_other_data: str = checked(one_of(ON_OTHER_DATA), "raise")
    on_degenerate: str = checked(one_of(ON_DEGENERATE), "stop")
    audit: Any = checked(Check("an SDCAudit, True or None", _is_audit), None)
    trace_path: str | os.PathLike[str] | None = None
    mlflow: bool | None = checked(Check("True, False or None", lambda v: v is None or type(v) is bool), None)
    init: str | Seeding = checked(
        one_of(INIT_MODES, also=lambda v: isinstance(v, Seeding), also_words="a Seeding"), "kmeans||"
    )
    init_steps: int | None = checked(integer(1, optional=True), None)
    keep_statistics: bool = checked(Check("True or False", lambda v: type(v) is bool), False)
    checkpoint_key: bytes | str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.tol is not None and self.delta is not None and self.delta != DELTA:
            raise SpecError(
                f"give one stopping rule: tol={self.tol!r} (a gain per row) or delta={self.delta!r} "
                "(a gain of the total log-likelihood), not both"
            )
        seeding = Seeding.build(self.init, self.init_steps)
        if self.checkpoint_key is not None:  # None: the environment's key, read when the fit starts
            checkpoint_key(self.checkpoint_key)
        audit: Any = self.audit
        if audit is True:
            from mixle_spark.em.sdc_audit import SDCAudit

            audit = SDCAudit()
        # What the fit runs, resolved once (the fields keep what was given).
        object.__setattr__(self, "_seeding", seeding)
        object.__setattr__(self, "_audit", None if audit is False else audit)

    @property
    def stops(self) -> bool:
        """Whether the fit stops on a small gain (``tol`` or ``delta``), not only at ``max_its``."""
        return self.tol is not None or self.delta is not None

    def stop_gain(self, weight: float) -> float | None:
        """The gain of the total log-likelihood below which a fit over rows of total ``weight``
        has converged: ``tol * weight`` when ``tol`` is given, else ``delta`` (None: never)."""
        return self.tol * float(weight) if self.tol is not None else self.delta

    @property
    def stopping(self) -> str:
        """The stopping rule in words, for messages: ``tol=1e-06 per row`` or ``delta=1e-09``."""
        return f"tol={self.tol!r} per row" if self.tol is not None else f"delta={self.delta!r}"

    @property
    def seeding(self) -> Seeding:
        """How the fit starts: ``init`` with ``init_steps`` applied."""
        return self._seeding  # type: ignore[no-any-return, attr-defined]

    @property
    def sdc_audit(self) -> Any:
        """The :class:`~mixle_spark.em.sdc_audit.SDCAudit` the fit runs (``audit=True``: the
        defaults), or None."""
        return self._audit  # type: ignore[attr-defined]

    @classmethod
    def gather(
        cls, options: FitOptions | None, keywords: Mapping[str, Any]
    ) -> tuple[FitOptions, dict[str, Any]]:
        """``(options with the keywords that name fit options applied, the other keywords)``."""
        if options is not None and not isinstance(options, FitOptions):
            raise TypeError(f"options must be a FitOptions, got {type(options).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        mine = {k: v for k, v in keywords.items() if k in names}
        rest = {k: v for k, v in keywords.items() if k not in names}
        base = options if options is not None else cls()
        if mine.get("tol") is not None and mine.get("delta") is not None:
            raise SpecError(
                f"give one stopping rule: tol={mine['tol']!r} (a gain per row) or "
                f"delta={mine['delta']!r} (a gain of the total log-likelihood), not both"
            )
        if "delta" in mine and "tol" not in mine:
            mine["tol"] = None  # the call's rule replaces the options' own
        elif mine.get("tol") is not None and "delta" not in mine:
            mine["delta"] = DELTA
        return (dataclasses.replace(base, **mine) if mine else base), rest

    def for_trial(self, k: int, seed: int) -> FitOptions:
        """The options of restart ``k`` of ``best_of``: its seed, and checkpoints and a trace file of
        its own (``checkpoint_dir/trial-K``, ``NAME.trial-K.jsonl`` next to ``trace_path``)."""
        directory = self.checkpoint_dir
        checkpoints = None if directory is None else f"{str(directory).rstrip('/')}/trial-{k}"
        trace: str | Path | None = None
        if self.trace_path is not None:  # as text: Path() would fold a URI's '//' (viewfs://host/x)
            folder, slash, name = os.fspath(self.trace_path).rpartition("/")
            stem, dot, suffix = name.rpartition(".")
            named = f"{stem}.trial-{k}.{suffix}" if dot and stem else f"{name}.trial-{k}.jsonl"
            uri = scheme_of(os.fspath(self.trace_path)) is not None
            trace = folder + slash + named if uri else Path(folder + slash + named)
        return dataclasses.replace(
            self, seed=seed, checkpoint_dir=checkpoints, trace_path=trace, keep_statistics=False
        )  # best_of keeps the statistics of the trial it returns only


def option_check(name: str) -> Check:
    """The declared check of fit option ``name`` (a :class:`FitOptions` field, or ``trials``): what
    the job's flags and the ML Params that stand for the option run."""
    return TRIALS if name == "trials" else field_check(FitOptions, name)
