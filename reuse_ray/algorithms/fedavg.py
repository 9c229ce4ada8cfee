"""FedAvg, FedAvg + Top-K and FedProx (ALGORITHMS.md §2.1, §2.2, §1.7).

Every selected client trains afresh (FedProx adds the proximal term μ to the local objective) and
sends ``TopK_r(Δ_i)`` (r = 1: the dense Δ_i). Server: ``w_{t+1} = w_t + η_s Σ π_i u_i``;
an empty round leaves ``w`` unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import ClientTask, FreshUpdate, RoundPlan, StepResult, sample_weights, weighted_sum


def fedavg_aggregate(
    w: torch.Tensor, fresh: dict[int, FreshUpdate], server_lr: float
) -> tuple[torch.Tensor, dict[int, float]]:
    """w + η_s Σ π_i u_i over the fresh clients, in ascending client order (§1.7)."""
    clients = sorted(fresh)
    if not clients:
        return w.clone(), {}
    weights = sample_weights(clients, {i: fresh[i].num_samples for i in clients})
    avg = weighted_sum([(weights[i], fresh[i].update) for i in clients], w.numel())
    return w + server_lr * avg, weights


@dataclass(frozen=True)
class FedAvg:
    """FedAvg (μ = 0) or FedProx (μ > 0), each with an optional matched Top-K uplink."""

    topk_ratio: float = 1.0
    mu: float = 0.0
    server_lr: float = 1.0
    name: str = "fedavg"

    def init_state(self, w0: torch.Tensor) -> None:
        return None

    def probes(self, state: None, t: int, selected: list[int]) -> tuple:
        return ()

    def plan(self, state: None, t: int, selected: list[int], probes=None) -> RoundPlan:
        tasks = tuple(ClientTask(i, t, self.topk_ratio, self.mu) for i in selected)
        return RoundPlan(tasks, {i: "fresh" for i in selected})

    def server_step(
        self,
        state: None,
        t: int,
        w: torch.Tensor,
        plan: RoundPlan,
        fresh: dict[int, FreshUpdate],
        num_samples: dict[int, int],
    ) -> StepResult:
        w_next, weights = fedavg_aggregate(w, fresh, self.server_lr)
        norms = {i: float(fresh[i].update.values.norm()) for i in fresh}
        return StepResult(None, w_next, weights, norms)

    def memory_bytes(self, state: None) -> int:
        return 0
