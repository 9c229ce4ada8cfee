"""SCAFFOLD (ALGORITHMS.md §2.9): the global learning rate η_g and the aggregation weights."""


def space(trial):
    trial.suggest_float("fl.server_lr", 0.3, 1.5)
    trial.suggest_categorical("method.scaffold.weighting", ["uniform", "samples"])
    return None
