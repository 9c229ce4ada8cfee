"""MIFA (ALGORITHMS.md §2.6): the server learning rate and the memory initialisation."""


def space(trial):
    trial.suggest_float("fl.server_lr", 0.3, 1.5)
    trial.suggest_categorical("method.mifa.init", ["zero", "wait"])
    return None
