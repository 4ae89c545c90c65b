"""The fit job's ``--update-from`` mode on its command line (:mod:`mixle_spark.cli.update` runs it): its
flags, checked by the declarations :func:`mixle_spark.em.incremental.update` checks its keywords by,
what it refuses (the fit-only flags: the model and its spec come from ``--update-from``), and the
``update`` keywords they become."""

from __future__ import annotations

import argparse
from typing import Any

from mixle_spark.em._records import TOL
from mixle_spark.em.incremental import METHODS, TIME_UNITS, UPDATE_CHECKS  # update()'s checks

__all__ = [
    "FIT_ONLY",
    "ON_DRIFT",
    "UPDATE_ONLY",
    "add_update_arguments",
    "check_update_arguments",
    "update_options",
]

REFIT_OPTIONS = {"max_its": 200, "tol": TOL}
"""How ``--on-drift refit`` fits the new rows from scratch (until converged, as the bundled spec fits)."""

ON_DRIFT = {"warn": "warn", "fail": "raise", "refit": "refit"}
"""``--on-drift`` -> ``update(on_drift=...)``: a job fails (exit code 3) where the API raises."""

# (dest, flag) of what only a fit reads: refused with --update-from, whose model and spec come from DIR
FIT_ONLY = (
    ("model", "--model"),
    ("infer_spec", "--infer-spec"),
    ("k", "--k"),
    ("forms", "--forms"),
    ("label_column", "--label-column"),
    ("init_model", "--init-model"),
    ("trials", "--trials"),
    ("checkpoint_dir", "--checkpoint-dir"),
    ("seed", "--seed"),
    ("init", "--init"),
    ("init_steps", "--init-steps"),
    ("init_p", "--init-p"),
    ("print_iter", "--print-iter"),
    ("criterion", "--criterion"),
    ("report", "--report"),
    ("trace", "--trace"),
    ("statistics", "--no-statistics"),
    ("checkpoint_every", "--checkpoint-every"),
    ("resume", "--no-resume"),
    ("checkpoint_key_file", "--checkpoint-key-file"),
    ("on_degenerate", "--on-degenerate"),
    ("audit_every", "--audit-every"),
    ("audit_fraction", "--audit-fraction"),
)
# (dest, flag) of what only --update-from reads (each defaults to None: given or not, it is known)
UPDATE_ONLY = (
    ("method", "--method"),
    ("decay", "--decay"),
    ("half_life", "--half-life"),
    ("time_unit", "--time-unit"),
    ("alpha", "--alpha"),
    ("max_drop", "--max-drop"),
    ("on_drift", "--on-drift"),
)


