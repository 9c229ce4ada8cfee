"""Vectorized local training (``engine.vectorize``): the ClientUpdate
(methods: Conventions) for a group of
clients at once.

The clients' parameters are stacked along a new leading dimension (ordered by step count) and
one step of every client is one batched forward of the loss over the stack — the model's own
``forward_stacked`` where it has one, else ``torch.func.vmap`` of its ``forward`` — and one
backward pass, followed by the heavy-ball SGD update on the stacked tensors. What each client
sees is what :func:`reuse_ray.training.local_update` gives it:

* the same mini-batches: every client's shuffles and augmentations are drawn from its own
  keyed streams (``train_shuffle``, ``augment`` of (seed, round, client)) in the same order, so
  the sample sets of every step are identical;
* the same update: a client's batch is padded to the widest batch of the step and the padded
  samples carry weight 0, so its loss is the mean over its real samples; the FedProx
  gradient μ(w − w_t), the SCAFFOLD correction, weight decay and momentum follow the
  per-client loop's order;
* clients with fewer steps stop: each step computes only the rows of the clients with steps
  left, so a client that has taken all its steps keeps its parameters.

The results equal the per-client loop within float tolerance, not bit for bit: the batched
kernels sum in another order. The tolerance measured by the tests is documented in
``docs/methods.md`` ("Vectorized clients"). Models with BatchNorm are refused (running
statistics cannot be updated per client under ``vmap``); training runs in fp32 (``train.amp``
does not apply).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .data.registry import ArraySplit, DatasetInfo
from .data.transforms import batch_images, crop_flip
from .rng import Purpose, torch_generator
from .state import StateLayout
from .training import LocalResult, _move, batch_starts, has_batchnorm


@dataclass(frozen=True)
class TrainRequest:
    """One client's ``ctx.train(task, w, mu=, correction=, lr=)`` call."""

    client: int
    round: int
    w: torch.Tensor
    indices: np.ndarray
    lr: float
    mu: float = 0.0
    correction: dict[str, torch.Tensor] | None = None


def check_vectorizable(model: nn.Module) -> None:
    """Raise ValueError when the model cannot be trained under ``vmap``: its float state must
    be its trainable parameters (no running statistics, no frozen tensors)."""
    if has_batchnorm(model):
        raise ValueError(
            "the model has BatchNorm layers, whose running statistics cannot be "
            "kept per client under vmap"
        )
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    if {n for n, t in model.state_dict().items() if t.is_floating_point()} != trainable:
        raise ValueError(
            "its float state is not exactly its trainable parameters (float "
            "buffers or frozen parameters)"
        )


def batched_forward(model: nn.Module):
    """``(params stacked (A, ...), x (A, B, ...)) -> logits (A, B, classes)``: the model's own
    ``forward_stacked`` where it has one, else ``torch.func.vmap`` of its ``forward``."""
    stacked = getattr(model, "forward_stacked", None)
    if stacked is not None:
        return stacked
    from torch.func import functional_call, vmap

    return vmap(lambda p, x: functional_call(model, p, (x,)))


class _Stream:
    """One client's batches in the per-client loop's order (same generators, same draws)."""

    def __init__(self, req: TrainRequest, seed: int, epochs: int, batch_size: int):
        self.req = req
        self.shuffle = torch_generator(seed, Purpose.TRAIN_SHUFFLE, req.round, req.client)
        self.aug = torch_generator(seed, Purpose.AUGMENT, req.round, req.client)
        self.n = len(req.indices)
        self.starts = batch_starts(self.n, batch_size, merge_singleton=False)
        self.steps = epochs * len(self.starts) if self.n else 0
        self.perm: np.ndarray | None = None

    def batch(self, step: int) -> np.ndarray:
        j = step % len(self.starts)
        if j == 0:
            self.perm = torch.randperm(self.n, generator=self.shuffle).numpy()
        start, stop = self.starts[j]
        return self.req.indices[self.perm[start:stop]]


