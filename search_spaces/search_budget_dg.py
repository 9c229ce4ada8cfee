"""DG-FedReuse in the search-budget benchmark: the shared learning rate and the method's own
registered space (τ0, τ_min, ρ, S, q, r; see ``search_budget``)."""

from __future__ import annotations

from reuse_ray.algorithms.dg_fedreuse import space as dg


def space(trial):
    trial.suggest_float("train.lr", 0.01, 0.2, log=True)
    dg(trial)
    return None
