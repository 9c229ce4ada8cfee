"""FedStale (ALGORITHMS.md §2.8): the stale-update weight β ∈ [0, 1] and η_s."""


def space(trial):
    trial.suggest_float("method.fedstale.beta", 0.0, 1.0)
    trial.suggest_float("fl.server_lr", 0.3, 1.5)
    return None
