"""LAQ adapted to FL rounds (methods: LAQ): b-bit innovation quantisation with a lazy
skip rule.

A selected client trains, quantises Δ relative to its last upload Q_i on 2^b levels of
[Q_i − R, Q_i + R] (R = ‖Δ − Q_i‖_∞) and uploads (R, codes) only when the innovation is large
enough; otherwise it sends the bare skip flag and the server replays Q_i. Server:
``w_{t+1} = w_t + η_s Σ_j α_j Q_j`` over every client's last upload. The client keeps ε̂_i (the
quantisation error of its last upload) and its skip clock; the server's mirror of Q_i travels
with the task.

Two variants (``method.laq.variant``): ``fl`` (the default, an adaptation to FL rounds) forces a
client's first upload, forces one after ``max_clock`` = 10 skips and averages the memories with
population weights α_j; ``authors`` follows the authors' ``LAQ.py``: the first upload is decided
by the skip rule against Q_i = 0, the clock is C = 100, and the server steps by the plain sum
Σ_m Q_m (their α·Σ_m Q_m with α the learning rate, which Δ already carries).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_choice, check_range
from ..codecs import (
    KIND_SKIP,
    decode_laq,
    encode_laq,
    encode_skip,
    laq_payload_bytes,
    message_kind,
)
from ..lazy import torch
from .api import (
    FRESH,
    LAZY,
    ClientResult,
    ClientTask,
    MethodEnv,
    Received,
    RoundPlan,
    StepResult,
    population_weights,
)
from .memory import MemoryBank
from .registry import register


@dataclass(frozen=True)
class LAQConfig:
    """LAQ adapted to FL rounds (methods: LAQ)."""

    # b, bits per coordinate (2^b levels). The official 4 makes the quantisation-error term
    # 3(ε + ε̂) exceed the innovation of whole local-training updates, so every later
    # participation is lazy and the replayed stale Q_i drive digits to chance; 8 does not
    bits: int = 8
    history: int = 10  # D, past model changes in the skip threshold
    xi: float = 0.8  # Σ_d ξ_d; ξ_d = xi / min(D, rounds so far)
    c_thr: float = 0.01  # replaces 1/(α²M²): pseudo-updates are lr-scaled, ≈ 1/m²
    # t̄: force an upload after this many skipped participations (default: 10 for fl, 100 for
    # authors)
    max_clock: int | None = None
    weights: str = "samples"  # α_j of the server aggregate (fl variant): samples | uniform
    variant: str = "fl"  # fl: today's adaptation | authors: LAQ.py (rule-decided first upload,
    # C = 100, server sum over workers)

    def __post_init__(self) -> None:
        check_range("bits", self.bits, 1, 16)
        check_range("history", self.history, 1)
        check_range("xi", self.xi, 0.0)
        check_range("c_thr", self.c_thr, 0.0)
        if self.max_clock is not None:
            check_range("max_clock", self.max_clock, 1)
        check_choice("weights", self.weights, ("samples", "uniform"))
        check_choice("variant", self.variant, ("fl", "authors"))

    @property
    def clock(self) -> int:
        """t̄ in force: the set value, else the variant's default."""
        if self.max_clock is not None:
            return self.max_clock
        return 100 if self.variant == "authors" else 10


# --------------------------------------------------------------------------- pure math


