"""Sweeps: Ray Tune + Optuna over validation metrics only, then a test-split final stage."""

from .spec import SweepSpec, load_sweep, parse_sweep
from .sweep import SweepOutcome, derive_concurrency, pareto_front, run_sweep

__all__ = [
    "SweepOutcome",
    "SweepSpec",
    "derive_concurrency",
    "load_sweep",
    "pareto_front",
    "parse_sweep",
    "run_sweep",
]
