"""EF21 with partial participation (methods: EF21-PP).

A selected client sends ``c_i = TopK_r(Δ_i − g_i)`` and both sides set ``g_i ← g_i + c_i`` (the
server's mirror of g_i travels with the task, so the client holds it identically by
construction). ``variant='pp'``: ``w += η_s Σ_all α_j g_j`` (stale g_j of non-participants
included); ``'s'``: ``w += η_s Σ_{i∈S} π_i g_i``. ``init='dense'``: a client's first message is Δ
itself, charged B0.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import check_choice
from ..codecs import SparseUpdate, topk_sparsify
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
    population_weights,
    sample_weights,
)
from .memory import MemoryBank
from .registry import register
from .uplink import decode_update, encode_update


@dataclass(frozen=True)
class EF21Config:
    """EF21 with partial participation (methods: EF21-PP); Top-K ratio from method."""

    variant: str = "pp"  # pp: w += Σ_all α_j g_j (memory) | s: w += Σ_selected π_i g_i
    init: str = "zero"  # zero: first message TopK(Δ) | dense: first message Δ, charged B0

    def __post_init__(self) -> None:
        check_choice("variant", self.variant, ("pp", "s"))
        check_choice("init", self.init, ("zero", "dense"))


def ef21_step(
    delta: torch.Tensor,
    g: torch.Tensor | None,
    layout: StateLayout,
    r: float,
    dense_first: bool = False,
) -> tuple[SparseUpdate, torch.Tensor]:
    """(c, g') with c = TopK_r(Δ − g) and g' = g + c; first visit: g = 0, or c = Δ dense."""
    delta = delta.to(torch.float32)
    if g is None:
        if dense_first:
            return SparseUpdate(layout.dim, None, delta), delta.clone()
        g = torch.zeros_like(delta)
    c = topk_sparsify(delta - g, layout, r)
    g_new = g.clone()
    c.add_into(g_new, 1.0)
    return c, g_new


@dataclass(frozen=True)
class EF21Work:
    """Train, then send TopK(Δ − g_i); ``g`` is the server's mirror of g_i (None: first visit)."""

    g: torch.Tensor | None


@dataclass(frozen=True)
class EF21:
    env: MethodEnv
    variant: str = "pp"
    dense_first: bool = False
    weights: str = "samples"
    name: str = "ef21"

    def init_state(self, w0: torch.Tensor) -> MemoryBank:
        return MemoryBank.empty(w0.numel())

    def probes(self, state, t, selected):
        return ()

    def plan(self, state: MemoryBank, t: int, selected: list[int], probes=None) -> RoundPlan:
        tasks = tuple(ClientTask(i, t, EF21Work(state.get(i))) for i in selected)
        return RoundPlan(tasks, {i: FRESH for i in selected})

    def client_work(self, ctx, task: ClientTask, w: torch.Tensor) -> ClientResult:
        res = ctx.train(task, w)
        layout = self.env.layout
        c, _ = ef21_step(res.delta, task.work.g, layout, self.env.topk_ratio, self.dense_first)
        msg = encode_update(c, layout, task, ctx.num_samples(task.client))
        return ClientResult((msg,), None, res.mean_loss, res.steps, res.finite)

    def decode(self, task: ClientTask, messages: tuple[bytes, ...]):
        return decode_update(messages[0], self.env.layout)

    def server_step(
        self, state: MemoryBank, t, w, plan, uploads: dict[int, Received], num_samples
    ) -> StepResult:
        alpha = population_weights(num_samples, self.weights)
        g_new = {}
        for i in sorted(uploads):
            old = state.get(i)
            c = uploads[i].value
            if old is None and c.is_dense and self.dense_first:
                g_new[i] = c.values.clone()
                continue
            g = torch.zeros(w.numel(), dtype=torch.float32) if old is None else old.clone()
            c.add_into(g, 1.0)
            g_new[i] = g
        bank = state.updated(g_new, alpha)
        lr = self.env.server_lr
        if self.variant == "pp":
            w_next, weights = w + lr * bank.total, {i: alpha[i] for i in g_new}
        else:
            weights = sample_weights(sorted(g_new), num_samples)
            acc = torch.zeros_like(w)
            for i in sorted(g_new):
                acc.add_(g_new[i], alpha=weights[i])
            w_next = w + lr * acc
        norms = {i: float(u.value.values.norm()) for i, u in uploads.items()}
        return StepResult(bank, w_next, weights, norms)

    def memory_bytes(self, state: MemoryBank) -> int:
        return state.nbytes()


def space(trial):
    trial.suggest_float("method.topk_ratio", 0.01, 1.0, log=True)
    trial.suggest_categorical("method.ef21.variant", ["pp", "s"])
    trial.suggest_categorical("method.ef21.init", ["zero", "dense"])
    return None


@register("ef21", config=EF21Config, space=space)
def build(params: EF21Config, env: MethodEnv) -> EF21:
    return EF21(env, params.variant, params.init == "dense", "samples")
