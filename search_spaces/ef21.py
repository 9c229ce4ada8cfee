"""EF21-PP (ALGORITHMS.md §2.11.2): r, the variant and the first-message rule."""


def space(trial):
    trial.suggest_float("method.topk_ratio", 0.01, 1.0, log=True)
    trial.suggest_categorical("method.ef21.variant", ["pp", "s"])
    trial.suggest_categorical("method.ef21.init", ["zero", "dense"])
    return None
