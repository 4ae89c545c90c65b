"""Special functions for families' cdfs, survival functions and quantiles, in plain numpy (the
numerical core does not depend on scipy).

* :func:`log1m_exp` - ``log(1 - exp(-a))`` for ``a >= 0``, accurate at both ends: a cdf or a survival
  function from the log of its complement (Maechler 2012, "Accurately computing log(1 - exp(-|a|))").

All accept a scalar (returning a float) or an array (returning an array of the same shape).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["log1m_exp"]

_LN2 = math.log(2.0)


def log1m_exp(a: Any) -> Any:
    """``log(1 - exp(-a))`` for ``a >= 0``: ``log(-expm1(-a))`` up to ``a = ln 2``, ``log1p(-exp(-a))``
    beyond (Maechler 2012), so neither end loses digits; ``-inf`` at 0, NaN below it.

    >>> round(log1m_exp(50.0) / -math.exp(-50.0), 12)
    1.0
    """
    x = np.asarray(a, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(x <= _LN2, np.log(-np.expm1(-x)), np.log1p(-np.exp(-x)))
    return float(out) if out.ndim == 0 else out
