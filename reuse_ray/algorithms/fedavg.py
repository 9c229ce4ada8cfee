"""FedAvg, FedAvg + Top-K and FedProx (methods: FedAvg and the Top-K control, FedProx, Conventions).

Every selected client trains afresh (FedProx adds the proximal term μ to the local objective) and
sends ``TopK_r(Δ_i)`` (r = 1: the dense Δ_i; Fed-EF may wrap it). Server:
``w_{t+1} = w_t + η_s Σ π_i u_i``; an empty round leaves ``w`` unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import check_range
from ..lazy import torch
from .api import (
    FRESH,
    ClientTask,
    MethodEnv,
    Received,
    RoundPlan,
    StepResult,
    fedavg_aggregate,
    norms,
    sample_weights,
)
from .registry import register
from .uplink import ErrorFeedback, TopK, compressor_for, decode_update, train_and_send


@dataclass(frozen=True)
class FedProxConfig:
    """FedProx (methods: FedProx); the seed's control uses mu = 5e-4."""

    mu: float = 5e-4  # μ of the proximal term (μ/2)‖w − w_t‖² in the local objective

    def __post_init__(self) -> None:
        check_range("mu", self.mu, 0.0)


@dataclass(frozen=True)
class Train:
    """A fresh-training task: the proximal μ of the local objective."""

    mu: float = 0.0


@dataclass(frozen=True)
class FedAvg:
    """FedAvg (μ = 0) or FedProx (μ > 0), each with an optional matched Top-K uplink."""

    env: MethodEnv
    compressor: TopK | ErrorFeedback
    mu: float = 0.0
    name: str = "fedavg"

    def init_state(self, w0: torch.Tensor) -> None:
        return None

    def probes(self, state, t: int, selected: list[int]) -> tuple:
        return ()

    def plan(self, state, t: int, selected: list[int], probes=None) -> RoundPlan:
        tasks = tuple(ClientTask(i, t, Train(self.mu)) for i in selected)
        return RoundPlan(tasks, {i: FRESH for i in selected})

    def client_work(self, ctx, task: ClientTask, w: torch.Tensor):
        return train_and_send(ctx, task, w, self.env.layout, self.compressor, mu=task.work.mu)

    def decode(self, task: ClientTask, messages: tuple[bytes, ...]):
        return decode_update(messages[0], self.env.layout)

    def server_step(
        self,
        state,
        t: int,
        w: torch.Tensor,
        plan: RoundPlan,
        uploads: dict[int, Received],
        num_samples: dict[int, int],
    ) -> StepResult:
        updates = {i: u.value for i, u in uploads.items()}
        weights = sample_weights(sorted(updates), num_samples)
        w_next = fedavg_aggregate(w, updates, weights, self.env.server_lr)
        return StepResult(None, w_next, weights, norms(updates))

    def memory_bytes(self, state) -> int:
        return 0


def fedavg_space(trial):
    trial.suggest_float("fl.server_lr", 0.3, 1.5)
    trial.suggest_float("method.topk_ratio", 0.01, 1.0, log=True)
    return None


def fedprox_space(trial):
    trial.suggest_float("method.fedprox.mu", 1e-5, 1.0, log=True)
    trial.suggest_float("method.topk_ratio", 0.01, 1.0, log=True)
    return None


@register("fedavg", space=fedavg_space, error_feedback=True)
def build_fedavg(params: None, env: MethodEnv) -> FedAvg:
    return FedAvg(env, compressor_for(env), 0.0, "fedavg")


@register("fedprox", config=FedProxConfig, space=fedprox_space, error_feedback=True)
def build_fedprox(params: FedProxConfig, env: MethodEnv) -> FedAvg:
    return FedAvg(env, compressor_for(env), params.mu, "fedprox")
