"""FedVARP and FedStale (methods: FedVARP and FedStale): variance reduction with stale memories.

    v = Σ_{i∈S} (α_i/p_i)(Δ_i − β y_i) + β Σ_j α_j y_j,   w_{t+1} = w_t + η_s v,   y_i ← Δ_i

β = 1 is FedVARP; β ∈ [0, 1] FedStale. Choices, each documented in docs/methods.md:

* ``probs``: p_i ``known`` from the participation model; ``estimated`` online as the authors'
  code does (FedAU's estimator, ``activity_estimator.py``): 1/p̂_i is the running mean of the
  intervals between a client's participations, counted up to the previous round (1 before any
  interval closed); or ``estimated_counts``: p̂_i = (k_i + 1)/t, the participation frequency
  including this round.
* ``empty_round``: ``skip`` (the authors' code returns early: nothing moves, no memory changes)
  or ``apply`` (the paper's formula: w moves by β Σ_j α_j y_j).
* ``server_weight_decay`` λ: the authors' server optimizer forms ``G + λ·x_t`` before adding the
  history term (their code hard-codes 5e-4); 0 is the paper's rule. In the update convention the
  step is ``w + η_s (v − λ w)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

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
    population_weights,
)
from .fedavg import Train
from .memory import MemoryBank
from .registry import register
from .uplink import ErrorFeedback, TopK, compressor_for, decode_update, train_and_send


@dataclass(frozen=True)
class FedStaleConfig:
    """FedVARP (β = 1) and FedStale (β ∈ [0, 1]) (methods: FedVARP and FedStale)."""

    beta: float = 0.5  # FedStale's mix; published runs 0.5 (FedVARP ignores it: β = 1)
    # known: p_i of the participation model | estimated: the authors' interval estimator
    # (FedAU) | estimated_counts: (k_i + 1)/t
    probs: str = "known"
    weights: str = "samples"  # α_i = n_i / Σ n | uniform 1/N
    empty_round: str = "skip"  # skip: nothing moves (authors' code) | apply: w += η β Σ α_j y_j
    server_weight_decay: float = 0.0  # λ; 0 = the paper's rule, 5e-4 = the authors' code

    def __post_init__(self) -> None:
        check_range("beta", self.beta, 0.0, 1.0)
        check_choice("probs", self.probs, PROB_ESTIMATORS)
        check_choice("weights", self.weights, ("samples", "uniform"))
        check_choice("empty_round", self.empty_round, ("skip", "apply"))
        check_range("server_weight_decay", self.server_weight_decay, 0.0)


PROB_ESTIMATORS = ("known", "estimated", "estimated_counts")


def interval_weight(history: tuple[int, float, int] | None) -> float:
    """1/p̂_i of the authors' estimator: the mean closed interval (1 before any closed)."""
    return 1.0 if history is None or history[0] == 0 else history[1]


def closed_interval(history: tuple[int, float, int] | None, t: int) -> tuple[int, float, int]:
    """(intervals, their running mean, last round) after a participation in round t: the
    interval since the last participation (since round 0 for the first) joins the mean."""
    n, mean, last = history if history is not None else (0, 0.0, 0)
    length = t - last
    return n + 1, (n * mean + length) / (n + 1), t


def fedstale_direction(
    fresh: Mapping[int, torch.Tensor],
    memory: Mapping[int, torch.Tensor | None],
    total: torch.Tensor,
    alpha: Mapping[int, float],
    p: Mapping[int, float],
    beta: float,
) -> torch.Tensor:
    """v = Σ_{i∈S} (α_i/p_i)(Δ_i − β y_i) + β Σ_j α_j y_j
    (methods: FedVARP and FedStale; β = 1: FedVARP)."""
    v = total * beta if beta != 0.0 else torch.zeros_like(total)
    for i in sorted(fresh):
        y = memory.get(i)
        d = fresh[i] if (y is None or beta == 0.0) else fresh[i] - beta * y
        v.add_(d, alpha=alpha[i] / p[i])
    return v


@dataclass(frozen=True)
class StaleState:
    bank: MemoryBank
    participations: dict[int, int]  # k_i: rounds client i took part in (estimated_counts)
    # per client (closed intervals, their mean, last participation round): estimated
    intervals: dict[int, tuple[int, float, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class FedStale:
    """FedStale (β ∈ [0, 1]); FedVARP is β = 1. Dense or Top-K uplink, ± Fed-EF."""

    env: MethodEnv
    compressor: TopK | ErrorFeedback
    beta: float = 0.5
    probs_from: str = "known"  # known | estimated | estimated_counts (see FedStaleConfig)
    weights: str = "samples"
    empty_round: str = "skip"
    server_weight_decay: float = 0.0
    name: str = "fedstale"

    @property
    def probs(self) -> tuple[float, ...]:
        return self.env.probs

    def init_state(self, w0: torch.Tensor) -> StaleState:
        return StaleState(MemoryBank.empty(w0.numel()), {})

    def probes(self, state, t, selected):
        return ()

    def plan(self, state: StaleState, t: int, selected: list[int], probes=None) -> RoundPlan:
        return RoundPlan(
            tuple(ClientTask(i, t, Train()) for i in selected), {i: FRESH for i in selected}
        )

    def client_work(self, ctx, task: ClientTask, w: torch.Tensor):
        return train_and_send(ctx, task, w, self.env.layout, self.compressor)

    def decode(self, task: ClientTask, messages: tuple[bytes, ...]):
        return decode_update(messages[0], self.env.layout)

    def p_hat(self, state: StaleState, i: int, t: int) -> float:
        if self.probs_from == "known":
            return self.probs[i]
        if self.probs_from == "estimated":
            return 1.0 / interval_weight(state.intervals.get(i))
        return (state.participations.get(i, 0) + 1) / t

    def server_step(
        self, state: StaleState, t, w, plan, uploads: dict[int, Received], num_samples
    ) -> StepResult:
        if not uploads and self.empty_round == "skip":  # the authors return early
            return StepResult(state, w.clone(), {}, {})
        alpha = population_weights(num_samples, self.weights)
        deltas = {i: u.value.to_dense() for i, u in uploads.items()}
        memory = {i: state.bank.get(i) for i in deltas}
        p = {i: self.p_hat(state, i, t) for i in deltas}
        v = fedstale_direction(deltas, memory, state.bank.total, alpha, p, self.beta)
        if self.server_weight_decay:
            v = v - self.server_weight_decay * w
        bank = state.bank.updated(deltas, alpha)
        parts, intervals = dict(state.participations), dict(state.intervals)
        for i in deltas:
            parts[i] = parts.get(i, 0) + 1
            intervals[i] = closed_interval(intervals.get(i), t)
        weights = {i: alpha[i] / p[i] for i in deltas}
        return StepResult(
            StaleState(bank, parts, intervals), w + self.env.server_lr * v, weights, norms(deltas)
        )

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
    return FedStale(
        env,
        compressor_for(env),
        beta,
        params.probs,
        params.weights,
        params.empty_round,
        params.server_weight_decay,
        name,
    )


@register(
    "fedvarp", config=FedStaleConfig, block="fedstale", space=fedvarp_space, error_feedback=True
)
def build_fedvarp(params: FedStaleConfig, env: MethodEnv) -> FedStale:
    return _build(params, env, 1.0, "fedvarp")


@register("fedstale", config=FedStaleConfig, space=fedstale_space, error_feedback=True)
def build_fedstale(params: FedStaleConfig, env: MethodEnv) -> FedStale:
    return _build(params, env, params.beta, "fedstale")
