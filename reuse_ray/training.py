"""Local training ``ClientUpdate`` and evaluation (methods: Conventions).

One function, :func:`local_update`, serves every method: SGD with momentum and weight decay from a
fresh optimizer, the optional FedProx proximal term μ (methods: FedProx), an optional
per-parameter gradient correction (methods: SCAFFOLD) and train-mode augmentation, with shuffles
and augmentation drawn from the keyed streams ``train_shuffle`` and ``augment`` of (seed, round,
client) (design: Keyed streams and pairing).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from .data.registry import ArraySplit, DatasetInfo
from .data.transforms import batch_images, crop_flip
from .engine.records import combine_batches
from .rng import Purpose, torch_generator
from .state import StateLayout


@dataclass(frozen=True)
class LocalResult:
    """What one client's local training produced."""

    delta: torch.Tensor  # Δ = w_local − w (fp32, flat)
    mean_loss: float  # mean training loss over all local steps
    steps: int  # optimizer steps taken
    finite: bool  # False when a loss or the update became non-finite


def configure_determinism(threads: int) -> None:
    """Fixed thread count and deterministic kernels, so results do not depend on the machine."""
    torch.set_num_threads(threads)
    deterministic_kernels()
    torch.backends.cudnn.benchmark = False


def deterministic_kernels() -> None:
    """``torch.use_deterministic_algorithms(True, warn_only=True)`` for eager execution.

    The public call also sets the compiler's (inductor's) flag, and importing that config
    imports torch's compiler stack (dynamo, triton): about 150 MB and half a second in every
    process that trains. Nothing here compiles, so the eager switch alone is set where torch
    exposes it; the public call is the fallback."""
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None:  # pragma: no cover - a torch without the eager switch
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        setter(True, warn_only=True)


def _autocast(device: torch.device, amp: bool):
    if amp and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.float16)
    return contextlib.nullcontext()


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def batch_starts(n: int, batch_size: int, merge_singleton: bool) -> list[tuple[int, int]]:
    """(start, stop) of each mini-batch, drop_last=False.

    BatchNorm cannot train on a batch of one sample, so with ``merge_singleton`` a trailing
    one-sample batch joins the batch before it [CHOICE]; otherwise batches are plain slices.
    """
    spans = [(s, min(s + batch_size, n)) for s in range(0, n, batch_size)]
    if merge_singleton and len(spans) > 1 and spans[-1][1] - spans[-1][0] == 1:
        spans[-2:] = [(spans[-2][0], n)]
    return spans


def _move(model: nn.Module, device: torch.device | str) -> None:
    """``model.to(device)`` unless it is already there (``Module.to`` walks every tensor)."""
    device = torch.device(device)
    current = next(model.parameters()).device
    if current.type != device.type or (device.index is not None and current != device):
        model.to(device)


def _load(
    model: nn.Module,
    layout: StateLayout,
    w: torch.Tensor,
    int_buffers: dict[str, torch.Tensor],
    device: torch.device,
) -> None:
    """Load w (floats) and the server's integer buffers into the model, then move it."""
    layout.load(model, w)
    sd = model.state_dict()
    with torch.no_grad():
        for name, buf in int_buffers.items():
            sd[name].copy_(buf)
    _move(model, device)


