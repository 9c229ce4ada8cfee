"""DG-FedReuse: proxy-gradient-gated reuse of cached sparse updates (methods: DG-FedReuse).

Per selected client the server decides between a fresh round (local training, Top-K uplink,
cache refresh) and replaying the client's cached sparse update with an age discount. The gate
compares a head-gradient proxy with the client's signature (R1) against a decaying threshold
(R2); an age cap S forces a refresh (R3) and a quota guarantees ⌈q·m⌉ fresh clients.

The math is in module-level functions; :class:`DGFedReuse` strings them together over an
explicit :class:`DGState`. Cached updates are stored packed (the field model's own bytes, never
a dense-shaped copy) in a :class:`~reuse_ray.algorithms.table.ClientTable`, which the Ray
engine backs with the object store. The module also holds the client side (gate and refresh
proxies, the Top-K uplink) and the wire decoding.

Controls that isolate the gate (methods: DG-FedReuse): ``gate="off"`` (age cap, quota and
first-visit rule only; promotion order drawn at random from the keyed ``gate_random`` stream) and
``gate="random"`` (fires with probability ``gate_prob`` from the same stream).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

from ..checks import check_choice, check_range
from ..codecs import KIND_PROXY, SparseUpdate, pack, unpack
from ..lazy import torch
from ..rng import Purpose, generator
from .api import (
    FRESH,
    REUSED,
    ClientResult,
    ClientTask,
    MethodEnv,
    Received,
    RoundPlan,
    StepResult,
    sample_weights,
    weighted_sum,
)
from .registry import register
from .table import ClientTable
from .uplink import (
    ErrorFeedback,
    TopK,
    compressor_for,
    decode_dense,
    decode_update,
    encode_dense,
    train_and_send,
)

DG_SCHEDULES = ("geometric", "linear", "exponential")
DG_DISTANCES = ("clipped_cosine", "half_cosine")
DG_DECAYS = ("power", "constant", "power_minus_one")
DG_GATES = ("proxy", "off", "random")


@dataclass(frozen=True)
class DGConfig:
    """DG-FedReuse (methods: DG-FedReuse); defaults: the paper's frozen values (methods: The paper's
    protocol)."""

    tau0: float = 0.9116988  # τ0, threshold at round 1
    tau_min: float = 0.8134931  # τ_min, the threshold's floor
    gamma: float = 0.01  # γ, decay of the threshold schedule
    schedule: str = "geometric"  # R2: max(τmin, τ0(1−γ)^(t−1)); or linear / exponential
    max_age: int = 4  # S: a cached update of age ≥ S forces a fresh round
    rho: float = 0.7279635  # ρ, age decay of reused updates
    quota: float = 0.30  # q: at least ⌈q·m⌉ fresh clients per round
    mu: float = 3.4156e-4  # proximal μ of the fresh path (R4); not FedProx's μ
    kappa: float = 0.9  # signature EMA coefficient (R5; the paper does not report it)
    distance: str = "clipped_cosine"  # R1: clip(1 − cos, 0, 1); or (1 − cos)/2
    decay: str = "power"  # R6: ρ^a; or constant ρ; or ρ^(a−1)
    gate: str = "proxy"  # proxy (the real gate) | off (age cap + quota only) | random
    gate_prob: float = 0.2  # gate=random: firing probability
    proxy_batches: int = 5  # at most this many proxy batches
    proxy_batch_size: int = 64  # samples per proxy-gradient batch
    proxy_mode: str = "train"  # train (the seed) or eval (design: Validation-only search)
    normalize_signature: bool = False  # unit-normalise p_ref before the EMA (R5 alternative)
    # clients the age cap forces fresh: skip their gate proxy (cheaper; gate_score null) |
    # compute it as the seed's code does (charged, recorded, decision unchanged)
    proxy_forced: str = "skip"

    def __post_init__(self) -> None:
        check_range("tau0", self.tau0, 0.0, 1.0)
        check_range("tau_min", self.tau_min, 0.0, self.tau0)
        check_range("gamma", self.gamma, 0.0, 1.0, hi_open=True)
        check_choice("schedule", self.schedule, DG_SCHEDULES)
        check_range("max_age", self.max_age, 1)
        check_range("rho", self.rho, 0.0, 1.0, lo_open=True, hi_open=True)
        check_range("quota", self.quota, 0.0, 1.0, lo_open=True)
        check_range("mu", self.mu, 0.0)
        check_range("kappa", self.kappa, 0.0, 1.0, hi_open=True)
        check_choice("distance", self.distance, DG_DISTANCES)
        check_choice("decay", self.decay, DG_DECAYS)
        check_choice("gate", self.gate, DG_GATES)
        check_range("gate_prob", self.gate_prob, 0.0, 1.0)
        check_range("proxy_batches", self.proxy_batches, 1)
        check_range("proxy_batch_size", self.proxy_batch_size, 1)
        check_choice("proxy_mode", self.proxy_mode, ("train", "eval"))
        check_choice("proxy_forced", self.proxy_forced, ("skip", "compute"))


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


# --------------------------------------------------------------------------- the method


@dataclass(frozen=True)
class DGState:
    """Per-client server state (methods: DG-FedReuse); never mutated: a round returns a new one."""

    cache: ClientTable  # Δ̂[i], packed: exactly the field model's bytes (methods: DG-FedReuse)
    last_fresh: dict[int, int]  # r[i]: round of the last fresh event
    signature: dict[int, torch.Tensor]  # h[i]: head-gradient signature

    def age(self, i: int, t: int) -> int | None:
        r = self.last_fresh.get(i)
        return None if r is None else t - r


@dataclass(frozen=True)
class GateProbe:
    """Pre-decision work: HeadProxy(i, w_t, proxy_gate) for the gate (methods: DG-FedReuse)."""


@dataclass(frozen=True)
class FreshWork:
    """A fresh round: local training with the proximal μ, and the refresh proxy if asked."""

    mu: float
    refresh_proxy: bool


@dataclass(frozen=True)
class DGFedReuse:
    """DG-FedReuse with the gate, its controls and every reconstruction of methods: DG-FedReuse."""

    cfg: DGConfig
    env: MethodEnv
    compressor: TopK | ErrorFeedback
    name: str = "dg_fedreuse"

    @property
    def layout(self):
        return self.env.layout

    def init_state(self, w0: torch.Tensor) -> DGState:
        return DGState(ClientTable.empty(), {}, {})

    def tau(self, t: int) -> float:
        c = self.cfg
        return tau_schedule(t, c.tau0, c.tau_min, c.gamma, c.schedule)

    def probes(self, state: DGState, t: int, selected: list[int]) -> tuple[ClientTask, ...]:
        """Gate proxies for cacheful clients whose decision is still open (age < S); with
        ``proxy_forced='compute'`` also for those the age cap forces fresh."""
        if self.cfg.gate != "proxy":
            return ()
        forced = self.cfg.proxy_forced == "compute"
        return tuple(
            ClientTask(i, t, GateProbe())
            for i in selected
            if i in state.cache and (forced or (state.age(i, t) or 0) < self.cfg.max_age)
        )

    def _random_draws(self, t: int, i: int) -> tuple[float, float]:
        u = generator(self.env.seed, Purpose.GATE_RANDOM, t, i).random(2)
        return float(u[0]), float(u[1])

    def plan(
        self,
        state: DGState,
        t: int,
        selected: list[int],
        probes: dict[int, Received] | None = None,
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
                elif i in probes:  # (age ≥ S with proxy_forced=compute: scored, still forced)
                    scores[i] = gate_distance(probes[i].value, state.signature[i], c.distance)
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
        decisions = {i: (FRESH if i in fresh else REUSED) for i in selected}
        columns = {
            i: {"gate_score": scores[i], "tau": tau, "age": ages[i], "promoted": i in promoted}
            for i in selected
        }
        work = FreshWork(c.mu, refresh_proxy=c.gate == "proxy")
        tasks = tuple(ClientTask(i, t, work) for i in selected if i in fresh)
        return RoundPlan(tasks, decisions, columns)

    # ----------------------------------------------------------------------- client side

    def _proxy(self, ctx, task: ClientTask, w: torch.Tensor, purpose: Purpose) -> bytes:
        c = self.cfg
        p = ctx.head_proxy(
            task,
            w,
            purpose,
            batches=c.proxy_batches,
            batch_size=c.proxy_batch_size,
            mode=c.proxy_mode,
        )
        return encode_dense(p, self.env.head_layout, KIND_PROXY, task)

    def client_work(self, ctx, task: ClientTask, w: torch.Tensor):
        if isinstance(task.work, GateProbe):
            return ClientResult((self._proxy(ctx, task, w, Purpose.PROXY_GATE),))
        res = train_and_send(ctx, task, w, self.layout, self.compressor, mu=task.work.mu)
        if task.work.refresh_proxy:
            proxy = self._proxy(ctx, task, w, Purpose.PROXY_REFRESH)
            res = replace(res, messages=(*res.messages, proxy))
        return res

    def decode(self, task: ClientTask, messages: tuple[bytes, ...]):
        """Probe: (proxy, 0 restricted bytes); fresh: ((Δ̂, refresh proxy or None), bytes)."""
        if isinstance(task.work, GateProbe):
            return decode_dense(messages[0], self.env.head_layout), 0
        update, nbytes = decode_update(messages[0], self.layout)
        proxy = decode_dense(messages[1], self.env.head_layout) if len(messages) > 1 else None
        return (update, proxy), nbytes

    # ----------------------------------------------------------------------- server step

    def server_step(
        self,
        state: DGState,
        t: int,
        w: torch.Tensor,
        plan: RoundPlan,
        uploads: dict[int, Received],
        num_samples: dict[int, int],
    ) -> StepResult:
        c = self.cfg
        last, sig = dict(state.last_fresh), dict(state.signature)
        new_cache = {}
        selected = sorted(plan.decisions)
        contributions: dict[int, SparseUpdate] = {}
        for i in selected:
            if plan.decisions[i] == FRESH:
                upd, proxy = uploads[i].value
                new_cache[i] = pack(upd, self.layout)
                last[i] = t
                if proxy is not None:
                    sig[i] = update_signature(sig.get(i), proxy, c.kappa, c.normalize_signature)
                contributions[i] = upd
            else:
                a = t - state.last_fresh[i]
                cached = unpack(state.cache[i], self.layout)
                contributions[i] = scaled(cached, decay_factor(c.rho, a, c.decay))
        cache = state.cache.updated(new_cache)
        weights = sample_weights(selected, num_samples)
        if not selected:
            return StepResult(DGState(cache, last, sig), w.clone(), {}, {})
        avg = weighted_sum([(weights[i], contributions[i]) for i in selected], w.numel())
        norms = {i: float(contributions[i].values.norm()) for i in selected}
        w_next = w + self.env.server_lr * avg
        return StepResult(DGState(cache, last, sig), w_next, weights, norms)

    def cache_bytes(self, state: DGState) -> int:
        """Bytes held by the cached sparse updates (the field model's size, exactly)."""
        return state.cache.nbytes()

    def memory_bytes(self, state: DGState) -> int:
        """Cache plus signatures (4 bytes per head value per client)."""
        return self.cache_bytes(state) + sum(4 * h.numel() for h in state.signature.values())


def space(trial):
    tau0 = trial.suggest_float("method.dg.tau0", 0.05, 0.99)
    trial.suggest_float("method.dg.tau_min", 0.01, tau0)  # constrained: τ_min ≤ τ0
    trial.suggest_float("method.dg.rho", 0.05, 0.99)
    trial.suggest_int("method.dg.max_age", 2, 8)
    trial.suggest_float("method.dg.quota", 0.1, 1.0)
    trial.suggest_float("method.topk_ratio", 0.01, 1.0, log=True)
    return None


@register("dg_fedreuse", config=DGConfig, block="dg", space=space, error_feedback=True)
def build(params: DGConfig, env: MethodEnv) -> DGFedReuse:
    return DGFedReuse(params, env, compressor_for(env))
