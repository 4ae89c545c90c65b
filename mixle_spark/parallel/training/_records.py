"""Value types shared by the training contracts: the str enums, per-update records and their checks.

Private: import these names from :mod:`mixle_spark.parallel.training.contracts`, which re-exports
them. Kept apart only so each module stays small; everything here is pure data and validation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from enum import Enum
from numbers import Integral, Real
from typing import Any

from mixle_spark.errors import UnknownNameError, describe_value

__all__ = [
    "PHYSICAL_AXES",
    "CollectiveKind",
    "DistributedUpdate",
    "ParallelAxis",
    "ParameterLayout",
    "PayloadKind",
    "StateLayout",
    "StepReceipt",
    "as_axis",
    "check_flag",
    "exact_int",
    "non_blank",
]


class _StrEnum(str, Enum):
    """A str enum (Python 3.10 has no ``enum.StrEnum``): members equal, hash and print as their values."""

    def __str__(self) -> str:
        return str(self.value)

    # Enum hashes the member *name*; hash the value so ``"tp" in {ParallelAxis.TP}`` agrees with ``==``.
    def __hash__(self) -> int:
        return hash(self.value)


class ParallelAxis(_StrEnum):
    """Named dimensions understood by mixle_spark and external training engines."""

    DP_REPLICATE = "dp_replicate"
    DP_SHARD = "dp_shard"
    TP = "tp"
    PP = "pp"
    CP = "cp"
    EP = "ep"
    ETP = "etp"


class PayloadKind(_StrEnum):
    """What a distributed update moves."""

    GRADIENT = "gradient"
    SUFFICIENT_STATISTIC = "sufficient_statistic"
    PARAMETER = "parameter"
    ACTIVATION = "activation"
    KV_BLOCK = "kv_block"
    TOKEN = "token"
    MESSAGE = "message"


class CollectiveKind(_StrEnum):
    """Collective or point-to-point operation required by an update."""

    NONE = "none"
    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"
    P2P = "p2p"
    CUSTOM = "custom"


class StateLayout(_StrEnum):
    """Where optimizer or model state lives across the mesh."""

    REPLICATED = "replicated"
    SHARDED = "sharded"
    PIPELINE_LOCAL = "pipeline_local"
    EXPERT_LOCAL = "expert_local"
    OFFLOADED = "offloaded"


#: The mesh dimensions, slowest first; every rank has exactly one coordinate over them.
PHYSICAL_AXES: tuple[ParallelAxis, ...] = (
    ParallelAxis.DP_REPLICATE,
    ParallelAxis.DP_SHARD,
    ParallelAxis.TP,
    ParallelAxis.PP,
    ParallelAxis.CP,
)


def exact_int(name: str, value: Any, minimum: int, what: str | None = None) -> int:
    """``int(value)`` for an exact integral ``value >= minimum`` (bools and floats refused)."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        expected = what or f"an exact integer >= {minimum}"
        raise ValueError(f"{name} must be {expected}, got {describe_value(value)}")
    return int(value)


