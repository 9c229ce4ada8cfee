"""FedVARP (ALGORITHMS.md §2.7): the server learning rate η_g and r."""


def space(trial):
    trial.suggest_float("fl.server_lr", 0.3, 1.5)
    trial.suggest_float("method.topk_ratio", 0.01, 1.0, log=True)
    return None
