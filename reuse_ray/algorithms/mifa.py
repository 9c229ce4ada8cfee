"""MIFA: memory-augmented averaging over every client's last update (ALGORITHMS.md §2.6).

    w_{t+1} = w_t + η_s Σ_j a_j G_j     (a_j = 1/N, or n_j / Σ n)

With a constant local learning rate, G_i = Δ_i/η is a constant rescaling, so the memory holds
Δ_i itself. ``init='zero'``: G_i = 0 until client i first trains. ``init='wait'``: nothing moves
until every client has been available once; in that round all N clients train at w_t (the
non-selected ones are recorded as ``fill`` events and charged like any upload). An empty round
still moves by the memory average.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import check_choice
from .api import (
    FILL,
    FRESH,
    WAITING,
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
class MIFAConfig:
    """MIFA (ALGORITHMS.md §2.6): the server averages every client's last update."""

    init: str = "zero"  # zero: G_i = 0 (fdu_no_wait) | wait: fill all G_i once all were seen (fdu)
    weights: str = "uniform"  # uniform 1/N (official) | samples: α_i = n_i / Σ n

    def __post_init__(self) -> None:
        check_choice("init", self.init, ("zero", "wait"))
        check_choice("weights", self.weights, ("uniform", "samples"))


@dataclass(frozen=True)
class MIFAState:
    bank: MemoryBank
    seen: frozenset[int]  # clients available at least once ('wait' init)
    filled: bool  # 'wait': memories filled, normal rounds from now on


def _tasks(clients, t: int) -> tuple[ClientTask, ...]:
    return tuple(ClientTask(i, t, Train()) for i in clients)


@dataclass(frozen=True)
class MIFA:
    env: MethodEnv
    compressor: TopK | ErrorFeedback
    init: str = "zero"
    weights: str = "uniform"
    name: str = "mifa"

    def init_state(self, w0: torch.Tensor) -> MIFAState:
        return MIFAState(MemoryBank.empty(w0.numel()), frozenset(), self.init == "zero")

    def probes(self, state, t, selected):
        return ()

    def plan(self, state: MIFAState, t: int, selected: list[int], probes=None) -> RoundPlan:
        if state.filled:
            return RoundPlan(_tasks(selected, t), {i: FRESH for i in selected})
        if len(state.seen | set(selected)) < self.env.num_clients:
            return RoundPlan((), {i: WAITING for i in selected})
        everyone = list(range(self.env.num_clients))
        decisions = {i: (FRESH if i in selected else FILL) for i in everyone}
        return RoundPlan(_tasks(everyone, t), decisions)

    def client_work(self, ctx, task: ClientTask, w: torch.Tensor):
        return train_and_send(ctx, task, w, self.env.layout, self.compressor)

    def decode(self, task: ClientTask, messages: tuple[bytes, ...]):
        return decode_update(messages[0], self.env.layout)

    def server_step(self, state: MIFAState, t, w, plan, uploads: dict[int, Received],
                    num_samples) -> StepResult:  # fmt: skip
        seen = state.seen | set(plan.decisions)
        if not state.filled and not uploads:  # 'wait': still waiting
            return StepResult(MIFAState(state.bank, seen, False), w.clone(), {}, {})
        a = population_weights(num_samples, self.weights)
        deltas = {i: u.value.to_dense() for i, u in uploads.items()}
        bank = state.bank.updated(deltas, a)
        w_next = w + self.env.server_lr * bank.total
        return StepResult(MIFAState(bank, seen, True), w_next, {i: a[i] for i in deltas},
                          norms(deltas))  # fmt: skip

    def memory_bytes(self, state: MIFAState) -> int:
        return state.bank.nbytes()


def space(trial):
    trial.suggest_float("fl.server_lr", 0.3, 1.5)
    trial.suggest_categorical("method.mifa.init", ["zero", "wait"])
    return None


@register("mifa", config=MIFAConfig, space=space, error_feedback=True)
def build(params: MIFAConfig, env: MethodEnv) -> MIFA:
    return MIFA(env, compressor_for(env), params.init, params.weights)
