"""Experiments: a sweep file or a study file, read into one spec by one parser, searched with
Ray Tune (+ Optuna) on validation metrics only, selected, then rerun on fresh seeds that read
the test split once — one pipeline (:mod:`.pipeline`) for both kinds of file."""

from __future__ import annotations

from pathlib import Path

from .launch import derive_concurrency
from .parse import load_spec, parse_experiment
from .pipeline import Experiment, SweepOutcome, run_experiment, run_study, run_sweep
from .spec import ExperimentSpec, WorkloadSpec
from .trials import pareto_front

experiment = Experiment  # what run_experiment runs, for a spec of either kind


def load_experiment(
    path: str | Path, overrides: list[str] | None = None, scale: str | None = None
) -> Experiment:
    """A sweep file, or a study file (``kind: study``), read with its named ``scale`` and
    ``a.b=value`` ``overrides`` applied and validated, as :func:`run_experiment` runs it."""
    return experiment(load_spec(path, overrides, scale))


__all__ = [
    "Experiment",
    "ExperimentSpec",
    "SweepOutcome",
    "WorkloadSpec",
    "derive_concurrency",
    "experiment",
    "load_experiment",
    "load_spec",
    "pareto_front",
    "parse_experiment",
    "run_experiment",
    "run_study",
    "run_sweep",
]
