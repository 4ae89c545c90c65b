"""Finite mixture: ``MixtureDistribution(components, w)``.

A record is drawn from component ``k`` with probability ``w[k]``. Components are any distributions
reading one shared encoding (the union of their encoders); the mixture treats that encoding as
opaque and hands it to every component.

The E-step (:meth:`MixtureAccumulator.seq_update`) builds the ``(n, K)`` matrix of
``log w_k + log p_k(x_i)``, normalises it by log-sum-exp in place, and feeds each component its
responsibilities; the log-sum-exp is the per-row log-likelihood, returned so that one pass yields
statistics and log-likelihood together. When every component offers the feature protocol described
in :mod:`mixle_spark.stats.base` (``feature_key`` / ``seq_features`` / ``feature_coefficients`` and
``add_feature_sums``), all components are scored with one matrix product and their statistics
gathered with a second one, instead of a Python loop over components.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle_spark.engines import current_engine, fallback_note
from mixle_spark.engines._numpy_kernels import exp_normalize, responsibilities
from mixle_spark.errors import SpecError
from mixle_spark.stats._accumulator import widened_parts, widening_target
from mixle_spark.stats._covariance import (
    FORM_CHOICES,
    check_form_components,
    covariance_form,
    form_parameters,
    is_form,
)
from mixle_spark.stats._mixture_encoder import MixtureEncoder, unwrap
from mixle_spark.stats._mixture_kernels import (
    feature_matrix,
    features_shared,
    fused_e_step,
    log_weights,
    normalized_weights,
    reference_active,
)
from mixle_spark.stats._mixture_kernels import reference_kernels as reference_kernels  # documented here
from mixle_spark.stats._mixture_m_step import estimate_components, mixture_weights
from mixle_spark.stats._partial_labels import LabelledBatch, LabelledEncoder, checked_labels
from mixle_spark.stats._product import ProductAccumulator
from mixle_spark.stats.base import (
    Accumulator,
    Distribution,
    Estimator,
    Parameter,
    RowRandom,
    Sampler,
    check_estimators,
    check_parameter,
    estimators_option,
    option,
    parts,
    register_distribution,
    register_estimator,
)
from mixle_spark.stats.criteria import count_free_parameters, information_criteria

MapFunction = Callable[[Callable[[Any], Any], Iterable[Any]], Iterator[Any]]
"""``map``, or an executor's ordered ``map``: how a batch's independent work items run."""

__all__ = [
    "MixtureAccumulator",
    "MixtureDistribution",
    "MixtureEncoder",
    "MixtureEstimator",
]


@register_distribution("mixture")
class MixtureDistribution(Distribution):
    """Finite mixture ``p(x) = Σ_k w_k p_k(x)``.

    Parameters
    ----------
    components : sequence of Distribution
        The K component distributions (all must read one shared encoding).
    w : array-like of shape (K,)
        Mixture weights: finite, non-negative, summing to 1 within 1e-9 (renormalised exactly).
    covariance : str, optional
        The covariance form the Gaussian components were fitted under (:mod:`._covariance`: an
        mclust name such as ``"EEE"`` or a scikit-learn one such as ``"tied"``): kept so that
        :meth:`estimator` refits under it and the free parameters are counted for it. It does not
        change the density.

    Examples
    --------
    >>> from mixle_spark.stats.gaussian import GaussianDistribution
    >>> g = GaussianDistribution(0.0, 1.0)
    >>> mix = MixtureDistribution([g, g], [0.3, 0.7])
    >>> round(mix.log_density(0.0), 6)
    -0.918939
    """

    parameters = (parts("components"), Parameter("w"), Parameter("covariance", default=None))

    def __init__(self, components: Sequence[Distribution], w: Any, covariance: str | None = None) -> None:
        comps = list(components) if isinstance(components, (list, tuple)) else []
        check_parameter(
            len(comps) > 0,
            "MixtureDistribution",
            "components",
            components,
            "a non-empty list of distributions",
        )
        for k, c in enumerate(comps):
            check_parameter(
                isinstance(c, Distribution), "MixtureDistribution", f"components[{k}]", c, "a Distribution"
            )
        self.components = comps
        self.w = normalized_weights(w, len(comps), "MixtureDistribution")
        self.log_w = log_weights(self.w)
        owner = "MixtureDistribution: covariance"
        self.covariance = None if covariance is None else covariance_form(covariance, owner)

    @property
    def num_components(self) -> int:
        return len(self.components)

    def sampling_parts(self) -> list[Distribution]:
        return list(self.components)

    def draw_with(self, sampler: Sampler, size: int | None = None) -> Any:
        """A component by ``w``, then a record from that component's own seeded sampler."""
        rng, samplers = sampler.rng, sampler.parts
        w = self.w
        if size is None:
            return samplers[int(rng.choice(len(w), p=w))].sample()
        z = rng.choice(len(w), size=size, p=w)
        draws = [
            (np.flatnonzero(z == k), s.sample(int((z == k).sum())))
            for k, s in enumerate(samplers)
            if (z == k).any()
        ]
        if not draws:
            return samplers[0].sample(0)
        shapes = {d.shape[1:] for _, d in draws if isinstance(d, np.ndarray)}
        if len(shapes) == 1 and all(isinstance(d, np.ndarray) for _, d in draws):
            dtype = np.result_type(*(d for _, d in draws))
            out = np.empty((size, *shapes.pop()), dtype=dtype)
            for idx, d in draws:
                out[idx] = d
            return out
        records: list[Any] = [None] * size
        for idx, d in draws:
            for i, x in zip(idx, d, strict=True):
                records[int(i)] = x
        return records

    def log_density(self, x: Any) -> float:
        vals = [float(lw) + c.log_density(x) for lw, c in zip(self.log_w, self.components, strict=True)]
        top = max(vals)
        if not math.isfinite(top):
            return float(top)
        return top + math.log(math.fsum(math.exp(v - top) for v in vals))

    def posterior(self, x: Any) -> np.ndarray:
        """Responsibilities ``P(component k | x)`` for one record, shape (K,)."""
        joint = np.array([[c.log_density(x)] for c in self.components], dtype=np.float64)
        return self._posterior_from(joint)[:, 0]

    def _component_matrix(self, enc: Any) -> np.ndarray:
        """``log p_k(x_i)`` component-major, shape (K, n) (the layout the E-step works in).

        With the feature protocol (see :mod:`mixle_spark.stats.base`), one matrix product."""
        enc = enc.inner if isinstance(enc, LabelledBatch) else enc  # a partly labelled fit's batch
        if features_shared(self.components, None, enc):
            phi = feature_matrix(self.components[0], enc)
            coef = np.array([c.feature_coefficients(enc) for c in self.components], dtype=np.float64)  # type: ignore[attr-defined]
            return current_engine().feature_joint(phi, coef)
        rows = [np.asarray(c.seq_log_density(enc), dtype=np.float64) for c in self.components]
        out = np.empty((len(rows), rows[0].shape[0]))
        for k, r in enumerate(rows):
            out[k] = r
        return out

    def seq_component_log_density(self, enc: Any) -> np.ndarray:
        """Component log-densities ``log p_k(x_i)`` (without the weights), shape (n, K)."""
        return self._component_matrix(enc).T

    def seq_log_density(self, enc: Any) -> np.ndarray:
        """Per-row log-density; for a partly labelled fit's batch (:class:`LabelledBatch`) the fit's
        objective: ``log w_y + log p_y(x)`` for a row labelled ``y``, the mixture density otherwise."""
        joint = self._component_matrix(enc)
        if joint.shape[1] == 0:
            return np.zeros(0)
        joint += self.log_w[:, None]
        picked = None
        if isinstance(enc, LabelledBatch):
            labels = checked_labels(enc.labels, len(self.components))
            known = np.flatnonzero(labels >= 0)
            picked = (known, joint[labels[known], known].copy())
        ll = exp_normalize(joint, self.w, self.components)[0]
        if picked is not None:
            ll[picked[0]] = picked[1]
        return ll

    def seq_posterior(self, enc: Any) -> np.ndarray:
        """Responsibilities of every row, shape (n, K); impossible rows get the weights ``w``."""
        return self._posterior_from(self._component_matrix(enc)).T

    def seq_impute(self, enc: Any) -> np.ndarray:
        """Vectors with every missing (NaN) coordinate replaced by its conditional mean under the
        mixture: each component's conditional mean given the row's observed coordinates, weighted by
        the row's posterior (which reads the observed coordinates only), shape (n, d). For mixtures of
        vector Gaussians (TypeError otherwise)."""
        if not all(hasattr(c, "seq_impute") for c in self.components):
            raise TypeError("seq_impute needs a mixture of vector Gaussians (multivariate or diagonal)")
        if getattr(enc, "missing", None) is None:
            return np.asarray(enc.x)
        post = self.seq_posterior(enc)
        out = np.zeros(enc.x.shape)
        for k, c in enumerate(self.components):
            out += post[:, k, None] * c.seq_impute(enc)  # type: ignore[attr-defined]
        return np.asarray(enc.filled(out))  # the observed coordinates exactly as they were

    def _posterior_from(self, joint: np.ndarray) -> np.ndarray:
        if joint.shape[1] == 0:
            return joint
        joint += self.log_w[:, None]
        _, s, bad, bad_post = exp_normalize(joint, self.w, self.components)
        joint /= s
        if bad is not None and bad_post is not None:
            joint[:, bad] = bad_post.T
        return joint

    # -- a scikit-learn style face for small in-memory data -------------------------------------
    def _encoded(self, X: Any) -> list[Any]:
        from mixle_spark.stats._tables import encode_rows  # the rules of every in-process encoding

        return encode_rows(X, self.encoder())

    def score_samples(self, X: Any) -> np.ndarray:
        """Log-density of every row of ``X``, shape (n,).

        ``X``: a numpy array (rows = records; 2-D for vector components), a list of records, or a
        pandas / pyarrow table (a Record model reads the columns its fields name).
        """
        chunks = [self.seq_log_density(enc) for enc in self._encoded(X)]
        return np.concatenate(chunks) if chunks else np.zeros(0)

    def score(self, X: Any) -> float:
        """Mean log-density per row of ``X`` (scikit-learn's ``score``)."""
        return float(np.mean(self.score_samples(X)))

    def predict_proba(self, X: Any) -> np.ndarray:
        """Component responsibilities of every row of ``X``, shape (n, K); rows sum to 1."""
        chunks = [self.seq_posterior(enc) for enc in self._encoded(X)]
        return np.concatenate(chunks) if chunks else np.zeros((0, self.num_components))

    def predict(self, X: Any) -> np.ndarray:
        """The most probable component of every row of ``X``, shape (n,) (int64)."""
        return np.asarray(np.argmax(self.predict_proba(X), axis=1), dtype=np.int64)

    def bic(self, X: Any) -> float:
        """Bayesian information criterion on ``X``: ``k ln(n) - 2 ll`` (lower is better)."""
        return self._criteria(X)["bic"]

    def aic(self, X: Any) -> float:
        """Akaike information criterion on ``X``: ``2 k - 2 ll`` (lower is better)."""
        return self._criteria(X)["aic"]

    def _criteria(self, X: Any) -> dict[str, float]:
        ll = self.score_samples(X)
        return information_criteria(float(ll.sum()), count_free_parameters(self), float(len(ll)))

    def estimator(self, pseudo_count: float | None = None) -> MixtureEstimator:
        """Estimator of the same shape; with ``pseudo_count`` each component uses its current
        parameters as a prior of strength ``pseudo_count / K`` and the weights get ``pseudo_count``."""
        if pseudo_count is None:
            return MixtureEstimator([c.estimator() for c in self.components], covariance=self.covariance)
        k = len(self.components)
        return MixtureEstimator(
            [c.estimator(pseudo_count / k) for c in self.components],
            pseudo_count=pseudo_count,
            covariance=self.covariance,
        )

    def encoder(self) -> MixtureEncoder:
        """The union of the component encoders (raises SpecError when they cannot be combined)."""
        encoders = [unwrap(c.encoder()) for c in self.components]
        out = encoders[0]
        for k, e in enumerate(encoders[1:], start=1):
            try:
                out = out.union(e)
            except TypeError as err:
                raise SpecError(
                    f"MixtureDistribution: component {k} reads {e!r}, which cannot be "
                    f"combined with {out!r} of the earlier components"
                ) from err
        return MixtureEncoder(out)

    def n_free_parameters(self) -> int:
        return self.estimator().n_free_parameters(self)


