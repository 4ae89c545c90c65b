"""Binomial: ``BinomialDistribution(p, n)``, successes in ``n`` trials.

Records are integers in ``[0, n]``. ``BinomialEstimator(n=None)`` learns ``n`` by a scan (the largest
record seen; scans merge by ``max``) and :meth:`BinomialEstimator.with_scan` fixes it. The encoded
batch carries ``(x, log C(n, x))`` for the encoder's ``n``; statistics ``(Σw, Σw x)``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats._scalar_common import (
    ScalarEncoder,
    SumAccumulator,
    check_counts,
    floor,
    prior,
)
from mixle_spark.stats._special import log_factorial
from mixle_spark.stats._validate import arrow_float_values, float_values
from mixle_spark.stats.base import (
    Distribution,
    Encoder,
    Estimator,
    Parameter,
    check_parameter,
    option,
    register_distribution,
    register_estimator,
)

__all__ = [
    "BinomialAccumulator",
    "BinomialDistribution",
    "BinomialEncoded",
    "BinomialEncoder",
    "BinomialEstimator",
]

DEFAULT_MIN_P = 1e-12


def _log(p: float) -> float:
    return math.log(p) if p > 0 else -math.inf


def _is_count(n: Any) -> bool:
    return isinstance(n, (int, np.integer)) and not isinstance(n, bool) and bool(n >= 0)


def log_binomial_coefficient(n: int, x: np.ndarray) -> np.ndarray:
    """log C(n, x) for integer-valued float arrays ``x`` in [0, n]."""
    return log_factorial(float(n)) - log_factorial(x) - log_factorial(n - x)


class BinomialEncoded:
    """An encoded batch: counts ``x`` (float64, shape (n_rows,)) and ``log C(n, x)`` for the encoder's
    ``n`` (None when the encoder had no ``n``)."""

    __slots__ = ("log_comb", "n", "x")

    def __init__(self, x: np.ndarray, n: int | None, log_comb: np.ndarray | None) -> None:
        self.x = x
        self.n = n
        self.log_comb = log_comb

    def __len__(self) -> int:
        return len(self.x)


@register_distribution("binomial")
class BinomialDistribution(Distribution):
    """Binomial distribution: ``n`` trials with success probability ``p`` (0 and 1 allowed).

    Examples
    --------
    >>> round(math.exp(BinomialDistribution(0.5, 2).log_density(1)), 12)
    0.5
    """

    parameters = (Parameter("p"), Parameter("n"))

    def __init__(self, p: float, n: int) -> None:
        check_parameter(0.0 <= p <= 1.0, "BinomialDistribution", "p", p, "a probability in [0, 1]")
        check_parameter(_is_count(n), "BinomialDistribution", "n", n, "a non-negative integer")
        self.p = float(p)
        self.n = int(n)
        self._log_p = _log(self.p)
        self._log_q = _log(1.0 - self.p)

    def draw(self, rng: np.random.Generator, size: int | None = None) -> Any:
        draws = rng.binomial(self.n, self.p, size=size)
        return int(draws) if size is None else draws

    def log_density(self, x: int) -> float:
        value = float(x)
        if not (0.0 <= value <= self.n and value == math.floor(value)):
            return -math.inf
        # a * log(p) with a = 0 is 0 even when p = 0 (never 0 * -inf = NaN).
        ll = float(log_binomial_coefficient(self.n, np.array([value]))[0])
        if value > 0:
            ll += value * self._log_p
        if self.n - value > 0:
            ll += (self.n - value) * self._log_q
        return ll

    def seq_log_density(self, enc: BinomialEncoded) -> np.ndarray:
        x = enc.x
        inside = x <= self.n
        if enc.n == self.n and enc.log_comb is not None:
            log_comb = enc.log_comb
        else:
            log_comb = log_binomial_coefficient(self.n, np.minimum(x, self.n))
        rest = self.n - x
        succ = x * self._log_p if self.p > 0 else np.where(x > 0, -np.inf, 0.0)
        fail = rest * self._log_q if self.p < 1 else np.where(rest > 0, -np.inf, 0.0)
        return np.where(inside, log_comb + succ + fail, -np.inf)

    def estimator(self, pseudo_count: float | None = None) -> BinomialEstimator:
        if pseudo_count is None:
            return BinomialEstimator(n=self.n)
        return BinomialEstimator(n=self.n, pseudo_count=pseudo_count, suff_stat=self.p)

    def encoder(self) -> BinomialEncoder:
        return BinomialEncoder(self.n)

    def n_free_parameters(self) -> int:
        return 1  # n (trials) is given, not estimated


class BinomialEncoder(ScalarEncoder):
    """Reads counts in ``[0, n]`` into a :class:`BinomialEncoded`.

    With ``n=None`` (not yet scanned) any non-negative integer is accepted and ``log C`` is left to
    the distribution; a scan returns the largest count seen.
    """

    embedding = "count"

    def seed_values(self, enc: Any) -> np.ndarray:
        return np.asarray(enc.x, dtype=np.float64)

    estimator_name = "BinomialEstimator"

    def __init__(self, n: int | None = None) -> None:
        check_parameter(n is None or _is_count(n), "BinomialEncoder", "n", n, "a non-negative integer")
        self.n = None if n is None else int(n)

    @property
    def expected(self) -> str:  # type: ignore[override]
        bound = "a non-negative integer count" if self.n is None else f"an integer count in [0, {self.n}]"
        return f"expected {bound} for {self.estimator_name}"

    def validate(self, x: np.ndarray) -> None:
        check_counts(x, self.expected, low=0.0, high=None if self.n is None else float(self.n))

    def pack(self, x: np.ndarray) -> BinomialEncoded:
        log_comb = None if self.n is None else log_binomial_coefficient(self.n, x)
        return BinomialEncoded(x, self.n, log_comb)

    @property
    def needs_scan(self) -> bool:
        return self.n is None

    def _scan_values(self, x: np.ndarray) -> int | None:
        check_counts(x, self.expected, low=0.0)
        return int(x.max()) if len(x) else None

    def scan(self, records: Sequence[Any]) -> int | None:
        return self._scan_values(float_values(records, self.expected))

    def scan_arrow(self, data: Any) -> int | None:
        return self._scan_values(arrow_float_values(data, self.expected))

    def merge_scans(self, a: int | None, b: int | None) -> int | None:
        if a is None or b is None:
            return b if a is None else a
        return max(a, b)

    @property
    def rebases(self) -> bool:
        return True

    def rebase(self, enc: BinomialEncoded) -> BinomialEncoded:
        """The batch's counts with this encoder's ``n`` (and its ``log C(n, x)``)."""
        return enc if enc.n == self.n else self.pack(enc.x)

    def union(self, other: Encoder) -> Encoder:
        if not isinstance(other, BinomialEncoder):
            return super().union(other)
        if self.n is None or other.n is None:
            return BinomialEncoder(None)
        return BinomialEncoder(max(self.n, other.n))

    def __hash__(self) -> int:
        return hash(("BinomialEncoder", self.n))

    def __repr__(self) -> str:
        return f"BinomialEncoder(n={self.n!r})"


class BinomialAccumulator(SumAccumulator):
    """Sums ``(Σw, Σw x)``."""

    def __init__(self, keys: Any = None, n: int | None = None) -> None:
        super().__init__(keys)
        self.n = n

    def values(self, enc: BinomialEncoded) -> np.ndarray:
        return enc.x

    def make_encoder(self) -> BinomialEncoder:
        return BinomialEncoder(self.n)

    def fresh_args(self) -> tuple[Any, ...]:
        return (self.keys, self.n)


@register_estimator("binomial")
@dataclass(eq=False, repr=False)
class BinomialEstimator(Estimator):
    """Maximum-likelihood binomial fit ``p = Σw x / (n Σw)``, clipped to ``[min_p, 1 - min_p]``.

    Parameters
    ----------
    n : int, optional
        Number of trials; None learns it by a scan (the largest count in the data).
    pseudo_count : float, optional
        Number of pseudo-observations (of ``n`` trials each) with success rate ``suff_stat``:
        ``p = (Σw x + pc n p0) / (n (Σw + pc))``.
    suff_stat : float, optional
        Prior probability ``p0`` (default 0.5 when only ``pseudo_count`` is given).
    min_p : float
        Clip (default 1e-12) keeping every count in [0, n] possible; ``min_p=0`` gives the plain MLE.
    keys : str, optional
        Tie this parameter to every other site with the same key.

    With zero total weight (or ``n = 0``) the estimate is ``suff_stat`` (or 0.5).
    """

    n: int | None = option(None, lambda v: _is_count(v), "a non-negative integer", read=int)
    pseudo_count: float | None = None
    suff_stat: float | None = prior(lambda v: 0.0 <= v <= 1.0, "a probability in [0, 1]")
    min_p: float = floor(DEFAULT_MIN_P, lambda v: 0.0 <= v < 0.5, "in [0, 0.5)")
    name: str | None = None
    keys: str | None = None

    def accumulator_factory(self) -> BinomialAccumulator:
        return BinomialAccumulator(self.keys, self.n)

    def encoder(self) -> BinomialEncoder:
        return BinomialEncoder(self.n)

    def with_scan(self, scan: Any) -> BinomialEstimator:
        if self.n is not None or scan is None:
            return self
        return dataclasses.replace(self, n=int(scan))

    def estimate(self, nobs: float | None, value: Any) -> BinomialDistribution:
        if self.n is None:
            raise SpecError("BinomialEstimator: n is unknown; fix n=... or apply a scan with with_scan()")
        sw, sx = value
        pc = self.pseudo_count or 0.0
        p0 = 0.5 if self.suff_stat is None else self.suff_stat
        trials = self.n * (sw + pc)
        p = (sx + pc * self.n * p0) / trials if trials > 0 else p0
        if not math.isfinite(p):
            p = p0
        return BinomialDistribution(min(max(p, self.min_p), 1.0 - self.min_p), self.n)
