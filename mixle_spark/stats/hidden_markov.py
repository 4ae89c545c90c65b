"""Hidden Markov models over a list column: ``HiddenMarkovDistribution(emissions, initial, transitions)``.

A record is a sequence (a list, or an Arrow ``list`` column) whose elements are emitted by a hidden
first-order Markov chain over ``K`` states: the first state is drawn from ``initial``, each next one
from the row of ``transitions`` of the current state, and element ``t`` from ``emissions[state_t]``
(any family: Gaussian, Categorical, DiagonalGaussian, Record, ...). An optional ``len_dist`` scores
the length.

The E-step is forward-backward over every sequence of a batch at once (see
:mod:`mixle_spark.stats._hmm_kernels`: a loop over time steps only, each step vectorized over the
running sequences); its Baum-Welch statistics are the accumulator's value — weighted initial-state
counts, weighted expected transition counts, and each state's emission statistics from the elements
weighted by their posterior state probabilities — so they merge like any other family's across
partitions, ranks and workers. :meth:`HiddenMarkovDistribution.seq_viterbi` decodes the most
probable state path (``mixle_spark.scoring.score`` adds it as a ``states`` column).

The elements are encoded once, by the emissions' encoder (all states read one encoding), as a
:class:`~mixle_spark.stats.sequence.SequenceEncoded` batch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.errors import SpecError
from mixle_spark.stats._accumulator import widened_parts, widening_target
from mixle_spark.stats._hmm_kernels import Layout, baum_welch, forward, viterbi
from mixle_spark.stats._lengths import LengthAccumulation, LengthEstimation, LengthModel, check_length_model
from mixle_spark.stats._product import as_record_list
from mixle_spark.stats._validate import unit_sum
from mixle_spark.stats.base import (
    Accumulator,
    Distribution,
    Encoder,
    Estimator,
    Parameter,
    RowRandom,
    Sampler,
    check_estimators,
    check_parameter,
    estimator_option,
    estimators_option,
    free_parameters,
    option,
    part,
    parts,
    register_distribution,
    register_estimator,
)
from mixle_spark.stats.sequence import SequenceEncoded, SequenceEncoder

__all__ = [
    "HiddenMarkovAccumulator",
    "HiddenMarkovDistribution",
    "HiddenMarkovEstimator",
]

_FAMILY = "HiddenMarkovDistribution"


def _probabilities(values: Any, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Validated probability vector / row-stochastic matrix, each row renormalized exactly."""
    try:
        arr = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        arr = np.full(1, math.nan)
    what = "a vector" if len(shape) == 1 else "a matrix"
    check_parameter(arr.shape == shape, _FAMILY, name, values, f"{what} of shape {shape}")
    check_parameter(
        bool(np.all(np.isfinite(arr)) and np.all(arr >= 0)), _FAMILY, name, values, "finite and >= 0"
    )
    rows = arr.reshape(-1, shape[-1])
    sums = rows.sum(axis=1)
    bad = np.flatnonzero(np.abs(sums - 1.0) > 1e-9)
    if bad.size:
        where = "" if len(shape) == 1 else f" (row {int(bad[0])} sums to {float(sums[bad[0]])!r})"
        check_parameter(False, _FAMILY, name, values, f"probabilities summing to 1 within 1e-9{where}")
    return np.stack([unit_sum(r) for r in rows]).reshape(shape)


