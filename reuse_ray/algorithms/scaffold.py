"""SCAFFOLD with option II control variates (methods: SCAFFOLD).

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

from ..checks import check_choice
from ..codecs import KIND_CONTROL, encode_vector
from ..lazy import torch
from ..state import StateLayout
from .api import (
    FRESH,
    ClientResult,
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
from .uplink import TopK, decode_dense, decode_update, encode_dense, encode_update


@dataclass(frozen=True)
class ScaffoldConfig:
    """SCAFFOLD option II (methods: SCAFFOLD); the server lr is ``fl.server_lr``."""

    weighting: str = "uniform"  # uniform 1/|S_t| (paper) | samples: π_i
    # K in c_i⁺ = c_i − c + (w_t − y)/(K η_l): momentum = the plain-SGD-equivalent step count
    # of heavy-ball SGD (K when momentum is 0) | raw = the optimizer steps taken
    steps: str = "momentum"

    def __post_init__(self) -> None:
        check_choice("weighting", self.weighting, ("uniform", "samples"))
        check_choice("steps", self.steps, ("momentum", "raw"))


def scaffold_correction(
    c: torch.Tensor, c_i: torch.Tensor | None, layout: StateLayout
) -> dict[str, torch.Tensor]:
    """Per-parameter gradient correction c − c_i (c lives on the trainable coordinates)."""
    diff = c if c_i is None else c - c_i
    out, pos = {}, 0
    for s in layout.tensors:
        if s.trainable:
            out[s.name] = diff[pos : pos + s.numel].view(s.shape)
            pos += s.numel
    return out


def effective_steps(steps: int, momentum: float) -> float:
    """Σ_{n=1..K} (1 − β^n)/(1 − β): how many plain-SGD steps K heavy-ball steps from a zero
    momentum buffer amount to under a constant gradient (= K when β = 0)."""
    if momentum == 0.0 or steps == 0:
        return float(steps)
    b = momentum
    return (steps - b * (1 - b**steps) / (1 - b)) / (1 - b)


def scaffold_new_control(
    c: torch.Tensor,
    c_i: torch.Tensor | None,
    delta: torch.Tensor,
    mask: torch.Tensor,
    steps: float,
    lr: float,
) -> torch.Tensor:
    """Option II: c_i⁺ = c_i − c + (w_t − y)/(K η_l) = c_i − c − Δ/(K η_l) (trainable coords).

    ``steps`` is K — or, with local momentum, :func:`effective_steps` (the average-gradient
    reading of option II; raw K would inflate c_i by up to 1/(1 − β) and diverges).
    """
    c_i = torch.zeros_like(c) if c_i is None else c_i
    return c_i - c - delta.to(torch.float32)[mask] / (max(steps, 1e-12) * lr)


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
class ScaffoldWork:
    """Train with the correction c − c_i; ``c`` is the server's control, sent with w_t."""

    c: torch.Tensor


@dataclass(frozen=True)
class Scaffold:
    env: MethodEnv
    weighting: str = "uniform"
    steps: str = "momentum"
    name: str = "scaffold"

    @property
    def trainable(self) -> StateLayout:
        """Layout of the trainable tensors (where c and every c_i live)."""
        return self.env.layout.trainable_subset()

    def init_state(self, w0: torch.Tensor) -> torch.Tensor:
        return torch.zeros(self.trainable.dim, dtype=torch.float32)

    def probes(self, state, t, selected):
        return ()

    def plan(self, state: torch.Tensor, t: int, selected: list[int], probes=None) -> RoundPlan:
        tasks = tuple(ClientTask(i, t, ScaffoldWork(state)) for i in selected)
        control_down = len(encode_vector(state, self.trainable, KIND_CONTROL, t, -1))
        return RoundPlan(tasks, {i: FRESH for i in selected}, down_extra=control_down)

    def client_work(self, ctx, task: ClientTask, w: torch.Tensor) -> ClientResult:
        """Δy_i (± Top-K) and Δc_i = c_i⁺ − c_i; the client keeps c_i⁺."""
        layout, tc = self.env.layout, self.env.train
        c, c_i = task.work.c, task.local
        res = ctx.train(task, w, correction=scaffold_correction(c, c_i, layout))
        upd, _ = TopK(self.env.topk_ratio).compress(res.delta, layout)
        k = effective_steps(res.steps, tc.momentum) if self.steps == "momentum" else res.steps
        c_new = scaffold_new_control(c, c_i, res.delta, layout.trainable_mask(), k, tc.lr)
        dc = c_new if c_i is None else c_new - c_i
        msgs = (
            encode_update(upd, layout, task, ctx.num_samples(task.client)),
            encode_dense(dc, self.trainable, KIND_CONTROL, task),
        )
        return ClientResult(msgs, c_new, res.mean_loss, res.steps, res.finite)

    def decode(self, task: ClientTask, messages: tuple[bytes, ...]):
        """((Δy_i, Δc_i), the update's bytes + the dense trainable bytes of Δc_i)."""
        update, nbytes = decode_update(messages[0], self.env.layout)
        control = decode_dense(messages[1], self.trainable)
        return (update, control), nbytes + self.trainable.dense_bytes

    def server_step(
        self, state: torch.Tensor, t, w, plan, uploads: dict[int, Received], num_samples
    ) -> StepResult:
        clients = sorted(uploads)
        if not clients:
            return StepResult(state, w.clone(), {}, {})
        weights = client_weights(clients, num_samples, self.weighting)
        updates = {i: uploads[i].value[0] for i in clients}
        dy = {i: weighted_sum([(1.0, updates[i])], w.numel()) for i in clients}
        dc = {i: uploads[i].value[1] for i in clients}
        w_next, c_next = scaffold_server_step(
            w, state, dy, dc, weights, self.env.num_clients, self.env.server_lr
        )
        return StepResult(c_next, w_next, weights, norms(updates))

    def memory_bytes(self, state: torch.Tensor) -> int:
        return 4 * state.numel()


def space(trial):
    trial.suggest_float("fl.server_lr", 0.3, 1.5)
    trial.suggest_categorical("method.scaffold.weighting", ["uniform", "samples"])
    return None


@register("scaffold", config=ScaffoldConfig, space=space)
def build(params: ScaffoldConfig, env: MethodEnv) -> Scaffold:
    return Scaffold(env, params.weighting, params.steps)
