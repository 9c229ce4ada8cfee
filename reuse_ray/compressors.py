"""Client-side uplink compressors beyond plain Top-K (ALGORITHMS.md §2.9, §2.11.2, §2.12).

Pure functions over explicit state, in the update convention Δ = w_local − w_t (the spec's
pseudo-gradient is g = −Δ; every rule below is sign-symmetric or restated for Δ):

* EF21 (§2.11.2): ``c = TopK_r(Δ − g_i)``, ``g_i ← g_i + c``; the server mirrors g_i exactly.
* LAQ (§2.12): quantise Δ relative to the last upload Q_i on 2^b levels of
  [Q_i − R, Q_i + R], R = ‖Δ − Q_i‖_∞, and upload only when the innovation is large enough.
* SCAFFOLD option II (§2.9): ``c_i⁺ = c_i − c − Δ/(K η_l)`` on the trainable coordinates.
"""

from __future__ import annotations

import torch

from .codecs import SparseUpdate, topk_sparsify
from .state import StateLayout


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


def laq_dequantize(q: torch.Tensor, radius: float, codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Q(Δ) = Q_i − R + 2δ·code with δ = R/(2^b − 1), in fp32 (client and server alike)."""
    r = torch.tensor(radius, dtype=torch.float32)
    step = 2 * (r / (2**bits - 1))
    return q - r + step * codes.to(torch.float32)


def laq_quantize(
    delta: torch.Tensor, q: torch.Tensor | None, bits: int
) -> tuple[float, torch.Tensor, torch.Tensor]:
    """(R, codes, Q(Δ)) with codes = ⌊(Δ − Q + R + δ)/(2δ)⌋ clamped to [0, 2^b − 1] (§2.12).

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
) -> tuple[bool, float]:
    """LAQ's skip rule: upload iff ‖Q(Δ) − Q_i‖² ≥ threshold + 3(ε + ε̂) or clock ≥ t̄.

    ε = ‖Q(Δ) − Δ‖² is returned too (it becomes ε̂ after an upload). A first visit (no Q_i)
    always uploads.
    """
    eps = float(((q_new - delta.to(torch.float32)) ** 2).sum())
    if q_old is None or clock >= max_clock:
        return True, eps
    innovation = float(((q_new - q_old) ** 2).sum())
    return innovation >= threshold + 3.0 * (eps + eps_hat), eps


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