@register_distribution("hidden_markov")
class HiddenMarkovDistribution(LengthModel, Distribution):
    """A K-state hidden Markov model of sequences.

    Parameters
    ----------
    emissions : sequence of Distribution
        ``emissions[k]`` models the elements emitted in state ``k``; they must read one encoding.
    initial : array-like of shape (K,)
        Probabilities of the first state.
    transitions : array-like of shape (K, K)
        ``transitions[i, j]`` is the probability of state ``j`` after state ``i`` (rows sum to 1).
    len_dist : Distribution, optional
        Model of the sequence length (a count family); required for sampling.

    Examples
    --------
    >>> from mixle_spark.stats import GaussianDistribution
    >>> hmm = HiddenMarkovDistribution(
    ...     [GaussianDistribution(0.0, 1.0), GaussianDistribution(5.0, 1.0)],
    ...     initial=[0.5, 0.5], transitions=[[0.9, 0.1], [0.2, 0.8]])
    >>> hmm.viterbi([0.1, 4.9, 5.2, -0.3])
    [0, 1, 1, 0]
    """

    parameters = (
        parts("emissions"),
        Parameter("initial"),
        Parameter("transitions"),
        part("len_dist", optional=True),
    )

    def __init__(
        self,
        emissions: Sequence[Distribution],
        initial: Any,
        transitions: Any,
        len_dist: Distribution | None = None,
    ) -> None:
        ems = list(emissions) if isinstance(emissions, (list, tuple)) else []
        check_parameter(len(ems) > 0, _FAMILY, "emissions", emissions, "a non-empty list of distributions")
        for k, e in enumerate(ems):
            check_parameter(isinstance(e, Distribution), _FAMILY, f"emissions[{k}]", e, "a Distribution")
        check_length_model(_FAMILY, len_dist)
        k = len(ems)
        self.emissions = ems
        self.initial = _probabilities(initial, (k,), "initial")
        self.transitions = _probabilities(transitions, (k, k), "transitions")
        self.len_dist = len_dist
        with np.errstate(divide="ignore"):
            self._log_initial = np.log(self.initial)
            self._log_transitions = np.log(self.transitions)

    @property
    def num_states(self) -> int:
        return len(self.emissions)

    def log_emissions(self, values: Any) -> np.ndarray:
        """``(m, K)`` log-densities of the encoded elements under every state's emission."""
        cols = [np.asarray(e.seq_log_density(values), dtype=np.float64) for e in self.emissions]
        return np.ascontiguousarray(np.stack(cols, axis=1)) if cols[0].size else np.zeros((0, len(cols)))

    def sampling_parts(self) -> list[Distribution]:
        return [self.sampled_lengths(), *self.emissions]

    def draw_with_states(self, sampler: Sampler, size: int) -> tuple[list[Any], list[list[int]]]:
        """``size`` sequences drawn by ``sampler`` (a sampler of this model), and their state paths:
        lengths from ``len_dist``, then the state paths of all sequences one time step at a time,
        then every state's elements in one call to its emission sampler."""
        lengths_sampler, *emitters = sampler.parts
        rng = sampler.rng
        lengths = np.asarray(as_record_list(lengths_sampler.sample(size)), dtype=np.int64).reshape(-1)
        if len(lengths) and lengths.min() < 0:
            raise SpecError(f"{_FAMILY}: len_dist drew a negative length {int(lengths.min())}")
        layout = Layout.of(lengths)
        m = int(lengths.sum())
        states_tm = np.zeros(m, dtype=np.int64)
        cum = np.cumsum(self.transitions, axis=1)
        current = np.zeros(len(lengths), dtype=np.int64)
        for t in range(len(layout.active)):
            c = int(layout.active[t])
            u = rng.random(c)
            if t == 0:
                current[:c] = np.minimum(
                    np.searchsorted(np.cumsum(self.initial), u, side="right"), self.num_states - 1
                )
            else:
                rows = cum[current[:c]]
                current[:c] = np.minimum((rows <= u[:, None]).sum(axis=1), self.num_states - 1)
            states_tm[layout.block(t)] = current[:c]
        states = states_tm[layout.position]
        values: list[Any] = [None] * m
        for k, emitter in enumerate(emitters):
            where = np.flatnonzero(states == k)
            if where.size:
                for j, v in zip(where.tolist(), as_record_list(emitter.sample(int(where.size))), strict=True):
                    values[j] = v
        ends = np.cumsum(lengths)
        seqs = [values[e - n : e] for e, n in zip(ends.tolist(), lengths.tolist(), strict=True)]
        paths = [states[e - n : e].tolist() for e, n in zip(ends.tolist(), lengths.tolist(), strict=True)]
        return seqs, paths

    def draw_with(self, sampler: Sampler, size: int | None = None) -> Any:
        """Lists of emissions (see :meth:`draw_with_states`)."""
        seqs, _ = self.draw_with_states(sampler, 1 if size is None else size)
        return seqs[0] if size is None else seqs

    def log_density(self, x: Sequence[Any]) -> float:
        return float(self.seq_log_density(self.encoder().encode([x]))[0])

    def seq_log_density(self, enc: SequenceEncoded) -> np.ndarray:
        ll = forward(self.log_emissions(enc.values), enc.lengths, self.initial, self.transitions)
        return ll + self.length_log_density(enc.len_enc, enc.lengths)

    def seq_viterbi(self, enc: SequenceEncoded) -> tuple[np.ndarray, np.ndarray]:
        """Most probable state paths of a batch: ``(states, log_p)``, ``states`` (m,) aligned with
        the elements (``enc.owner`` gives each one's row), ``log_p`` (n,) the log-probability of
        each row's path jointly with its elements (and length, with ``len_dist``)."""
        states, log_p = viterbi(
            self.log_emissions(enc.values), enc.lengths, self._log_initial, self._log_transitions
        )
        return states, log_p + self.length_log_density(enc.len_enc, enc.lengths)

    def seq_state_posteriors(self, enc: SequenceEncoded) -> np.ndarray:
        """``(m, K)`` posterior probability of each state at every element (forward-backward)."""
        bw = baum_welch(
            self.log_emissions(enc.values), enc.lengths, np.ones(enc.n), self.initial, self.transitions
        )
        return bw.gamma

    def viterbi(self, x: Sequence[Any]) -> list[int]:
        """The most probable state path of one sequence."""
        states, _ = self.seq_viterbi(self.encoder().encode([x]))
        return [int(s) for s in states]

    def estimator(self, pseudo_count: float | None = None) -> HiddenMarkovEstimator:
        pc = None if pseudo_count is None else pseudo_count / self.num_states
        return HiddenMarkovEstimator(
            [e.estimator(pc) for e in self.emissions],
            len_estimator=self.length_estimator(pseudo_count),
            pseudo_count=pseudo_count,
        )

    def encoder(self) -> SequenceEncoder:
        out: Encoder = self.emissions[0].encoder()
        for k, e in enumerate(self.emissions[1:], start=1):
            try:
                out = out.union(e.encoder())
            except TypeError as err:
                raise SpecError(
                    f"{_FAMILY}: emissions[{k}] reads {e.encoder()!r}, which cannot be combined with "
                    f"{out!r} of the earlier states"
                ) from err
        return SequenceEncoder(out, self.length_encoder())

    def n_free_parameters(self) -> int:
        return self.estimator().n_free_parameters(self)


