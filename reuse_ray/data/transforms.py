"""Batch transforms: stored arrays -> normalised float tensors, and keyed CIFAR augmentation.

Augmentation (random crop with 4-pixel zero padding + horizontal flip, ALGORITHMS.md §4.1) draws
its offsets and flips from a torch.Generator of the keyed ``augment`` stream (§1.6), so every
method sees the same augmented images for a given (seed, round, client).
"""

from __future__ import annotations

import numpy as np
import torch

from .registry import DatasetInfo


def to_tensor(x: np.ndarray, info: DatasetInfo) -> torch.Tensor:
    """Stored images (B, C, H, W) -> normalised float32 tensor."""
    t = torch.from_numpy(np.ascontiguousarray(x)).to(torch.float32)
    if info.scale != 1.0:
        t = t * info.scale
    mean = torch.tensor(info.mean, dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.tensor(info.std, dtype=torch.float32).view(1, -1, 1, 1)
    return (t - mean) / std


def crop_flip(x: torch.Tensor, gen: torch.Generator, pad: int = 4) -> torch.Tensor:
    """Random crop after zero padding, then a horizontal flip with probability 1/2."""
    b, _, h, w = x.shape
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    offs = torch.randint(0, 2 * pad + 1, (b, 2), generator=gen)
    flips = torch.rand(b, generator=gen) < 0.5
    out = torch.empty_like(x)
    for j in range(b):
        oy, ox = int(offs[j, 0]), int(offs[j, 1])
        img = padded[j, :, oy : oy + h, ox : ox + w]
        out[j] = img.flip(-1) if bool(flips[j]) else img
    return out