def add_update_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--update-from`` mode's flags (:func:`mixle_spark.em.incremental.update`'s options)."""
    update = parser.add_argument_group(
        "update a fitted model with new rows (--update-from DIR --input NEW --output OUT)"
    )
    update.add_argument(
        "--update-from",
        metavar="DIR",
        help="fold the rows of --input into the model in DIR (an em_fit output, or a model.json) "
        "without reading the rows it was fitted to; write the updated model and a summary to --output",
    )
    update.add_argument(
        "--method",
        choices=METHODS,
        help="incremental (default): up to --max-its passes over the new rows, the kept statistics "
        "fixed; stepwise: one pass, moving the statistics by a step (k + 2) ** -alpha",
    )
    update.add_argument(
        "--decay",
        type=UPDATE_CHECKS["decay"].argument("number"),
        metavar="F",
        help="multiply the kept statistics by F first: per update, or per new row with --time-unit "
        "points (default 1: forget nothing)",
    )
    update.add_argument(
        "--half-life",
        type=UPDATE_CHECKS["half_life"].argument("number"),
        metavar="H",
        help="instead of --decay: the kept statistics' weight halves every H updates (or new rows)",
    )
    update.add_argument(
        "--time-unit",
        choices=TIME_UNITS,
        help="what --decay and --half-life count: batches (updates, default) or points (new rows)",
    )
    update.add_argument(
        "--alpha",
        type=UPDATE_CHECKS["alpha"].argument("number"),
        metavar="A",
        help="--method stepwise: the step size's exponent (default 0.7)",
    )
    update.add_argument(
        "--max-drop",
        type=UPDATE_CHECKS["max_drop"].argument("number"),
        metavar="NATS",
        help="drift limit: the new rows' mean log-likelihood more than NATS per row below that of the "
        "rows the model holds (before the update) is drift, acted on by --on-drift",
    )
    update.add_argument(
        "--on-drift",
        choices=tuple(ON_DRIFT),
        help="past --max-drop: warn and update (default), fail (exit code 3, nothing written) or "
        "refit the new rows from scratch",
    )


_UNSET = object()


def _apply(flags: list[str]) -> str:
    """``--a applies`` / ``--a, --b apply``."""
    return f"{', '.join(flags)} appl{'ies' if len(flags) == 1 else 'y'}"


def _given(parser: argparse.ArgumentParser, argv: list[str] | None, dests: list[str]) -> set[str]:
    """Which of ``dests`` the command line gives (a flag repeating its default counts): parsed again
    with them preset, as argparse sets a default only where the namespace has no value yet."""
    probe = argparse.Namespace(**dict.fromkeys(dests, _UNSET))
    parser.parse_known_args(argv, probe)
    return {dest for dest in dests if getattr(probe, dest) is not _UNSET}


def check_update_arguments(
    parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str] | None
) -> None:
    """Without ``--update-from``: its flags refused. With it: the fit-only flags and conflicting
    update flags refused (exit code 2, one line), and the update flags' defaults filled in."""
    if args.update_from is None:
        update_only = [flag for dest, flag in UPDATE_ONLY if getattr(args, dest) is not None]
        if update_only:
            parser.error(f"{_apply(update_only)} with --update-from")
        return
    given = _given(parser, argv, [dest for dest, _ in FIT_ONLY])
    fit_only = [flag for dest, flag in FIT_ONLY if dest in given]
    if fit_only:
        parser.error(
            f"--update-from takes the model and its spec from {args.update_from}; {_apply(fit_only)} to a fit"
        )
    if args.input is None or args.output is None:
        parser.error("--update-from needs --input (the new rows) and --output")
    if args.decay is not None and args.half_life is not None:
        parser.error("give --decay or --half-life, not both")
    if args.time_unit is not None and args.decay is None and args.half_life is None:
        parser.error("--time-unit needs --decay or --half-life")
    if args.on_drift is not None and args.max_drop is None:
        parser.error("--on-drift needs --max-drop")
    args.method = args.method or METHODS[0]
    if args.method == "stepwise":
        one_pass = [
            flag
            for dest, flag in (("max_its", "--max-its"), ("tol", "--tol"), ("delta", "--delta"))
            if getattr(args, dest) is not None
        ]
        if one_pass:
            parser.error(
                f"--method stepwise makes one pass over the new rows; {_apply(one_pass)} to --method "
                "incremental"
            )
    elif args.alpha is not None:
        parser.error("--alpha applies to --method stepwise")
    passes = UPDATE_CHECKS["max_its"]
    if args.max_its is not None and passes.fault(args.max_its) is not None:
        parser.error(
            f"argument --max-its: with --update-from, expected {passes.expected} (update passes), "
            f"got {args.max_its}"
        )
    args.time_unit = args.time_unit or TIME_UNITS[0]
    args.on_drift = args.on_drift or "warn"


def update_options(args: argparse.Namespace) -> dict[str, Any]:
    """:func:`~mixle_spark.em.incremental.update`'s keywords from the ``--update-from`` mode's flags
    (a flag left out: update's default)."""
    options: dict[str, Any] = {
        "method": args.method,
        "time_unit": args.time_unit,
        "on_drift": ON_DRIFT[args.on_drift],
        "refit_options": REFIT_OPTIONS,
    }
    for key in ("decay", "half_life", "alpha", "max_its", "tol", "delta", "max_drop"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    return options