def _batch(
    data: ArraySplit,
    batch: np.ndarray,
    info: DatasetInfo,
    augment: str,
    gen: torch.Generator,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One training mini-batch: normalised images (augmented from ``gen``) and labels."""
    x, y = batch_images(data, batch, info, device)
    if augment == "crop_flip":
        x = crop_flip(x, gen)
    return x, y


class HeavyBallSGD:
    """``torch.optim.SGD(params, lr, momentum, weight_decay)`` (no dampening, no Nesterov): the
    operations of its single-tensor path in the same order, so the same bits (the golden runs
    check it). torch's optimizers import its compiler stack (dynamo, triton: ~150 MB and half a
    second) on first use in every process; a client worker needs only this update."""

    def __init__(self, params: list[torch.Tensor], lr: float, momentum: float, weight_decay: float):
        self.params, self.lr, self.momentum, self.weight_decay = params, lr, momentum, weight_decay
        self.buffers: list[torch.Tensor | None] = [None] * len(params)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            grad = p.grad
            if self.weight_decay != 0:
                grad = grad.add(p, alpha=self.weight_decay)
            if self.momentum != 0:
                buf = self.buffers[i]
                if buf is None:
                    buf = self.buffers[i] = grad.detach().clone()
                else:
                    buf.mul_(self.momentum).add_(grad, alpha=1)
                grad = buf
            p.add_(grad, alpha=-self.lr)


def local_update(
    model: nn.Module,
    layout: StateLayout,
    w: torch.Tensor,
    int_buffers: dict[str, torch.Tensor],
    data: ArraySplit,
    indices: np.ndarray,
    info: DatasetInfo,
    *,
    seed: int,
    round_: int,
    client: int,
    epochs: int,
    batch_size: int,
    lr: float,
    momentum: float,
    weight_decay: float,
    mu: float = 0.0,
    correction: dict[str, torch.Tensor] | None = None,
    augment: str = "none",
    amp: bool = True,
    device: torch.device | str = "cpu",
) -> LocalResult:
    """ClientUpdate(i, w, μ, correction) (methods: Conventions); returns Δ = w_local − w, fp32."""
    device = torch.device(device)
    _load(model, layout, w, int_buffers, device)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    scaler = torch.amp.GradScaler("cuda") if (amp and device.type == "cuda") else None
    opt: Any = (
        torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
        if scaler is not None  # the scaler steps torch's optimizers
        else HeavyBallSGD(params, lr, momentum, weight_decay)
    )
    step = _Step(model, opt, scaler, params, mu, correction, device, amp)
    shuffle_gen = torch_generator(seed, Purpose.TRAIN_SHUFFLE, round_, client)
    aug_gen = torch_generator(seed, Purpose.AUGMENT, round_, client)
    n = len(indices)
    starts = batch_starts(n, batch_size, has_batchnorm(model))
    # the losses are summed on the device in float64 (no synchronisation per step); a
    # non-finite loss leaves the sum non-finite (cross-entropy is never negative)
    total = torch.zeros((), dtype=torch.float64, device=device)
    steps = 0
    for _ in range(epochs):
        perm = torch.randperm(n, generator=shuffle_gen).numpy()
        for start, stop in starts:
            batch = indices[perm[start:stop]]
            total += step(*_batch(data, batch, info, augment, aug_gen, device))
            steps += 1
    total_loss = float(total)
    _move(model, "cpu")
    delta = layout.flatten(model) - w
    finite = math.isfinite(total_loss) and bool(torch.isfinite(delta).all())
    return LocalResult(delta, total_loss / max(steps, 1), steps, finite)


class _Step:
    """One local SGD step of :func:`local_update` on a batch: the loss's gradient, FedProx's
    proximal gradient ``μ(w − w_t)`` and a control-variate correction added to it, then the
    optimizer's step; returns the batch's loss (with the proximal term) in float64."""

    def __init__(self, model, opt, scaler, params, mu, correction, device, amp):
        self.model, self.opt, self.scaler, self.params = model, opt, scaler, params
        self.mu, self.device, self.amp = mu, device, amp
        self.anchors = [p.detach().clone() for p in params] if mu > 0 else None
        self.named = dict(model.named_parameters())
        # moved once, not every step
        self.correction = (
            None if correction is None else {k: c.to(device) for k, c in correction.items()}
        )

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt, scaler, params = self.opt, self.scaler, self.params
        opt.zero_grad(set_to_none=True)
        with _autocast(self.device, self.amp):
            loss = nn.functional.cross_entropy(self.model(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
        else:
            loss.backward()
        lv = loss.detach().double()
        if self.anchors is not None:
            # FedProx term (μ/2)·‖w − w_t‖²: its gradient μ·(w − w_t) is added directly
            # instead of through autograd (the same values, without a graph over every
            # parameter); the reported loss includes the term
            with torch.no_grad():
                diffs = torch._foreach_sub(params, self.anchors)
                sq = torch.stack(torch._foreach_norm(diffs)).square().sum()
                lv = lv + (self.mu / 2) * sq.double()
                torch._foreach_mul_(diffs, self.mu)
                torch._foreach_add_([p.grad for p in params], diffs)
        if self.correction is not None:
            for name, c in self.correction.items():
                self.named[name].grad.add_(c)
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        return lv


EVAL_CHUNK = 128  # samples per forward of a CPU evaluation (see :func:`evaluate`)


@torch.no_grad()
def evaluate_batches(
    model: nn.Module,
    layout: StateLayout,
    w: torch.Tensor,
    split: ArraySplit,
    info: DatasetInfo,
    batch_size: int = 1024,
    device: torch.device | str = "cpu",
    batches: range | None = None,
) -> list[tuple[int, float]]:
    """(correct predictions, summed cross-entropy) of state ``w`` on each evaluation batch of
    ``split`` in ``batches`` (indices of batches of ``batch_size``; default: all), in eval mode.

    On a CPU each batch's forward runs in chunks of at most :data:`EVAL_CHUNK` samples, whose
    activations stay in cache (faster than whole batches of 1,024 at one thread); the logits
    are concatenated, so the batch's loss is reduced as one. In eval mode a sample's logits do
    not depend on the other samples of its batch; the golden digests and the Ray-equals-local
    tests check the bits."""
    device = torch.device(device)
    layout.load(model, w)
    _move(model, device)
    model.eval()
    chunk = min(batch_size, EVAL_CHUNK) if device.type == "cpu" else batch_size
    if batches is None:
        batches = range(-(-len(split) // batch_size))
    out_parts: list[tuple[int, float]] = []
    for b in batches:
        start = b * batch_size
        x, y = batch_images(split, slice(start, start + batch_size), info, device)
        if chunk < len(x):
            out = torch.cat([model(x[k : k + chunk]) for k in range(0, len(x), chunk)]).float()
        else:
            out = model(x).float()
        out_parts.append(
            (
                int((out.argmax(1) == y).sum()),
                float(nn.functional.cross_entropy(out, y, reduction="sum")),
            )
        )
    _move(model, "cpu")
    return out_parts


def evaluate(
    model: nn.Module,
    layout: StateLayout,
    w: torch.Tensor,
    split: ArraySplit,
    info: DatasetInfo,
    batch_size: int = 1024,
    device: torch.device | str = "cpu",
) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of state ``w`` on ``split``, in eval mode; losses are
    summed per batch of ``batch_size`` (``train.eval_batch_size``), see
    :func:`evaluate_batches`."""
    parts = evaluate_batches(model, layout, w, split, info, batch_size, device)
    return combine_batches(parts, len(split))


