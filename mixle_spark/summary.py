"""Summaries of fitted models (for jobs and notebooks), built from ``to_dict()``: a plain-text
description, the number of free parameters, and information criteria (BIC / AIC)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from mixle_spark.stats.base import Distribution

__all__ = ["count_free_parameters", "describe_model", "information_criteria"]


def _number(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _params(spec: dict[str, Any]) -> str:
    parts = []
    for key, value in spec.items():
        if key == "type":
            continue
        if key == "pmap" and isinstance(value, list):
            top = sorted(value, key=lambda kv: -kv[1])[:4]
            more = f", ... {len(value) - 4} more" if len(value) > 4 else ""
            parts.append("{" + ", ".join(f"{k!r}: {p:.3f}" for k, p in top) + more + "}")
        elif isinstance(value, list) and value and all(isinstance(x, (int, float)) for x in value):
            shown = ", ".join(_number(x) for x in value[:6]) + (", ..." if len(value) > 6 else "")
            parts.append(f"{key}=[{shown}]")
        elif isinstance(value, list):
            parts.append(f"{key}=<{len(value)} rows>")
        elif isinstance(value, dict):
            parts.append(f"{key}={_line(value)}")
        else:
            parts.append(f"{key}={_number(value)}")
    return ", ".join(parts)


def _line(spec: dict[str, Any]) -> str:
    return f"{spec.get('type', '?')}({_params(spec)})"


def _describe(spec: dict[str, Any], indent: str) -> list[str]:
    kind = spec.get("type")
    if kind == "mixture":
        lines = []
        for k, (w, comp) in enumerate(zip(spec["w"], spec["components"], strict=True)):
            lines.append(f"{indent}component {k}  weight {w:.4f}")
            lines += _describe(comp, indent + "    ")
        return lines
    if kind == "record":
        lines = []
        for name, child in spec["fields"].items():
            if child.get("type") in ("record", "mixture"):
                lines.append(f"{indent}{name}:")
                lines += _describe(child, indent + "    ")
            else:
                lines.append(f"{indent}{name}: {_line(child)}")
        return lines
    return [indent + _line(spec)]


def describe_model(model: Distribution) -> str:
    """A multi-line, human-readable summary: mixture weights, then each field's parameters."""
    return "\n".join(_describe(model.to_dict(), ""))


def _size(value: Any) -> int:
    """How many numbers ``value`` (a number or a nested list of numbers) holds."""
    if isinstance(value, list | tuple):
        return sum(_size(v) for v in value)
    return 1 if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _children(spec: Mapping[str, Any]) -> int:
    return sum(_free(v) for v in spec.values() if isinstance(v, Mapping)) + sum(
        _free(c) for v in spec.values() if isinstance(v, list) for c in v if isinstance(c, Mapping)
    )


def _mvn(spec: Mapping[str, Any]) -> int:
    d = len(spec["mu"])
    return d + d * (d + 1) // 2


# Families whose to_dict() numbers are not all free: what each one really estimates.
_FREE: dict[str, Callable[[Mapping[str, Any]], int]] = {
    "categorical": lambda s: max(len(s["pmap"]) - 1, 0),  # probabilities sum to one
    "integer_categorical": lambda s: max(len(s["p_vec"]) - 1, 0),  # min_val is the support
    "binomial": lambda s: 1,  # n (trials) is given, not estimated
    "multivariate_gaussian": _mvn,  # covar is symmetric
    "mixture": lambda s: max(len(s["w"]) - 1, 0) + sum(_free(c) for c in s["components"]),
    "ignored": lambda s: 0,
    # token probabilities sum to one; the length model adds its own
    "multinomial": lambda s: max(len(s["pmap"]) - 1, 0) + _children(s),
    # initial and each transition row sum to one; emissions and the length model add their own
    # initial (K - 1) and each transition row (K (K - 1)) sum to one; the length model adds its own
    "markov_chain": lambda s: len(s["initial"]) ** 2 - 1 + _children(s),
    "hidden_markov": lambda s: len(s["initial"]) ** 2 - 1 + _children(s),
}


def _free(spec: Mapping[str, Any]) -> int:
    rule = _FREE.get(str(spec.get("type")))
    if rule is not None:
        return rule(spec)
    own = sum(_size(v) for k, v in spec.items() if k != "type" and not isinstance(v, Mapping))
    return own + _children(spec)


def count_free_parameters(model: Distribution) -> int:
    """The number of free parameters of ``model``, counted from ``model.to_dict()``.

    Every number in the model's dict counts, less the constraints of the families that have them:
    probability vectors (categorical, integer-categorical, mixture weights) sum to one, a full
    covariance is symmetric (``d (d + 1) / 2``), a binomial's ``n`` and an integer-categorical's
    ``min_val`` are given, not fitted; a multinomial's token probabilities and a hidden Markov model's
    initial and transition rows sum to one. Combinators (record, composite, optional, sequence) add their
    parts; an optional's missing-value probability counts as one.

    This is an approximation where parameters are tied across components (estimator ``keys``):
    tied copies are counted again, so BIC / AIC over-penalise such models.

    >>> from mixle_spark.stats import CategoricalDistribution, GaussianDistribution, MixtureDistribution
    >>> count_free_parameters(GaussianDistribution(0.0, 1.0))
    2
    >>> count_free_parameters(MixtureDistribution(
    ...     [CategoricalDistribution({"a": 0.5, "b": 0.5}), CategoricalDistribution({"a": 0.1, "b": 0.9})],
    ...     [0.3, 0.7]))
    3
    """
    return _free(model.to_dict())


def information_criteria(log_likelihood: float, n_parameters: int, n_rows: float) -> dict[str, float]:
    """``{"bic": k ln(n) - 2 ll, "aic": 2 k - 2 ll}`` (lower is better).

    >>> {k: round(v, 3) for k, v in information_criteria(-100.0, 2, 50).items()}
    {'bic': 207.824, 'aic': 204.0}
    """
    if n_rows <= 0:
        raise ValueError(f"n_rows must be positive, got {n_rows}")
    return {
        "bic": n_parameters * math.log(n_rows) - 2.0 * log_likelihood,
        "aic": 2.0 * n_parameters - 2.0 * log_likelihood,
    }
