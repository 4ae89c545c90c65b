"""How an EM fit runs: :class:`FitOptions`, the one options object of ``optimize``, ``best_of`` and
``select_k``.

Each of them accepts ``options=FitOptions(...)`` and the same names as keywords (a keyword overrides
the object's value); keywords that are not fit options go to ``encoded_data`` (``backend``,
``num_chunks``, ...). :meth:`FitOptions.fit` is the fit routine every one of them runs, once per fit.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from mixle_spark.em._records import Progress
from mixle_spark.em._run import EMRun, Settings
from mixle_spark.em.seeding import Seeding
from mixle_spark.stats._random import seed_to_int
from mixle_spark.stats.base import Distribution, Estimator

__all__ = ["FitOptions"]


@dataclass(frozen=True)
class FitOptions:
    """The options of one EM fit, validated when made.

    Attributes
    ----------
    max_its : int
        Most EM iterations (each one E-step and one M-step, one pass over the data).
    delta : float or None
        Stop when the log-likelihood gain is in ``[0, delta)``; None runs exactly ``max_its``.
    init_p : float
        Fraction of rows used for a random initial model (``init="random"``).
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
    checkpoint_key : bytes or str, optional
        Authenticate the checkpoints with this key (HMAC-SHA256, at least 16 bytes): only checkpoints
        written with it are resumed from. Default: the environment variable
        ``MIXLE_SPARK_CHECKPOINT_KEY`` when set; without a key a checkpoint's sha256 finds damage,
        not tampering (see :mod:`mixle_spark.em._checkpoint_store`).
    """

    max_its: int = 10
    delta: float | None = 1e-9
    init_p: float = 0.1
    seed: int | None = None
    init_estimator: Estimator | None = None
    out: IO[str] | None = None
    print_iter: int = 1
    checkpoint_dir: str | os.PathLike[str] | None = None
    checkpoint_every: int = 1
    resume: bool = True
    on_degenerate: str = "stop"
    audit: Any = None
    trace_path: str | os.PathLike[str] | None = None
    mlflow: bool | None = None
    init: str | Seeding = "kmeans||"
    init_steps: int | None = None
    checkpoint_key: bytes | str | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.max_its < 0:
            raise ValueError(f"max_its must be >= 0, got {self.max_its}")
        if self.delta is not None and not (self.delta >= 0):
            raise ValueError(f"delta must be >= 0 or None, got {self.delta}")
        self.settings()  # the reliability options are checked now, not at the first iteration

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
        return (dataclasses.replace(base, **mine) if mine else base), rest

    def settings(self) -> Settings:
        """The reliability and observability options, validated (the fit's :class:`Settings`)."""
        return Settings.build(
            self.checkpoint_dir,
            self.checkpoint_every,
            self.resume,
            self.on_degenerate,
            self.audit,
            self.trace_path,
            self.mlflow,
            self.init,
            self.init_steps,
            self.checkpoint_key,
        )

    def fit(
        self,
        estimator: Estimator,
        *,
        seed: int | None = None,
        prev_estimate: Distribution | None = None,
        vhandle: Any = None,
        label: str = "",
        settings: Settings | None = None,
        started: float | None = None,
    ) -> Callable[[Any], Distribution]:
        """The fit routine: ``run(handle) -> model``, one EM fit of ``estimator`` over ``handle``.

        ``seed`` overrides the options' seed (a restart's); ``label`` prefixes its progress lines;
        ``settings`` overrides :meth:`settings` (a restart's own checkpoint directory and trace);
        ``started`` is when the fit's clock started (default: when ``run`` is called)."""
        use_settings = self.settings() if settings is None else settings

        def run(handle: Any) -> Distribution:
            return self._em_run(
                handle, estimator, seed, prev_estimate, vhandle, label, use_settings, started
            ).run()

        return run

    def _em_run(
        self,
        handle: Any,
        estimator: Estimator,
        seed: int | None,
        prev_estimate: Distribution | None,
        vhandle: Any,
        label: str,
        settings: Settings,
        started: float | None,
    ) -> EMRun:
        """The one fit these options describe, over ``handle``."""
        return EMRun(
            handle,
            vhandle,
            estimator,
            self.max_its,
            self.delta,
            self.init_p,
            seed_to_int(self.seed if seed is None else seed),
            prev_estimate,
            self.init_estimator,
            Progress(self.out, self.print_iter, label),
            time.perf_counter() if started is None else started,
            settings,
        )

    def finished(
        self, estimator: Estimator, rows: int, *, prev_estimate: Distribution | None = None
    ) -> Distribution | None:
        """The model of this fit when ``checkpoint_dir`` holds its final checkpoint (same estimator,
        options and row count), without reading the data; None when the fit has to run."""
        if self.checkpoint_dir is None or not self.resume:
            return None
        run = self._em_run(_Rows(rows), estimator, None, prev_estimate, None, "", self.settings(), None)
        return run.finished()


class _Rows:
    """What a finished fit's checkpoint is checked against without the data: its row count."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n
