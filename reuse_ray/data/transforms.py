"""Batch transforms: stored arrays -> normalised float tensors, and keyed CIFAR augmentation.

Augmentation (random crop with 4-pixel zero padding and horizontal flip; methods: The paper's
protocol) draws its offsets and flips from a torch.Generator of the keyed ``augment`` stream
(design: Keyed streams and pairing), so every method sees the same augmented images for a given
(seed, round, client).
"""

from __future__ import annotations

import weakref

import numpy as np
import torch

from .registry import ArraySplit, DatasetInfo


def to_tensor(x: np.ndarray, info: DatasetInfo) -> torch.Tensor:
    """Stored images (B, C, H, W) -> normalised float32 tensor."""
    return normalize(torch.from_numpy(np.ascontiguousarray(x)), info)


def normalize(t: torch.Tensor, info: DatasetInfo) -> torch.Tensor:
    """Stored values (any dtype, any device) -> normalised float32, on ``t``'s device.

    Elementwise (scale, subtract, divide) in float32, so the host and an accelerator give the
    same bits. The result has the standard (N, C, H, W) strides whatever the stored array's:
    a one-channel array transposed from (N, H, W, 1) counts as contiguous with strides
    (HW, 1, W, 1), which a convolution may read through another kernel than the same values
    with strides (HW, HW, W, 1) after a trip through the object store (the last bits of the
    test loss then differed between the engines)."""
    t = t.to(torch.float32, memory_format=torch.contiguous_format)
    if info.scale != 1.0:
        t = t * info.scale
    mean = torch.tensor(info.mean, dtype=torch.float32, device=t.device).view(1, -1, 1, 1)
    std = torch.tensor(info.std, dtype=torch.float32, device=t.device).view(1, -1, 1, 1)
    return (t - mean) / std


# accelerator copies of stored arrays, keyed by (id(array), device); an entry leaves when
# its array is collected
_ON_DEVICE: dict[tuple[int, str], torch.Tensor] = {}


def on_device(a: np.ndarray, device: torch.device) -> torch.Tensor:
    """A stored array (images in their stored dtype, or labels) on ``device``, copied once per
    array and device: a worker on an accelerator gathers its batches there instead of copying
    every batch from the host."""
    key = (id(a), str(device))
    t = _ON_DEVICE.get(key)
    if t is None:
        t = torch.from_numpy(np.array(a, copy=True)).to(device)
        _ON_DEVICE[key] = t
        weakref.finalize(a, _ON_DEVICE.pop, key, None)
    return t


def batch_images(
    data: ArraySplit, idx: np.ndarray | slice, info: DatasetInfo, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised images and labels of the samples ``idx`` (indices or a slice) on ``device``.

    On the CPU the rows are gathered from the stored arrays; on an accelerator from their copy
    there (:func:`on_device`), so only the indices cross. The values are the same either way."""
    if device.type == "cpu":
        return to_tensor(data.x[idx], info), torch.from_numpy(data.y[idx])
    if isinstance(idx, slice):
        idx = np.arange(*idx.indices(len(data)))
    sel = torch.from_numpy(np.asarray(idx, dtype=np.int64)).to(device)
    x = normalize(on_device(data.x, device).index_select(0, sel), info)
    return x, on_device(data.y, device).index_select(0, sel)


def crop_flip(x: torch.Tensor, gen: torch.Generator, pad: int = 4) -> torch.Tensor:
    """Random crop after zero padding, then a horizontal flip with probability 1/2.

    The offsets (B×2 draws in [0, 2·pad]) and then the flips (B uniform draws < 1/2) come from
    ``gen`` (on the CPU); the crop itself is one gather, on ``x``'s device."""
    b, c, h, w = x.shape
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    offs = torch.randint(0, 2 * pad + 1, (b, 2), generator=gen)
    flips = torch.rand(b, generator=gen) < 0.5
    rows = offs[:, :1] + torch.arange(h)  # (B, H): row oy + i
    cols = offs[:, 1:] + torch.arange(w)  # (B, W): column ox + j, or ox + W-1-j when flipped
    cols = torch.where(flips[:, None], cols.flip(1), cols)
    dev = x.device
    return padded[
        torch.arange(b, device=dev)[:, None, None, None],
        torch.arange(c, device=dev)[None, :, None, None],
        rows.to(dev)[:, None, :, None],
        cols.to(dev)[:, None, None, :],
    ]