class HiddenMarkovAccumulator(LengthAccumulation, Accumulator):
    """Baum-Welch statistics. Value: ``(initial (K,), transitions (K, K), state weights (K,),
    emission values (K,), length value or None, row weight)``."""

    def __init__(
        self, emissions: Sequence[Accumulator], len_acc: Accumulator | None = None, keys: Any = None
    ) -> None:
        k = len(emissions)
        self.emissions = list(emissions)
        self.len_acc = len_acc
        self.keys = keys
        self.initial = np.zeros(k)
        self.transitions = np.zeros((k, k))
        self.state_weights = np.zeros(k)
        self.row_weight = 0.0

    def seq_update(self, enc: SequenceEncoded, weights: np.ndarray, estimate: Any) -> np.ndarray:
        if estimate is None:
            raise SpecError(f"{_FAMILY}: the E-step needs the current model (estimate), got None")
        weights = np.asarray(weights, dtype=np.float64)
        bw = baum_welch(
            estimate.log_emissions(enc.values),
            enc.lengths,
            weights,
            estimate.initial,
            estimate.transitions,
        )
        self.row_weight += float(weights.sum())
        self.initial += bw.initial
        self.transitions += bw.transitions
        resp = bw.gamma * weights[enc.owner][:, None]
        self.state_weights += resp.sum(axis=0)
        for k, (acc, dist) in enumerate(zip(self.emissions, estimate.emissions, strict=True)):
            acc.seq_update(enc.values, np.ascontiguousarray(resp[:, k]), dist)
        return bw.log_likelihood + self.update_lengths(enc.len_enc, enc.lengths, weights, estimate.len_dist)

    def seq_initialize(self, enc: SequenceEncoded, weights: np.ndarray, rng: RowRandom) -> None:
        """Random, nearly hard state responsibilities per element (approximately Dirichlet(1/K^2))
        from the row-keyed ``rng``; initial and transition counts from consecutive elements."""
        k = len(self.emissions)
        self.seq_assign(enc, weights, rng.expand(enc.lengths).dirichlet_like(k, alpha=1.0 / k**2), rng)

    def seq_assign(self, enc: SequenceEncoded, weights: np.ndarray, resp: np.ndarray, rng: RowRandom) -> None:
        """Initial statistics from given state responsibilities ``resp`` of shape (elements, K) (the
        seeding's hard assignments, or random ones); initial and transition counts from consecutive
        elements."""
        weights = np.asarray(weights, dtype=np.float64)
        self.row_weight += float(weights.sum())
        if enc.owner.size:
            r = np.asarray(resp, dtype=np.float64)
            w_elem = weights[enc.owner]
            first = np.ones(len(enc.owner), dtype=bool)
            first[1:] = enc.owner[1:] != enc.owner[:-1]
            self.initial += w_elem[first] @ r[first]
            nxt = np.flatnonzero(~first)
            self.transitions += (r[nxt - 1] * w_elem[nxt][:, None]).T @ r[nxt]
            weighted = r * w_elem[:, None]
            self.state_weights += weighted.sum(axis=0)
            for j, acc in enumerate(self.emissions):
                acc.seq_initialize(
                    enc.values, np.ascontiguousarray(weighted[:, j]), rng.expand(enc.lengths).child(j)
                )
        self.initialize_lengths(enc.len_enc, enc.lengths, weights, rng)

    def combine(self, value: Any) -> HiddenMarkovAccumulator:
        initial, transitions, state_weights, em_values, len_value, row_weight = value
        self.initial += np.asarray(initial, dtype=np.float64)
        self.transitions += np.asarray(transitions, dtype=np.float64)
        self.state_weights += np.asarray(state_weights, dtype=np.float64)
        for acc, v in zip(self.emissions, em_values, strict=True):
            acc.combine(v)
        self.combine_lengths(len_value)
        self.row_weight += float(row_weight)
        return self

    def value(self) -> tuple[Any, ...]:
        return (
            self.initial.copy(),
            self.transitions.copy(),
            self.state_weights.copy(),
            tuple(acc.value() for acc in self.emissions),
            self.length_value(),
            self.row_weight,
        )

    def _scale(self, factor: float) -> None:
        self.initial = factor * self.initial
        self.transitions = factor * self.transitions
        self.state_weights = factor * self.state_weights
        self.row_weight *= factor
        for acc in self.emissions:
            acc._scale(factor)
        self.scale_lengths(factor)

    def widened(self, target: Accumulator) -> tuple[Any, ...]:
        other = widening_target(self, target)
        return (
            self.initial.copy(),
            self.transitions.copy(),
            self.state_weights.copy(),
            widened_parts(self, self.emissions, other.emissions),
            self.widened_lengths(other),
            self.row_weight,
        )

    def from_value(self, value: Any) -> HiddenMarkovAccumulator:
        initial, transitions, state_weights, em_values, len_value, row_weight = value
        self.initial = np.array(initial, dtype=np.float64)
        self.transitions = np.array(transitions, dtype=np.float64)
        self.state_weights = np.array(state_weights, dtype=np.float64)
        for acc, v in zip(self.emissions, em_values, strict=True):
            acc.from_value(v)
        self.lengths_from_value(len_value)
        self.row_weight = float(row_weight)
        return self

    def make_encoder(self) -> SequenceEncoder:
        return SequenceEncoder(self.emissions[0].make_encoder(), self.length_encoder())

    def parts(self) -> list[Accumulator]:
        return [*self.emissions, *self.length_parts()]

    def fresh_args(self) -> tuple[Any, ...]:
        return ([e.make() for e in self.emissions], self.fresh_lengths(), self.keys)


