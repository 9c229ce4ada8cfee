"""Optuna samplers survive Tune's pickling of its experiment state."""

from __future__ import annotations

import pickle

from reuse_ray.tuning.samplers import NSGAIISampler


def test_the_nsga2_sampler_pickles_and_keeps_sampling_the_same():
    a = NSGAIISampler(seed=3)
    b = pickle.loads(pickle.dumps(a))
    import optuna

    def first(sampler):
        study = optuna.create_study(sampler=sampler)
        return [study.ask().suggest_float("x", 0.0, 1.0) for _ in range(3)]

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    assert first(a) == first(b)
