"""The per-client memory bank shared by the stale-update methods (methods: MIFA,
FedVARP and FedStale,
methods: EF21-PP, LAQ).

Methods that keep one d-float memory y_i per client (MIFA, FedVARP/FedStale, EF21-PP, LAQ) hold
them in a :class:`MemoryBank`: the memories in a :class:`~reuse_ray.algorithms.table.ClientTable`
and their weighted sum Σ_j a_j y_j, kept incrementally (the spec's "efficient form"), so a round
touches only the memories of the clients that took part. Every such method is written in the
update convention Δ = w_local − w_t (the spec's pseudo-gradient is g = −Δ, so ``w − η g``
becomes ``w + η Δ``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..lazy import torch
from .table import ClientTable


@dataclass(frozen=True)
class MemoryBank:
    """Per-client memories y_i and their weighted sum Σ_j a_j y_j."""

    memories: ClientTable
    total: torch.Tensor

    @classmethod
    def empty(cls, dim: int) -> MemoryBank:
        return cls(ClientTable.empty(), torch.zeros(dim, dtype=torch.float32))

    def get(self, i: int) -> torch.Tensor | None:
        return self.memories.get(i)

    def updated(self, new: Mapping[int, torch.Tensor], a: Mapping[int, float]) -> MemoryBank:
        """y_i ← new_i for the given clients; Σ a_j y_j += a_i (new_i − old_i), in id order."""
        total = self.total.clone()
        for i in sorted(new):
            old = self.get(i)
            total.add_(new[i] if old is None else new[i] - old, alpha=a[i])
        return MemoryBank(self.memories.updated(new), total)

    def nbytes(self) -> int:
        """4·d per memory, plus the running sum."""
        return 4 * self.total.numel() * (len(self.memories) + 1)
