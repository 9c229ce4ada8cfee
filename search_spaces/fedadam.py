"""FedAdam (§2.10): server η, β2, τ and the v0 initialisation."""


def space(trial):
    trial.suggest_float("method.fedadam.lr", 1e-4, 1.0, log=True)
    trial.suggest_float("method.fedadam.beta2", 0.9, 0.999)
    trial.suggest_float("method.fedadam.tau", 1e-5, 1e-1, log=True)
    trial.suggest_categorical("method.fedadam.v0", ["tau_squared", "zero"])
    return None
