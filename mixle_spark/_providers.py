"""Families registered by a module outside :mod:`mixle_spark.stats`, declared by name so that a spec
reads them, and an unknown family's error lists them, whatever the caller imported.

The statistics layer knows no backend: the package's entry (``mixle_spark/__init__.py``, which runs
before any of its modules) declares here which module registers such a family, and the family
registry (:mod:`mixle_spark.stats._registry`) imports that module when a spec names the family or
the registered families are listed. Nothing is imported when a family is declared.
"""

from __future__ import annotations

__all__ = ["declare_family", "declared_families"]

_FAMILIES: dict[str, str] = {}


def declare_family(name: str, module: str) -> None:
    """Importing ``module`` registers the estimator family ``name`` (case-insensitive)."""
    _FAMILIES[name.lower()] = module


def declared_families() -> dict[str, str]:
    """Family name -> the module that registers it, for every declared family."""
    return dict(_FAMILIES)
