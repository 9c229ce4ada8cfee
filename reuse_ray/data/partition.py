"""Client partitions of the training split, all driven by the keyed RNG (design: Keyed streams
and pairing; methods: The paper's protocol).

* ``dirichlet``: per class, proportions over clients ~ Dir(α·1_N); retried until every client
  holds at least ``min_size`` samples, then (if retries run out) topped up deterministically from
  the largest clients so the guarantee always holds.
* ``iid``: a keyed permutation cut into N near-equal parts.
* ``shards``: label-sorted shards, ``shards_per_client`` of them dealt to each client.
"""

from __future__ import annotations

import numpy as np

from ..errors import UserError
from ..rng import Purpose, generator

MAX_DIRICHLET_TRIES = 200


def dirichlet_partition(
    y: np.ndarray,
    num_clients: int,
    alpha: float,
    min_size: int,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """Label-Dirichlet(α) partition with a minimum-size guarantee."""
    n = len(y)
    if num_clients * min_size > n:
        raise UserError(
            f"partition: {num_clients} clients x min_size {min_size} needs {num_clients * min_size}"
            f" samples but the training split has {n}; lower partition.min_size or fl.num_clients"
        )
    classes = np.unique(y)
    by_class = [np.flatnonzero(y == c) for c in classes]
    parts: list[list[int]] = []
    for _ in range(MAX_DIRICHLET_TRIES):
        parts = [[] for _ in range(num_clients)]
        for idx in by_class:
            idx = rng.permutation(idx)
            props = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(props) * len(idx)).astype(np.int64)[:-1]
            for client, chunk in enumerate(np.split(idx, cuts)):
                parts[client].extend(chunk.tolist())
        if min(len(p) for p in parts) >= min_size:
            break
    else:
        _top_up(parts, min_size)
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def _top_up(parts: list[list[int]], min_size: int) -> None:
    """Move samples from the currently largest client to each client below min_size."""
    for p in parts:
        p.sort()
    for client in range(len(parts)):
        while len(parts[client]) < min_size:
            donor = max(range(len(parts)), key=lambda j: (len(parts[j]), -j))
            parts[client].append(parts[donor].pop())


def iid_partition(n: int, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Uniform random split into near-equal parts."""
    if num_clients > n:
        raise UserError(
            f"fl.num_clients: {num_clients} clients but only {n} training samples "
            "— allowed: at most one client per sample"
        )
    perm = rng.permutation(n)
    return [np.sort(p.astype(np.int64)) for p in np.array_split(perm, num_clients)]


def shards_partition(
    y: np.ndarray, num_clients: int, shards_per_client: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Sort by label, cut into N·s shards and deal s random shards to each client."""
    num_shards = num_clients * shards_per_client
    if num_shards > len(y):
        raise UserError(
            f"partition: {num_shards} shards but only {len(y)} training samples — "
            "lower fl.num_clients or partition.shards_per_client"
        )
    order = rng.permutation(len(y))
    order = order[np.argsort(y[order], kind="stable")]
    shards = np.array_split(order, num_shards)
    deal = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
    return [np.sort(np.concatenate([shards[s] for s in row]).astype(np.int64)) for row in deal]


def make_partition(
    y: np.ndarray,
    num_clients: int,
    kind: str,
    seed: int,
    alpha: float = 0.5,
    min_size: int = 10,
    shards_per_client: int = 2,
) -> list[np.ndarray]:
    """Partition by name, from the keyed ``partition`` stream of ``seed``."""
    rng = generator(seed, Purpose.PARTITION)
    if kind == "dirichlet":
        return dirichlet_partition(y, num_clients, alpha, min_size, rng)
    if kind == "iid":
        return iid_partition(len(y), num_clients, rng)
    if kind == "shards":
        return shards_partition(y, num_clients, shards_per_client, rng)
    raise UserError(f"partition.kind: unknown value {kind!r}; allowed: dirichlet, iid, shards")


def class_counts(parts: list[np.ndarray], y: np.ndarray, num_classes: int) -> np.ndarray:
    """(N, C) matrix of per-client class counts."""
    return np.stack([np.bincount(y[p], minlength=num_classes) for p in parts]).astype(np.int64)
