"""LAQ (ALGORITHMS.md §2.12): bits b, the skip-threshold constant and the clock t̄."""


def space(trial):
    trial.suggest_int("method.laq.bits", 2, 8)
    trial.suggest_float("method.laq.c_thr", 1e-4, 1.0, log=True)
    trial.suggest_int("method.laq.max_clock", 2, 20)
    return None
