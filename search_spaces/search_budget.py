"""The search-budget benchmark's spaces (``benchmarks/search_budget.py``): the study's shared
local learning rate on every arm, as the study draws it, plus each arm's own knobs. ``space``
is dense FedAvg's (server learning rate); the Top-K and DG-FedReuse arms use
``search_budget_topk`` and ``search_budget_dg``, which add r and the DG gate."""

from __future__ import annotations


def space(trial):
    trial.suggest_float("train.lr", 0.01, 0.2, log=True)
    trial.suggest_float("fl.server_lr", 0.3, 1.5)
    return None
