"""Bytes held by the DG-FedReuse cache: 50 clients of ResNet-18 at r = 0.2, against dense.

Each client's cache entry is what DG-FedReuse stores after a fresh round: the per-tensor Top-K
update packed in the field model's layout (bitmap or int32 indices, fp32 values). The updates
here are random fp32 deltas; the cache size depends only on the layout and k, not on values.

    python benchmarks/cache_memory.py [--clients 50] [--r 0.2]
"""

from __future__ import annotations

import argparse
import sys

import torch

from reuse_ray.codecs import pack, restricted_update_bytes, topk_sparsify
from reuse_ray.models import build_model
from reuse_ray.state import StateLayout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--r", type=float, default=0.2)
    args = ap.parse_args()
    layout = StateLayout.from_model(build_model("resnet18", (3, 32, 32), 10))
    gen = torch.Generator().manual_seed(0)
    held = 0
    naive = 0
    for i in range(args.clients):
        delta = torch.randn(layout.dim, generator=gen)
        upd = topk_sparsify(delta, layout, args.r)
        packed = pack(upd, layout)
        held += sys.getsizeof(packed.payload) + len(packed.modes) + 8 * len(packed.counts)
        naive += upd.memory_bytes()  # int64 indices + fp32 values
        if i == 0:
            assert packed.nbytes == restricted_update_bytes(layout, args.r)
        print(f"\r  packed {i + 1}/{args.clients} client updates", end="", file=sys.stderr)
    print(file=sys.stderr)
    dense = args.clients * layout.dense_bytes
    print(
        f"ResNet-18 (d = {layout.dim:,}, B0 = {layout.dense_bytes:,} B), {args.clients} "
        f"clients, r = {args.r}"
    )
    print(f"  dense-shaped cache:        {dense / 1e6:10.2f} MB")
    print(f"  int64-index sparse cache:  {naive / 1e6:10.2f} MB  ({naive / dense:.4f} of dense)")
    print(
        f"  packed cache (ours):       {held / 1e6:10.2f} MB  ({held / dense:.4f} of dense;"
        " goal <= 0.25)"
    )


if __name__ == "__main__":
    main()
