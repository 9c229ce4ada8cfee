"""MIFA: memory-augmented averaging over every client's last update (methods: MIFA).

    w_{t+1} = w_t + η_s · η_k Σ_j a_j G_j,   G_i = Δ_i / η_k   (a_j = 1/N, or n_j / Σ n)

``init='zero'``: G_i = 0 until client i first trains. ``init='wait'`` (the authors' ``fdu.py``):
nothing moves until every client has been available once; in that round all N clients train at
w_t (the non-selected ones are ``fill`` events, charged like any upload) and fill the table, and
the model does **not** move; updates start in the next round. An empty round still moves by the
memory average.

``lr_schedule``: ``constant`` keeps the local learning rate η; then G_i = Δ_i/η and the step
η·G is the identity, so the memory holds Δ_i itself (no rounding through 1/η). ``inverse`` is the
authors' schedule: η_k = η_0/(k + 1), k counting the rounds in which the model moved (the fill
round trains at η_0); clients train at η_k, the memory holds G_i = Δ_i/η_k — what the authors'
table holds — and the step multiplies the average by the current η_k.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import check_choice
from ..lazy import torch
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
from .memory import MemoryBank
from .registry import register
from .uplink import ErrorFeedback, TopK, compressor_for, decode_update, train_and_send


@dataclass(frozen=True)
class MIFAConfig:
    """MIFA (methods: MIFA): the server averages every client's last update."""

    init: str = "zero"  # zero: G_i = 0 (fdu_no_wait) | wait: fill all G_i once all were seen (fdu)
    weights: str = "uniform"  # uniform 1/N (official) | samples: α_i = n_i / Σ n
    lr_schedule: str = "constant"  # constant η | inverse: η_k = η_0/(k + 1) (the authors' code)

    def __post_init__(self) -> None:
        check_choice("init", self.init, ("zero", "wait"))
        check_choice("weights", self.weights, ("uniform", "samples"))
        check_choice("lr_schedule", self.lr_schedule, ("constant", "inverse"))


@dataclass(frozen=True)
class MIFAState:
    bank: MemoryBank
    seen: frozenset[int]  # clients available at least once ('wait' init)
    filled: bool  # 'wait': memories filled, normal rounds from now on
    moves: int = 0  # k: rounds in which the model moved (the inverse schedule's counter)


@dataclass(frozen=True)
class MifaWork:
    """Train at the round's local learning rate (None: train.lr)."""

    lr: float | None


@dataclass(frozen=True)
class MIFA:
    env: MethodEnv
    compressor: TopK | ErrorFeedback
    init: str = "zero"
    weights: str = "uniform"
    lr_schedule: str = "constant"
    name: str = "mifa"

    def eta(self, state: MIFAState) -> float | None:
        """η_k of the inverse schedule (None: the constant train.lr)."""
        if self.lr_schedule == "constant":
            return None
        return self.env.train.lr / (state.moves + 1)

    def init_state(self, w0: torch.Tensor) -> MIFAState:
        return MIFAState(MemoryBank.empty(w0.numel()), frozenset(), self.init == "zero")

    def probes(self, state, t, selected):
        return ()

    def _tasks(self, state: MIFAState, clients, t: int) -> tuple[ClientTask, ...]:
        work = MifaWork(self.eta(state))
        return tuple(ClientTask(i, t, work) for i in clients)

    def plan(self, state: MIFAState, t: int, selected: list[int], probes=None) -> RoundPlan:
        if state.filled:
            return RoundPlan(self._tasks(state, selected, t), {i: FRESH for i in selected})
        if len(state.seen | set(selected)) < self.env.num_clients:
            return RoundPlan((), {i: WAITING for i in selected})
        everyone = list(range(self.env.num_clients))
        decisions = {i: (FRESH if i in selected else FILL) for i in everyone}
        return RoundPlan(self._tasks(state, everyone, t), decisions)

    def client_work(self, ctx, task: ClientTask, w: torch.Tensor):
        return train_and_send(ctx, task, w, self.env.layout, self.compressor, lr=task.work.lr)

    def decode(self, task: ClientTask, messages: tuple[bytes, ...]):
        return decode_update(messages[0], self.env.layout)

    def server_step(
        self, state: MIFAState, t, w, plan, uploads: dict[int, Received], num_samples
    ) -> StepResult:
        seen = state.seen | set(plan.decisions)
        if not state.filled and not uploads:  # 'wait': still waiting
            return StepResult(MIFAState(state.bank, seen, False), w.clone(), {}, {})
        a = population_weights(num_samples, self.weights)
        eta = self.eta(state)
        deltas = {i: u.value.to_dense() for i, u in uploads.items()}
        table = deltas if eta is None else {i: d / eta for i, d in deltas.items()}  # G_i
        bank = state.bank.updated(table, a)
        weights = {i: a[i] for i in deltas}
        if not state.filled:  # 'wait': the fill round fills the table; the model stays
            return StepResult(MIFAState(bank, seen, True, 0), w.clone(), weights, norms(deltas))
        step = bank.total if eta is None else eta * bank.total
        w_next = w + self.env.server_lr * step
        return StepResult(
            MIFAState(bank, seen, True, state.moves + 1), w_next, weights, norms(deltas)
        )

    def memory_bytes(self, state: MIFAState) -> int:
        return state.bank.nbytes()


def space(trial):
    trial.suggest_float("fl.server_lr", 0.3, 1.5)
    trial.suggest_categorical("method.mifa.init", ["zero", "wait"])
    return None


@register("mifa", config=MIFAConfig, space=space, error_feedback=True)
def build(params: MIFAConfig, env: MethodEnv) -> MIFA:
    return MIFA(env, compressor_for(env), params.init, params.weights, params.lr_schedule)
