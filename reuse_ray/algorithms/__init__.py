"""Algorithms by name (ALGORITHMS.md §2); each is pure math over explicit state."""

from __future__ import annotations

from ..config import METHODS, RunConfig
from ..state import StateLayout
from .base import (
    Algorithm,
    ClientTask,
    FreshUpdate,
    ProbeTask,
    RoundPlan,
    StepResult,
    sample_weights,
    weighted_sum,
)
from .dg_fedreuse import CacheStore, DGFedReuse, DGState, LocalCacheStore
from .fedadam import FedAdam, FedAdamState, fedadam_step
from .fedavg import FedAvg, fedavg_aggregate


def build_algorithm(
    cfg: RunConfig, layout: StateLayout, store: CacheStore | None = None
) -> Algorithm:
    """The algorithm named by ``cfg.method.name``, configured from its own block.

    ``store`` holds cached updates (DG-FedReuse): in process by default, the Ray object store
    when the server runs as a Ray actor.
    """
    m = cfg.method
    if m.name == "fedavg":
        return FedAvg(m.topk_ratio, 0.0, cfg.fl.server_lr, "fedavg")
    if m.name == "fedprox":
        return FedAvg(m.topk_ratio, m.fedprox.mu, cfg.fl.server_lr, "fedprox")
    if m.name == "fedadam":
        a = m.fedadam
        return FedAdam(layout.trainable_mask(), m.topk_ratio, a.lr, a.beta1, a.beta2, a.tau, a.v0)
    if m.name == "dg_fedreuse":
        return DGFedReuse(
            m.dg, layout, cfg.seed, store or LocalCacheStore(), m.topk_ratio, cfg.fl.server_lr
        )
    raise ValueError(f"method.name: unknown method {m.name!r}; allowed: {', '.join(METHODS)}")


__all__ = [
    "Algorithm",
    "CacheStore",
    "DGFedReuse",
    "DGState",
    "LocalCacheStore",
    "ProbeTask",
    "ClientTask",
    "FedAdam",
    "FedAdamState",
    "FedAvg",
    "FreshUpdate",
    "RoundPlan",
    "StepResult",
    "build_algorithm",
    "fedadam_step",
    "fedavg_aggregate",
    "sample_weights",
    "weighted_sum",
]
