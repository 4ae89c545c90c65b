"""Data-parallel and sharded gradient training of a torch module over a :class:`ParallelPlan`.

:class:`TorchDistributedBackend` (registered as ``torch_native`` when this module is imported) turns
a module and a plan into a :class:`TorchDistributedSession`:

* ``dp_replicate`` alone: DDP; ``dp_shard``: FSDP2 (``fully_shard``); both: HSDP (FSDP2 over a 2-D
  mesh); ``tp``: tensor parallelism (``parallelize_module`` with a caller's ``tp_plan``), alone or
  under ``dp_shard``. All of these run on CPU with gloo, and the tests run them under ``torchrun``.
* Pipeline and context parallelism, and TP under DDP replication, are refused
  (:class:`~mixle_spark.parallel.training.contracts.UnsupportedParallelismError`), never dropped.

One optimizer step uses the exact mean of the per-example losses over the global batch: each rank's
``loss_fn`` returns one loss per example, backward runs on the rank's loss *sum* times the
data-parallel size (DDP and FSDP average gradients over ranks), and at the commit the gradients are
divided by the global example count. So a 2-rank run equals a 1-rank run over the union of the
ranks' batches, whatever their sizes, and gradient accumulation and micro-batches change nothing
but memory. A step whose global loss or gradient norm is not finite is skipped (no parameter moves)
and its receipt says so.

>>> from mixle_spark.parallel.training.contracts import ParallelPlan
>>> TORCH_NATIVE.validate(ParallelPlan(dp_shard=2, tp=2))
>>> TORCH_NATIVE.unsupported_axes(ParallelPlan(pp=2, cp=2))
(<ParallelAxis.PP: 'pp'>, <ParallelAxis.CP: 'cp'>)
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from mixle_spark.errors import describe_value
from mixle_spark.parallel._torch_group import TORCH_REQUIREMENT, default_group
from mixle_spark.parallel.training._optional import require_torch
from mixle_spark.parallel.training._records import ParameterLayout, StateLayout, StepReceipt
from mixle_spark.parallel.training.contracts import (
    BackendCapabilities,
    ParallelAxis,
    ParallelPlan,
)

__all__ = [
    "OPTIMIZERS",
    "TORCH_NATIVE",
    "TorchDistributedBackend",
    "TorchDistributedSession",
    "describe_parameter_layouts",
    "init_process_group",
]

_WHAT = "torch_training"
OPTIMIZERS = ("sgd", "adam", "adamw")
_TP_STYLES = ("colwise", "rowwise")

TORCH_NATIVE = BackendCapabilities(
    "torch_native",
    axes={ParallelAxis.DP_REPLICATE, ParallelAxis.DP_SHARD, ParallelAxis.TP},
    precisions={"fp32", "bf16"},
    distributed_optimizer=True,
    reshardable_checkpoint=True,
    elastic_restart=True,
    requirements=(TORCH_REQUIREMENT,),
    incompatible_axis_sets=({ParallelAxis.DP_REPLICATE, ParallelAxis.TP},),
)


def init_process_group(timeout_s: float = 300.0) -> Any:
    """The default process group, initialised from the ``torchrun`` environment when it is not yet.

    gloo on CPU, nccl when CUDA is available; the launch's topology is checked first, and each
    restart of an elastic job gets its own keys in torchrun's store
    (:func:`~mixle_spark.parallel._torch_group.default_group`, shared with the torchrun EM backend).
    Returns ``torch.distributed``, or None when this is not a distributed launch (no ``WORLD_SIZE``
    in the environment) and no group exists.
    """
    return default_group(_WHAT, timeout_s=timeout_s)


def _split(batch: Any, parts: int) -> list[Any]:
    """``batch`` (a tensor, a sequence or mapping of tensors sharing dim 0) in ``parts`` pieces."""
    torch = require_torch(_WHAT)
    if isinstance(batch, torch.Tensor):
        return list(torch.tensor_split(batch, parts))
    if isinstance(batch, Mapping):
        pieces = {k: _split(v, parts) for k, v in batch.items()}
        return [{k: v[i] for k, v in pieces.items()} for i in range(parts)]
    if isinstance(batch, (list, tuple)):
        columns = [_split(v, parts) for v in batch]
        return [type(batch)(c[i] for c in columns) for i in range(parts)]
    raise TypeError(
        f"a batch must be a tensor, or a sequence or mapping of tensors; got {describe_value(batch)}"
    )


def _full(value: Any) -> Any:
    return value.full_tensor() if hasattr(value, "full_tensor") else value


class TorchDistributedSession:
    """A prepared module: one committed optimizer update per :meth:`step` or completed accumulation.

    Built by :meth:`TorchDistributedBackend.prepare`; ``module`` is the wrapped module (DDP, FSDP2
    or the original) and ``optimizer`` its optimizer. ``loss_fn(module, batch)`` returns one loss per
    example (a 1-D tensor; rows that are padding return 0 and are not counted when ``examples`` is
    given).
    """

    def __init__(
        self,
        module: Any,
        optimizer: Any,
        loss_fn: Callable[[Any, Any], Any],
        *,
        plan: ParallelPlan,
        capabilities: BackendCapabilities,
        precision: str,
        device: Any,
        dist: Any,
        wrapping: str,
        max_grad_norm: float | None,
        scheduler: Any,
        optimizer_name: str,
    ) -> None:
        self.module = module
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.plan = plan
        self.capabilities = capabilities
        self.precision = precision
        self.device = device
        self.wrapping = wrapping
        self.max_grad_norm = max_grad_norm
        self.scheduler = scheduler
        self.optimizer_name = optimizer_name
        self._dist = dist
        self.steps = 0
        self._pending = 0  # accumulation calls since the last commit
        self._sums = [0.0, 0]  # local loss sum and examples since the last commit
        self._global_examples: int | None = 0
        self._started = time.perf_counter()

    # -- distributed facts -------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return int(self._dist.get_rank()) if self._dist is not None else 0

    @property
    def world_size(self) -> int:
        return int(self._dist.get_world_size()) if self._dist is not None else 1

    @property
    def parameters(self) -> list[Any]:
        return [p for p in self.module.parameters() if p.requires_grad]

    def _sync_context(self, sync: bool) -> Any:
        if sync:
            return contextlib.nullcontext()
        if self.wrapping == "ddp":
            return self.module.no_sync()
        if self.wrapping == "fsdp":

            @contextlib.contextmanager
            def unsynced() -> Iterator[None]:
                self.module.set_requires_gradient_sync(False)
                try:
                    yield
                finally:
                    self.module.set_requires_gradient_sync(True)

            return unsynced()
        return contextlib.nullcontext()

    def _autocast(self) -> Any:
        torch = require_torch(_WHAT)
        if self.precision == "bf16":
            return torch.autocast(device_type=str(self.device).split(":")[0], dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # -- training ----------------------------------------------------------------------------------
    def train_batch(
        self, batch: Any, *, examples: int | None = None, global_examples: int | None = None
    ) -> StepReceipt | None:
        """Accumulate this rank's ``batch``; commit once ``gradient_accumulation_steps`` calls are in.

        ``batch`` is split into ``plan.microbatches`` pieces along dim 0. ``examples`` (default: the
        number of per-example losses) is how many real examples the batch holds; ``global_examples``,
        when every rank knows it, saves the one accounting collective of the commit (the receipt's
        loss is then this rank's). Returns the :class:`StepReceipt` of the commit, else None.
        """
        torch = require_torch(_WHAT)
        last_call = self._pending + 1 >= self.plan.gradient_accumulation_steps
        pieces = _split(batch, self.plan.microbatches)
        counted = 0
        for i, piece in enumerate(pieces):
            sync = i == len(pieces) - 1
            with self._sync_context(sync), self._autocast():
                losses = self.loss_fn(self.module, piece)
                if losses.dim() != 1:
                    raise ValueError(
                        "loss_fn must return one loss per example (a 1-D tensor), got shape "
                        f"{tuple(losses.shape)}"
                    )
                total = losses.sum(dtype=torch.float64)  # float64 accounting, whatever the losses' dtype
                (total * self.plan.data_parallel_size).backward()
            self._sums[0] += float(total.detach())
            counted += int(losses.shape[0])
        self._sums[1] += counted if examples is None else int(examples)
        if global_examples is None or self._global_examples is None:
            self._global_examples = None
        else:
            self._global_examples += int(global_examples)
        self._pending += 1
        return self.finish_accumulation() if last_call else None

    def step(self, batch: Any, **kwargs: Any) -> StepReceipt:
        """:meth:`train_batch` then :meth:`finish_accumulation`: always one committed update."""
        receipt = self.train_batch(batch, **kwargs)
        if receipt is None:
            receipt = self.finish_accumulation()
        assert receipt is not None
        return receipt

    def _global(self) -> tuple[float, int, int]:
        """(global loss sum, global examples, collective bytes) over the data-parallel ranks."""
        loss_sum, examples = float(self._sums[0]), int(self._sums[1])
        if self._global_examples is not None:
            return loss_sum, self._global_examples, 0
        if self._dist is None:
            return loss_sum, examples, 0
        torch = require_torch(_WHAT)
        both = torch.tensor([loss_sum, float(examples)], dtype=torch.float64)
        self._dist.all_reduce(both)
        # Ranks of one tensor-parallel group saw the same batch: count each data shard once.
        share = self.plan.data_parallel_size / self.world_size
        return float(both[0]) * share, round(float(both[1]) * share), 16

    def finish_accumulation(self) -> StepReceipt | None:
        """Commit the accumulated gradients (None when nothing is pending)."""
        if not self._pending:
            return None
        torch = require_torch(_WHAT)
        loss_sum, global_examples, collective = self._global()
        local_loss, local_examples = self._sums
        accumulated = self._pending
        self._pending, self._sums = 0, [0.0, 0]
        self._global_examples = 0
        if global_examples <= 0:
            raise ValueError("a committed step holds no examples on any rank (every batch was empty)")
        grads = [p.grad for p in self.parameters if p.grad is not None]
        for g in grads:
            g.div_(global_examples)
        limit = self.max_grad_norm if self.max_grad_norm is not None else math.inf
        norm = float(_full(torch.nn.utils.clip_grad_norm_(self.parameters, limit, foreach=None)))
        if collective or self._dist is None:
            loss = loss_sum / global_examples  # the global mean
        else:  # every rank knew the global count, so the loss was not reduced: this rank's mean
            loss = local_loss / max(1, local_examples)
        finite = math.isfinite(loss) and math.isfinite(norm)
        if finite:
            self.optimizer.step()
            if self.scheduler is not None:
                self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        elapsed, self._started = time.perf_counter() - self._started, time.perf_counter()
        extra: dict[str, Any] = {
            "grad_norm": norm if math.isfinite(norm) else repr(norm),
            "seconds": elapsed,
            "wrapping": self.wrapping,
            "rank": self.rank,
        }
        if not finite:
            extra["nonfinite"] = "loss" if not math.isfinite(loss) else "grad_norm"
            extra["loss"] = repr(loss)
        return StepReceipt(
            step=self.steps,
            loss=loss if finite else 0.0,
            local_examples=int(local_examples),
            local_tokens=int(local_examples),
            microbatches=self.plan.microbatches,
            accumulation_steps=accumulated,
            data_parallel_size=self.plan.data_parallel_size,
            optimizer=self.optimizer_name,
            precision=self.precision,
            collective_bytes=collective,
            skipped=not finite,
            extra=extra,
            global_examples_observed=max(int(global_examples), int(local_examples)),
            global_tokens_observed=max(int(global_examples), int(local_examples)),
        )

    def discard_accumulation(self) -> None:
        """Drop pending gradients without an update."""
        self.optimizer.zero_grad(set_to_none=True)
        self._pending, self._sums, self._global_examples = 0, [0.0, 0], 0

    # -- state -------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Model, optimizer (and scheduler) state as ``torch.distributed.checkpoint`` saves it, plus the step.

        Refused while gradients are pending: a checkpoint holds committed updates only.
        """
        if self._pending:
            raise RuntimeError(
                f"finish gradient accumulation before saving ({self._pending} of "
                f"{self.plan.gradient_accumulation_steps} accumulation calls pending)"
            )
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optim = get_state_dict(self.module, self.optimizer)
        state: dict[str, Any] = {"model": model, "optimizer": optim, "step": self.steps}
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (in place; resharded by torch when the layout differs)."""
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(
            self.module, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
        )
        self.steps = int(state["step"])
        if self.scheduler is not None and "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])

    def full_parameters(self) -> dict[str, Any]:
        """Every parameter gathered whole (a collective for FSDP2 / TP), as CPU tensors by name."""
        named = dict(self.module.named_parameters())
        prefix = "module." if self.wrapping == "ddp" else ""
        return {k.removeprefix(prefix): _full(v.detach()).cpu().clone() for k, v in named.items()}

    def reduce_sums(self, values: Sequence[float]) -> list[float]:
        """Sum ``values`` over every rank (float64); the values themselves on one process."""
        if self._dist is None:
            return [float(v) for v in values]
        torch = require_torch(_WHAT)
        t = torch.tensor([float(v) for v in values], dtype=torch.float64)
        self._dist.all_reduce(t)
        return [float(v) for v in t]

    def close(self) -> None:
        """Drop pending gradients (the process group is the caller's)."""
        self.discard_accumulation()


class TorchDistributedBackend:
    """The ``torch_native`` training backend (:data:`TORCH_NATIVE` capabilities)."""

    capabilities = TORCH_NATIVE

    def prepare(
        self,
        module: Any,
        *,
        plan: ParallelPlan,
        loss_fn: Callable[[Any, Any], Any],
        precision: str = "fp32",
        optimizer: str | Callable[[Any], Any] = "sgd",
        lr: float = 1e-3,
        scheduler: Callable[[Any], Any] | None = None,
        max_grad_norm: float | None = None,
        tp_plan: Mapping[str, str] | None = None,
        device: str | None = None,
        distributed: bool = True,
    ) -> TorchDistributedSession:
        """Wrap ``module`` for ``plan`` and build its optimizer.

        ``optimizer`` is one of :data:`OPTIMIZERS` (with ``lr``) or a callable ``params -> Optimizer``;
        ``scheduler`` a callable ``optimizer -> LRScheduler``. ``tp_plan`` maps submodule names to
        ``"colwise"`` / ``"rowwise"`` and is required when ``plan.tp > 1``. The process group is
        initialised from the ``torchrun`` environment when needed; ``plan.world_size`` must equal it.
        ``distributed=False`` trains this process alone (a 1-rank plan), even inside a process group.
        """
        if not isinstance(plan, ParallelPlan):
            raise TypeError(f"plan must be a ParallelPlan, got {describe_value(plan)}")
        self.capabilities.validate(plan, precision=precision)
        if not callable(loss_fn):
            raise TypeError(
                "loss_fn must be callable (module, batch) -> per-example losses, got "
                f"{describe_value(loss_fn)}"
            )
        if isinstance(optimizer, str) and optimizer not in OPTIMIZERS:
            raise ValueError(
                f"optimizer must be one of {', '.join(OPTIMIZERS)} or a callable, got {optimizer!r}"
            )
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
            raise ValueError(f"lr must be a positive number, got {describe_value(lr)}")
        if max_grad_norm is not None and not max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be positive or None, got {describe_value(max_grad_norm)}")
        if plan.tp > 1:
            if not tp_plan:
                raise ValueError(
                    f"plan.tp={plan.tp} needs tp_plan: submodule names mapped to 'colwise' or 'rowwise'"
                )
            bad = {k: v for k, v in tp_plan.items() if v not in _TP_STYLES}
            if bad:
                raise ValueError(f"tp_plan styles must be 'colwise' or 'rowwise', got {bad}")
        torch = require_torch(_WHAT)
        dist = init_process_group() if distributed else None
        world = int(dist.get_world_size()) if dist is not None else 1
        plan.validate_world_size(world)
        if device is None:
            device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if torch.cuda.is_available() else "cpu"
        module = module.to(device)
        wrapping = "none"
        if world > 1:
            module, wrapping = self._wrap(module, plan, tp_plan or {}, str(device).split(":")[0])
        params = [p for p in module.parameters() if p.requires_grad]
        if callable(optimizer):
            built, name = optimizer(params), type(optimizer).__name__.lower()
        else:
            factory = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[
                optimizer
            ]
            built, name = factory(params, lr=lr), optimizer
        return TorchDistributedSession(
            module,
            built,
            loss_fn,
            plan=plan,
            capabilities=self.capabilities,
            precision=precision,
            device=device,
            dist=dist,
            wrapping=wrapping,
            max_grad_norm=max_grad_norm,
            scheduler=scheduler(built) if scheduler is not None else None,
            optimizer_name=name,
        )

    @staticmethod
    def _wrap(
        module: Any, plan: ParallelPlan, tp_plan: Mapping[str, str], device_type: str
    ) -> tuple[Any, str]:
        from torch.distributed.device_mesh import init_device_mesh

        names, shape = plan.mesh
        mesh = init_device_mesh(device_type, shape, mesh_dim_names=names)
        if plan.tp > 1:
            from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

            styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
            parallelize_module(module, mesh["tp"], {k: styles[v]() for k, v in tp_plan.items()})
        sharded = [n for n in ("dp_replicate", "dp_shard") if plan.size(n) > 1]
        if plan.dp_shard > 1:
            from torch.distributed.fsdp import fully_shard

            fully_shard(module, mesh=mesh[tuple(sharded)] if len(sharded) > 1 else mesh["dp_shard"])
            return module, "fsdp"
        if plan.dp_replicate > 1:
            from torch.nn.parallel import DistributedDataParallel

            return DistributedDataParallel(module), "ddp"
        return module, "tp"


def describe_parameter_layouts(
    module: Any, plan: ParallelPlan, *, sharded: bool | None = None
) -> tuple[ParameterLayout, ...]:
    """One :class:`ParameterLayout` per parameter of ``module`` under ``plan``.

    Placements: ``dp_shard`` shards dim 0 (FSDP2), ``dp_replicate`` replicates; the optimizer state
    is sharded with the parameters under FSDP2, else replicated. Tensor-parallel placements come
    from a module already parallelised (DTensor parameters).
    """
    sharded = plan.dp_shard > 1 if sharded is None else sharded
    layouts = []
    for name, param in module.named_parameters():
        placements: list[tuple[str, str]] = []
        if plan.dp_replicate > 1:
            placements.append(("dp_replicate", "replicate"))
        if sharded:
            placements.append(("dp_shard", "shard(0)"))
        for dim_name, placement in zip(
            getattr(getattr(param, "device_mesh", None), "mesh_dim_names", None) or (),
            getattr(param, "placements", ()),
            strict=False,
        ):
            if dim_name == "tp":
                dim = getattr(placement, "dim", None)
                placements.append(("tp", "replicate" if dim is None else f"shard({dim})"))
        layouts.append(
            ParameterLayout(
                logical_id=name.removeprefix("module."),
                global_shape=tuple(int(s) for s in param.shape),
                placements=tuple(placements),
                optimizer_state=StateLayout.SHARDED if sharded else StateLayout.REPLICATED,
            )
        )
    return tuple(layouts)
