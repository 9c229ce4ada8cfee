"""Per-tensor Top-K sparsification and the wire format of the measured ledger (design: Ledgers).

* ``topk_count``: k = max(1, ⌊r·d⌋) in exact rational arithmetic (R8); ``rounding="ceil"`` is the
  recorded alternative.
* ``field_bytes``: the seed's restricted field model B(d) = min(dense, COO, bitmap) (R9).
* ``topk_sparsify``: keeps the k largest |x| of every state tensor, ties broken by lower flat index
  (methods: FedAvg and the Top-K control); r = 1 returns the update unchanged (dense).
* ``encode`` / ``decode``: a real byte layout (headers + the cheapest of dense / COO / bitmap per
  tensor, the same choice as the field model), whose length is what the measured ledger records.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .lazy import torch
from .state import StateLayout

VALUE_BYTES = 4
INDEX_BYTES = 4
MODE_DENSE, MODE_COO, MODE_BITMAP = 0, 1, 2
MAGIC = b"RR"
WIRE_VERSION = 1
# magic, version, kind, round, client, num_samples, num_tensors
_MSG_HEADER = struct.Struct("<2sBBIiIH")
# tensor id, mode, numel, k
_TENSOR_HEADER = struct.Struct("<HBII")
KIND_UPDATE, KIND_MODEL, KIND_PROXY, KIND_LAQ, KIND_SKIP, KIND_CONTROL = 1, 2, 3, 4, 5, 6
_LAQ_HEADER = struct.Struct("<fB")  # radius R (fp32), bits b


def topk_count(d: int, r: float, rounding: str = "floor") -> int:
    """k = max(1, ⌊r·d⌋) with r read as an exact decimal (never float floor)."""
    frac = Fraction(str(r)) * d
    k = math.floor(frac) if rounding == "floor" else math.ceil(frac)
    return max(1, min(d, k))


def field_bytes(d: int, k: int, b: int = VALUE_BYTES) -> int:
    """B(d) = min(b·d, k·(b+4), ⌈d/8⌉ + b·k): the seed's per-tensor field model (R9)."""
    return min(b * d, k * (b + INDEX_BYTES), -(-d // 8) + b * k)


def field_mode(d: int, k: int, b: int = VALUE_BYTES) -> int:
    """Which layout attains B(d): dense, COO or bitmap (dense wins ties, then COO)."""
    sizes = (b * d, k * (b + INDEX_BYTES), -(-d // 8) + b * k)
    return int(np.argmin(sizes))


def restricted_update_bytes(layout: StateLayout, r: float) -> int:
    """Σ_tensors B(d, r): the restricted uplink of one fresh Top-K update (r = 1 ⇒ B0)."""
    if r >= 1.0:
        return layout.dense_bytes
    return sum(field_bytes(s.numel, topk_count(s.numel, r)) for s in layout.tensors)


def topk_select(x: torch.Tensor, k: int) -> torch.Tensor:
    """Sorted indices of the k largest |x|; among equal magnitudes the lower index wins."""
    a = x.abs()
    if k >= a.numel():
        return torch.arange(a.numel())
    thr = torch.topk(a, k, sorted=False).values.min()
    above = torch.nonzero(a > thr).flatten()
    ties = torch.nonzero(a == thr).flatten()[: k - above.numel()]
    return torch.sort(torch.cat([above, ties])).values


@dataclass(frozen=True)
class SparseUpdate:
    """A per-tensor Top-K update as global flat indices (sorted) and fp32 values.

    ``indices is None`` means the update is dense and ``values`` holds all d entries.
    """

    dim: int
    indices: torch.Tensor | None
    values: torch.Tensor

    @property
    def is_dense(self) -> bool:
        return self.indices is None

    def to_dense(self) -> torch.Tensor:
        if self.indices is None:
            return self.values
        out = torch.zeros(self.dim, dtype=torch.float32)
        out[self.indices] = self.values
        return out

    def add_into(self, acc: torch.Tensor, weight: float) -> None:
        """acc += weight · self, in place, touching only the kept coordinates."""
        if self.indices is None:
            acc.add_(self.values, alpha=weight)
        else:
            acc.index_add_(0, self.indices, self.values * weight)

    def memory_bytes(self) -> int:
        """Bytes held by this object's tensors."""
        n = self.values.numel() * self.values.element_size()
        if self.indices is not None:
            n += self.indices.numel() * self.indices.element_size()
        return n


def topk_sparsify(delta: torch.Tensor, layout: StateLayout, r: float) -> SparseUpdate:
    """Per-tensor Top-K at keep ratio r; r = 1 returns the update itself, bit-exactly."""
    delta = delta.to(torch.float32)
    if r >= 1.0:
        return SparseUpdate(layout.dim, None, delta)
    parts = []
    for s in layout.tensors:
        seg = delta[s.offset : s.offset + s.numel]
        parts.append(topk_select(seg, topk_count(s.numel, r)) + s.offset)
    idx = torch.cat(parts)
    return SparseUpdate(layout.dim, idx, delta[idx].clone())


def error_feedback_step(
    delta: torch.Tensor, error: torch.Tensor | None, layout: StateLayout, r: float
) -> tuple[SparseUpdate, torch.Tensor]:
    """Fed-EF (methods: Fed-EF): p = Δ + e, c = TopK_r(p), e' = p − c; returns (c, e').

    c + e' equals p exactly (kept coordinates give p − p = 0, the rest p − 0); with r = 1,
    c = p and e' stays 0.
    """
    p = delta.to(torch.float32) if error is None else delta.to(torch.float32) + error
    c = topk_sparsify(p, layout, r)
    if c.is_dense:
        return c, torch.zeros_like(p)
    e = p.clone()
    e[c.indices] = 0.0
    return c, e


# --------------------------------------------------------------------------- wire format


def tensor_payloads(update: SparseUpdate, layout: StateLayout) -> list[tuple[int, int, bytes]]:
    """Per tensor: (mode, k, payload) in the cheapest layout; payload length is B(d, k)."""
    out: list[tuple[int, int, bytes]] = []
    if update.is_dense:
        dense = update.values.numpy()
        for s in layout.tensors:
            out.append(
                (MODE_DENSE, s.numel, dense[s.offset : s.offset + s.numel].astype("<f4").tobytes())
            )
        return out
    idx_all = update.indices.numpy()
    val_all = update.values.numpy()
    bounds = np.searchsorted(idx_all, [s.offset for s in layout.tensors] + [layout.dim])
    for tid, s in enumerate(layout.tensors):
        lo, hi = bounds[tid], bounds[tid + 1]
        local = (idx_all[lo:hi] - s.offset).astype(np.int64)
        vals = val_all[lo:hi]
        k = int(hi - lo)
        mode = field_mode(s.numel, k)
        if mode == MODE_DENSE:
            seg = np.zeros(s.numel, dtype="<f4")
            seg[local] = vals
            payload = seg.tobytes()
        elif mode == MODE_COO:
            payload = local.astype("<i4").tobytes() + vals.astype("<f4").tobytes()
        else:
            bits = np.zeros(s.numel, dtype=bool)
            bits[local] = True
            payload = np.packbits(bits, bitorder="little").tobytes() + vals.astype("<f4").tobytes()
        out.append((mode, k, payload))
    return out


def encode(
    update: SparseUpdate,
    layout: StateLayout,
    *,
    kind: int = KIND_UPDATE,
    round_: int = 0,
    client: int = -1,
    num_samples: int = 0,
    skip: tuple[int, ...] = (),
) -> bytes:
    """Serialise an update (or a dense model) to bytes, per tensor in its cheapest layout.

    Tensor ids in ``skip`` are not sent at all (FedLUAR's recycled layers); the decoded update
    then has no entries there.
    """
    skipped = set(skip)
    chunks = [
        _MSG_HEADER.pack(
            MAGIC,
            WIRE_VERSION,
            kind,
            round_,
            client,
            num_samples,
            len(layout.tensors) - len(skipped & set(range(len(layout.tensors)))),
        )
    ]
    for tid, ((mode, k, payload), s) in enumerate(
        zip(tensor_payloads(update, layout), layout.tensors, strict=True)
    ):
        if tid in skipped:
            continue
        chunks.append(_TENSOR_HEADER.pack(tid, mode, s.numel, k))
        chunks.append(payload)
    return b"".join(chunks)


def _read_tensor(
    blob: bytes | memoryview, pos: int, mode: int, numel: int, k: int, offset: int
) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """Parse one tensor payload at ``pos``: (global indices, values, new pos, is_full_dense)."""
    if mode == MODE_DENSE:
        seg = np.frombuffer(blob, dtype="<f4", count=numel, offset=pos)
        pos += 4 * numel
        if k == numel:
            return np.arange(numel, dtype=np.int64) + offset, seg, pos, True
        nz = np.flatnonzero(seg)
        # a dense-layout sparse tensor keeps exactly k entries; zeros among them are the
        # lowest-index zeros, as Top-K's tie rule picked them
        keep = np.sort(np.concatenate([nz, np.flatnonzero(seg == 0)[: k - len(nz)]]))
        return keep + offset, seg[keep], pos, False
    if mode == MODE_COO:
        local = np.frombuffer(blob, dtype="<i4", count=k, offset=pos).astype(np.int64)
        pos += 4 * k
        vals = np.frombuffer(blob, dtype="<f4", count=k, offset=pos)
        return local + offset, vals, pos + 4 * k, False
    nbytes = -(-numel // 8)
    bits = np.unpackbits(
        np.frombuffer(blob, dtype=np.uint8, count=nbytes, offset=pos), bitorder="little"
    )[:numel]
    pos += nbytes
    vals = np.frombuffer(blob, dtype="<f4", count=k, offset=pos)
    return np.flatnonzero(bits).astype(np.int64) + offset, vals, pos + 4 * k, False


def _assemble(
    layout: StateLayout, parts: list[tuple[np.ndarray, np.ndarray]], all_dense: bool
) -> SparseUpdate:
    values = torch.from_numpy(np.concatenate([v for _, v in parts]).astype(np.float32))
    if all_dense:
        return SparseUpdate(layout.dim, None, values)
    return SparseUpdate(layout.dim, torch.from_numpy(np.concatenate([i for i, _ in parts])), values)


@dataclass(frozen=True)
class PackedUpdate:
    """A sparse update stored compactly: per tensor its layout mode and k, and one payload.

    ``payload`` holds exactly the field model's bytes (bitmap or int32 indices, and fp32
    values), never a dense-shaped copy, so ``nbytes`` equals Σ_tensors B(d, k) (the DG-FedReuse
    cache).
    """

    modes: bytes
    counts: tuple[int, ...]
    payload: bytes

    @property
    def nbytes(self) -> int:
        return len(self.payload)


def pack(update: SparseUpdate, layout: StateLayout) -> PackedUpdate:
    parts = tensor_payloads(update, layout)
    return PackedUpdate(
        bytes(m for m, _, _ in parts), tuple(k for _, k, _ in parts), b"".join(p for *_, p in parts)
    )


def unpack(packed: PackedUpdate, layout: StateLayout) -> SparseUpdate:
    pos, parts, all_dense = 0, [], True
    for s, mode, k in zip(layout.tensors, packed.modes, packed.counts, strict=True):
        idx, vals, pos, full = _read_tensor(packed.payload, pos, mode, s.numel, k, s.offset)
        parts.append((idx, vals))
        all_dense &= full
    return _assemble(layout, parts, all_dense)


@dataclass(frozen=True)
class Decoded:
    kind: int
    round: int
    client: int
    num_samples: int
    update: SparseUpdate


def decode(blob: bytes, layout: StateLayout) -> Decoded:
    """Inverse of :func:`encode`."""
    magic, version, kind, round_, client, n, ntens = _MSG_HEADER.unpack_from(blob, 0)
    if magic != MAGIC or version != WIRE_VERSION:
        raise ValueError("not a reuse_ray wire message")
    pos = _MSG_HEADER.size
    if kind not in (KIND_UPDATE, KIND_MODEL, KIND_PROXY, KIND_CONTROL):
        raise ValueError(f"message kind {kind} is not an update; use decode_laq / message_kind")
    parts, all_dense = [], ntens == len(layout.tensors)
    for _ in range(ntens):
        tid, mode, numel, k = _TENSOR_HEADER.unpack_from(blob, pos)
        pos += _TENSOR_HEADER.size
        idx, vals, pos, full = _read_tensor(blob, pos, mode, numel, k, layout.tensors[tid].offset)
        parts.append((idx, vals))
        all_dense &= full
    if not parts:
        return Decoded(
            kind,
            round_,
            client,
            n,
            SparseUpdate(layout.dim, torch.zeros(0, dtype=torch.int64), torch.zeros(0)),
        )
    return Decoded(kind, round_, client, n, _assemble(layout, parts, all_dense))


def message_kind(blob: bytes) -> int:
    """The kind field of a wire message's header."""
    magic, version, kind, *_ = _MSG_HEADER.unpack_from(blob, 0)
    if magic != MAGIC or version != WIRE_VERSION:
        raise ValueError("not a reuse_ray wire message")
    return int(kind)


def encode_skip(round_: int, client: int, num_samples: int) -> bytes:
    """A lazy client's skip flag: the message header alone (LAQ, methods: LAQ)."""
    return _MSG_HEADER.pack(MAGIC, WIRE_VERSION, KIND_SKIP, round_, client, num_samples, 0)


def laq_payload_bytes(dim: int, bits: int) -> int:
    """The restricted bytes of one LAQ upload: 4 (radius R) + ⌈b·d/8⌉ (methods: LAQ)."""
    return 4 + -(-bits * dim // 8)


def encode_laq(
    radius: float, codes: torch.Tensor, bits: int, round_: int, client: int, num_samples: int
) -> bytes:
    """A LAQ upload: header, R as fp32, b, and the d codes packed at b bits each."""
    c = codes.numpy().astype(np.uint32)
    shifts = np.arange(bits, dtype=np.uint32)
    bit_matrix = ((c[:, None] >> shifts) & 1).astype(bool)  # little-endian bits per code
    packed = np.packbits(bit_matrix.reshape(-1), bitorder="little").tobytes()
    return (
        _MSG_HEADER.pack(MAGIC, WIRE_VERSION, KIND_LAQ, round_, client, num_samples, 0)
        + _LAQ_HEADER.pack(radius, bits)
        + packed
    )


def decode_laq(blob: bytes, dim: int) -> tuple[float, torch.Tensor, int]:
    """Inverse of :func:`encode_laq`: (R, codes as int64, b)."""
    if message_kind(blob) != KIND_LAQ:
        raise ValueError("not a LAQ message")
    pos = _MSG_HEADER.size
    radius, bits = _LAQ_HEADER.unpack_from(blob, pos)
    pos += _LAQ_HEADER.size
    nbytes = -(-bits * dim // 8)
    raw = np.frombuffer(blob, dtype=np.uint8, count=nbytes, offset=pos)
    bit_matrix = np.unpackbits(raw, bitorder="little")[: bits * dim].reshape(dim, bits)
    codes = (bit_matrix.astype(np.int64) << np.arange(bits, dtype=np.int64)).sum(axis=1)
    return float(radius), torch.from_numpy(codes), int(bits)


def encode_model(w: torch.Tensor, layout: StateLayout, round_: int) -> bytes:
    """The downlink message: the dense global state w_t."""
    return encode(SparseUpdate(layout.dim, None, w), layout, kind=KIND_MODEL, round_=round_)


def encode_vector(
    v: torch.Tensor, layout: StateLayout, kind: int, round_: int, client: int
) -> bytes:
    """A dense vector over ``layout`` (e.g. a head-gradient proxy) as a wire message."""
    return encode(
        SparseUpdate(layout.dim, None, v), layout, kind=kind, round_=round_, client=client
    )
