"""Client participation (ALGORITHMS.md §1.4): uniform m-of-N from the keyed ``select`` stream."""

from __future__ import annotations

from ..rng import Purpose, generator


def uniform_selection(seed: int, round_: int, num_clients: int, per_round: int) -> list[int]:
    """S_t: ``per_round`` distinct ids drawn uniformly, sorted ascending (§1.5)."""
    rng = generator(seed, Purpose.SELECT, round_)
    return sorted(int(i) for i in rng.choice(num_clients, size=per_round, replace=False))