class MixtureAccumulator(Accumulator):
    """Component counts ``Σ w r_k`` and the component accumulators; value ``(counts, (v_1, ..., v_K))``.

    ``keys = (weight_key, comp_key)``: mixtures sharing ``weight_key`` pool their count vectors;
    mixtures sharing ``comp_key`` pool their component accumulators element-wise.
    """

    use_fast_path: bool = True
    """Use the one-matrix-product path when the components support it (False forces the loop)."""

    def __init__(self, accumulators: Sequence[Accumulator], keys: tuple[Any, Any] | None = None) -> None:
        self.accumulators = list(accumulators)
        self.counts = np.zeros(len(self.accumulators))
        self.keys = keys
        self.weight_key: Any = None if keys is None else keys[0]
        self.comp_key: Any = None if keys is None else keys[1]

    def seq_update(self, enc: Any, weights: np.ndarray, estimate: Distribution | None) -> np.ndarray:
        """E-step over a batch; returns the per-row log-likelihood under ``estimate``.

        Rows impossible under every component get the prior weights as responsibilities (so their
        weight is spread by ``w`` rather than producing NaN); their log-likelihood is ``-inf``.
        """
        return self.threaded_update(enc, weights, estimate, map)

    def threaded_update(
        self, enc: Any, weights: np.ndarray, estimate: Distribution | None, map_fn: MapFunction
    ) -> np.ndarray:
        """:meth:`seq_update` with its independent work items mapped by ``map_fn`` (``map``, or a
        thread pool's ordered ``map``; numpy releases the GIL in the products and ufuncs).

        The work items are the fused kernel's row blocks, or else the components (scoring, then each
        component's statistics). Results are combined in item order, so every ``map_fn`` gives
        bit-identical statistics.
        """
        if not isinstance(estimate, MixtureDistribution):
            raise SpecError(
                "MixtureAccumulator.seq_update needs the current MixtureDistribution as "
                f"estimate (use seq_initialize for the first pass), got {estimate!r}"
            )
        comps = estimate.components
        if len(comps) != len(self.accumulators):
            raise SpecError(
                f"MixtureAccumulator: the estimate has {len(comps)} components, the "
                f"accumulator {len(self.accumulators)}"
            )
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape[0] == 0:
            return np.zeros(0)
        labels = None
        if isinstance(enc, LabelledBatch):  # partly labelled: the components' path, labels one-hot
            labels, enc = checked_labels(enc.labels, len(self.accumulators)), enc.inner
        elif self.use_fast_path and not reference_active() and features_shared(comps, self.accumulators, enc):
            return self._fused_update(enc, weights, estimate, map_fn)
        engine = current_engine()
        if (engine.name, engine.precision) != ("numpy", "float64"):  # said once per family and engine
            fallback_note(engine, getattr(comps[0], "family", "") or type(comps[0]).__name__)
        rows = list(map_fn(lambda c: np.asarray(c.seq_log_density(enc), dtype=np.float64), comps))
        joint = np.empty((len(rows), rows[0].shape[0]))
        for k, r in enumerate(rows):
            joint[k] = r
        joint += estimate.log_w[:, None]
        known = np.flatnonzero(labels >= 0) if labels is not None else np.zeros(0, dtype=np.int64)
        picked = joint[labels[known], known].copy() if labels is not None else None  # log w_y + log p_y(x)
        ll = responsibilities(joint, weights, estimate)
        if labels is not None:
            joint[:, known] = 0.0
            joint[labels[known], known] = weights[known]
            ll[known] = picked
        self.counts += joint.sum(axis=1)
        work = zip(self.accumulators, joint, comps, strict=True)
        for _ in map_fn(lambda item: item[0].seq_update(enc, item[1], item[2]), work):
            pass
        return ll

    def _fused_update(
        self, enc: Any, weights: np.ndarray, estimate: MixtureDistribution, map_fn: MapFunction
    ) -> np.ndarray:
        return fused_e_step(self.accumulators, self.counts, enc, weights, estimate, map_fn)

    def seq_initialize(self, enc: Any, weights: np.ndarray, rng: RowRandom) -> None:
        """Random responsibilities ~ Dirichlet(1/K^2) (nearly hard assignments) from row-keyed ``rng``."""
        k = len(self.accumulators)
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape[0] == 0:
            return
        self.seq_assign(enc, weights, rng.dirichlet_like(k, alpha=1.0 / k**2), rng)

    def seq_assign(
        self,
        enc: Any,
        weights: np.ndarray,
        resp: np.ndarray,
        rng: RowRandom,
        nested: tuple[int, np.ndarray] | None = None,
    ) -> None:
        """Initial statistics from given responsibilities ``resp`` of shape (n, K) (the seeding's
        hard assignments, or random ones; a labelled row's are one-hot at its label); each component
        initializes from its weighted rows. ``nested = (field, responsibilities)``: the mixture in
        that field of every (record / composite) component starts from those responsibilities
        rather than random ones (:mod:`mixle_spark.em._nested_seeding`)."""
        if isinstance(enc, LabelledBatch):
            labels = checked_labels(enc.labels, len(self.accumulators))
            known = np.flatnonzero(labels >= 0)
            resp = np.array(resp, dtype=np.float64)
            resp[known] = 0.0
            resp[known, labels[known]] = 1.0
            enc = enc.inner
        r = np.asarray(resp, dtype=np.float64) * np.asarray(weights, dtype=np.float64)[:, None]
        self.counts += r.sum(axis=0)
        for j, acc in enumerate(self.accumulators):
            if nested is not None and isinstance(acc, ProductAccumulator):
                acc.seq_initialize_assigned(enc, np.ascontiguousarray(r[:, j]), rng.child(j), *nested)
            else:
                acc.seq_initialize(enc, np.ascontiguousarray(r[:, j]), rng.child(j))

    def combine(self, value: Any) -> MixtureAccumulator:
        counts, comp_values = value
        self.counts += np.asarray(counts, dtype=np.float64)
        for acc, v in zip(self.accumulators, comp_values, strict=True):
            acc.combine(v)
        return self

    def value(self) -> tuple[np.ndarray, tuple[Any, ...]]:
        return (self.counts.copy(), tuple(acc.value() for acc in self.accumulators))

    def _scale(self, factor: float) -> None:
        self.counts = factor * self.counts
        for acc in self.accumulators:
            acc._scale(factor)

    def widened(self, target: Accumulator) -> tuple[np.ndarray, tuple[Any, ...]]:
        other = widening_target(self, target)
        return (self.counts.copy(), widened_parts(self, self.accumulators, other.accumulators))

    def from_value(self, value: Any) -> MixtureAccumulator:
        counts, comp_values = value
        self.counts = np.array(counts, dtype=np.float64)
        for acc, v in zip(self.accumulators, comp_values, strict=True):
            acc.from_value(v)
        return self

    def make_encoder(self) -> MixtureEncoder:
        return MixtureEncoder(self.accumulators[0].make_encoder())

    def key_merge(self, stats: dict[Any, Any]) -> None:
        # Pools are copies, never this site's objects, so later sites cannot alias earlier ones.
        if self.weight_key is not None:
            if self.weight_key in stats:
                stats[self.weight_key] += self.counts
            else:
                stats[self.weight_key] = self.counts.copy()
        if self.comp_key is not None:
            if self.comp_key in stats:
                for pool, acc in zip(stats[self.comp_key], self.accumulators, strict=True):
                    pool.combine(acc.value())
            else:
                stats[self.comp_key] = [copy.deepcopy(acc) for acc in self.accumulators]
        for part in self.parts():
            part.key_merge(stats)

    def key_replace(self, stats: dict[Any, Any]) -> None:
        if self.weight_key is not None and self.weight_key in stats:
            self.counts = np.array(stats[self.weight_key], dtype=np.float64)
        if self.comp_key is not None and self.comp_key in stats:
            for pool, acc in zip(stats[self.comp_key], self.accumulators, strict=True):
                acc.from_value(pool.value())
        for part in self.parts():
            part.key_replace(stats)

    def parts(self) -> list[Accumulator]:
        return self.accumulators

    def fresh_args(self) -> tuple[Any, ...]:
        return ([a.make() for a in self.accumulators], self.keys)


