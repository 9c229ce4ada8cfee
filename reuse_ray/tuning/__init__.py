"""Experiments: a sweep file or a study file searched with Ray Tune (+ Optuna) on validation
metrics only, selected, then rerun on fresh seeds that read the test split once — one pipeline
(:mod:`.pipeline`) for both kinds of file."""

from __future__ import annotations

from pathlib import Path

from .fields import read_file
from .pipeline import Experiment, run_experiment
from .spec import SweepSpec, load_sweep, parse_sweep
from .study import StudyExperiment, run_study
from .study_spec import StudySpec, is_study, load_study, parse_study
from .sweep import Sweep, SweepOutcome, derive_concurrency, pareto_front, run_sweep


def load_experiment(
    path: str | Path, overrides: list[str] | None = None, scale: str | None = None
) -> Experiment:
    """A sweep file, or a study file (``kind: study``), read with its named ``scale`` and
    ``a.b=value`` ``overrides`` applied and validated, as :func:`run_experiment` runs it."""
    raw = read_file(path, overrides, scale, "sweep file")
    if is_study(raw):
        return StudyExperiment(parse_study(raw, str(path), scale))
    return Sweep(parse_sweep(raw, str(path)))


__all__ = [
    "Experiment",
    "StudySpec",
    "SweepOutcome",
    "SweepSpec",
    "derive_concurrency",
    "load_experiment",
    "load_study",
    "load_sweep",
    "pareto_front",
    "parse_study",
    "parse_sweep",
    "run_experiment",
    "run_study",
    "run_sweep",
]
