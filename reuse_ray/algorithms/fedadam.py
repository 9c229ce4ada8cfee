"""FedAdam of the FedOpt family (methods: FedAdam).

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

from ..checks import check_choice, check_range
from ..lazy import torch
from .api import (
    FRESH,
    ClientTask,
    MethodEnv,
    Received,
    RoundPlan,
    StepResult,
    norms,
    sample_weights,
    weighted_sum,
)
from .fedavg import Train
from .registry import register
from .uplink import ErrorFeedback, TopK, compressor_for, decode_update, train_and_send


@dataclass(frozen=True)
class FedAdamConfig:
    """FedAdam (methods: FedAdam); seed values eta=0.01, beta1=0.9, beta2=0.99, tau=1e-3."""

    lr: float = 0.01  # η: the server's Adam step size
    beta1: float = 0.9  # β1: the first moment's decay
    beta2: float = 0.99  # β2: the second moment's decay
    tau: float = 1e-3  # τ: the adaptivity constant added to √v
    v0: str = "tau_squared"  # v_0 = tau^2 (paper) or zero (Flower)

    def __post_init__(self) -> None:
        check_range("lr", self.lr, 0.0, lo_open=True)
        check_range("beta1", self.beta1, 0.0, 1.0, hi_open=True)
        check_range("beta2", self.beta2, 0.0, 1.0, hi_open=True)
        check_range("tau", self.tau, 0.0, lo_open=True)
        check_choice("v0", self.v0, ("tau_squared", "zero"))


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
    """FedAdam with an optional matched Top-K uplink (± Fed-EF)."""

    env: MethodEnv
    compressor: TopK | ErrorFeedback
    trainable_mask: torch.Tensor
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
        tasks = tuple(ClientTask(i, t, Train()) for i in selected)
        return RoundPlan(tasks, {i: FRESH for i in selected})

    def client_work(self, ctx, task: ClientTask, w: torch.Tensor):
        return train_and_send(ctx, task, w, self.env.layout, self.compressor)

    def decode(self, task: ClientTask, messages: tuple[bytes, ...]):
        return decode_update(messages[0], self.env.layout)

    def server_step(
        self,
        state: FedAdamState,
        t: int,
        w: torch.Tensor,
        plan: RoundPlan,
        uploads: dict[int, Received],
        num_samples: dict[int, int],
    ) -> StepResult:
        clients = sorted(uploads)
        if not clients:
            return StepResult(state, w.clone(), {}, {})
        updates = {i: uploads[i].value for i in clients}
        weights = sample_weights(clients, num_samples)
        avg = weighted_sum([(weights[i], updates[i]) for i in clients], w.numel())
        w_next, new_state = fedadam_step(
            w, avg, self.trainable_mask, state, self.lr, self.beta1, self.beta2, self.tau
        )
        return StepResult(new_state, w_next, weights, norms(updates))

    def memory_bytes(self, state: FedAdamState) -> int:
        return state.m.numel() * 4 + state.v.numel() * 4


def space(trial):
    trial.suggest_float("method.fedadam.lr", 1e-4, 1.0, log=True)
    trial.suggest_float("method.fedadam.beta2", 0.9, 0.999)
    trial.suggest_float("method.fedadam.tau", 1e-5, 1e-1, log=True)
    trial.suggest_categorical("method.fedadam.v0", ["tau_squared", "zero"])
    return None


@register("fedadam", config=FedAdamConfig, space=space, error_feedback=True)
def build(params: FedAdamConfig, env: MethodEnv) -> FedAdam:
    p = params
    return FedAdam(
        env, compressor_for(env), env.layout.trainable_mask(), p.lr, p.beta1, p.beta2, p.tau, p.v0
    )