def non_blank(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-blank string, got {describe_value(value)}")
    return value


def check_flag(name: str, value: Any, *, optional: bool = False) -> None:
    if not (isinstance(value, bool) or (optional and value is None)):
        expected = "a bool or None" if optional else "a bool"
        raise TypeError(f"{name} must be {expected}, got {describe_value(value)}")


def as_axis(value: Any) -> ParallelAxis:
    """A :class:`ParallelAxis` from a member or its value; unknown names list the valid ones."""
    if isinstance(value, ParallelAxis):
        return value
    if isinstance(value, str):
        try:
            return ParallelAxis(value.strip().lower())
        except ValueError:
            pass
    raise UnknownNameError("parallel axis", value, [a.value for a in ParallelAxis])


@dataclass(frozen=True)
class ParameterLayout:
    """Stable logical identity and global layout of one parameter.

    ``placements`` are ``(mesh axis, placement)`` string pairs such as ``("tp", "Shard(0)")``.
    """

    logical_id: str
    global_shape: tuple[int, ...]
    placements: tuple[tuple[str, str], ...] = ()
    shared_group: str | None = None
    optimizer_state: StateLayout = StateLayout.REPLICATED

    def __post_init__(self) -> None:
        non_blank("logical_id", self.logical_id)
        if not isinstance(self.global_shape, tuple):
            raise TypeError(f"global_shape must be a tuple, got {describe_value(self.global_shape)}")
        shape = tuple(exact_int(f"global_shape[{i}]", d, 0) for i, d in enumerate(self.global_shape))
        object.__setattr__(self, "global_shape", shape)
        if not isinstance(self.placements, tuple):
            raise ValueError(f"placements must be a tuple of pairs, got {describe_value(self.placements)}")
        seen: set[str] = set()
        placements = []
        for pair in self.placements:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise ValueError(f"each placement must be an (axis, placement) pair, got {pair!r}")
            axis, placement = str(non_blank("placement axis", pair[0])), non_blank("placement", pair[1])
            if axis in seen:
                raise ValueError(f"placements repeat axis {axis!r}")
            seen.add(axis)
            placements.append((axis, str(placement)))
        object.__setattr__(self, "placements", tuple(placements))
        if self.shared_group is not None:
            non_blank("shared_group", self.shared_group)
        if not isinstance(self.optimizer_state, StateLayout):
            raise TypeError(
                f"optimizer_state must be a StateLayout, got {describe_value(self.optimizer_state)}"
            )

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready description (placements as a dict, the state layout as its value)."""
        return {
            "logical_id": self.logical_id,
            "global_shape": list(self.global_shape),
            "placements": dict(self.placements),
            "shared_group": self.shared_group,
            "optimizer_state": self.optimizer_state.value,
        }


def _enum_instance(name: str, value: Any, kind: type[Enum]) -> None:
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be a {kind.__name__} member, got {describe_value(value)}")


def _error_bound(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite real >= 0 or None, got {describe_value(value)}")
    return float(value)


@dataclass(frozen=True)
class DistributedUpdate:
    """Executable communication declaration for one update node, with explicit numerical evidence.

    ``contract_exact`` says the model's mathematical update is exact (for example summed sufficient
    statistics); ``exact`` says *numerical* exactness is guaranteed, which no collective can promise
    (reduction order changes rounding), so ``exact=True`` requires ``CollectiveKind.NONE``.

    Numerics evidence is all-or-nothing: ``numerics_evidence_id`` and a positive
    ``numerics_sample_count`` come together, with ``determinism_observed`` and both error bounds; none
    of the four may be given without the evidence id.
    """

    node_id: str
    payload: PayloadKind
    collective: CollectiveKind
    mesh_axes: tuple[ParallelAxis, ...]
    state_layout: StateLayout
    exact: bool
    notes: tuple[str, ...] = ()
    contract_exact: bool = False
    determinism_observed: bool | None = None
    maximum_absolute_error: float | None = None
    maximum_relative_error: float | None = None
    numerics_evidence_id: str | None = None
    numerics_sample_count: int = 0

    def __post_init__(self) -> None:
        non_blank("node_id", self.node_id)
        _enum_instance("payload", self.payload, PayloadKind)
        _enum_instance("collective", self.collective, CollectiveKind)
        _enum_instance("state_layout", self.state_layout, StateLayout)
        if not isinstance(self.mesh_axes, tuple) or not all(
            isinstance(a, ParallelAxis) for a in self.mesh_axes
        ):
            raise TypeError(
                f"mesh_axes must be a tuple of ParallelAxis, got {describe_value(self.mesh_axes)}"
            )
        if len(set(self.mesh_axes)) != len(self.mesh_axes):
            raise ValueError(f"mesh_axes repeat an axis: {', '.join(a.value for a in self.mesh_axes)}")
        check_flag("exact", self.exact)
        check_flag("contract_exact", self.contract_exact)
        check_flag("determinism_observed", self.determinism_observed, optional=True)
        if not isinstance(self.notes, tuple) or not all(isinstance(n, str) for n in self.notes):
            raise TypeError(f"notes must be a tuple of strings, got {describe_value(self.notes)}")
        if self.exact and self.collective is not CollectiveKind.NONE:
            raise ValueError(
                f"update {self.node_id!r}: a distributed collective ({self.collective.value}) cannot claim "
                "guaranteed numerical exactness; use exact=False (contract_exact may still be True)"
            )
        for name in ("maximum_absolute_error", "maximum_relative_error"):
            object.__setattr__(self, name, _error_bound(name, getattr(self, name)))
        count = exact_int("numerics_sample_count", self.numerics_sample_count, 0)
        object.__setattr__(self, "numerics_sample_count", count)
        self._check_evidence(count)

    def _check_evidence(self, count: int) -> None:
        evidence_id = self.numerics_evidence_id
        if evidence_id is not None:
            non_blank("numerics_evidence_id", evidence_id)
        if (evidence_id is None) != (count == 0):
            raise ValueError(
                f"update {self.node_id!r}: numerics evidence requires both an id and positive sample count, "
                f"got numerics_evidence_id={evidence_id!r}, numerics_sample_count={count}"
            )
        measured = {
            "determinism_observed": self.determinism_observed,
            "maximum_absolute_error": self.maximum_absolute_error,
            "maximum_relative_error": self.maximum_relative_error,
        }
        if evidence_id is not None:
            missing = [k for k, v in measured.items() if v is None]
            if missing:
                raise ValueError(
                    f"update {self.node_id!r}: numerics evidence {evidence_id!r} lacks {missing}"
                )
        else:
            given = [f"{k}={v!r}" for k, v in measured.items() if v is not None]
            if given:
                raise ValueError(
                    f"update {self.node_id!r}: {', '.join(given)} given without numerics_evidence_id; "
                    "measured numerics must name their evidence"
                )

    def as_dict(self) -> dict[str, Any]:
        """All fields, enums as their values."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("payload", "collective", "state_layout"):
            out[name] = out[name].value
        out["mesh_axes"] = [a.value for a in self.mesh_axes]
        out["notes"] = list(self.notes)
        return out