def local_update_many(
    model: nn.Module,
    layout: StateLayout,
    requests: list[TrainRequest],
    data: ArraySplit,
    info: DatasetInfo,
    *,
    seed: int,
    epochs: int,
    batch_size: int,
    momentum: float,
    weight_decay: float,
    augment: str = "none",
    device: torch.device | str = "cpu",
    graphs: bool = False,
) -> list[LocalResult]:
    """ClientUpdate (methods: Conventions) of every request at once; results in request order.

    ``graphs`` (``engine.vectorize_graphs``): every step at the group's full shape — every
    client's row (a client without steps left masked) and a full batch (padding weighs 0) —
    so one step is one fixed computation (:class:`_FixedStep`): on CUDA captured once as a
    CUDA graph and replayed each step, without a kernel launch from Python; elsewhere run as
    it is."""
    check_vectorizable(model)
    device = torch.device(device)
    _move(model, device)
    model.train()
    C = len(requests)
    names = [s.name for s in layout.tensors]
    # the stack holds the clients by step count, most first (ties in request order), so the
    # clients with steps left are always its first rows: a step works on views of a prefix
    streams = [_Stream(r, seed, epochs, batch_size) for r in requests]
    order = sorted(range(C), key=lambda i: -streams[i].steps)
    requests, streams = [requests[i] for i in order], [streams[i] for i in order]
    P, M, anchors = _stack(requests, layout, device)
    corrections = _corrections(requests, names, P, device)
    lr = torch.tensor([r.lr for r in requests], device=device)
    mu = torch.tensor([r.mu for r in requests], device=device)
    update = _Update(P, M, anchors, corrections, lr, mu, momentum, weight_decay, names, C)
    # the forward is batched and the backward is plain autograd over the sum of the clients'
    # losses (the clients are independent, so each stack row gets its own gradient, the same
    # bits as torch.func.grad, which would import torch's compiler stack: ~150 MB a process)
    forward = batched_forward(model)
    # each client's summed loss stays on the device (no synchronisation per step); a
    # non-finite loss keeps the sum non-finite, which is how the per-client loop's check reads
    total = torch.zeros(C, dtype=torch.float64, device=device)
    max_steps = streams[0].steps if streams else 0
    if graphs:
        train_step = _FixedStep(forward, update, P, total, batch_size, device)
    else:
        train_step = _unpadded_step(forward, update, P, total, names)
    A = C
    for step in range(max_steps):
        # only the clients with steps left train: the stack's first A rows
        while streams[A - 1].steps <= step:
            A -= 1
        batches = [streams[c].batch(step) for c in range(A)]
        aug = [streams[c].aug for c in range(A)]
        train_step(step, A, *_step_batch(batches, aug, data, info, augment, device))
    return _results(layout, requests, streams, order, P, total)


def _unpadded_step(forward, update: _Update, P, total, names):
    """A step on the views of the stack's first ``A`` rows, each batch as wide as the step's
    widest: the parameters are fresh leaves of the step, updated by :class:`_Update`."""

    def train_step(step: int, A: int, x, y, weight, counts) -> None:
        params = {n: update.take(P[n], A).detach().requires_grad_(True) for n in names}
        losses, grads = _losses_and_grads(forward, params, x, y, weight, counts)
        with torch.no_grad():
            lv = update(step, A, {n: p.detach() for n, p in params.items()}, grads, losses)
            if A == update.C:
                total.add_(lv)
            else:
                total[:A] += lv

    return train_step


def _stack(requests, layout, device) -> tuple[dict, dict, dict | None]:
    """The requests' starting states stacked per tensor (a row per request), zero momentum
    buffers, and the proximal anchors (the starting states) when any request has μ > 0."""
    C = len(requests)
    W = torch.stack([r.w.to(torch.float32) for r in requests]).to(device)
    P = {
        s.name: W[:, s.offset : s.offset + s.numel].reshape(C, *s.shape).clone()
        for s in layout.tensors
    }
    M = {n: torch.zeros_like(p) for n, p in P.items()}
    anchors = {n: p.clone() for n, p in P.items()} if any(r.mu > 0 for r in requests) else None
    return P, M, anchors


def _losses_and_grads(forward, params, x, y, weight, counts):
    """Each stacked client's mean loss over its real samples (per-sample cross-entropy as a
    log_softmax and a gather; padding weighs 0) and every parameter's gradient of their sum
    (``None`` for a parameter the loss does not use)."""
    with torch.enable_grad():
        out = forward(params, x)
        per_sample = -out.log_softmax(-1).gather(-1, y.unsqueeze(-1)).squeeze(-1)
        losses = (per_sample * weight).sum(-1) / counts
        found = torch.autograd.grad(losses.sum(), list(params.values()), allow_unused=True)
    return losses, dict(zip(params, found, strict=True))


def _corrections(requests, names, P, device) -> dict[str, torch.Tensor] | None:
    """Every request's control-variate correction stacked per tensor (zeros for a request or a
    tensor without one); None when no request has one."""
    if not any(r.correction is not None for r in requests):
        return None
    return {
        n: torch.stack(
            [
                r.correction[n].to(device, torch.float32)
                if r.correction and n in r.correction
                else torch.zeros(P[n].shape[1:], device=device)
                for r in requests
            ]
        )
        for n in names
    }


