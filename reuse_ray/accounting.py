"""Byte ledgers (design: Ledgers).

Two ledgers are kept side by side for every round and client:

1. the seed's **restricted** ledger: Top-K field bytes per fresh uplink (R9), 16 B per reused
   event (R10), and the dense-downlink **sensitivity** of one B0 per selected client (R11);
2. the **measured** ledger: the length of every serialized message that crosses the wire, both
   ways (headers, indices, bitmaps and values; see ``codecs.encode``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .codecs import SparseUpdate, field_bytes
from .state import StateLayout

REUSE_CHARGE_BYTES = 16  # the seed's fixed per-reuse uplink convention (R10)


def restricted_bytes_of(update: SparseUpdate, layout: StateLayout) -> int:
    """Field-model bytes of an update as sent: B0 if dense, else Σ_tensors B(d, k_tensor)."""
    if update.is_dense:
        return layout.dense_bytes
    idx = update.indices.numpy()
    bounds = np.searchsorted(idx, [s.offset for s in layout.tensors] + [layout.dim])
    return sum(
        field_bytes(s.numel, int(bounds[j + 1] - bounds[j])) for j, s in enumerate(layout.tensors)
    )


def state_nbytes(obj: object) -> int:
    """Bytes of the tensors and scalars in a (nested) state object: tensors by their storage,
    Python numbers as 8 bytes."""
    if obj is None:
        return 0
    if hasattr(obj, "element_size") and hasattr(obj, "numel"):
        return int(obj.numel() * obj.element_size())
    if isinstance(obj, dict):
        return sum(state_nbytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(state_nbytes(v) for v in obj)
    if isinstance(obj, int | float):
        return 8
    return 0


def saving(up: int, reference: int) -> float:
    """s = 1 − U / (m B0): the restricted uplink saving against dense uplink."""
    return 1.0 - up / reference if reference else float("nan")


def bidirectional_saving(up: int, down: int, reference: int) -> float:
    """s_bi = 1 − (U + D) / (2 m B0), the dense-downlink sensitivity saving (R11)."""
    return 1.0 - (up + down) / (2 * reference) if reference else float("nan")


@dataclass(frozen=True)
class RoundBytes:
    """One round's totals in both ledgers."""

    up_restricted: int = 0
    down_sensitivity: int = 0
    dense_reference: int = 0
    up_measured: int = 0
    down_measured: int = 0

    def __add__(self, other: RoundBytes) -> RoundBytes:
        return RoundBytes(
            self.up_restricted + other.up_restricted,
            self.down_sensitivity + other.down_sensitivity,
            self.dense_reference + other.dense_reference,
            self.up_measured + other.up_measured,
            self.down_measured + other.down_measured,
        )

    @property
    def saving_restricted(self) -> float:
        return saving(self.up_restricted, self.dense_reference)

    @property
    def saving_bidirectional(self) -> float:
        return bidirectional_saving(self.up_restricted, self.down_sensitivity, self.dense_reference)
