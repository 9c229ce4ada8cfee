"""Methods that keep one d-float memory per client on the server (ALGORITHMS.md §2.6–§2.8,
§2.11.2, §2.12): MIFA, FedVARP, FedStale, EF21(-PP) and LAQ.

All of them are written in the update convention Δ = w_local − w_t (the spec's pseudo-gradient
is g = −Δ, so ``w − η g`` becomes ``w + η Δ``). Their memories y_i live in an injected
:class:`~reuse_ray.algorithms.dg_fedreuse.CacheStore` — a dict in process, the Ray object store
inside the server actor — behind a :class:`MemoryBank` that also keeps the weighted sum
Σ_j a_j y_j incrementally (the spec's "efficient form"), so a round touches only the memories of
the clients that took part.

Empty rounds: MIFA, FedVARP/FedStale (β > 0), EF21-PP and LAQ still move the model by the
memory average; FedStale with β = 0 and EF21-S leave it unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from ..compressors import laq_dequantize
from .base import ClientTask, FreshUpdate, RoundPlan, StepResult, sample_weights

# --------------------------------------------------------------------------- memory bank


@dataclass(frozen=True)
class MemoryBank:
    """Per-client memories y_i (as store handles) and their weighted sum Σ_j a_j y_j."""

    handles: dict[int, Any]
    total: torch.Tensor

    @classmethod
    def empty(cls, dim: int) -> MemoryBank:
        return cls({}, torch.zeros(dim, dtype=torch.float32))

    def get(self, store, i: int) -> torch.Tensor | None:
        h = self.handles.get(i)
        return None if h is None else store.get(h)

    def updated(self, store, new: Mapping[int, torch.Tensor], a: Mapping[int, float]) -> MemoryBank:
        """y_i ← new_i for the given clients; Σ a_j y_j += a_i (new_i − old_i), in id order."""
        total = self.total.clone()
        handles = dict(self.handles)
        for i in sorted(new):
            old = self.get(store, i)
            total.add_(new[i] if old is None else new[i] - old, alpha=a[i])
            handles[i] = store.put(new[i])
        return MemoryBank(handles, total)

    def nbytes(self) -> int:
        return 4 * self.total.numel() * (len(self.handles) + 1)

    def export(self, store) -> MemoryBank:
        return MemoryBank({i: store.get(h) for i, h in self.handles.items()}, self.total.clone())

    def imported(self, store) -> MemoryBank:
        return MemoryBank({i: store.put(v) for i, v in self.handles.items()}, self.total.clone())


def population_weights(num_samples: Mapping[int, int], kind: str) -> dict[int, float]:
    """α_j = n_j / Σ_all n (``samples``) or 1/N (``uniform``) over every client (§1.1)."""
    n = len(num_samples)
    if kind == "uniform":
        return {i: 1.0 / n for i in num_samples}
    total = sum(num_samples.values())
    return {i: v / total for i, v in num_samples.items()}


def fresh_tasks(selected: list[int], t: int, r: float = 1.0, **kw) -> tuple[ClientTask, ...]:
    return tuple(ClientTask(i, t, r, **kw) for i in selected)


def _norms(values: Mapping[int, torch.Tensor]) -> dict[int, float]:
    return {i: float(v.norm()) for i, v in values.items()}


# --------------------------------------------------------------------------- FedVARP / FedStale


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

    store: Any
    probs: tuple[float, ...]  # known p_i of the participation model
    beta: float = 0.5
    estimate_probs: bool = False  # p̂_i = k_i / t: participations over rounds so far (FedAU)
    weights: str = "samples"
    topk_ratio: float = 1.0
    server_lr: float = 1.0
    name: str = "fedstale"

    def init_state(self, w0: torch.Tensor) -> StaleState:
        return StaleState(MemoryBank.empty(w0.numel()), {})

    def probes(self, state, t, selected):
        return ()

    def plan(self, state: StaleState, t: int, selected: list[int], probes=None) -> RoundPlan:
        return RoundPlan(fresh_tasks(selected, t, self.topk_ratio), {i: "fresh" for i in selected})

    def p_hat(self, state: StaleState, i: int, t: int) -> float:
        if not self.estimate_probs:
            return self.probs[i]
        return (state.participations.get(i, 0) + 1) / t

    def server_step(self, state: StaleState, t, w, plan, fresh: dict[int, FreshUpdate],
                    num_samples) -> StepResult:  # fmt: skip
        alpha = population_weights(num_samples, self.weights)
        deltas = {i: f.update.to_dense() for i, f in fresh.items()}
        memory = {i: state.bank.get(self.store, i) for i in deltas}
        p = {i: self.p_hat(state, i, t) for i in deltas}
        v = fedstale_direction(deltas, memory, state.bank.total, alpha, p, self.beta)
        bank = state.bank.updated(self.store, deltas, alpha)
        parts = dict(state.participations)
        for i in deltas:
            parts[i] = parts.get(i, 0) + 1
        weights = {i: alpha[i] / p[i] for i in deltas}
        return StepResult(StaleState(bank, parts), w + self.server_lr * v, weights, _norms(deltas))

    def memory_bytes(self, state: StaleState) -> int:
        return state.bank.nbytes()

    def export_state(self, state: StaleState) -> StaleState:
        return replace(state, bank=state.bank.export(self.store))

    def import_state(self, state: StaleState) -> StaleState:
        return replace(state, bank=state.bank.imported(self.store))


# --------------------------------------------------------------------------- MIFA


@dataclass(frozen=True)
class MIFAState:
    bank: MemoryBank
    seen: frozenset[int]  # clients available at least once ('wait' init)
    filled: bool  # 'wait': memories filled, normal rounds from now on


@dataclass(frozen=True)
class MIFA:
    """MIFA (§2.6): w_{t+1} = w_t + η_s Σ_j a_j G_j over every client's last update.

    With a constant local learning rate, G_i = Δ_i/η is a constant rescaling, so the memory holds
    Δ_i itself. ``init='zero'``: G_i = 0 until client i first trains. ``init='wait'``: nothing
    moves until every client has been available once; in that round all N clients train at w_t
    (the non-selected ones are recorded as ``fill`` events and charged like any upload).
    """

    store: Any
    num_clients: int
    init: str = "zero"
    weights: str = "uniform"
    topk_ratio: float = 1.0
    server_lr: float = 1.0
    name: str = "mifa"

    def init_state(self, w0: torch.Tensor) -> MIFAState:
        return MIFAState(MemoryBank.empty(w0.numel()), frozenset(), self.init == "zero")

    def probes(self, state, t, selected):
        return ()

    def plan(self, state: MIFAState, t: int, selected: list[int], probes=None) -> RoundPlan:
        if state.filled:
            return RoundPlan(fresh_tasks(selected, t, self.topk_ratio),
                             {i: "fresh" for i in selected})  # fmt: skip
        if len(state.seen | set(selected)) < self.num_clients:
            return RoundPlan((), {i: "waiting" for i in selected})
        everyone = list(range(self.num_clients))
        decisions = {i: ("fresh" if i in selected else "fill") for i in everyone}
        return RoundPlan(fresh_tasks(everyone, t, self.topk_ratio), decisions)

    def server_step(self, state: MIFAState, t, w, plan, fresh: dict[int, FreshUpdate],
                    num_samples) -> StepResult:  # fmt: skip
        seen = state.seen | set(plan.decisions)
        if not state.filled and not fresh:  # 'wait': still waiting
            return StepResult(MIFAState(state.bank, seen, False), w.clone(), {}, {})
        a = population_weights(num_samples, self.weights)
        deltas = {i: f.update.to_dense() for i, f in fresh.items()}
        bank = state.bank.updated(self.store, deltas, a)
        w_next = w + self.server_lr * bank.total
        return StepResult(MIFAState(bank, seen, True), w_next, {i: a[i] for i in deltas},
                          _norms(deltas))  # fmt: skip

    def memory_bytes(self, state: MIFAState) -> int:
        return state.bank.nbytes()

    def export_state(self, state: MIFAState) -> MIFAState:
        return replace(state, bank=state.bank.export(self.store))

    def import_state(self, state: MIFAState) -> MIFAState:
        return replace(state, bank=state.bank.imported(self.store))


# --------------------------------------------------------------------------- EF21


@dataclass(frozen=True)
class EF21:
    """EF21 with partial participation (§2.11.2): clients send c_i = TopK_r(Δ_i − g_i) and
    both sides set g_i ← g_i + c_i. ``variant='pp'``: w += η_s Σ_all α_j g_j (stale g_j of
    non-participants included); ``'s'``: w += η_s Σ_{i∈S} π_i g_i."""

    store: Any
    topk_ratio: float
    variant: str = "pp"
    dense_first: bool = False
    weights: str = "samples"
    server_lr: float = 1.0
    name: str = "ef21"

    def init_state(self, w0: torch.Tensor) -> MemoryBank:
        return MemoryBank.empty(w0.numel())

    def probes(self, state, t, selected):
        return ()

    def plan(self, state: MemoryBank, t: int, selected: list[int], probes=None) -> RoundPlan:
        tasks = tuple(
            ClientTask(i, t, self.topk_ratio, codec="ef21", memory=state.get(self.store, i),
                       dense_first=self.dense_first)
            for i in selected
        )  # fmt: skip
        return RoundPlan(tasks, {i: "fresh" for i in selected})

    def server_step(self, state: MemoryBank, t, w, plan, fresh: dict[int, FreshUpdate],
                    num_samples) -> StepResult:  # fmt: skip
        alpha = population_weights(num_samples, self.weights)
        g_new = {}
        for i in sorted(fresh):
            old = state.get(self.store, i)
            c = fresh[i].update
            if old is None and c.is_dense and self.dense_first:
                g_new[i] = c.values.clone()
                continue
            g = torch.zeros(w.numel(), dtype=torch.float32) if old is None else old.clone()
            c.add_into(g, 1.0)
            g_new[i] = g
        bank = state.updated(self.store, g_new, alpha)
        if self.variant == "pp":
            w_next, weights = w + self.server_lr * bank.total, {i: alpha[i] for i in g_new}
        else:
            weights = sample_weights(sorted(g_new), num_samples)
            acc = torch.zeros_like(w)
            for i in sorted(g_new):
                acc.add_(g_new[i], alpha=weights[i])
            w_next = w + self.server_lr * acc
        norms = {i: float(f.update.values.norm()) for i, f in fresh.items()}
        return StepResult(bank, w_next, weights, norms)

    def memory_bytes(self, state: MemoryBank) -> int:
        return state.nbytes()

    def export_state(self, state: MemoryBank) -> MemoryBank:
        return state.export(self.store)

    def import_state(self, state: MemoryBank) -> MemoryBank:
        return state.imported(self.store)


# --------------------------------------------------------------------------- LAQ


def laq_threshold(history: tuple[float, ...], c_thr: float, xi: float, depth: int) -> float:
    """c_thr · Σ_{d=1..D} ξ_d ‖w^{t+1−d} − w^{t−d}‖², ξ_d = xi / min(D, len(history)) (§2.12)."""
    recent = history[-depth:]
    if not recent:
        return 0.0
    return c_thr * (xi / len(recent)) * float(np.sum(recent))


@dataclass(frozen=True)
class LAQState:
    bank: MemoryBank  # server mirror of every client's last upload Q_j, and Σ α_j Q_j
    history: tuple[float, ...]  # ‖w_{t+1} − w_t‖² of past rounds (last D kept)


@dataclass(frozen=True)
class LAQ:
    """LAQ adapted to FL rounds (§2.12): b-bit innovation quantisation with a lazy skip rule;
    w_{t+1} = w_t + η_s Σ_j α_j Q_j over every client's last upload."""

    store: Any
    bits: int = 8
    history: int = 10
    xi: float = 0.8
    c_thr: float = 0.01
    weights: str = "samples"
    server_lr: float = 1.0
    name: str = "laq"

    def init_state(self, w0: torch.Tensor) -> LAQState:
        return LAQState(MemoryBank.empty(w0.numel()), ())

    def probes(self, state, t, selected):
        return ()

    def plan(self, state: LAQState, t: int, selected: list[int], probes=None) -> RoundPlan:
        thr = laq_threshold(state.history, self.c_thr, self.xi, self.history)
        tasks = tuple(
            ClientTask(i, t, codec="laq", memory=state.bank.get(self.store, i), threshold=thr)
            for i in selected
        )  # fmt: skip
        return RoundPlan(tasks, {i: "fresh" for i in selected})

    def server_step(self, state: LAQState, t, w, plan, fresh: dict[int, FreshUpdate],
                    num_samples) -> StepResult:  # fmt: skip
        alpha = population_weights(num_samples, self.weights)
        q_new, decisions, norms = {}, {}, {}
        for i in sorted(fresh):
            f = fresh[i]
            if f.skipped:
                decisions[i] = "lazy"
                continue
            old = state.bank.get(self.store, i)
            base = torch.zeros(w.numel(), dtype=torch.float32) if old is None else old
            radius, codes = f.quantized
            q_new[i] = laq_dequantize(base, radius, codes, self.bits)
            norms[i] = float((q_new[i] - base).norm())
        bank = state.bank.updated(self.store, q_new, alpha)
        w_next = w + self.server_lr * bank.total
        change = float(((w_next - w) ** 2).sum())
        new_state = LAQState(bank, (state.history + (change,))[-self.history :])
        return StepResult(new_state, w_next, {i: alpha[i] for i in q_new}, norms, decisions)

    def memory_bytes(self, state: LAQState) -> int:
        return state.bank.nbytes()

    def export_state(self, state: LAQState) -> LAQState:
        return replace(state, bank=state.bank.export(self.store))

    def import_state(self, state: LAQState) -> LAQState:
        return replace(state, bank=state.bank.imported(self.store))