class _Update:
    """One stacked SGD step of :func:`local_update_many` on the stack's first ``A`` rows:
    FedProx's proximal gradient, the correction, weight decay and heavy-ball momentum, as the
    per-client loop's optimizer takes them; returns the rows' losses (with the proximal term)
    in float64. ``P`` (the parameters) and ``M`` (the momentum buffers) are updated in place."""

    def __init__(self, P, M, anchors, corrections, lr, mu, momentum, weight_decay, names, C):
        self.P, self.M, self.anchors, self.corrections = P, M, anchors, corrections
        self.lr, self.mu, self.momentum, self.weight_decay = lr, mu, momentum, weight_decay
        self.names, self.C = names, C

    def take(self, t: torch.Tensor, A: int) -> torch.Tensor:
        return t if A == self.C else t[:A]

    @staticmethod
    def bcast(v: torch.Tensor, like: torch.Tensor, A: int) -> torch.Tensor:
        return v.view(A, *([1] * (like.dim() - 1)))

    def __call__(self, step: int, A: int, params, grads, losses) -> torch.Tensor:
        take, bcast, anchors, mu = self.take, self.bcast, self.anchors, self.mu
        lv = losses.detach().double()
        if anchors is not None:  # the FedProx term: its value joins the reported loss
            sq = sum(
                (params[n] - take(anchors[n], A)).square().flatten(1).sum(1) for n in self.names
            )
            lv = lv + (take(mu, A).double() / 2) * sq.double()
        for n in self.names:
            p, g = params[n], grads[n]
            if g is None:  # a parameter the loss does not use: the loop's optimizer skips it
                continue
            if anchors is not None:
                g = g + bcast(take(mu, A), g, A) * (p - take(anchors[n], A))
            if self.corrections is not None:
                g = g + take(self.corrections[n], A)
            if self.weight_decay != 0:
                g = g.add(p, alpha=self.weight_decay)
            if self.momentum != 0:
                # every client's first step is the round's first; after it the buffer's
                # rows are updated in place
                if step == 0:
                    self.M[n] = g.clone()
                else:
                    g = take(self.M[n], A).mul_(self.momentum).add_(g)
            new = p - bcast(take(self.lr, A), g, A) * g
            if A == self.C:
                self.P[n] = new
            else:
                self.P[n][:A] = new
        return lv

    def fixed(self, params, grads, losses, active: torch.Tensor) -> torch.Tensor:
        """The same update on every row of the stack in place (:class:`_FixedStep`), kept
        only where ``active``; zero momentum buffers make the first step's buffer the
        gradient."""
        C, anchors, mu = self.C, self.anchors, self.mu
        lv = losses.detach().double()
        if anchors is not None:
            sq = sum((params[n] - anchors[n]).square().flatten(1).sum(1) for n in self.names)
            lv = lv + (mu.double() / 2) * sq.double()
        for n in self.names:
            p, g = params[n], grads[n]
            if g is None:
                continue
            if anchors is not None:
                g = g + self.bcast(mu, g, C) * (p - anchors[n])
            if self.corrections is not None:
                g = g + self.corrections[n]
            if self.weight_decay != 0:
                g = g.add(p, alpha=self.weight_decay)
            keep = self.bcast(active, p, C)
            if self.momentum != 0:
                m = self.M[n].mul(self.momentum).add(g)
                self.M[n].copy_(torch.where(keep, m, self.M[n]))
                g = m
            p.copy_(torch.where(keep, p - self.bcast(self.lr, g, C) * g, p))
        return lv


