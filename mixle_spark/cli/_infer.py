"""``em_fit --infer-spec``: the spec the fit job fits, inferred from its input table
(:func:`mixle_spark.infer.infer_spec`), and the spec file it writes beside the model."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, TextIO

from mixle_spark.infer import InferredSpec, infer_spec
from mixle_spark.jobspec import ModelSpec
from mixle_spark.spec import estimator_from_spec

__all__ = [
    "INFERRED_SPEC_FILE",
    "infer_fit_spec",
    "inferred_spec_text",
    "refuse_with_infer_spec",
]

INFERRED_SPEC_FILE = "spec.json"
"""The spec ``--infer-spec`` chose, written beside model.json (a spec file ``--model`` reads)."""

_WITH_A_SPEC = ("label_column", "init_model", "forms")
"""Flags that need a spec given with ``--model`` (a labelled column, a starting model of the spec's
shape, covariance forms of a Gaussian mixture)."""


def refuse_with_infer_spec(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--infer-spec`` reads ``--input`` with Spark or locally and replaces ``--model``: refuse, by
    name, what does not go with it (exit code 2)."""
    if args.model is not None:
        parser.error("--infer-spec infers the spec that --model would give: give one of them")
    if args.input is None:
        parser.error("--infer-spec needs --input (the table whose spec it infers)")
    clash = [f"--{name.replace('_', '-')}" for name in _WITH_A_SPEC if getattr(args, name) is not None]
    if clash:
        parser.error(
            f"{', '.join(clash)} need{'s' if len(clash) == 1 else ''} a spec given with --model, "
            "not --infer-spec"
        )
    if args.backend not in ("spark", "local"):
        parser.error(f"--infer-spec reads the input with --backend spark or local, not {args.backend}")


def infer_fit_spec(
    data: Any, args: argparse.Namespace, log: TextIO | None, timings: dict[str, float]
) -> tuple[ModelSpec, InferredSpec]:
    """The spec the job fits: the record inferred from ``data``, a mixture of it when ``--k`` chooses
    the number of segments (select_k repeats the component); the reasons go to ``log``."""
    t0 = time.perf_counter()
    inferred = infer_spec(data, seed=0 if args.seed is None else args.seed)
    timings["infer_spec"] = time.perf_counter() - t0
    if log is not None:
        print(
            f"em_fit: inferred a spec for {len(inferred.spec['fields'])} columns from {inferred.rows} rows "
            f"(candidates fitted on {inferred.sample_rows}):",
            file=log,
        )
        for line in inferred.reasons:
            print(f"  {line}", file=log)
    record = inferred.spec
    estimator = {"type": "mixture", "k": 1, "component": record} if args.ks is not None else record
    return ModelSpec(estimator_from_spec(estimator), description="inferred by em_fit --infer-spec"), inferred


def inferred_spec_text(model: Any, inferred: dict[str, Any]) -> str:
    """What spec.json holds (``inferred``: :meth:`InferredSpec.to_dict`): a spec file ``em_fit --model``
    reads, of the fitted model's shape (the mixture at the number of components chosen, or the record
    alone), its description the reasons."""
    estimator: dict[str, Any] = inferred["spec"]
    components = getattr(model, "components", None)
    if components is not None:
        estimator = {"type": "mixture", "k": len(components), "component": estimator}
    description = "inferred by em_fit --infer-spec: " + "; ".join(inferred["reasons"])
    return json.dumps({"estimator": estimator, "description": description}, indent=2) + "\n"
