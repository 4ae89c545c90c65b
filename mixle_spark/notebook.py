"""Small helpers that let the same notebook run on Databricks and as a plain local Python script.

>>> widget("rows", "1000", environ={})
'1000'
>>> widget("rows", "1000", environ={"MIXLE_WIDGET_ROWS": "50"})
'50'
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["display_html", "widget"]


def _dbutils() -> Any:
    """Databricks' ``dbutils`` from the notebook's namespace, or None outside Databricks."""
    main = sys.modules.get("__main__")
    return getattr(main, "dbutils", None)


def widget(
    name: str, default: str, label: str | None = None, environ: Mapping[str, str] | None = None
) -> str:
    """A text widget's value: created with ``default`` on Databricks; elsewhere the environment
    variable ``MIXLE_WIDGET_<NAME>`` (upper case) or ``default``."""
    dbutils = _dbutils()
    if dbutils is not None:
        dbutils.widgets.text(name, default, label or name)
        return str(dbutils.widgets.get(name))
    env = os.environ if environ is None else environ
    return env.get(f"MIXLE_WIDGET_{name.upper()}", default)


def display_html(html: str) -> None:
    """Show ``html`` in the notebook (Databricks ``displayHTML``); elsewhere print its size."""
    main = sys.modules.get("__main__")
    show = getattr(main, "displayHTML", None)
    if show is not None:
        show(html)
    else:
        print(f"(HTML output, {len(html):,} characters; open the written file in a browser)")
