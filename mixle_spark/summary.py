"""Plain-text summaries of fitted models (for jobs and notebooks), built from ``to_dict()``."""

from __future__ import annotations

from typing import Any

from mixle_spark.stats.base import Distribution

__all__ = ["describe_model"]


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
