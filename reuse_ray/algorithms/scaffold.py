"""SCAFFOLD with option II control variates (ALGORITHMS.md §2.9).

Server state: the control c over the trainable coordinates; each client keeps its own c_i
(client-local state, held by the simulation in the store). A selected client trains with the
gradient correction c − c_i, sends Δy_i (± Top-K) and Δc_i = c_i⁺ − c_i, and the server steps

    w_{t+1} = w_t + η_g Σ_{i∈S} ω_i Δy_i        (ω_i = 1/|S_t| as in the paper, or π_i)
    c       ← c + (1/N) Σ_{i∈S} Δc_i

BatchNorm running statistics are plain-averaged inside Δy, with no control variate. Uplink and
downlink both carry twice the trainable parameters (Δy + Δc up, w + c down). An empty round
changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..codecs import KIND_CONTROL, encode_vector
from ..state import StateLayout
from .base import ClientTask, FreshUpdate, RoundPlan, StepResult, sample_weights, weighted_sum


def scaffold_server_step(
    w: torch.Tensor,
    c: torch.Tensor,
    dy: dict[int, torch.Tensor],
    dc: dict[int, torch.Tensor],
    weights: dict[int, float],
    num_clients: int,
    server_lr: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(w + η_g Σ ω_i Δy_i, c + (1/N) Σ Δc_i), accumulated in ascending client order."""
    acc = torch.zeros_like(w)
    c_next = c.clone()
    for i in sorted(dy):
        acc.add_(dy[i], alpha=weights[i])
        c_next.add_(dc[i], alpha=1.0 / num_clients)
    return w + server_lr * acc, c_next


@dataclass(frozen=True)
class Scaffold:
    trainable: StateLayout  # layout of the trainable tensors (where c lives)
    num_clients: int
    topk_ratio: float = 1.0
    weighting: str = "uniform"
    server_lr: float = 1.0
    name: str = "scaffold"

    def init_state(self, w0: torch.Tensor) -> torch.Tensor:
        return torch.zeros(self.trainable.dim, dtype=torch.float32)

    def probes(self, state, t, selected):
        return ()

    def plan(self, state: torch.Tensor, t: int, selected: list[int], probes=None) -> RoundPlan:
        tasks = tuple(ClientTask(i, t, self.topk_ratio, codec="scaffold", memory=state)
                      for i in selected)  # fmt: skip
        control_down = len(encode_vector(state, self.trainable, KIND_CONTROL, t, -1))
        return RoundPlan(tasks, {i: "fresh" for i in selected}, down_extra=control_down)

    def server_step(self, state: torch.Tensor, t, w, plan, fresh: dict[int, FreshUpdate],
                    num_samples) -> StepResult:  # fmt: skip
        clients = sorted(fresh)
        if not clients:
            return StepResult(state, w.clone(), {}, {})
        if self.weighting == "uniform":
            weights = {i: 1.0 / len(clients) for i in clients}
        else:
            weights = sample_weights(clients, num_samples)
        dy = {i: weighted_sum([(1.0, fresh[i].update)], w.numel()) for i in clients}
        dc = {i: fresh[i].control for i in clients}
        w_next, c_next = scaffold_server_step(w, state, dy, dc, weights, self.num_clients,
                                              self.server_lr)  # fmt: skip
        norms = {i: float(fresh[i].update.values.norm()) for i in clients}
        return StepResult(c_next, w_next, weights, norms)

    def memory_bytes(self, state: torch.Tensor) -> int:
        return 4 * state.numel()
