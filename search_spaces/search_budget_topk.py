"""Top-K FedAvg in the search-budget benchmark: the shared learning rate, the server learning
rate and r (see ``search_budget``)."""

from __future__ import annotations

from .search_budget import space as dense


def space(trial):
    dense(trial)
    trial.suggest_float("method.topk_ratio", 0.01, 1.0, log=True)
    return None
