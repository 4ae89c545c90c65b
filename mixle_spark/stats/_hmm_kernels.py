"""Forward-backward and Viterbi over all the sequences of a batch at once.

A batch of ``n`` sequences is ``m`` elements stored back to back (Arrow list offsets). :class:`Layout`
sorts the sequences by length, longest first, so the sequences still running at time step ``t`` are
a prefix of that order (``active[t]`` of them), and permutes the elements *time-major*: the elements
of step ``t`` are the contiguous block ``offsets[t] : offsets[t] + active[t]``, in the same sequence
order as every other step. A recursion is then a Python loop over time steps only
(``max(lengths)`` of them), each step a few whole-block numpy operations on contiguous slices (a
small GEMM with the transition matrix among them): no loop over sequences or elements, no gathers.

Log space without a ``logsumexp`` per step. The emission log-densities are shifted once per batch
by their row maximum (``e = exp(log e - max)``, the maxima kept as logs). The forward pass keeps the
filtered state probabilities ``alpha_t`` normalized; ``alpha_{t-1} @ A`` then sums to 1, so
``s_t = sum(alpha_{t-1} @ A * e_t)`` underflows only if every likely state emits almost nothing —
the rows where ``s_t < 1e-280`` are redone in log space (``log`` of the prediction plus the
emission log-densities, normalized by their maximum). The sequence log-likelihood is the sum of
``log s_t + max_t`` over its steps: the log-sum-exp recursion, to rounding. The backward pass keeps
``beta_t`` normalized the same way (only ratios matter for the posteriors) with the same fallback.

Impossible sequences (every path has probability zero) get log-likelihood ``-inf`` and zero
posteriors, never NaN.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["BaumWelch", "Layout", "baum_welch", "forward", "viterbi"]

_TINY = 1e-280  # below this a step's normalizer is recomputed in log space


class Layout(NamedTuple):
    """Where the elements of a batch go in time-major order.

    ``order[r]`` is the batch row of the r-th longest sequence and ``lengths[r]`` its length;
    ``active[t]`` how many sequences have an element at step ``t``; ``offsets[t]`` where step
    ``t``'s block starts (``offsets[-1] == m``); ``position[j]`` the time-major position of element
    ``j`` (elements in batch order, sequence after sequence).
    """

    order: np.ndarray
    lengths: np.ndarray
    active: np.ndarray
    offsets: np.ndarray
    position: np.ndarray

    @classmethod
    def of(cls, lengths: np.ndarray) -> Layout:
        lengths = np.asarray(lengths, dtype=np.int64)
        n = len(lengths)
        order = np.argsort(-lengths, kind="stable")
        sorted_lengths = lengths[order]
        t_max = int(sorted_lengths[0]) if n else 0
        # sequences with length > t, for t = 0 .. t_max - 1 (lengths sorted descending)
        active = np.searchsorted(-sorted_lengths, -np.arange(t_max), side="left").astype(np.int64)
        offsets = np.zeros(t_max + 1, dtype=np.int64)
        np.cumsum(active, out=offsets[1:])
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        owner = np.repeat(np.arange(n), lengths)
        starts = np.zeros(n, dtype=np.int64)
        if n > 1:
            np.cumsum(lengths[:-1], out=starts[1:])
        step = np.arange(len(owner), dtype=np.int64) - starts[owner]
        position = offsets[step] + rank[owner]
        return cls(order, sorted_lengths, active, offsets, position)

    def block(self, t: int) -> slice:
        return slice(int(self.offsets[t]), int(self.offsets[t]) + int(self.active[t]))

    def to_time_major(self, values: np.ndarray) -> np.ndarray:
        out = np.empty_like(values)
        out[self.position] = values
        return out

    def per_row(self, per_element_tm: np.ndarray) -> np.ndarray:
        """Sum a time-major per-element quantity over each sequence, in batch row order."""
        owner_rank = np.repeat(np.arange(len(self.order)), self.lengths)  # sorted rows, row-major
        # time-major position of (sorted row r, step t) is offsets[t] + r
        steps = np.arange(len(owner_rank)) - np.repeat(np.cumsum(self.lengths) - self.lengths, self.lengths)
        sums = np.bincount(
            owner_rank, weights=per_element_tm[self.offsets[steps] + owner_rank], minlength=len(self.order)
        )
        out = np.empty(len(self.order))
        out[self.order] = sums
        return out


class _Emissions(NamedTuple):
    """Time-major emissions: ``log`` (m, K), ``scaled = exp(log - top)`` and ``top`` (m,)."""

    log: np.ndarray
    scaled: np.ndarray
    top: np.ndarray

    @classmethod
    def of(cls, log_e: np.ndarray, layout: Layout) -> _Emissions:
        log_tm = layout.to_time_major(np.asarray(log_e, dtype=np.float64))
        top = log_tm.max(axis=1) if log_tm.size else np.zeros(0)
        finite = np.isfinite(top)
        shift = np.where(finite, top, 0.0)
        scaled = np.exp(log_tm - shift[:, None])
        scaled[~finite] = 0.0  # all -inf (or NaN: keep it out of the fast path, the log path sees it)
        return cls(log_tm, scaled, np.where(finite, top, -np.inf))


def _row_sums(x: np.ndarray) -> np.ndarray:
    """``x.sum(axis=1)`` for a (rows, K) block as a matrix-vector product (several times faster for
    the small K of an HMM than numpy's reduction over a short trailing axis)."""
    return x @ np.ones(x.shape[1])


def _log_normalize(lp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(exp(lp - max) / sum, max + log(sum))`` per row; rows that are all -inf give (0, -inf)."""
    mx = lp.max(axis=1)
    finite = np.isfinite(mx)
    shift = np.where(finite, mx, 0.0)
    p = np.exp(lp - shift[:, None])
    s = p.sum(axis=1)
    ok = s > 0
    with np.errstate(divide="ignore"):
        log_norm = np.where(
            finite & ok, shift + np.log(np.where(ok, s, 1.0)), np.where(np.isnan(mx), np.nan, -np.inf)
        )
    p /= np.where(ok, s, 1.0)[:, None]
    return p, log_norm


def _weigh(prior: np.ndarray, em: _Emissions, rows: slice) -> tuple[np.ndarray, np.ndarray]:
    """Normalize ``prior * e`` row by row: ``(probabilities, log normalizer)``, log space where needed."""
    p = prior * em.scaled[rows]
    s = _row_sums(p)
    small = ~(s > _TINY)
    safe = np.where(small, 1.0, s)
    p /= safe[:, None]
    with np.errstate(divide="ignore"):
        log_norm = np.log(safe) + em.top[rows]
        if small.any():
            fix = np.flatnonzero(small)
            p[fix], log_norm[fix] = _log_normalize(np.log(prior[fix]) + em.log[rows][fix])
    return p, log_norm


def _forward_tm(
    em: _Emissions, layout: Layout, pi: np.ndarray, a: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Time-major filtered probabilities and per-element log normalizers."""
    m, k = em.log.shape
    alpha = np.zeros((m, k))
    log_norm = np.zeros(m)
    for t in range(len(layout.active)):
        cur = layout.block(t)
        if t == 0:
            prior = np.broadcast_to(pi, (cur.stop - cur.start, k))
        else:
            prev = slice(int(layout.offsets[t - 1]), int(layout.offsets[t - 1]) + cur.stop - cur.start)
            prior = alpha[prev] @ a
        alpha[cur], log_norm[cur] = _weigh(prior, em, cur)
    return alpha, log_norm


def forward(log_e: np.ndarray, lengths: np.ndarray, pi: np.ndarray, a: np.ndarray) -> np.ndarray:
    """The log-likelihood of every sequence of a batch, shape (n,) (0 for an empty sequence).

    ``log_e[j, k]`` is the log-density of element ``j`` under state ``k`` (elements in batch order);
    ``pi`` the initial probabilities; ``a`` the transition matrix (rows sum to 1).
    """
    layout = Layout.of(lengths)
    _alpha, log_norm = _forward_tm(_Emissions.of(log_e, layout), layout, pi, a)
    return layout.per_row(log_norm)


class BaumWelch(NamedTuple):
    """One batch's E-step: per-sequence log-likelihood, per-element state posteriors ``gamma``
    (shape (m, K), batch order), weighted initial-state counts (K,) and weighted expected
    transition counts (K, K)."""

    log_likelihood: np.ndarray
    gamma: np.ndarray
    initial: np.ndarray
    transitions: np.ndarray


def baum_welch(
    log_e: np.ndarray, lengths: np.ndarray, weights: np.ndarray, pi: np.ndarray, a: np.ndarray
) -> BaumWelch:
    """Forward-backward over a batch; ``weights`` (one per sequence) scale the counts (not gamma)."""
    m, k = np.shape(log_e)
    layout = Layout.of(lengths)
    em = _Emissions.of(log_e, layout)
    alpha, log_norm = _forward_tm(em, layout, pi, a)
    ll = layout.per_row(log_norm)
    gamma = np.zeros((m, k))
    xi = np.zeros((k, k))
    initial = np.zeros(k)
    w = np.asarray(weights, dtype=np.float64)[layout.order]
    beta = np.full((len(layout.order), k), 1.0 / k)  # normalized; a row starts fresh at its last step
    for t in range(len(layout.active) - 1, -1, -1):
        cur = layout.block(t)
        c = cur.stop - cur.start
        g = alpha[cur] * beta[:c]
        gs = _row_sums(g)
        gamma[cur] = g / np.where(gs > 0, gs, 1.0)[:, None]
        if t == 0:
            initial += w[:c] @ gamma[cur]
            break
        b, _ = _weigh(beta[:c], em, cur)  # e_t * beta_t, normalized
        prev = alpha[int(layout.offsets[t - 1]) : int(layout.offsets[t - 1]) + c]
        back = b @ a.T  # beta_{t-1} up to a factor
        z = _row_sums(prev * back)
        ok = z > 0
        scale = np.where(ok, w[:c] / np.where(ok, z, 1.0), 0.0)
        xi += a * ((prev * scale[:, None]).T @ b)
        total = _row_sums(back)
        beta[:c] = back / np.where(total > 0, total, 1.0)[:, None]
    return BaumWelch(ll, gamma[layout.position], initial, xi)


def viterbi(
    log_e: np.ndarray, lengths: np.ndarray, log_pi: np.ndarray, log_a: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The most probable state path of every sequence: ``(states, log_p)``, ``states`` (m,) int64 in
    batch element order, ``log_p`` (n,) the joint log-probability of each path with its sequence
    (-inf, with states 0, for impossible sequences). Ties go to the lowest state."""
    m, k = np.shape(log_e)
    layout = Layout.of(lengths)
    n = len(layout.order)
    best = np.zeros(n)
    if m == 0:
        return np.zeros(0, dtype=np.int64), best
    log_tm = layout.to_time_major(np.asarray(log_e, dtype=np.float64))
    delta = np.empty((m, k))
    back = np.zeros((m, k), dtype=np.int32 if k > 32767 else np.int16)
    block = max(1, (1 << 22) // (k * k))  # bounds the (rows, K, K) candidates to ~32 MiB
    first = layout.block(0)
    delta[first] = log_pi[None, :] + log_tm[first]
    for t in range(1, len(layout.active)):
        cur = layout.block(t)
        base = int(layout.offsets[t - 1]) - cur.start
        for lo in range(cur.start, cur.stop, block):
            hi = min(lo + block, cur.stop)
            cand = delta[lo + base : hi + base][:, :, None] + log_a[None, :, :]  # (rows, from, to)
            arg = cand.argmax(axis=1)
            back[lo:hi] = arg
            delta[lo:hi] = np.take_along_axis(cand, arg[:, None, :], axis=1)[:, 0, :] + log_tm[lo:hi]
    states_tm = np.zeros(m, dtype=np.int64)
    state = np.zeros(n, dtype=np.int64)
    t_max = len(layout.active)
    for t in range(t_max - 1, -1, -1):
        cur = layout.block(t)
        c = cur.stop - cur.start
        ending = int(layout.active[t + 1]) if t + 1 < t_max else 0  # rows [ending, c) end at step t
        last = delta[cur.start + ending : cur.stop]
        state[ending:c] = last.argmax(axis=1)
        best[ending:c] = last.max(axis=1)
        states_tm[cur] = state[:c]
        if t > 0:
            state[:c] = back[cur][np.arange(c), state[:c]]
    log_p = np.empty(n)
    log_p[layout.order] = best
    states = states_tm[layout.position]
    impossible = ~np.isfinite(log_p)
    if impossible.any():  # their backpointers are arbitrary: report state 0 throughout
        states[np.repeat(impossible, np.asarray(lengths, dtype=np.int64))] = 0
    return states, log_p
