"""The generalized extreme value family's pass sums and its monotone M-step (see
:mod:`mixle_spark.stats.generalized_extreme_value` for the derivation and its sources).

At the anchor ``(xi0, mu0, sigma0)`` (the current model) a row has ``z = (x - mu0) / sigma0``,
``u = 1 + xi0 z``, ``H = log(u) / xi0`` (``z`` at ``xi0 = 0``), ``E = exp(-H)`` and log-density
``-log sigma0 + psi(z)`` with ``psi = -(1 + xi0) H - E``. The pass sums, over rows of positive weight,

* ``OUT`` the weight outside the support (``u <= 0``), ``PSI = Σw psi``,
* ``G = Σw psi'(z) (1, z)`` with ``psi' = (E - 1 - xi0) / u``,
* ``SA = Σw u^-2 (1, z, z^2)`` and ``SB = Σw E u^-2 (1, z, z^2)`` (the location-scale step's curvature
  bounds),
* ``DPSI_c = Σw (psi_c - psi)`` and ``OUT_c`` at every candidate shape ``xi0 + s STEPS_j`` (``s = ±1``) with
  ``mu0``, ``sigma0`` kept: the shape step's exact gains, summed row by row so that a small gain is not
  lost to the rounding of two large sums.

Every entry is a finite weighted sum of the rows, so partitions merge by addition and scale exactly.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["CANDIDATES", "WIDTH", "anchor_sums", "location_scale_step", "shape_step"]

STEPS = 0.5 * 2.0 ** -np.arange(30, dtype=np.float64)
"""Shape moves ``0.5, 0.25, ..., 0.5 * 2^-29`` either way: the best of them is within a factor ~1/3 of the
shape's conditional optimum, at every scale down to ~1e-9."""
CANDIDATES = np.concatenate([STEPS, -STEPS])
_REGIONS = 2.0 ** -np.arange(1, 40, dtype=np.float64)
"""Relative sizes ``d`` of the regions ``|dz| <= d u / max(1, |xi0|)`` the location-scale step may move in."""
_HEAD = 10
WIDTH = _HEAD + 2 * len(CANDIDATES)