class _FixedStep:
    """A step of :func:`local_update_many` at one fixed shape: all ``C`` rows of the stack and
    batches of ``width`` samples, in buffers the step's inputs are copied into. The rows of
    clients without steps left are computed and discarded (``active`` false: their parameters,
    momentum and summed loss are kept by a select, exactly); a short batch's padding weighs 0,
    as in the unpadded step. Momentum starts from zero buffers, so the first step's buffer is
    the gradient, as the per-client loop's. On CUDA the step is captured once as a CUDA graph
    (after a warm-up with no row active, which changes nothing) and replayed."""

    def __init__(self, forward, update: _Update, P, total, width: int, device: torch.device):
        self.forward, self.update, self.P, self.total = forward, update, P, total
        self.width, self.device = width, device
        self.C = update.C
        for p in P.values():
            p.requires_grad_(True)  # the stack is the step's leaf: updated in place
        self.active = torch.zeros(self.C, dtype=torch.bool, device=device)
        self.counts = torch.ones(self.C, device=device)
        self.weight = torch.zeros(self.C, width, device=device)
        self.x: torch.Tensor | None = None
        self.graph = None

    def __call__(self, step: int, A: int, x, y, weight, counts) -> None:
        if self.x is None:  # the buffers take the first batch's sample shape and dtypes
            self.x = x.new_zeros((self.C, self.width, *x.shape[2:]))
            self.y = y.new_zeros((self.C, self.width))
        w = x.shape[1]
        self.x[:A, :w].copy_(x)
        self.y[:A, :w].copy_(y)
        self.weight.zero_()
        self.weight[:A, :w].copy_(weight)
        self.counts.fill_(1.0)
        self.counts[:A].copy_(counts)
        self.active.zero_()
        self.active[:A] = True
        if self.device.type != "cuda":
            self._step()
            return
        if self.graph is None:
            self.graph = self._capture()
        if self.graph is False:  # the capture failed: the same step, launched from Python
            self._step()
        else:
            self.graph.replay()

    def _capture(self):
        """The step as a CUDA graph, or False where capturing it failed (a warning says why;
        the step then runs as it is, with the same kernels and numbers)."""
        active = self.active.clone()
        self.active.zero_()  # the warm-up and the capture change nothing
        try:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(2):
                    self._step()
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._step()
        except RuntimeError as err:
            import warnings

            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            warnings.warn(f"engine.vectorize_graphs: no CUDA graph ({first})", stacklevel=2)
            graph = False
        self.active.copy_(active)
        return graph

    def _step(self) -> None:
        params = self.P
        losses, grads = _losses_and_grads(
            self.forward, params, self.x, self.y, self.weight, self.counts
        )
        with torch.no_grad():
            lv = self.update.fixed(params, grads, losses, self.active)
            self.total.copy_(torch.where(self.active, self.total + lv, self.total))


def _results(layout, requests, streams, order, P, total) -> list[LocalResult]:
    """Each request's Δ = w_local − w, mean loss, steps and finiteness, in request order."""
    C = len(requests)
    results: list[LocalResult | None] = [None] * C
    with torch.no_grad():
        flat = torch.cat([P[s.name].reshape(C, -1) for s in layout.tensors], dim=1).cpu()
    for c, (r, v) in enumerate(zip(requests, total.tolist(), strict=True)):
        delta = flat[c] - r.w.to(torch.float32)
        ok = math.isfinite(v) and bool(torch.isfinite(delta).all())
        steps = streams[c].steps
        results[order[c]] = LocalResult(delta, v / max(steps, 1), steps, ok)
    return results  # type: ignore[return-value]


def _step_batch(
    batches: list[np.ndarray],
    aug: list[torch.Generator],
    data: ArraySplit,
    info: DatasetInfo,
    augment: str,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step's inputs for the active clients: images (A, width, ...) and labels (A, width),
    each client's batch padded to the step's widest with weight 0, and the real counts (A,).

    All the step's samples are gathered and normalised at once (on an accelerator from its copy
    of the data). Without augmentation a short batch is padded with repeats of its first
    sample, so the gather is the stack itself; a padded sample's loss is weighted exactly 0,
    so its gradient is exactly 0. With augmentation each client's real samples are augmented
    from its own stream, in row order, and placed into zeros."""
    lens = [len(b) for b in batches]
    A, width = len(batches), max(lens)
    counts = torch.tensor([float(k) for k in lens])
    weight = (torch.arange(width)[None, :] < torch.tensor(lens)[:, None]).to(torch.float32)
    moved = weight.to(device, non_blocking=True), counts.to(device, non_blocking=True)
    if augment != "crop_flip":
        idx = np.empty((A, width), dtype=np.int64)
        for a, b in enumerate(batches):
            idx[a, : len(b)] = b
            idx[a, len(b) :] = b[0]
        xs, ys = batch_images(data, idx.ravel(), info, device)
        return xs.view(A, width, *xs.shape[1:]), ys.view(A, width), *moved
    xs, ys = batch_images(data, np.concatenate(batches), info, device)
    bounds = np.cumsum([0, *lens])
    xs = torch.cat([crop_flip(xs[bounds[a] : bounds[a + 1]], aug[a]) for a in range(A)])
    if width * A == len(xs):  # no padding: the gathered rows are the stack
        return xs.view(A, width, *xs.shape[1:]), ys.view(A, width), *moved
    x = xs.new_zeros((A, width, *xs.shape[1:]))
    y = ys.new_zeros((A, width))
    mask = moved[0].bool()
    x[mask] = xs
    y[mask] = ys
    return x, y, *moved
