"""Which distributed engine a data object belongs to, told by its type alone (no engine is imported).

One place for the test every layer needs (the backend registry's defaults, planning's row counts and
samples, the jobs' report sample): a pyspark DataFrame (classic or Connect), a Dask DataFrame or a
Ray Dataset.
"""

from __future__ import annotations

from typing import Any

__all__ = ["frame_engine"]

_ENGINES = (
    ("spark", "pyspark.sql", ("DataFrame",)),
    ("dask", "dask", ("DataFrame",)),
    ("ray", "ray.data", ("Dataset", "MaterializedDataset")),
)


def frame_engine(data: Any) -> str | None:
    """``"spark"``, ``"dask"`` or ``"ray"`` for a DataFrame / Dataset of that engine, else None.

    >>> frame_engine([1.0, 2.0]) is None
    True
    """
    cls = type(data)
    module = cls.__module__ or ""
    for engine, prefix, names in _ENGINES:
        if cls.__name__ in names and (module == prefix or module.startswith(prefix + ".")):
            return engine
    return None
