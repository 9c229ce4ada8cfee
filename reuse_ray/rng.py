"""Keyed random streams (design: Keyed streams and pairing).

Every random quantity in a run is drawn from a stream keyed by
``(base_seed, purpose, round, client)``. Two methods run with one base seed therefore see
the same partitions, client schedules, shuffles and augmentations, however many random
numbers each of them consumes elsewhere.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported where a torch stream is made: a process that only
    import torch  # loads data (numpy streams) never imports it


class Purpose(IntEnum):
    """Stream purposes; the integer is part of the key, so never renumber an entry."""

    PARTITION = 1
    SELECT = 2
    TRAIN_SHUFFLE = 3
    AUGMENT = 4
    PROXY_GATE = 5
    PROXY_REFRESH = 6
    LUAR_LAYERS = 7
    CORESET = 8
    BERNOULLI = 9
    MODEL_INIT = 10
    DATA_SPLIT = 11
    SYNTHETIC_DATA = 12
    GATE_RANDOM = 13


NO_ROUND = 0
NO_CLIENT = -1


def _entropy(base_seed: int, purpose: Purpose, round_: int, client: int) -> list[int]:
    # SeedSequence wants non-negative words; shift the "no client" sentinel.
    if base_seed < 0:
        raise ValueError(f"seed must be >= 0, got {base_seed}")
    return [int(base_seed), int(purpose), int(round_), int(client) + 1]


def seed_sequence(
    base_seed: int, purpose: Purpose, round_: int = NO_ROUND, client: int = NO_CLIENT
) -> np.random.SeedSequence:
    """The SeedSequence of one keyed stream."""
    return np.random.SeedSequence(_entropy(base_seed, purpose, round_, client))


def generator(
    base_seed: int, purpose: Purpose, round_: int = NO_ROUND, client: int = NO_CLIENT
) -> np.random.Generator:
    """A numpy Generator for the stream ``(base_seed, purpose, round, client)``."""
    return np.random.Generator(np.random.PCG64(seed_sequence(base_seed, purpose, round_, client)))


def torch_seed(
    base_seed: int, purpose: Purpose, round_: int = NO_ROUND, client: int = NO_CLIENT
) -> int:
    """A 63-bit integer seed for torch, derived from the same key."""
    state = seed_sequence(base_seed, purpose, round_, client).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1])) & ((1 << 63) - 1)


def torch_generator(
    base_seed: int, purpose: Purpose, round_: int = NO_ROUND, client: int = NO_CLIENT
) -> torch.Generator:
    """A CPU torch.Generator for the stream ``(base_seed, purpose, round, client)``."""
    import torch

    g = torch.Generator()
    g.manual_seed(torch_seed(base_seed, purpose, round_, client))
    return g