@register_estimator("mixture")
@dataclass(eq=False, repr=False)
class MixtureEstimator(Estimator):
    """EM estimator of a K-component mixture.

    Parameters
    ----------
    estimators : sequence of Estimator
        One estimator per component (``[est] * k`` is fine); their encoders must be equal.
    pseudo_count : float, optional
        Adds ``pseudo_count / K`` to every component count before normalising the weights.
    w_min : float
        Floor on every weight (then renormalised; ``w_min * K <= 1``), so that a component that
        lost all its rows can come back. Default 0.
    keys : (weight_key, comp_key), optional
        Tie the weights / the components to other mixtures with the same keys.
    name : str, optional
    init_rows_per_component : int or None
        Size of the random initial sample, per component (default 20). Random responsibilities over
        a large sample give components that all look like the whole data set, and EM can stall at
        that symmetric start; a small sample gives distinct starting components. The driver uses
        ``init_p`` capped to about ``init_rows_per_component * K`` rows (at least ``10 * K``, or all
        rows of a smaller data set). None uses ``init_p`` as given.

    Zero total weight gives uniform weights; each component is estimated from its own count.
    """

    estimators: Sequence[Estimator] = estimators_option(key="components")
    pseudo_count: float | None = None
    w_min: float = option(0.0, read=float)
    keys: tuple[Any, Any] | None = option(
        None,
        lambda v: isinstance(v, (list, tuple)) and len(v) == 2,
        "a pair (weight_key, comp_key)",
        read=tuple,
    )
    name: str | None = None
    init_rows_per_component: int | None = option(
        20, lambda v: v is None or (isinstance(v, int) and v >= 1), "a positive integer or None"
    )
    covariance: str | None = option(None, is_form, FORM_CHOICES, read=covariance_form)
    label_column: str | None = option(None, lambda v: isinstance(v, str) and bool(v), "a column name")
    data_column: str | None = option(None, lambda v: isinstance(v, str) and bool(v), "a column name")

    def check(self) -> None:
        self.estimators = ests = check_estimators("MixtureEstimator", "estimators", self.estimators)
        ok = math.isfinite(self.w_min) and 0 <= self.w_min * len(ests) <= 1
        check_parameter(ok, "MixtureEstimator", "w_min", self.w_min, f"in [0, 1/K] = [0, {1 / len(ests)!r}]")
        if self.covariance is not None:
            check_form_components(self.covariance, ests)
        if self.data_column is not None and self.label_column is None:
            raise SpecError(
                f"MixtureEstimator: data_column={self.data_column!r} names the data beside label_column, "
                "which is not set"
            )

    def min_rows(self) -> int:
        return len(self.estimators)

    def init_sample_size(self) -> tuple[int, int] | None:
        if self.init_rows_per_component is None:
            return None
        k = len(self.estimators)
        return 10 * k, max(self.init_rows_per_component, 10) * k

    def accumulator_factory(self) -> MixtureAccumulator:
        return MixtureAccumulator([e.accumulator() for e in self.estimators], self.keys)

    def encoder(self) -> MixtureEncoder | LabelledEncoder:  # type: ignore[override]
        first = unwrap(self.estimators[0].encoder())
        for k, e in enumerate(self.estimators[1:], start=1):
            other = unwrap(e.encoder())
            if other != first:
                raise SpecError(
                    f"MixtureEstimator: all components must read one encoding, but "
                    f"component 0 reads {first!r} and component {k} reads {other!r}"
                )
        if self.label_column is not None:  # partly labelled: the label rides with the data
            return LabelledEncoder(
                MixtureEncoder(first), self.label_column, len(self.estimators), self.data_column
            )
        return MixtureEncoder(first)

    def with_scan(self, scan: Any) -> MixtureEstimator:
        return dataclasses.replace(self, estimators=[e.with_scan(scan) for e in self.estimators])

    def estimate(self, nobs: float | None, value: Any) -> MixtureDistribution:
        counts, comp_values = value
        w = mixture_weights(counts, len(self.estimators), self.pseudo_count, self.w_min)
        comps = estimate_components(self.estimators, self.covariance, counts, comp_values, w)
        return MixtureDistribution(comps, w, covariance=self.covariance)

    def n_free_parameters(self, model: Distribution, tied: set[Any] | None = None) -> int:
        """The weights (k - 1) and the components; ``keys = (weight_key, comp_key)`` tie each part
        to the same part of other mixtures, so it counts once."""
        tied = set() if tied is None else tied
        weight_key, comp_key = self.keys or (None, None)

        def first(part: str, key: Any) -> bool:  # the first site of a tied part counts it
            if key is None:
                return True
            seen = (part, key) in tied
            tied.add((part, key))
            return not seen

        count = len(model.w) - 1 if first("mixture weights", weight_key) else 0  # type: ignore[attr-defined]
        if self.covariance is not None and first("mixture components", comp_key):
            return count + form_parameters(self.covariance, model)
        if first("mixture components", comp_key):
            pairs = zip(self.estimators, model.components, strict=True)  # type: ignore[attr-defined]
            count += sum(e.n_free_parameters(c, tied) for e, c in pairs)
        return count
