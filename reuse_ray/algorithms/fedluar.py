"""FedLUAR: layer-wise update aggregation with recycling (methods: FedLUAR).

Candidate layers L_rec are the trainable tensors of rank ≥ 2 (conv and linear kernels); biases
and buffers are always aggregated. Each round the server broadcasts w_t and the recycle set R_t;
clients still train every layer but do not upload the layers in R_t, and the server moves a
recycled layer by that layer's **last fresh aggregated update** U[l] (not refreshed while
recycled, so it can be applied in consecutive rounds). A freshly aggregated candidate layer gets
the score s_l = ‖Ū_l‖ / (‖w_{t,l}‖ + 1e-6), and R_{t+1} draws δ distinct layers with
probability ∝ 1/max(s_l, 1e-12) by successive sampling without replacement, from the keyed
``luar_layers`` stream. R_1 = ∅. Combined with Top-K, the uploaded layers go through the codec.
An empty round leaves w and the scores unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_choice, check_range
from ..errors import UserError
from ..lazy import torch
from ..rng import Purpose, generator
from ..state import StateLayout
from .api import (
    FRESH,
    ClientTask,
    MethodEnv,
    Received,
    RoundPlan,
    StepResult,
    client_weights,
    norms,
    weighted_sum,
)
from .registry import register
from .uplink import TopK, decode_update, train_and_send

SCORE_EPS = 1e-6
MIN_SCORE = 1e-12


def candidate_layers(layout: StateLayout) -> tuple[int, ...]:
    """Tensor ids of L_rec: trainable entries of rank ≥ 2."""
    return tuple(j for j, s in enumerate(layout.tensors) if s.trainable and len(s.shape) >= 2)


def layer_score(update: torch.Tensor, weights: torch.Tensor) -> float:
    """s_l = ‖Ū_l‖ / (‖w_{t,l}‖ + 1e-6)."""
    return float(update.norm()) / (float(weights.norm()) + SCORE_EPS)


def draw_recycle_set(
    scores: dict[int, float], delta: int, rng: np.random.Generator
) -> tuple[int, ...]:
    """δ distinct layers, P ∝ 1/max(s_l, 1e-12), successive draws without replacement."""
    if delta == 0 or not scores:
        return ()
    layers = sorted(scores)
    inv = np.array([1.0 / max(scores[j], MIN_SCORE) for j in layers])
    picked = rng.choice(len(layers), size=delta, replace=False, p=inv / inv.sum())
    return tuple(sorted(layers[k] for k in picked))


def recycle_probabilities(scores: dict[int, float], delta: int) -> dict[frozenset[int], float]:
    """Exact law of the recycle set under successive sampling (small cases, for checks)."""
    layers = sorted(scores)
    inv = {j: 1.0 / max(scores[j], MIN_SCORE) for j in layers}
    out: dict[frozenset[int], float] = {}

    def walk(chosen: tuple[int, ...], prob: float) -> None:
        if len(chosen) == delta:
            key = frozenset(chosen)
            out[key] = out.get(key, 0.0) + prob
            return
        rest = [j for j in layers if j not in chosen]
        z = sum(inv[j] for j in rest)
        for j in rest:
            walk(chosen + (j,), prob * inv[j] / z)

    walk((), 1.0)
    return out


@dataclass(frozen=True)
class FedLUARConfig:
    """FedLUAR (methods: FedLUAR): δ layers recycled per round, chosen ∝ 1/score."""

    delta: int = 2  # δ; paper: 2 (CNN/FEMNIST), 10 (ResNet-20), 14 (WRN-28-10); must be < |L_rec|
    weighting: str = "uniform"  # uniform: 1/|S_t| (the authors' code) | samples: π_i (FedAvg)

    def __post_init__(self) -> None:
        check_range("delta", self.delta, 0)
        check_choice("weighting", self.weighting, ("samples", "uniform"))


@dataclass(frozen=True)
class LUARState:
    updates: dict[int, torch.Tensor]  # U[l]: last fresh aggregated update of candidate layer l
    scores: dict[int, float]  # s[l]
    recycle: tuple[int, ...]  # R_t, the layers recycled in the coming round


@dataclass(frozen=True)
class LuarWork:
    """Train every layer, upload all but the recycled ones (tensor ids)."""

    skip: tuple[int, ...]


@dataclass(frozen=True)
class FedLUAR:
    env: MethodEnv
    compressor: TopK
    delta: int = 2
    weighting: str = "uniform"
    name: str = "fedluar"

    @property
    def layout(self) -> StateLayout:
        return self.env.layout

    def __post_init__(self) -> None:
        n = len(candidate_layers(self.layout))
        if self.delta > 0 and self.delta >= n:  # δ = 0 (no recycling) fits any model
            raise UserError(
                f"method.fedluar.delta: {self.delta} is not below the model's {n} candidate "
                f"layers (trainable tensors of rank >= 2); allowed: [0, {n - 1}]"
            )

    def init_state(self, w0: torch.Tensor) -> LUARState:
        return LUARState({}, {}, ())

    def probes(self, state, t, selected):
        return ()

    def plan(self, state: LUARState, t: int, selected: list[int], probes=None) -> RoundPlan:
        tasks = tuple(ClientTask(i, t, LuarWork(state.recycle)) for i in selected)
        # the R_t broadcast: a 2-byte count and one 2-byte id per recycled layer
        return RoundPlan(tasks, {i: FRESH for i in selected}, down_extra=2 + 2 * len(state.recycle))

    def client_work(self, ctx, task: ClientTask, w: torch.Tensor):
        return train_and_send(ctx, task, w, self.layout, self.compressor, skip=task.work.skip)

    def decode(self, task: ClientTask, messages: tuple[bytes, ...]):
        return decode_update(messages[0], self.layout)

    def server_step(
        self, state: LUARState, t, w, plan, uploads: dict[int, Received], num_samples
    ) -> StepResult:
        clients = sorted(uploads)
        rng = generator(self.env.seed, Purpose.LUAR_LAYERS, t + 1)
        if not clients:
            nxt = draw_recycle_set(state.scores, self.delta, rng)
            return StepResult(LUARState(state.updates, state.scores, nxt), w.clone(), {}, {})
        fresh = {i: uploads[i].value for i in clients}
        weights = client_weights(clients, num_samples, self.weighting)
        agg = weighted_sum([(weights[i], fresh[i]) for i in clients], w.numel())
        updates, scores = dict(state.updates), dict(state.scores)
        step = agg.clone()
        for j in candidate_layers(self.layout):
            s = self.layout.tensors[j]
            sl = slice(s.offset, s.offset + s.numel)
            if j in state.recycle:
                step[sl] = updates[j]  # the stored U[l]; its score is unchanged
            else:
                updates[j] = agg[sl].clone()
                scores[j] = layer_score(agg[sl], w[sl])
        nxt = draw_recycle_set(scores, self.delta, rng)
        return StepResult(
            LUARState(updates, scores, nxt), w + self.env.server_lr * step, weights, norms(fresh)
        )

    def memory_bytes(self, state: LUARState) -> int:
        return sum(4 * u.numel() for u in state.updates.values()) + 8 * len(state.scores)


def space(trial):
    """δ must stay below the model's candidate layers (trainable tensors of rank >= 2): 4 for
    the shallow CNN, 21 for ResNet-18 — widen the upper bound for larger models."""
    trial.suggest_int("method.fedluar.delta", 0, 3)
    trial.suggest_float("method.topk_ratio", 0.01, 1.0, log=True)
    return None


@register("fedluar", config=FedLUARConfig, space=space)
def build(params: FedLUARConfig, env: MethodEnv) -> FedLUAR:
    return FedLUAR(env, TopK(env.topk_ratio), params.delta, params.weighting)
