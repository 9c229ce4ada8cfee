"""The algorithm interface shared by every method (ALGORITHMS.md §1.5).

A method is a small object holding only its frozen hyper-parameters, plus pure functions over an
explicit state that goes in and comes out:

* :meth:`Algorithm.init_state` — the server state before round 1;
* :meth:`Algorithm.plan` — which selected clients do fresh work this round, and with what knobs;
* :meth:`Algorithm.server_step` — from the decoded uplink messages to ``w_{t+1}`` and the new state.

The engine moves work and bytes; nothing here knows which backend ran the clients.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..codecs import SparseUpdate


@dataclass(frozen=True)
class ClientTask:
    """Fresh local work for one selected client: ClientUpdate then the uplink codec."""

    client: int
    round: int
    topk_ratio: float = 1.0  # per-tensor Top-K keep ratio of the uplink (1 = dense)
    mu: float = 0.0  # proximal coefficient of the local objective
    refresh_proxy: bool = False  # also send HeadProxy(i, w_t, proxy_refresh) (§2.3.5)
    # the uplink compressor: topk | ef (Fed-EF) | ef21 | laq | scaffold (Δy and Δc)
    codec: str = "topk"
    # client-local state kept between participations (None = zeros / first visit): Fed-EF's
    # e_i, SCAFFOLD's c_i, LAQ's (ε̂_i, clock_i)
    local: Any = None
    # what the server sends along with w_t: SCAFFOLD's c; or the server's mirror of a state
    # the client holds identically by construction (EF21's g_i, LAQ's last upload Q_i)
    memory: Any = None
    skip_tensors: tuple[int, ...] = ()  # FedLUAR: tensor ids not uploaded this round
    threshold: float = 0.0  # LAQ: the model-change term of the skip rule
    dense_first: bool = False  # EF21 init=dense: the first message is Δ itself


@dataclass(frozen=True)
class ProbeTask:
    """Pre-decision client work: HeadProxy(i, w_t, proxy_gate) for the DG gate (§2.3.4)."""

    client: int
    round: int


@dataclass(frozen=True)
class RoundPlan:
    """What the server decided before client work: tasks, and a decision per selected client."""

    tasks: tuple[ClientTask, ...]
    # client -> "fresh" | "reused" | "skipped" | "waiting"; clients outside S_t that still work
    # (FedSteer's fidelity warm-up, MIFA's 'wait' fill) appear with "oracle" / "fill"
    decisions: dict[int, str]
    gate: dict[int, dict[str, Any]] = field(default_factory=dict)  # per-client gate columns
    down_extra: int = 0  # measured downlink bytes per participant besides w_t (controls, R_t)


@dataclass(frozen=True)
class FreshUpdate:
    """A decoded uplink message of a fresh client."""

    client: int
    num_samples: int
    update: SparseUpdate | None  # None for a LAQ upload (see ``quantized``) or a skip
    proxy: torch.Tensor | None = None  # refresh head proxy, when the task asked for one
    control: torch.Tensor | None = None  # SCAFFOLD: Δc_i over the trainable coordinates
    quantized: tuple[float, torch.Tensor] | None = None  # LAQ: (radius R, integer codes)
    skipped: bool = False  # LAQ: the client trained but its skip rule held back the upload
    steps: int = 0


@dataclass(frozen=True)
class StepResult:
    """The server step's output: next state and global vector, and each client's contribution."""

    state: Any
    w: torch.Tensor
    weights: dict[int, float]  # aggregation weight per selected client
    contribution_norms: dict[int, float]  # ‖u_i‖ per selected client
    decisions: dict[int, str] = field(default_factory=dict)  # outcomes known only after uploads


class Algorithm(Protocol):
    name: str

    def init_state(self, w0: torch.Tensor) -> Any: ...

    def probes(self, state: Any, t: int, selected: list[int]) -> tuple[ProbeTask, ...]: ...

    def plan(
        self, state: Any, t: int, selected: list[int], probes: dict[int, torch.Tensor]
    ) -> RoundPlan: ...

    def server_step(
        self,
        state: Any,
        t: int,
        w: torch.Tensor,
        plan: RoundPlan,
        fresh: dict[int, FreshUpdate],
        num_samples: dict[int, int],
    ) -> StepResult: ...

    def memory_bytes(self, state: Any) -> int: ...


def sample_weights(clients: list[int], num_samples: dict[int, int]) -> dict[int, float]:
    """π_i = n_i / Σ_{j∈S} n_j over the given clients (§1.1)."""
    total = sum(num_samples[i] for i in clients)
    return {i: num_samples[i] / total for i in clients} if total else {}


def weighted_sum(contributions: list[tuple[float, SparseUpdate]], dim: int) -> torch.Tensor:
    """Σ weight·u in fp32, accumulated in the order given (callers sort by client id)."""
    acc = torch.zeros(dim, dtype=torch.float32)
    for weight, upd in contributions:
        upd.add_into(acc, weight)
    return acc
