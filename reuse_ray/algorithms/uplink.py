"""Composable uplink stages and the client side that most methods share (methods: FedAvg and
the Top-K control,
methods: Fed-EF; design: Ledgers).

A *compressor* turns the client's update into what goes on the wire and may keep client-local
state between participations: :class:`TopK` (per-tensor Top-K at keep ratio r; r = 1 is the
dense update) and :class:`ErrorFeedback`, which wraps another compressor with Fed-EF's error
memory e_i. A method picks its compressor with :func:`compressor_for` (Fed-EF when the run asks
for ``method.error_feedback``) and sends the result with :func:`encode_update`; the server's
:func:`decode_update` returns the update and its restricted field-model bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..accounting import restricted_bytes_of
from ..codecs import (
    SparseUpdate,
    decode,
    encode,
    encode_vector,
    error_feedback_step,
    topk_sparsify,
)
from ..lazy import torch
from ..state import StateLayout
from .api import ClientContext, ClientResult, ClientTask, MethodEnv


class Compressor(Protocol):
    """x (fp32, flat) and the client's stage state → (what is sent, the new stage state)."""

    def compress(
        self, x: torch.Tensor, layout: StateLayout, state: Any
    ) -> tuple[SparseUpdate, Any]: ...


@dataclass(frozen=True)
class TopK:
    """Per-tensor Top-K at keep ratio r (methods: FedAvg and the Top-K control); stateless."""

    ratio: float = 1.0

    def compress(self, x: torch.Tensor, layout: StateLayout, state: Any = None):
        return topk_sparsify(x, layout, self.ratio), None


@dataclass(frozen=True)
class ErrorFeedback:
    """Fed-EF (methods: Fed-EF) around a Top-K compressor: p = x + e, c = TopK(p), e' = p − c."""

    inner: TopK

    def compress(self, x: torch.Tensor, layout: StateLayout, state: Any = None):
        return error_feedback_step(x, state, layout, self.inner.ratio)


def compressor_for(env: MethodEnv) -> TopK | ErrorFeedback:
    """The run's uplink compressor: Top-K at ``method.topk_ratio``, with Fed-EF if asked."""
    topk = TopK(env.topk_ratio)
    return ErrorFeedback(topk) if env.error_feedback else topk


def encode_update(
    update: SparseUpdate,
    layout: StateLayout,
    task: ClientTask,
    num_samples: int,
    skip: tuple[int, ...] = (),
) -> bytes:
    """The uplink message of an update: header and each tensor in its cheapest layout."""
    return encode(
        update, layout, round_=task.round, client=task.client, num_samples=num_samples, skip=skip
    )


def decode_update(message: bytes, layout: StateLayout) -> tuple[SparseUpdate, int]:
    """(the update, its restricted bytes: B0 if dense, else Σ_tensors B(d, k))."""
    update = decode(message, layout).update
    return update, restricted_bytes_of(update, layout)


def encode_dense(v: torch.Tensor, layout: StateLayout, kind: int, task: ClientTask) -> bytes:
    """A dense vector over ``layout`` (a head proxy, a control variate) as a wire message."""
    return encode_vector(v, layout, kind, task.round, task.client)


def decode_dense(message: bytes, layout: StateLayout) -> torch.Tensor:
    return decode(message, layout).update.to_dense()


def train_and_send(
    ctx: ClientContext,
    task: ClientTask,
    w: torch.Tensor,
    layout: StateLayout,
    compressor: TopK | ErrorFeedback,
    *,
    mu: float = 0.0,
    skip: tuple[int, ...] = (),
    extra: tuple[bytes, ...] = (),
    lr: float | None = None,
) -> ClientResult:
    """The common client side: local training (``lr`` overrides train.lr), the compressor, one
    update message (+ extra)."""
    res = ctx.train(task, w, mu=mu, lr=lr)
    update, state = compressor.compress(res.delta, layout, task.local)
    msg = encode_update(update, layout, task, ctx.num_samples(task.client), skip)
    return ClientResult((msg, *extra), state, res.mean_loss, res.steps, res.finite)


__all__ = [
    "Compressor",
    "ErrorFeedback",
    "TopK",
    "compressor_for",
    "decode_dense",
    "decode_update",
    "encode_dense",
    "encode_update",
    "train_and_send",
]