def laq_dequantize(q: torch.Tensor, radius: float, codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Q(Δ) = Q_i − R + 2δ·code with δ = R/(2^b − 1), in fp32 (client and server alike)."""
    r = torch.tensor(radius, dtype=torch.float32)
    step = 2 * (r / (2**bits - 1))
    return q - r + step * codes.to(torch.float32)


def laq_quantize(
    delta: torch.Tensor, q: torch.Tensor | None, bits: int
) -> tuple[float, torch.Tensor, torch.Tensor]:
    """(R, codes, Q(Δ)) with codes = ⌊(Δ − Q + R + δ)/(2δ)⌋ clamped to [0, 2^b − 1] (methods: LAQ).

    R is rounded to fp32 first, so the server's :func:`laq_dequantize` reproduces Q(Δ)
    bit-for-bit from (R, codes). R = 0 (Δ = Q) gives codes 0 and Q(Δ) = Q.
    """
    delta = delta.to(torch.float32)
    q = torch.zeros_like(delta) if q is None else q
    diff = delta - q
    radius = float(diff.abs().max()) if diff.numel() else 0.0
    levels = 2**bits - 1
    if radius == 0.0:
        codes = torch.zeros(delta.numel(), dtype=torch.int64)
        return 0.0, codes, q.clone()
    r = torch.tensor(radius, dtype=torch.float32)
    half = r / levels  # δ
    codes = torch.floor((diff + r + half) / (2 * half)).clamp_(0, levels).to(torch.int64)
    return float(r), codes, laq_dequantize(q, float(r), codes, bits)


def laq_upload(
    q_new: torch.Tensor,
    q_old: torch.Tensor | None,
    delta: torch.Tensor,
    eps_hat: float,
    threshold: float,
    clock: int,
    max_clock: int,
    force_first: bool = True,
) -> tuple[bool, float]:
    """LAQ's skip rule: upload iff ‖Q(Δ) − Q_i‖² ≥ threshold + 3(ε + ε̂) or clock ≥ t̄.

    ε = ‖Q(Δ) − Δ‖² is returned too (it becomes ε̂ after an upload). A first visit (no Q_i)
    always uploads with ``force_first``; otherwise the rule decides against Q_i = 0.
    """
    eps = float(((q_new - delta.to(torch.float32)) ** 2).sum())
    if (q_old is None and force_first) or clock >= max_clock:
        return True, eps
    base = torch.zeros_like(q_new) if q_old is None else q_old
    innovation = float(((q_new - base) ** 2).sum())
    return innovation >= threshold + 3.0 * (eps + eps_hat), eps


def laq_threshold(history: tuple[float, ...], c_thr: float, xi: float, depth: int) -> float:
    """c_thr · Σ_{d=1..D} ξ_d ‖w^{t+1−d} − w^{t−d}‖², ξ_d = xi / min(D, len(history))
    (methods: LAQ)."""
    recent = history[-depth:]
    if not recent:
        return 0.0
    return c_thr * (xi / len(recent)) * float(np.sum(recent))


# --------------------------------------------------------------------------- the method


@dataclass(frozen=True)
class LAQState:
    bank: MemoryBank  # server mirror of every client's last upload Q_j, and Σ α_j Q_j
    history: tuple[float, ...]  # ‖w_{t+1} − w_t‖² of past rounds (last D kept)


@dataclass(frozen=True)
class LAQWork:
    """Train, quantise against ``q`` (the server's mirror of Q_i), apply the skip rule."""

    q: torch.Tensor | None
    threshold: float  # the model-change term of the skip rule


@dataclass(frozen=True)
class LAQ:
    env: MethodEnv
    bits: int = 8
    history: int = 10
    xi: float = 0.8
    c_thr: float = 0.01
    max_clock: int = 10
    weights: str = "samples"
    variant: str = "fl"
    name: str = "laq"

    def init_state(self, w0: torch.Tensor) -> LAQState:
        return LAQState(MemoryBank.empty(w0.numel()), ())

    def probes(self, state, t, selected):
        return ()

    def plan(self, state: LAQState, t: int, selected: list[int], probes=None) -> RoundPlan:
        thr = laq_threshold(state.history, self.c_thr, self.xi, self.history)
        tasks = tuple(ClientTask(i, t, LAQWork(state.bank.get(i), thr)) for i in selected)
        return RoundPlan(tasks, {i: FRESH for i in selected})

    def client_work(self, ctx, task: ClientTask, w: torch.Tensor) -> ClientResult:
        res = ctx.train(task, w)
        work, n = task.work, ctx.num_samples(task.client)
        head = {"round_": task.round, "client": task.client, "num_samples": n}
        eps_hat, clock = task.local if task.local is not None else (0.0, 0)
        radius, codes, q_new = laq_quantize(res.delta, work.q, self.bits)
        upload, eps = laq_upload(
            q_new,
            work.q,
            res.delta,
            eps_hat,
            work.threshold,
            clock,
            self.max_clock,
            force_first=self.variant == "fl",
        )
        if upload:
            msg, local = encode_laq(radius, codes, self.bits, **head), (eps, 0)
        else:
            msg, local = encode_skip(**head), (eps_hat, clock + 1)
        return ClientResult((msg,), local, res.mean_loss, res.steps, res.finite)

    def decode(self, task: ClientTask, messages: tuple[bytes, ...]):
        """(R, codes) and 4 + ⌈b·d/8⌉ restricted bytes; a skip flag: (None, 0)."""
        if message_kind(messages[0]) == KIND_SKIP:
            return None, 0
        radius, codes, bits = decode_laq(messages[0], self.env.layout.dim)
        return (radius, codes), laq_payload_bytes(self.env.layout.dim, bits)

    def server_step(
        self, state: LAQState, t, w, plan, uploads: dict[int, Received], num_samples
    ) -> StepResult:
        if self.variant == "authors":  # Σ_m Q_m over the workers
            alpha = dict.fromkeys(num_samples, 1.0)
        else:
            alpha = population_weights(num_samples, self.weights)
        q_new, decisions, norms = {}, {}, {}
        for i in sorted(uploads):
            if uploads[i].value is None:
                decisions[i] = LAZY
                continue
            old = state.bank.get(i)
            base = torch.zeros(w.numel(), dtype=torch.float32) if old is None else old
            radius, codes = uploads[i].value
            q_new[i] = laq_dequantize(base, radius, codes, self.bits)
            norms[i] = float((q_new[i] - base).norm())
        bank = state.bank.updated(q_new, alpha)
        w_next = w + self.env.server_lr * bank.total
        change = float(((w_next - w) ** 2).sum())
        new_state = LAQState(bank, (state.history + (change,))[-self.history :])
        return StepResult(new_state, w_next, {i: alpha[i] for i in q_new}, norms, decisions)

    def memory_bytes(self, state: LAQState) -> int:
        return state.bank.nbytes()


def space(trial):
    trial.suggest_int("method.laq.bits", 2, 8)
    trial.suggest_float("method.laq.c_thr", 1e-4, 1.0, log=True)
    trial.suggest_int("method.laq.max_clock", 2, 20)
    return None


@register("laq", config=LAQConfig, space=space, sparse_uplink=False)
def build(params: LAQConfig, env: MethodEnv) -> LAQ:
    q = params
    return LAQ(env, q.bits, q.history, q.xi, q.c_thr, q.clock, q.weights, q.variant)
