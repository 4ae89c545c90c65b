"""The fit job's ``--engine`` and ``--precision``: the compute engine of the E-step and the precision the
encoded data is stored and computed in (:mod:`mixle_spark.engines`), with their checks.

They override the spec's fit section (``"engine"``, ``"precision"``) and reach ``encoded_data`` with the
backend's other controls, in a fit and in an ``--update-from`` update alike; each backend stores its
data at that precision or refuses it in one line. What the command line and the spec ask for together
is checked before any data is read or anything written (an engine that is not installed names its
extra; bf16 with numpy names the engine that computes it), and summary.json records what the fit ran
with (``compute``).

``em_score`` has neither flag: it scores through ``mixle_spark.scoring.score`` (one Arrow pass per
batch with the model's own float64 kernels), not through ``encoded_data``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from mixle_spark.engines import available_engines, precision_name, resolve_compute
from mixle_spark.errors import SpecError

__all__ = ["add_compute_arguments", "check_compute_arguments", "checked_compute", "compute_summary"]

PRECISION_CHOICES = ("float64", "float32", "bf16")
"""The ``--precision`` values the help lists (their aliases are accepted too: fp32, bfloat16, ...)."""


def _engine(value: str) -> str:
    name = value.strip().lower()
    if name not in available_engines():
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a compute engine; expected one of {', '.join(available_engines())}"
        )
    return name


def _precision(value: str) -> str:
    try:
        return str(precision_name(value))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a precision; expected one of {', '.join(PRECISION_CHOICES)}"
        ) from None


def add_compute_arguments(group: Any) -> None:
    """``--engine`` and ``--precision`` in the job's execution group."""
    group.add_argument(
        "--engine",
        type=_engine,
        metavar="{" + ",".join(available_engines()) + "}",
        help="compute engine of the E-step: numpy (default) or torch (CPU, or CUDA when available; "
        "pip install 'mixle-spark[torch]'); default: the spec's fit section, else numpy",
    )
    group.add_argument(
        "--precision",
        type=_precision,
        metavar="{" + ",".join(PRECISION_CHOICES) + "}",
        help="precision the encoded data is stored and the E-step computed in: float64 (default), "
        "float32 (numpy or torch: half the bytes, a faster E-step, log-likelihood within 1e-5 "
        "relative) or bf16 (torch); statistics are summed in float64 either way; default: the spec's "
        "fit section, else float64",
    )


def check_compute_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--engine`` with ``--precision`` checked together (exit code 2, one line, nothing written):
    an engine that is not installed names its extra, bf16 with numpy the engine that computes it."""
    if args.engine is None and args.precision is None:
        return
    try:
        resolve_compute(args.engine, args.precision)
    except (ValueError, ImportError) as err:
        parser.error(f"--engine / --precision: {err}")


def checked_compute(options: dict[str, Any]) -> None:
    """The fit's ``engine`` / ``precision`` (the command line's over the spec's) checked together, and
    kept under their canonical names; a combination no engine computes (or an engine not installed)
    raises :class:`~mixle_spark.errors.SpecError` in one line (exit code 2)."""
    if options.get("engine") is None and options.get("precision") is None:
        return
    try:
        compute = resolve_compute(options.get("engine"), options.get("precision"))
    except (ValueError, ImportError) as err:
        raise SpecError(f"engine / precision (the command line's over the spec's): {err}") from None
    for key in ("engine", "precision"):
        if options.get(key) is not None:
            options[key] = getattr(compute, key)


def compute_summary(options: Mapping[str, Any]) -> dict[str, str]:
    """summary.json's ``compute``: the engine and precision the fit asked for (defaults filled in)."""
    return {
        "engine": str(options.get("engine") or "numpy"),
        "precision": str(options.get("precision") or "float64"),
    }
