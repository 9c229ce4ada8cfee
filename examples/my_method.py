"""An example method in one file: sign compression with error feedback (EF-SignSGD style).

Each selected client trains, adds its error memory e_i to its update, and sends one sign bit per
coordinate plus one fp32 scale per tensor (the mean |value| of that tensor):

    p = Δ_i + e_i,   c_l = mean|p_l| · sign(p_l),   e_i ← p − c        (client, kept locally)
    w_{t+1} = w_t + η_s Σ_{i∈S} π_i c_i                                 (server)

It shows every part of the method contract (reuse_ray/algorithms/api.py): a config block, a
search space, the server side, the client side with client-local state (e_i, kept by the engine
between the client's participations), and a wire format of its own whose decoder names the
restricted bytes (4 + ⌈d_l/8⌉ per tensor); the measured ledger is the message's real length.

Run it with ``reuse-ray run examples/my_method.yaml`` (``--backend local`` or ``ray``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import torch

from reuse_ray.algorithms import (
    FRESH,
    ClientResult,
    ClientTask,
    MethodEnv,
    Received,
    RoundPlan,
    StepResult,
    fedavg_aggregate,
    register,
    sample_weights,
)
from reuse_ray.checks import check_range
from reuse_ray.codecs import SparseUpdate

# magic, round, client, number of tensors (a format string: the module travels by value to Ray
# workers, and a struct.Struct object cannot be pickled)
_HEADER = "<4sIiI"


@dataclass(frozen=True)
class SignEFConfig:
    """The example's own knobs (YAML block ``method.sign_ef``)."""

    memory_decay: float = 1.0  # e_i ← decay · (p − c); 0 turns error feedback off

    def __post_init__(self) -> None:
        check_range("memory_decay", self.memory_decay, 0.0, 1.0)


def sign_compress(p: torch.Tensor, env: MethodEnv) -> tuple[torch.Tensor, list[float]]:
    """c with c_l = mean|p_l| · sign(p_l) per tensor, and the scales."""
    c, scales = torch.zeros_like(p), []
    for s in env.layout.tensors:
        seg = p[s.offset : s.offset + s.numel]
        scale = float(seg.abs().mean()) if s.numel else 0.0
        scales.append(scale)
        c[s.offset : s.offset + s.numel] = torch.where(seg >= 0, scale, -scale)
    return c, scales


def encode(c_sign: torch.Tensor, scales: list[float], task: ClientTask, env: MethodEnv) -> bytes:
    """Header, then per tensor: fp32 scale and the packed sign bits (1 = non-negative)."""
    parts = [struct.pack(_HEADER, b"SGN1", task.round, task.client, len(scales))]
    for s, scale in zip(env.layout.tensors, scales, strict=True):
        bits = (c_sign[s.offset : s.offset + s.numel] >= 0).numpy()
        parts.append(struct.pack("<f", scale) + np.packbits(bits, bitorder="little").tobytes())
    return b"".join(parts)


def decode(message: bytes, env: MethodEnv) -> tuple[torch.Tensor, int]:
    """(c, restricted bytes = Σ_l 4 + ⌈d_l/8⌉)."""
    magic, _, _, n = struct.unpack_from(_HEADER, message, 0)
    assert magic == b"SGN1" and n == len(env.layout.tensors)
    pos, out, restricted = struct.calcsize(_HEADER), torch.zeros(env.layout.dim), 0
    for s in env.layout.tensors:
        (scale,) = struct.unpack_from("<f", message, pos)
        nbytes = -(-s.numel // 8)
        raw = np.frombuffer(message, dtype=np.uint8, count=nbytes, offset=pos + 4)
        bits = np.unpackbits(raw, bitorder="little")[: s.numel].astype(bool)
        seg = torch.from_numpy(np.where(bits, scale, -scale).astype(np.float32))
        out[s.offset : s.offset + s.numel] = seg
        pos += 4 + nbytes
        restricted += 4 + nbytes
    return out, restricted


@dataclass(frozen=True)
class SignEF:
    env: MethodEnv
    memory_decay: float = 1.0
    name: str = "sign_ef"

    # ------------------------------------------------------------------ server side

    def init_state(self, w0: torch.Tensor) -> None:
        return None

    def probes(self, state, t: int, selected: list[int]) -> tuple:
        return ()

    def plan(self, state, t: int, selected: list[int], probes=None) -> RoundPlan:
        return RoundPlan(tuple(ClientTask(i, t) for i in selected), {i: FRESH for i in selected})

    def server_step(self, state, t, w, plan, uploads: dict[int, Received], num_samples):
        updates = {i: SparseUpdate(w.numel(), None, u.value) for i, u in uploads.items()}
        weights = sample_weights(sorted(updates), num_samples)
        w_next = fedavg_aggregate(w, updates, weights, self.env.server_lr)
        norms = {i: float(u.values.norm()) for i, u in updates.items()}
        return StepResult(None, w_next, weights, norms)

    def memory_bytes(self, state) -> int:
        return 0

    # ------------------------------------------------------------------ client side and wire

    def client_work(self, ctx, task: ClientTask, w: torch.Tensor) -> ClientResult:
        res = ctx.train(task, w)
        p = res.delta if task.local is None else res.delta + task.local  # task.local: e_i
        c, scales = sign_compress(p, self.env)
        error = self.memory_decay * (p - c)
        return ClientResult(
            (encode(c, scales, task, self.env),), error, res.mean_loss, res.steps, res.finite
        )

    def decode(self, task: ClientTask, messages: tuple[bytes, ...]):
        return decode(messages[0], self.env)


def space(trial):
    trial.suggest_float("method.sign_ef.memory_decay", 0.0, 1.0)
    trial.suggest_float("fl.server_lr", 0.3, 1.5)
    return None


@register("sign_ef", config=SignEFConfig, space=space, sparse_uplink=False)
def build(params: SignEFConfig, env: MethodEnv) -> SignEF:
    return SignEF(env, params.memory_decay)