def _detach(value: Any) -> Any:
    """Copy containers recursively (types kept) so a receipt shares no mutable state with its caller."""
    if isinstance(value, dict):
        return type(value)((k, _detach(v)) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return type(value)(_detach(v) for v in value)
    return value


@dataclass(frozen=True)
class StepReceipt:
    """Unambiguous accounting for one committed (or skipped) optimizer update.

    ``global_examples`` / ``global_tokens`` are the observed global counts when a backend measured
    them (``global_*_observed``), else the local count times ``data_parallel_size``.

    >>> StepReceipt(1, 0.5, 4, 16, 2, 2, 4, "sgd", "fp32").global_tokens
    64
    """

    step: int
    loss: float
    local_examples: int
    local_tokens: int
    microbatches: int
    accumulation_steps: int
    data_parallel_size: int
    optimizer: str
    precision: str
    collective_bytes: int = 0
    skipped: bool = False
    extra: dict[str, Any] = field(default_factory=dict, hash=False)
    global_examples_observed: int | None = None
    global_tokens_observed: int | None = None

    def __post_init__(self) -> None:
        for name in ("step", "local_examples", "local_tokens", "collective_bytes"):
            object.__setattr__(self, name, exact_int(name, getattr(self, name), 0))
        for name in ("microbatches", "accumulation_steps", "data_parallel_size"):
            object.__setattr__(self, name, exact_int(name, getattr(self, name), 1))
        loss = self.loss
        if isinstance(loss, bool) or not isinstance(loss, Real):
            raise TypeError(f"loss must be a real number, got {describe_value(loss)}")
        # Any sign: a negative log-likelihood of a continuous density is often below 0.
        if not math.isfinite(loss):
            raise ValueError(f"loss must be finite, got {describe_value(loss)}")
        object.__setattr__(self, "loss", float(loss))
        non_blank("optimizer", self.optimizer)
        non_blank("precision", self.precision)
        check_flag("skipped", self.skipped)
        if not isinstance(self.extra, dict):
            raise TypeError(f"extra must be a dict, got {describe_value(self.extra)}")
        object.__setattr__(self, "extra", _detach(self.extra))
        for kind in ("examples", "tokens"):
            name, local = f"global_{kind}_observed", getattr(self, f"local_{kind}")
            observed = getattr(self, name)
            if observed is not None:
                observed = exact_int(name, observed, 0)
                if observed < local:
                    raise ValueError(f"{name}={observed} is smaller than this rank's local_{kind}={local}")
                object.__setattr__(self, name, observed)

    @property
    def global_examples(self) -> int:
        """Observed global examples, else ``local_examples * data_parallel_size``."""
        if self.global_examples_observed is not None:
            return self.global_examples_observed
        return self.local_examples * self.data_parallel_size

    @property
    def global_tokens(self) -> int:
        """Observed global tokens, else ``local_tokens * data_parallel_size``."""
        if self.global_tokens_observed is not None:
            return self.global_tokens_observed
        return self.local_tokens * self.data_parallel_size

    def as_dict(self) -> dict[str, Any]:
        """All fields (``extra`` detached) plus ``global_examples`` and ``global_tokens``."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["extra"] = _detach(self.extra)
        out["global_examples"] = self.global_examples
        out["global_tokens"] = self.global_tokens
        return out