def _psi(z: np.ndarray, xi: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(inside, u, E, psi)`` for standardized values ``z`` at shape ``xi`` (``psi = 0`` outside)."""
    u = 1.0 + xi * z
    inside = u > 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        h = z if xi == 0 else np.log1p(xi * z) / xi  # log1p keeps H exact for a small xi z
        e = np.exp(-h)
        psi = -(1.0 + xi) * h - e
    if not inside.all():
        u, e, psi = np.where(inside, u, 1.0), np.where(inside, e, 0.0), np.where(inside, psi, 0.0)
    return inside, u, e, psi


def anchor_sums(x: np.ndarray, w: np.ndarray, xi0: float, mu0: float, sigma0: float) -> np.ndarray:
    """The sums of the module docstring over the rows of positive weight, an array of shape ``(WIDTH,)``."""
    seen = w > 0
    z, ws = (x[seen] - mu0) / sigma0, w[seen]
    out = np.zeros(WIDTH)
    inside, u, e, psi = _psi(z, xi0)
    wi = np.where(inside, ws, 0.0)
    out[0] = float(ws[~inside].sum())
    out[1] = float(np.dot(wi, psi))
    slope = wi * (e - 1.0 - xi0) / u
    out[2:4] = [float(slope.sum()), float(np.dot(slope, z))]
    inv2 = wi / (u * u)
    einv2 = inv2 * e
    for k, c in enumerate((inv2, einv2)):
        cz = c * z
        out[4 + 3 * k : 7 + 3 * k] = [float(c.sum()), float(cz.sum()), float(np.dot(cz, z))]
    n = len(CANDIDATES)
    for j, step in enumerate(CANDIDATES):
        inside_c, _, _, psi_c = _psi(z, xi0 + float(step))
        out[_HEAD + j] = float(np.dot(np.where(inside_c, wi, 0.0), psi_c - psi))
        out[_HEAD + n + j] = float(ws[~inside_c].sum())
    return out


def shape_step(
    sums: np.ndarray, xi0: float, min_xi: float, max_xi: float, floor: float
) -> tuple[float, float]:
    """``(gain, xi)``: the candidate shape of highest exact log-likelihood (location and scale kept) inside
    ``[min_xi, max_xi]`` and the support of every row; ``(0, xi0)`` when none beats the anchor by more than
    ``floor`` (the sums' rounding: a gain below it may be noise, and moving on noise never settles)."""
    n = len(CANDIDATES)
    xs = xi0 + CANDIDATES
    gains = sums[_HEAD : _HEAD + n]
    ok = (sums[_HEAD + n :] == 0) & (xs >= min_xi) & (xs <= max_xi) & np.isfinite(gains)
    if not ok.any():
        return 0.0, xi0
    best = int(np.argmax(np.where(ok, gains, -np.inf)))
    return (float(gains[best]), float(xs[best])) if gains[best] > floor else (0.0, xi0)


def _quadratic_best(sw: float, g: np.ndarray, m: np.ndarray) -> tuple[float, float] | None:
    """The maximiser ``(a, b)`` of ``q = sw log(1 + b) + g . (a, b) - (a, b) m (a, b)' / 2`` (concave when
    ``m`` is positive semi-definite; None otherwise): ``a`` given ``b`` is linear, and ``b`` the root above
    -1 of the quadratic ``c2 b^2 + (c2 - c1) b - (c1 + sw) = 0`` (``c1``, ``c2`` from eliminating ``a``)."""
    m00, m01, m11 = m
    if not (m00 > 0 and math.isfinite(m00)):
        return None
    c1, c2 = g[1] - m01 * g[0] / m00, m11 - m01 * m01 / m00
    if not c2 >= 0:
        return None
    r = math.sqrt((c2 + c1) ** 2 + 4.0 * c2 * sw)
    if c1 - c2 >= 0:
        if c2 <= 0:
            return None
        b = (c1 - c2 + r) / (2.0 * c2)
    else:
        b = 2.0 * (c1 + sw) / (c2 - c1 + r)
    return (g[0] - m01 * b) / m00, b


def location_scale_step(
    sw: float, sums: np.ndarray, xi0: float, z_low: float, z_high: float
) -> tuple[float, float, float]:
    """``(gain, alpha, beta)``: the best guaranteed gain over the nested regions of the minorizer
    ``sw log beta + G . (alpha, beta - 1) - (.)' M(d) (.) / 2`` of the log-likelihood at
    ``z' = alpha + beta z`` (the new model has ``sigma = sigma0 / beta``, ``mu = mu0 - alpha sigma``);
    ``z_low``, ``z_high`` are the least and largest standardized values, where the region's constraints
    bind. ``(0, 0, 1)`` when nothing gains."""
    g = np.array(sums[2:4], dtype=np.float64)
    sa, sb = np.array(sums[4:7]), np.array(sums[7:10])
    kappa = max(1.0, abs(xi0))
    ends = np.array([z_low, z_high])
    room = (1.0 + xi0 * ends) / kappa
    best = (0.0, 0.0, 1.0)
    for d in _REGIONS:
        lead = (1.0 + xi0) * (1.0 - d) ** -2
        loose = lead * (math.exp(d / (kappa * (1.0 - d))) * sb + max(-xi0, 0.0) * sa)
        shapes = [loose]
        if xi0 > 0:
            shapes.append(loose - (1.0 + xi0) * xi0 * (1.0 + d) ** -2 * sa)
        for m in shapes:
            found = _quadratic_best(sw, g, m)
            if found is None:
                continue
            a, b = found
            moves = np.abs(a + b * ends)
            with np.errstate(divide="ignore"):
                t = float(min(1.0, np.min(np.where(moves > 0, d * room / moves, np.inf))))
            a, b = t * a, t * b
            if not 1.0 + b > 0:
                continue
            gain = (
                sw * math.log1p(b)
                + g[0] * a
                + g[1] * b
                - 0.5 * (m[0] * a * a + 2 * m[1] * a * b + m[2] * b * b)
            )
            if gain > best[0]:
                best = (gain, a, 1.0 + b)
    return best
