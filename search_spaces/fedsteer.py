"""FedSteer (ALGORITHMS.md §2.5): core-set size K, ridge λ, warm-up W and cache refresh β."""


def space(trial):
    trial.suggest_int("method.fedsteer.core_size", 2, 20)
    trial.suggest_float("method.fedsteer.ridge", 0.01, 10.0, log=True)
    trial.suggest_int("method.fedsteer.warmup", 1, 10)
    trial.suggest_float("method.fedsteer.beta", 0.5, 1.0)
    trial.suggest_float("fl.server_lr", 0.3, 1.5)
    return None
