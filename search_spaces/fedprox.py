"""FedProx (§2.2): the proximal coefficient μ (the paper tuned 0.001-1) and r."""


def space(trial):
    trial.suggest_float("method.fedprox.mu", 1e-5, 1.0, log=True)
    trial.suggest_float("method.topk_ratio", 0.01, 1.0, log=True)
    return None
