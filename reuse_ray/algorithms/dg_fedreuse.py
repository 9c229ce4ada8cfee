"""DG-FedReuse: proxy-gradient-gated reuse of cached sparse updates (ALGORITHMS.md §2.3).

Per selected client the server decides between a fresh round (local training, Top-K uplink,
cache refresh) and replaying the client's cached sparse update with an age discount. The gate
compares a head-gradient proxy with the client's signature (R1) against a decaying threshold
(R2); an age cap S forces a refresh (R3) and a quota guarantees ⌈q·m⌉ fresh clients.

The math is in module-level functions; :class:`DGFedReuse` strings them together over an
explicit :class:`DGState`. Cached updates are stored packed (the field model's own bytes, never
a dense-shaped copy) in an injected :class:`CacheStore`: a dict in process, the Ray object store
on the Ray engine.

Controls that isolate the gate (§6 item 10): ``gate="off"`` (age cap, quota and first-visit rule
only; promotion order drawn at random from the keyed ``gate_random`` stream) and
``gate="random"`` (fires with probability ``gate_prob`` from the same stream).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Protocol

import torch

from ..codecs import PackedUpdate, SparseUpdate, pack, unpack
from ..config import DGConfig
from ..rng import Purpose, generator
from ..state import StateLayout
from .base import (
    ClientTask,
    FreshUpdate,
    ProbeTask,
    RoundPlan,
    StepResult,
    sample_weights,
    weighted_sum,
)

# --------------------------------------------------------------------------- pure math


def tau_schedule(
    t: int, tau0: float, tau_min: float, gamma: float, kind: str = "geometric"
) -> float:
    """τ_t (R2): geometric max(τmin, τ0(1−γ)^(t−1)); linear; or exponential approach."""
    if kind == "geometric":
        return max(tau_min, tau0 * (1.0 - gamma) ** (t - 1))
    if kind == "linear":
        return max(tau_min, tau0 - gamma * (t - 1))
    if kind == "exponential":
        return tau_min + (tau0 - tau_min) * math.exp(-gamma * (t - 1))
    raise ValueError(
        f"method.dg.schedule: unknown {kind!r}; allowed: geometric, linear, exponential"
    )


def gate_distance(p: torch.Tensor, h: torch.Tensor, kind: str = "clipped_cosine") -> float:
    """D (R1): clip(1 − cos(p, h), 0, 1), or (1 − cos)/2; a zero-norm vector gives D = 1."""
    p64, h64 = p.double(), h.double()
    np_, nh = float(p64.norm()), float(h64.norm())
    if np_ == 0.0 or nh == 0.0:
        return 1.0
    cos = float(p64 @ h64) / (np_ * nh)
    if kind == "clipped_cosine":
        return min(1.0, max(0.0, 1.0 - cos))
    if kind == "half_cosine":
        return min(1.0, max(0.0, (1.0 - cos) / 2.0))
    raise ValueError(f"method.dg.distance: unknown {kind!r}; allowed: clipped_cosine, half_cosine")


def quota_count(q: float, m: int) -> int:
    """⌈q·m⌉ in exact rational arithmetic (q read as a decimal)."""
    return math.ceil(Fraction(str(q)) * m)


def preliminary_active(
    selected: list[int],
    scores: dict[int, float | None],
    ages: dict[int, int | None],
    tau: float,
    max_age: int,
    fired: dict[int, bool] | None = None,
) -> list[int]:
    """A⁰_t (R3): cacheless, or age ≥ S, or the gate fired (D ≥ τ_t, or ``fired`` given)."""
    active = []
    for i in selected:
        a = ages[i]
        if a is None or a >= max_age:
            active.append(i)
        elif fired is not None:
            if fired.get(i, False):
                active.append(i)
        elif scores[i] is not None and scores[i] >= tau:
            active.append(i)
    return active


def promote(
    selected: list[int], active: list[int], order_scores: dict[int, float], need: int
) -> list[int]:
    """The ``need`` non-active clients with the largest score; ties go to the lower id."""
    if need <= 0:
        return []
    rest = [i for i in selected if i not in set(active)]
    rest.sort(key=lambda i: (-order_scores[i], i))
    return rest[: min(need, len(rest))]


def decay_factor(rho: float, age: int, kind: str = "power") -> float:
    """Reuse discount (R6): ρ^a, or constant ρ, or ρ^(a−1)."""
    if kind == "power":
        return rho**age
    if kind == "constant":
        return rho
    if kind == "power_minus_one":
        return rho ** (age - 1)
    raise ValueError(
        f"method.dg.decay: unknown {kind!r}; allowed: power, constant, power_minus_one"
    )


def update_signature(
    h: torch.Tensor | None, p_ref: torch.Tensor, kappa: float, normalize: bool = False
) -> torch.Tensor:
    """h ← κ·h + (1−κ)·p_ref, or h ← p_ref when there is none yet (R5)."""
    p = p_ref.float()
    if normalize:
        n = float(p.norm())
        p = p / n if n > 0 else p
    if h is None:
        return p.clone()
    return kappa * h + (1.0 - kappa) * p


def scaled(update: SparseUpdate, factor: float) -> SparseUpdate:
    """factor · Δ̂, keeping the sparsity pattern."""
    return SparseUpdate(update.dim, update.indices, update.values * factor)


# --------------------------------------------------------------------------- cache store


class CacheStore(Protocol):
    """Where packed cached updates live: a dict in process or the Ray object store."""

    def put(self, packed: PackedUpdate) -> Any: ...

    def get(self, handle: Any) -> PackedUpdate: ...


class LocalCacheStore:
    """In-process store: the handle is the packed update itself."""

    def put(self, packed: PackedUpdate) -> PackedUpdate:
        return packed

    def get(self, handle: PackedUpdate) -> PackedUpdate:
        return handle


@dataclass(frozen=True)
class CacheEntry:
    handle: Any  # store handle of the packed Δ̂ (the object itself, or a Ray ObjectRef)
    nbytes: int  # bytes held: exactly the field model's size of Δ̂


@dataclass(frozen=True)
class DGState:
    """Per-client server state of §2.3.2 (never mutated; each round returns a new one)."""

    cache: dict[int, CacheEntry]
    last_fresh: dict[int, int]  # r[i]: round of the last fresh event
    signature: dict[int, torch.Tensor]  # h[i]: head-gradient signature

    def age(self, i: int, t: int) -> int | None:
        r = self.last_fresh.get(i)
        return None if r is None else t - r


# --------------------------------------------------------------------------- the method


@dataclass(frozen=True)
class DGFedReuse:
    """DG-FedReuse with the gate, its controls and every reconstruction of §2.3.3."""

    cfg: DGConfig
    layout: StateLayout
    seed: int
    store: CacheStore
    topk_ratio: float = 0.2
    server_lr: float = 1.0
    name: str = "dg_fedreuse"

    def init_state(self, w0: torch.Tensor) -> DGState:
        return DGState({}, {}, {})

    def tau(self, t: int) -> float:
        c = self.cfg
        return tau_schedule(t, c.tau0, c.tau_min, c.gamma, c.schedule)

    def probes(self, state: DGState, t: int, selected: list[int]) -> tuple[ProbeTask, ...]:
        """Gate proxies for cacheful clients whose decision is still open (age < S)."""
        if self.cfg.gate != "proxy":
            return ()
        return tuple(
            ProbeTask(i, t)
            for i in selected
            if i in state.cache and (state.age(i, t) or 0) < self.cfg.max_age
        )

    def _random_draws(self, t: int, i: int) -> tuple[float, float]:
        u = generator(self.seed, Purpose.GATE_RANDOM, t, i).random(2)
        return float(u[0]), float(u[1])

    def plan(
        self,
        state: DGState,
        t: int,
        selected: list[int],
        probes: dict[int, torch.Tensor] | None = None,
    ) -> RoundPlan:
        c, probes = self.cfg, probes or {}
        tau = self.tau(t)
        ages = {i: state.age(i, t) for i in selected}
        scores: dict[int, float | None] = {}
        fired: dict[int, bool] | None = None
        order: dict[int, float] = {}
        if c.gate == "proxy":
            for i in selected:
                if i not in state.cache:
                    scores[i] = 1.0  # cacheless ⇒ D = 1 (fresh)
                elif i in probes:
                    scores[i] = gate_distance(probes[i], state.signature[i], c.distance)
                else:
                    scores[i] = None  # age ≥ S: forced fresh, no proxy computed
            order = {i: (s if s is not None else 1.0) for i, s in scores.items()}
        else:
            fired = {}
            for i in selected:
                u_fire, u_order = self._random_draws(t, i)
                fired[i] = c.gate == "random" and u_fire < c.gate_prob
                scores[i] = u_fire if c.gate == "random" else None
                order[i] = u_order
        active = preliminary_active(selected, scores, ages, tau, c.max_age, fired)
        need = quota_count(c.quota, len(selected)) - len(active)
        promoted = promote(selected, active, order, need)
        fresh = set(active) | set(promoted)
        decisions = {i: ("fresh" if i in fresh else "reused") for i in selected}
        gate = {
            i: {"gate_score": scores[i], "tau": tau, "age": ages[i], "promoted": i in promoted}
            for i in selected
        }
        tasks = tuple(
            ClientTask(i, t, self.topk_ratio, c.mu, refresh_proxy=c.gate == "proxy")
            for i in selected
            if i in fresh
        )
        return RoundPlan(tasks, decisions, gate)

    def server_step(
        self,
        state: DGState,
        t: int,
        w: torch.Tensor,
        plan: RoundPlan,
        fresh: dict[int, FreshUpdate],
        num_samples: dict[int, int],
    ) -> StepResult:
        c = self.cfg
        cache, last, sig = dict(state.cache), dict(state.last_fresh), dict(state.signature)
        selected = sorted(plan.decisions)
        contributions: dict[int, SparseUpdate] = {}
        for i in selected:
            if plan.decisions[i] == "fresh":
                upd = fresh[i].update
                packed = pack(upd, self.layout)
                cache[i] = CacheEntry(self.store.put(packed), packed.nbytes)
                last[i] = t
                if fresh[i].proxy is not None:
                    sig[i] = update_signature(
                        sig.get(i), fresh[i].proxy, c.kappa, c.normalize_signature
                    )
                contributions[i] = upd
            else:
                a = t - state.last_fresh[i]
                cached = unpack(self.store.get(state.cache[i].handle), self.layout)
                contributions[i] = scaled(cached, decay_factor(c.rho, a, c.decay))
        weights = sample_weights(selected, num_samples)
        if not selected:
            return StepResult(DGState(cache, last, sig), w.clone(), {}, {})
        avg = weighted_sum([(weights[i], contributions[i]) for i in selected], w.numel())
        norms = {i: float(contributions[i].values.norm()) for i in selected}
        return StepResult(DGState(cache, last, sig), w + self.server_lr * avg, weights, norms)

    def export_state(self, state: DGState) -> DGState:
        """The state with every cached update fetched from the store (picklable anywhere)."""
        cache = {i: CacheEntry(self.store.get(e.handle), e.nbytes) for i, e in state.cache.items()}
        return DGState(cache, dict(state.last_fresh), dict(state.signature))

    def import_state(self, state: DGState) -> DGState:
        """Inverse of :meth:`export_state`: cached updates go back into this store."""
        cache = {i: CacheEntry(self.store.put(e.handle), e.nbytes) for i, e in state.cache.items()}
        return DGState(cache, dict(state.last_fresh), dict(state.signature))

    def cache_bytes(self, state: DGState) -> int:
        """Bytes held by the cached sparse updates (the field model's size, exactly)."""
        return sum(e.nbytes for e in state.cache.values())

    def memory_bytes(self, state: DGState) -> int:
        """Cache plus signatures (4 bytes per head value per client)."""
        return self.cache_bytes(state) + sum(4 * h.numel() for h in state.signature.values())


def with_store(algo: DGFedReuse, store: CacheStore) -> DGFedReuse:
    return replace(algo, store=store)
