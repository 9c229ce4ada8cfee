"""FedVARP (ALGORITHMS.md §2.7) and FedStale (§2.8): variance reduction with stale memories.

    v = Σ_{i∈S} (α_i/p_i)(Δ_i − β y_i) + β Σ_j α_j y_j,   w_{t+1} = w_t + η_s v,   y_i ← Δ_i

β = 1 is FedVARP; β ∈ [0, 1] FedStale. p_i is known from the participation model or estimated
online (p̂_i = (k_i + 1)/t). An empty round still moves by β Σ_j α_j y_j.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..config import check_choice, check_range
from .api import (
    FRESH,
    ClientTask,
    MethodEnv,
    Received,
    RoundPlan,
    StepResult,
    norms,
    population_weights,
)
from .fedavg import Train
from .memory import MemoryBank
from .registry import register
from .uplink import ErrorFeedback, TopK, compressor_for, decode_update, train_and_send


@dataclass(frozen=True)
class FedStaleConfig:
    """FedVARP (β = 1, §2.7) and FedStale (β ∈ [0, 1], §2.8)."""

    beta: float = 0.5  # FedStale's mix; published runs 0.5 (FedVARP ignores it: β = 1)
    probs: str = "known"  # known p_i from the participation model | estimated online (FedAU)
    weights: str = "samples"  # α_i = n_i / Σ n | uniform 1/N

    def __post_init__(self) -> None:
        check_range("beta", self.beta, 0.0, 1.0)
        check_choice("probs", self.probs, ("known", "estimated"))
        check_choice("weights", self.weights, ("samples", "uniform"))


def fedstale_direction(
    fresh: Mapping[int, torch.Tensor],
    memory: Mapping[int, torch.Tensor | None],
    total: torch.Tensor,
    alpha: Mapping[int, float],
    p: Mapping[int, float],
    beta: float,
) -> torch.Tensor:
    """v = Σ_{i∈S} (α_i/p_i)(Δ_i − β y_i) + β Σ_j α_j y_j (§2.8; β = 1: FedVARP, §2.7)."""
    v = total * beta if beta != 0.0 else torch.zeros_like(total)
    for i in sorted(fresh):
        y = memory.get(i)
        d = fresh[i] if (y is None or beta == 0.0) else fresh[i] - beta * y
        v.add_(d, alpha=alpha[i] / p[i])
    return v


@dataclass(frozen=True)
class StaleState:
    bank: MemoryBank
    participations: dict[int, int]  # k_i: rounds client i took part in (for estimated p_i)


@dataclass(frozen=True)
class FedStale:
    """FedStale (β ∈ [0, 1]); FedVARP is β = 1. Dense or Top-K uplink, ± Fed-EF."""

    env: MethodEnv
    compressor: TopK | ErrorFeedback
    beta: float = 0.5
    estimate_probs: bool = False  # p̂_i = k_i / t: participations over rounds so far (FedAU)
    weights: str = "samples"
    name: str = "fedstale"

    @property
    def probs(self) -> tuple[float, ...]:
        return self.env.probs

    def init_state(self, w0: torch.Tensor) -> StaleState:
        return StaleState(MemoryBank.empty(w0.numel()), {})

    def probes(self, state, t, selected):
        return ()

    def plan(self, state: StaleState, t: int, selected: list[int], probes=None) -> RoundPlan:
        return RoundPlan(tuple(ClientTask(i, t, Train()) for i in selected),
                         {i: FRESH for i in selected})  # fmt: skip

    def client_work(self, ctx, task: ClientTask, w: torch.Tensor):
        return train_and_send(ctx, task, w, self.env.layout, self.compressor)

    def decode(self, task: ClientTask, messages: tuple[bytes, ...]):
        return decode_update(messages[0], self.env.layout)

    def p_hat(self, state: StaleState, i: int, t: int) -> float:
        if not self.estimate_probs:
            return self.probs[i]
        return (state.participations.get(i, 0) + 1) / t

    def server_step(self, state: StaleState, t, w, plan, uploads: dict[int, Received],
                    num_samples) -> StepResult:  # fmt: skip
        alpha = population_weights(num_samples, self.weights)
        deltas = {i: u.value.to_dense() for i, u in uploads.items()}
        memory = {i: state.bank.get(i) for i in deltas}
        p = {i: self.p_hat(state, i, t) for i in deltas}
        v = fedstale_direction(deltas, memory, state.bank.total, alpha, p, self.beta)
        bank = state.bank.updated(deltas, alpha)
        parts = dict(state.participations)
        for i in deltas:
            parts[i] = parts.get(i, 0) + 1
        weights = {i: alpha[i] / p[i] for i in deltas}
        return StepResult(StaleState(bank, parts), w + self.env.server_lr * v, weights,
                          norms(deltas))  # fmt: skip

    def memory_bytes(self, state: StaleState) -> int:
        return state.bank.nbytes()


def fedstale_space(trial):
    trial.suggest_float("method.fedstale.beta", 0.0, 1.0)
    trial.suggest_float("fl.server_lr", 0.3, 1.5)
    return None


def fedvarp_space(trial):
    trial.suggest_float("fl.server_lr", 0.3, 1.5)
    trial.suggest_float("method.topk_ratio", 0.01, 1.0, log=True)
    return None


def _build(params: FedStaleConfig, env: MethodEnv, beta: float, name: str) -> FedStale:
    return FedStale(env, compressor_for(env), beta, params.probs == "estimated", params.weights,
                    name)  # fmt: skip


@register("fedvarp", config=FedStaleConfig, block="fedstale", space=fedvarp_space,
          error_feedback=True)  # fmt: skip
def build_fedvarp(params: FedStaleConfig, env: MethodEnv) -> FedStale:
    return _build(params, env, 1.0, "fedvarp")


@register("fedstale", config=FedStaleConfig, space=fedstale_space, error_feedback=True)
def build_fedstale(params: FedStaleConfig, env: MethodEnv) -> FedStale:
    return _build(params, env, params.beta, "fedstale")
