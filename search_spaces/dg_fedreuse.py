"""DG-FedReuse (ALGORITHMS.md §2.3): τ0 ≥ τ_min, ρ, S, q and the Top-K ratio r."""


def space(trial):
    tau0 = trial.suggest_float("method.dg.tau0", 0.05, 0.99)
    trial.suggest_float("method.dg.tau_min", 0.01, tau0)  # constrained: τ_min ≤ τ0
    trial.suggest_float("method.dg.rho", 0.05, 0.99)
    trial.suggest_int("method.dg.max_age", 2, 8)
    trial.suggest_float("method.dg.quota", 0.1, 1.0)
    trial.suggest_float("method.topk_ratio", 0.01, 1.0, log=True)
    return None
