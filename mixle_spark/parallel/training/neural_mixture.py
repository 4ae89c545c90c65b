"""A mixture of experts fitted by generalized EM, its M-step a few data-parallel optimizer steps.

The model for a target ``y`` given covariates ``x`` (a mixture-density network with Gaussian
experts)::

    p(y | x) = sum_k g_k(x) N(y; mu_k(x), sigma_k^2),   g(x) = softmax(gate(x)),  mu(x) = experts(x)

``gate`` and ``experts`` are torch modules from the covariates to ``k`` outputs (linear by default:
a mixture of linear regressions with a logistic gate); the ``sigma_k`` are parameters of their own.

:meth:`MixtureOfExperts.fit` alternates

E-step
    responsibilities ``r_ik`` of each expert for each row under the current model (no gradients);
M-step
    ``m_steps`` optimizer steps on the expected complete-data negative log-likelihood
    ``-sum_i sum_k r_ik [log g_k(x_i) + log N(y_i; mu_k(x_i), sigma_k^2)] / n`` (generalized EM:
    the M-step improves the objective rather than maximising it).

Under ``torchrun`` each rank holds its own rows: the E-step is local, the M-step's gradients are
all-reduced by DDP (:mod:`~mixle_spark.parallel.training.torch_training`), and the log-likelihood of
each iteration is one float64 sum over ranks. The result equals a single-process fit of the union.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mixle_spark.parallel.training._optional import require_torch
from mixle_spark.parallel.training._records import exact_int
from mixle_spark.parallel.training.contracts import ParallelPlan

__all__ = ["MixtureOfExperts", "MixtureOfExpertsFit", "covariate_tensors"]

_WHAT = "the neural mixture (MixtureOfExperts)"
_LOG_2PI = math.log(2 * math.pi)


def covariate_tensors(table: Any, covariates: Sequence[str], target: str) -> tuple[Any, Any]:
    """``(x, y)`` float64 tensors from columns of a pandas DataFrame or a pyarrow Table.

    Raises ValueError naming a missing column, a non-numeric one, or the first row with a missing
    or non-finite value.
    """
    torch = require_torch(_WHAT)
    names = list(table.column_names) if hasattr(table, "column_names") else list(table.columns)
    missing = [c for c in [*covariates, target] if c not in names]
    if missing:
        raise ValueError(f"column(s) {missing} not found; the table has {names}")
    arrays = {}
    for name in [*covariates, target]:
        column = table[name]
        values = column.to_numpy() if hasattr(column, "to_numpy") else np.asarray(column)
        try:
            arr = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"column {name!r} must be numeric, got values such as {values[:3]!r}") from err
        bad = np.flatnonzero(~np.isfinite(arr))
        if bad.size:
            raise ValueError(
                f"column {name!r} row {int(bad[0])}: {float(arr[bad[0]])!r} (expected a finite number)"
            )
        arrays[name] = arr
    x = np.column_stack([arrays[c] for c in covariates]) if covariates else np.zeros((len(arrays[target]), 0))
    return torch.as_tensor(x), torch.as_tensor(arrays[target])


@dataclass
class MixtureOfExpertsFit:
    """What :meth:`MixtureOfExperts.fit` did: the mean log-likelihood per iteration over every rank's
    rows (before that iteration's M-step), the iterations run, whether it converged, the row count."""

    log_likelihood: list[float] = field(default_factory=list)
    iterations: int = 0
    converged: bool = False
    rows: int = 0


class MixtureOfExperts:
    """``k`` Gaussian experts of a scalar target, gated by the covariates.

    Parameters
    ----------
    n_features, k : int
        Covariate count and number of experts.
    gate, experts : torch.nn.Module, optional
        Modules mapping ``(n, n_features)`` covariates to ``(n, k)`` gate logits and expert means.
        Default: ``torch.nn.Linear(n_features, k)`` each, in float64.
    seed : int
        Seeds the default modules' initialisation (the same on every rank).
    """

    def __init__(
        self, n_features: int, k: int, *, gate: Any = None, experts: Any = None, seed: int = 0
    ) -> None:
        torch = require_torch(_WHAT)
        self.n_features, self.k = exact_int("n_features", n_features, 0), exact_int("k", k, 1)
        with torch.random.fork_rng():
            torch.manual_seed(int(seed))
            gate = gate if gate is not None else torch.nn.Linear(n_features, k, dtype=torch.float64)
            experts = experts if experts is not None else torch.nn.Linear(n_features, k, dtype=torch.float64)

        class _Net(torch.nn.Module):  # type: ignore[misc, name-defined]
            def __init__(self) -> None:
                super().__init__()
                self.gate, self.experts = gate, experts
                self.log_sigma = torch.nn.Parameter(torch.zeros(k, dtype=torch.float64))

            def forward(self, x: Any, y: Any) -> Any:
                """Per row and expert: ``log g_k(x) + log N(y; mu_k(x), sigma_k^2)``, shape (n, k)."""
                log_gate = torch.log_softmax(self.gate(x), dim=1)
                z = (y[:, None] - self.experts(x)) / torch.exp(self.log_sigma)
                return log_gate - 0.5 * z**2 - self.log_sigma - 0.5 * _LOG_2PI

        self.module = _Net()
        self.session: Any = None

    # -- model -------------------------------------------------------------------------------------
    def _check(self, x: Any, y: Any) -> tuple[Any, Any]:
        torch = require_torch(_WHAT)
        x, y = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
        if x.dim() != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"x must have shape (rows, {self.n_features}), got {tuple(x.shape)}")
        if y.shape != (x.shape[0],):
            raise ValueError(f"y must have shape ({x.shape[0]},) to match x, got {tuple(y.shape)}")
        return x, y

    def _net(self) -> Any:
        return self.session.module if self.session is not None else self.module

    def log_joint(self, x: Any, y: Any) -> Any:
        """``log g_k(x) + log N(y; mu_k(x), sigma_k^2)`` per row and expert (no gradients)."""
        torch = require_torch(_WHAT)
        x, y = self._check(x, y)
        with torch.no_grad():
            return self._net()(x, y)

    def responsibilities(self, x: Any, y: Any) -> Any:
        """Posterior probability of each expert for each row, shape (n, k)."""
        torch = require_torch(_WHAT)
        return torch.softmax(self.log_joint(x, y), dim=1)

    def log_likelihood(self, x: Any, y: Any) -> Any:
        """``log p(y_i | x_i)`` per row."""
        torch = require_torch(_WHAT)
        return torch.logsumexp(self.log_joint(x, y), dim=1)

    def parameters(self) -> dict[str, np.ndarray]:
        """Gate and expert weights and biases (linear defaults) and ``sigma``, as numpy arrays."""
        net = self.module
        out = {name: p.detach().cpu().numpy().copy() for name, p in net.named_parameters()}
        out["sigma"] = np.exp(out.pop("log_sigma"))
        return out

    # -- estimation --------------------------------------------------------------------------------
    def fit(
        self,
        x: Any,
        y: Any,
        *,
        max_its: int = 200,
        m_steps: int = 10,
        lr: float = 0.05,
        tol: float = 1e-7,
        distributed: bool = True,
        optimizer: str | Callable[[Any], Any] = "adam",
        print_iter: int = 0,
    ) -> MixtureOfExpertsFit:
        """Fit by generalized EM on this rank's rows ``x`` (n, n_features) and ``y`` (n,).

        Under a process group (``torchrun``) every rank passes its own rows and ends with the same
        model; ``distributed=False`` fits this process's rows alone. Stops when the global mean
        log-likelihood changes by less than ``tol`` (relative) or after ``max_its`` iterations.
        """
        from mixle_spark.parallel.training.torch_training import TorchDistributedBackend, init_process_group

        torch = require_torch(_WHAT)
        x, y = self._check(x, y)
        max_its, m_steps = exact_int("max_its", max_its, 1), exact_int("m_steps", m_steps, 1)
        dist = init_process_group() if distributed else None
        world = int(dist.get_world_size()) if dist is not None else 1

        def expected_nll(module: Any, batch: Any) -> Any:
            bx, by, resp = batch
            return -(resp * module(bx, by)).sum(dim=1)

        self.session = TorchDistributedBackend().prepare(
            self.module,
            plan=ParallelPlan(dp_replicate=world),
            loss_fn=expected_nll,
            optimizer=optimizer,
            lr=lr,
            distributed=distributed,
        )
        (rows,) = self.session.reduce_sums([x.shape[0]])
        result = MixtureOfExpertsFit(rows=int(rows))
        previous = -math.inf
        for it in range(max_its):
            with torch.no_grad():
                joint = self.session.module(x, y)
                resp = torch.softmax(joint, dim=1)
                (total,) = self.session.reduce_sums([float(torch.logsumexp(joint, dim=1).sum())])
            mean = total / rows
            result.log_likelihood.append(mean)
            result.iterations = it + 1
            if print_iter and it % print_iter == 0 and self.session.rank == 0:
                print(f"mixture of experts: iteration {it}, mean log-likelihood {mean:.6f}", flush=True)
            if abs(mean - previous) <= tol * max(1.0, abs(mean)):
                result.converged = True
                break
            previous = mean
            for _ in range(m_steps):
                self.session.step((x, y, resp), global_examples=int(rows))
        return result