def _smoothed(counts: np.ndarray, pseudo_count: float) -> np.ndarray:
    """Rows of ``counts`` plus ``pseudo_count / K`` each, normalized; a row with no weight is uniform."""
    k = counts.shape[-1]
    rows = np.atleast_2d(counts) + pseudo_count / k
    totals = rows.sum(axis=1)
    out = np.empty_like(rows)
    ok = (totals > 0) & np.isfinite(totals)
    out[ok] = rows[ok] / totals[ok, None]
    out[~ok] = 1.0 / k
    return np.stack([unit_sum(r) for r in out]).reshape(counts.shape)


@register_estimator("hidden_markov")
@dataclass(eq=False, repr=False)
class HiddenMarkovEstimator(LengthEstimation, Estimator):
    """Baum-Welch (EM) estimator of a K-state hidden Markov model.

    Parameters
    ----------
    estimators : sequence of Estimator
        One emission estimator per state (``[est] * K`` is fine); their encoders must be equal.
    len_estimator : Estimator, optional
        Length model estimator (a count family).
    pseudo_count : float, optional
        Dirichlet smoothing of the initial probabilities and of every transition row:
        ``pseudo_count / K`` is added to each count. A state never visited gets a uniform row.
    init_rows_per_state : int or None
        Sequences in the random initial sample per state (default 20; at least ``10 * K``), as
        :class:`~mixle_spark.stats.mixture.MixtureEstimator`'s ``init_rows_per_component``.
    name, keys : str, optional
    """

    estimators: Sequence[Estimator] = estimators_option()
    len_estimator: Estimator | None = estimator_option()
    pseudo_count: float | None = None
    init_rows_per_state: int | None = option(
        20, lambda v: v is None or (isinstance(v, int) and v >= 1), "a positive integer or None"
    )
    name: str | None = None
    keys: str | None = None

    def check(self) -> None:
        self.estimators = check_estimators("HiddenMarkovEstimator", "estimators", self.estimators)

    def accumulator_factory(self) -> HiddenMarkovAccumulator:
        emissions = [e.accumulator() for e in self.estimators]
        return HiddenMarkovAccumulator(emissions, self.length_accumulator(), self.keys)

    def encoder(self) -> SequenceEncoder:
        first = self.estimators[0].encoder()
        for k, e in enumerate(self.estimators[1:], start=1):
            if e.encoder() != first:
                raise SpecError(
                    f"HiddenMarkovEstimator: all states must read one encoding, but state 0 reads "
                    f"{first!r} and state {k} reads {e.encoder()!r}"
                )
        return SequenceEncoder(first, self.length_encoder())

    def with_scan(self, scan: Any) -> HiddenMarkovEstimator:
        if scan is None:
            return self
        child_scan, len_scan = scan
        ests = self.estimators if child_scan is None else [e.with_scan(child_scan) for e in self.estimators]
        return dataclasses.replace(self, estimators=ests, len_estimator=self.length_with_scan(len_scan))

    def min_rows(self) -> int:
        return 1

    def init_sample_size(self) -> tuple[int, int] | None:
        if self.init_rows_per_state is None:
            return None
        k = len(self.estimators)
        return 10 * k, max(self.init_rows_per_state, 10) * k

    def estimate(self, nobs: float | None, value: Any) -> HiddenMarkovDistribution:
        initial, transitions, state_weights, em_values, len_value, row_weight = value
        pc = self.pseudo_count or 0.0
        emissions = [
            e.estimate(float(w), v) for e, w, v in zip(self.estimators, state_weights, em_values, strict=True)
        ]
        return HiddenMarkovDistribution(
            emissions,
            _smoothed(np.asarray(initial, dtype=np.float64), pc),
            _smoothed(np.asarray(transitions, dtype=np.float64), pc),
            self.length_estimate(row_weight, len_value),
        )

    def _free_parameters(self, model: Any, tied: set[Any]) -> int:
        k = len(model.emissions)  # the initial (k - 1) and each transition row (k - 1) sum to one
        pairs = zip(self.estimators, model.emissions, strict=True)
        emissions = sum(e.n_free_parameters(d, tied) for e, d in pairs)
        return k * k - 1 + emissions + free_parameters(self.len_estimator, model.len_dist, tied)
