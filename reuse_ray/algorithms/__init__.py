"""Algorithms by name (ALGORITHMS.md §2); each is pure math over explicit state."""

from __future__ import annotations

from collections.abc import Sequence

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
from .fedluar import FedLUAR
from .fedsteer import FedSteer
from .memory import EF21, LAQ, MIFA, FedStale, MemoryBank
from .scaffold import Scaffold


def build_algorithm(
    cfg: RunConfig,
    layout: StateLayout,
    store: CacheStore | None = None,
    probs: Sequence[float] | None = None,
) -> Algorithm:
    """The algorithm named by ``cfg.method.name``, configured from its own block.

    ``store`` holds cached updates (DG-FedReuse): in process by default, the Ray object store
    when the server runs as a Ray actor.
    """
    m = cfg.method
    store = store or LocalCacheStore()
    if probs is None and m.name in ("fedstale", "fedvarp", "fedsteer"):
        from ..participation import participation_probs

        probs = participation_probs(cfg).tolist()
    lr = cfg.fl.server_lr
    n = cfg.fl.num_clients
    if m.name == "fedavg":
        return FedAvg(m.topk_ratio, 0.0, cfg.fl.server_lr, "fedavg")
    if m.name == "fedprox":
        return FedAvg(m.topk_ratio, m.fedprox.mu, cfg.fl.server_lr, "fedprox")
    if m.name == "fedadam":
        a = m.fedadam
        return FedAdam(layout.trainable_mask(), m.topk_ratio, a.lr, a.beta1, a.beta2, a.tau, a.v0)
    if m.name == "dg_fedreuse":
        return DGFedReuse(m.dg, layout, cfg.seed, store, m.topk_ratio, lr)
    if m.name in ("fedstale", "fedvarp"):
        s = m.fedstale
        beta = 1.0 if m.name == "fedvarp" else s.beta
        return FedStale(store, tuple(probs), beta,
                        s.probs == "estimated", s.weights, m.topk_ratio, lr, m.name)  # fmt: skip
    if m.name == "mifa":
        return MIFA(store, n, m.mifa.init, m.mifa.weights, m.topk_ratio, lr)
    if m.name == "ef21":
        e = m.ef21
        return EF21(store, m.topk_ratio, e.variant, e.init == "dense", "samples", lr)
    if m.name == "laq":
        q = m.laq
        return LAQ(store, q.bits, q.history, q.xi, q.c_thr, q.weights, lr)
    if m.name == "scaffold":
        return Scaffold(layout.trainable_subset(), n, m.topk_ratio, m.scaffold.weighting, lr)
    if m.name == "fedsteer":
        f = m.fedsteer
        return FedSteer(store, layout, cfg.seed, tuple(probs),
                        f.core_size, f.ridge, f.warmup, f.swaps, f.beta, f.mode, lr)  # fmt: skip
    if m.name == "fedluar":
        return FedLUAR(layout, cfg.seed, m.fedluar.delta, m.fedluar.weighting, m.topk_ratio, lr)
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
    "EF21",
    "FedLUAR",
    "FedSteer",
    "FedStale",
    "LAQ",
    "MIFA",
    "MemoryBank",
    "Scaffold",
    "FreshUpdate",
    "RoundPlan",
    "StepResult",
    "build_algorithm",
    "fedadam_step",
    "fedavg_aggregate",
    "sample_weights",
    "weighted_sum",
]
