"""FedAdam of the FedOpt family (ALGORITHMS.md §2.10).

    Δ̄_t = Σ π_i Δ_i                 (pseudo-update, trainable parameters)
    m_t = β1 m_{t−1} + (1−β1) Δ̄_t
    v_t = β2 v_{t−1} + (1−β2) Δ̄_t²
    w_{t+1} = w_t + η m_t / (√v_t + τ)   (no bias correction)

Moments cover trainable parameters only; BatchNorm running statistics are plain-averaged.
``v0 = "tau_squared"`` starts v at τ² (the paper's requirement), ``"zero"`` at 0 (Flower).
An empty round skips the step and leaves the moments unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import ClientTask, FreshUpdate, RoundPlan, StepResult, sample_weights, weighted_sum


@dataclass(frozen=True)
class FedAdamState:
    m: torch.Tensor  # first moment over trainable coordinates
    v: torch.Tensor  # second moment over trainable coordinates


def fedadam_init(num_trainable: int, tau: float, v0: str) -> FedAdamState:
    v_init = tau * tau if v0 == "tau_squared" else 0.0
    return FedAdamState(
        torch.zeros(num_trainable, dtype=torch.float32),
        torch.full((num_trainable,), v_init, dtype=torch.float32),
    )


def fedadam_step(
    w: torch.Tensor,
    avg: torch.Tensor,
    mask: torch.Tensor,
    state: FedAdamState,
    lr: float,
    beta1: float,
    beta2: float,
    tau: float,
) -> tuple[torch.Tensor, FedAdamState]:
    """One server step: Adam on the masked (trainable) coordinates, plain average elsewhere."""
    g = avg[mask]
    m = beta1 * state.m + (1 - beta1) * g
    v = beta2 * state.v + (1 - beta2) * g * g
    w_next = w + avg  # non-trainable float buffers: plain average
    w_next[mask] = w[mask] + lr * m / (torch.sqrt(v) + tau)
    return w_next, FedAdamState(m, v)


@dataclass(frozen=True)
class FedAdam:
    """FedAdam with an optional matched Top-K uplink."""

    trainable_mask: torch.Tensor
    topk_ratio: float = 1.0
    lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3
    v0: str = "tau_squared"
    name: str = "fedadam"

    def init_state(self, w0: torch.Tensor) -> FedAdamState:
        return fedadam_init(int(self.trainable_mask.sum()), self.tau, self.v0)

    def probes(self, state: FedAdamState, t: int, selected: list[int]) -> tuple:
        return ()

    def plan(self, state: FedAdamState, t: int, selected: list[int], probes=None) -> RoundPlan:
        tasks = tuple(ClientTask(i, t, self.topk_ratio, 0.0) for i in selected)
        return RoundPlan(tasks, {i: "fresh" for i in selected})

    def server_step(
        self,
        state: FedAdamState,
        t: int,
        w: torch.Tensor,
        plan: RoundPlan,
        fresh: dict[int, FreshUpdate],
        num_samples: dict[int, int],
    ) -> StepResult:
        clients = sorted(fresh)
        if not clients:
            return StepResult(state, w.clone(), {}, {})
        weights = sample_weights(clients, {i: fresh[i].num_samples for i in clients})
        avg = weighted_sum([(weights[i], fresh[i].update) for i in clients], w.numel())
        w_next, new_state = fedadam_step(
            w, avg, self.trainable_mask, state, self.lr, self.beta1, self.beta2, self.tau
        )
        norms = {i: float(fresh[i].update.values.norm()) for i in clients}
        return StepResult(new_state, w_next, weights, norms)

    def memory_bytes(self, state: FedAdamState) -> int:
        return state.m.numel() * 4 + state.v.numel() * 4