def head_proxy(
    model: nn.Module,
    layout: StateLayout,
    w: torch.Tensor,
    int_buffers: dict[str, torch.Tensor],
    data: ArraySplit,
    indices: np.ndarray,
    info: DatasetInfo,
    head_names: list[str],
    *,
    seed: int,
    round_: int,
    client: int,
    purpose: Purpose,
    max_batches: int = 5,
    batch_size: int = 64,
    augment: str = "none",
    mode: str = "train",
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """HeadProxy(i, w, stream) (methods: DG-FedReuse): summed head gradients over at most
    ``max_batches`` batches.

    The model is loaded with ``w`` (and the server's integer buffers) before the passes and is
    reloaded before any later use, so it acts as the scratch copy: train-mode BatchNorm updates
    never reach the global state. Shuffle and augmentation come from the keyed ``purpose``
    stream (``proxy_gate`` or ``proxy_refresh``) of (seed, round, client).
    """
    device = torch.device(device)
    _load(model, layout, w, int_buffers, device)
    model.train(mode == "train")
    model.zero_grad(set_to_none=True)
    # only the head's gradient is needed: backward stops at the head (same values, less work)
    heads = set(head_names)
    frozen = [p for n, p in model.named_parameters() if n not in heads and p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        gen = torch_generator(seed, purpose, round_, client)
        n = len(indices)
        perm = torch.randperm(n, generator=gen).numpy()
        train_bn = mode == "train" and has_batchnorm(model)
        for start, stop in batch_starts(n, batch_size, train_bn)[:max_batches]:
            batch = indices[perm[start:stop]]
            x, y = _batch(data, batch, info, augment, gen, device)
            nn.functional.cross_entropy(model(x), y).backward()
        named = dict(model.named_parameters())
        out = torch.cat([named[n].grad.detach().reshape(-1).float().cpu() for n in head_names])
    finally:
        model.zero_grad(set_to_none=True)
        for p in frozen:
            p.requires_grad_(True)
    _move(model, "cpu")
    return out
