"""Client participation models (methods: Conventions), each drawn from the keyed RNG
(design: Keyed streams and pairing).

* ``uniform``: S_t = m distinct ids drawn uniformly without replacement; p_i = m/N.
* ``bernoulli``: each client joins independently with p_i = m/N; |S_t| is random and may be 0.
* ``two_group``: FedSteer's law — weight 1+a for the first ⌊N/2⌋ ids, 1 for the rest,
  p_i = m·weight_i / Σ weight (capped at 1), then Bernoulli.
* ``groups``: FedStale's groups — per-client probabilities from a list tiled over contiguous id
  blocks (published runs: [1.0, 0.5], half always present, half with 0.5), then Bernoulli.
* ``adversarial``: MIFA's law — p_i = p_min + (p_max − p_min)·min_label_i/(K − 1), where
  min_label_i is the smallest label client i holds (clients holding only high labels are more
  available; the reference code writes K − 1 = 9 for its 10 classes), then Bernoulli. It depends
  on the partition, so callers pass the clients' labels.

The Bernoulli draws come from the ``bernoulli`` stream of (seed, round): one uniform number per
client, so two methods with one seed see the same schedule, whatever they do with it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .config import RunConfig
from .errors import UserError
from .rng import Purpose, generator


def uniform_selection(seed: int, round_: int, num_clients: int, per_round: int) -> list[int]:
    """S_t: ``per_round`` distinct ids drawn uniformly, sorted ascending (design: Runs)."""
    rng = generator(seed, Purpose.SELECT, round_)
    return sorted(int(i) for i in rng.choice(num_clients, size=per_round, replace=False))


def two_group_probs(num_clients: int, per_round: int, a: float) -> np.ndarray:
    """p_i = m·weight_i/Σ weight with weight 1+a on the first ⌊N/2⌋ ids (FedSteer)."""
    weight = np.ones(num_clients)
    weight[: num_clients // 2] += a
    return np.minimum(1.0, per_round * weight / weight.sum())


def group_probs(num_clients: int, probs: tuple[float, ...]) -> np.ndarray:
    """FedStale's groups: probs[g] for the g-th of len(probs) contiguous blocks of ids."""
    g = len(probs)
    return np.array([probs[i * g // num_clients] for i in range(num_clients)], dtype=float)


def adversarial_probs(
    client_labels: Sequence[np.ndarray], num_classes: int, p_min: float, p_max: float
) -> np.ndarray:
    """MIFA's adversarial availability: p_min + (p_max − p_min)·min_label_i/(K − 1).

    A client without samples has no smallest label and gets p_min [CHOICE].
    """
    span = max(num_classes - 1, 1)
    lows = np.array([int(np.min(y)) if len(y) else 0 for y in client_labels], dtype=float)
    return p_min + (p_max - p_min) * lows / span


def participation_probs(
    cfg: RunConfig,
    client_labels: Sequence[np.ndarray] | None = None,
    num_classes: int | None = None,
) -> np.ndarray:
    """p_i of every client under the configured participation model.

    ``client_labels`` (the labels of each client's partition) and ``num_classes`` are needed by
    the ``adversarial`` model only.
    """
    fl = cfg.fl
    n, m = fl.num_clients, fl.clients_per_round
    if fl.participation == "adversarial":
        if client_labels is None or num_classes is None:
            raise UserError(
                "fl.participation: 'adversarial' depends on each client's labels; "
                "pass client_labels and num_classes (the engine does)"
            )
        if len(client_labels) != n:
            raise ValueError(f"client_labels: {len(client_labels)} clients; expected {n}")
        return adversarial_probs(client_labels, num_classes, fl.avail_min, fl.avail_max)
    if fl.participation in ("uniform", "bernoulli"):
        return np.full(n, m / n)
    if fl.participation == "two_group":
        return two_group_probs(n, m, fl.two_group_a)
    if fl.participation == "groups":
        return group_probs(n, fl.group_probs)
    raise ValueError(f"fl.participation: unknown model {fl.participation!r}")


def bernoulli_selection(seed: int, round_: int, probs: np.ndarray) -> list[int]:
    """Every client joins independently with probability p_i; the result may be empty."""
    u = generator(seed, Purpose.BERNOULLI, round_).random(len(probs))
    return [int(i) for i in np.flatnonzero(u < probs)]


def select_clients(cfg: RunConfig, round_: int, probs: np.ndarray | None = None) -> list[int]:
    """S_t under ``cfg.fl.participation``, sorted ascending (``probs``: the p_i to use)."""
    fl = cfg.fl
    if fl.participation == "uniform":
        return uniform_selection(cfg.seed, round_, fl.num_clients, fl.clients_per_round)
    return bernoulli_selection(
        cfg.seed, round_, participation_probs(cfg) if probs is None else probs
    )
