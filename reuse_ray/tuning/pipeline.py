"""One experiment pipeline for sweep files and study files (design: Validation-only search).

An experiment is workloads × arms (:class:`.spec.ExperimentSpec`, read from either kind of file
by one parser): each workload's arms are searched on validation data only, selected,
optionally re-evaluated on further search seeds, and rerun on fresh seeds that read the test
split once. A study file is the general form; a sweep file is one workload whose one searched
arm draws its configurations from a searcher (TPE, NSGA-II, random, a grid; ``none``: the grid
goes unsearched to the final stage), with its ``final.compare`` entries as unsearched arms.
Every stage is written once, here:

1. **open** — connect to Ray (``--address``, else a workload's ``engine.ray_address``, else
   ``$RAY_ADDRESS``, else a new local Ray), name the results folder (a dated one where asked),
   refuse a start over earlier results or a ``--resume``/``--final`` of nothing, set damaged
   files aside, say what will run;
2. per workload: **search** (or with ``--final`` the finished search the results hold) →
   **trials table** → robust **re-evaluation** of the best candidates on further search seeds
   (where asked) → **selection** → the **final stage** on fresh seeds;
3. **record** how it ended and write the **report**.

What differs between the two kinds of file is a :class:`Plan` per workload — how its
configurations are searched and chosen — and the experiment's own record (a study's
``study.json``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import pandas as pd

from ..errors import UserError
from ..results.storage import Storage, display
from . import reeval
from .launch import Launcher, derive_concurrency, set_aside_damaged
from .spec import ExperimentSpec, WorkloadSpec
from .trials import write_trials


class Plan(Protocol):
    """One workload of an experiment: ``spec`` is what each of its stages launches with; the
    methods are the steps its kind of file decides."""

    spec: WorkloadSpec
    reference: float | None  # the retention objective's reference accuracy its trials report

    def search(self, run: Launcher) -> pd.DataFrame: ...  # the search stage; its trials
    def finished_search(self) -> pd.DataFrame: ...  # --final: the search the results hold
    # the results record this workload's search as finished and chosen from (a sweep's trials
    # table, a study's choices): --resume goes on from there, as --final does
    def search_finished(self) -> bool: ...
    # the trials-table rows of a stage's points (None: a searcher's own draws) and results
    def rows(self, stage: str, points: list | None, results) -> pd.DataFrame: ...
    def candidates(self, trials: pd.DataFrame) -> pd.DataFrame: ...  # robust selection's
    def reeval_line(self, n: int) -> str: ...
    # (what was chosen, the trials marked with it), on validation metrics only
    def choose(self, trials: pd.DataFrame) -> tuple[Any, pd.DataFrame]: ...
    def said_choice(self, chosen: Any, trials: pd.DataFrame, say) -> None: ...
    def finals(self, chosen: Any) -> list[dict[str, Any]]: ...  # config + fresh seed + label
    def final_line(self, n: int) -> str: ...
    # the console's lines on the final stage (selection gaps, per-label means)
    def after_final(self, chosen: Any, trials, finals: pd.DataFrame, say) -> None: ...


class Experiment(Protocol):
    """A sweep or a study as the pipeline runs it: its spec (name, folder), what the console
    calls it, its plans, and its record (a study's study.json; a sweep keeps none)."""

    what: str
    spec: ExperimentSpec

    def started(self, final_only: bool) -> bool: ...  # the folder holds it already
    def opened(self, final_only: bool) -> None: ...  # recorded as running
    def header(self, run: Launcher, resources: dict[str, float]) -> str: ...
    def plans(self) -> Iterator[Plan]: ...
    def interrupted(self) -> None: ...  # recorded as interrupted (Ctrl-C, SIGTERM)
    def finished(self, outcomes: list, say) -> None: ...  # recorded; the closing line


def run_experiment(
    exp: Experiment,
    resume: bool = False,
    final_only: bool = False,
    say=print,
    verbose: int = 0,
    mlflow: str | None = None,
    address: str | None = None,
) -> list[tuple[Any, pd.DataFrame, pd.DataFrame | None]]:
    """Open the experiment's folder, run every workload's stages, record the end and write the
    report; returns (chosen, trials, final runs) per workload.

    ``resume``: continue the interrupted experiment in its folder; ``final_only``: no search,
    the choice from the search the folder holds, then the final stage; ``verbose``: 0 prints
    our own trial lines only, 1 adds Tune's status tables, 2 also every trial's per-round
    lines; ``address``: the Ray cluster to join (else a workload's ``engine.ray_address``,
    else ``$RAY_ADDRESS``, else a new local Ray)."""
    run = open_experiment(exp, resume, final_only, say, verbose, mlflow, address)
    outcomes = []
    try:
        for plan in exp.plans():
            searched = final_only or (resume and plan.search_finished())
            if searched and _lost_search_runs(plan, run, final_only):
                searched = False  # the search resumes and recomputes them
            outcomes.append(run_workload(plan, run, searched))
    except KeyboardInterrupt:
        exp.interrupted()
        raise
    exp.finished(outcomes, say)
    report_at_end(exp.spec.results_dir, say)
    return outcomes


def _lost_search_runs(plan: Plan, run: Launcher, final_only: bool) -> list[str]:
    """The runs of a finished search that this launch set aside as damaged: a ``--resume``
    walks the search again (its Tune state ends each trial; a trial whose run is gone is
    recomputed), so the choice is made from every run, as before; ``--final`` refuses."""
    if not run.set_aside:
        return []
    lost = sorted(set(plan.finished_search()["run_id"]) & set(run.set_aside))
    if lost and final_only:
        raise UserError(
            f"--final: {len(lost)} search runs of {plan.spec.name!r} were damaged and set "
            f"aside ({', '.join(lost[:3])}{' …' if len(lost) > 3 else ''}); the choice "
            "needs them — run with --resume to recompute them"
        )
    if lost:
        run.say(
            f"search: {len(lost)} of its runs were damaged; the search resumes to recompute them"
        )
    return lost


def open_experiment(exp: Experiment, resume, final_only, say, verbose, mlflow, address):
    """Connect (before naming a dated folder: a cluster that does not answer leaves none),
    open the folder as asked, record the experiment running and say what runs; returns the
    :class:`.launch.Launcher` every stage is launched with."""
    from ..distributed import ensure_ray

    ensure_ray(address or exp.spec.ray_address())
    flag = "--resume" if resume else "--final"
    exp.spec = dated(exp.spec, resume or final_only, exp.what, flag)
    aside = open_folder(exp.spec, resume, final_only, exp.what, exp.started(final_only), say)
    import optuna
    import ray

    resources = ray.cluster_resources()
    concurrency = derive_concurrency(exp.spec.workload(next(iter(exp.spec.workloads))), resources)
    exp.opened(final_only)
    if verbose < 1:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    # --final continues a final stage the results hold, as --resume does
    run = Launcher(concurrency, resume or final_only, say, verbose, mlflow, tuple(aside))
    say(exp.header(run, resources))
    return run


def run_workload(plan: Plan, run: Launcher, searched: bool):
    """One workload: search (``searched``: the finished search the results hold), the trials
    table, selection, then the final stage on fresh seeds; returns (chosen, trials, final runs
    or None). A resumed experiment whose search finished goes on from it: its search's Tune
    state may lag its tables (or be absent from a copied folder), and a search walked again
    would recompute the runs a scheduler stopped."""
    trials = plan.finished_search() if searched else plan.search(run)
    chosen, trials = plan.choose(reevaluate(plan, run, trials))
    write_trials(plan.spec.results_dir, plan.spec.name, trials)
    plan.said_choice(chosen, trials, run.say)
    points = plan.finals(chosen)
    if not points:
        return chosen, trials, None
    run.say(plan.final_line(len(points)))
    finals = run.final(plan.spec, points)
    plan.after_final(chosen, trials, finals, run.say)
    return chosen, trials, finals


def reevaluate(plan: Plan, run: Launcher, trials: pd.DataFrame) -> pd.DataFrame:
    """Robust selection's stage (``search.reeval_top``; module ``reeval``): the plan's
    candidates rerun on the further search seeds, validation only; the trials table with their
    rows (stage ``reeval``) added, which selection then averages over."""
    if not plan.spec.search.reeval_top:
        return trials
    cands = plan.candidates(trials)
    what = plan.reeval_line(len(cands))
    ran = reeval.run_stage(plan.spec, cands, run, what, reference=plan.reference)
    if ran is None:
        return trials
    return pd.concat([trials, plan.rows("reeval", *ran)], ignore_index=True)


def dated(spec, resume: bool, what: str = "sweep", flag: str = "--resume"):
    """The spec (a sweep's or a study's) with its own folder: a folder of dated experiments
    gets a fresh dated folder (``resume``, asked by ``flag`` — ``--resume`` or ``--final``: its
    newest)."""
    import dataclasses

    from ..results.storage import dated_folder, latest_dated

    if not spec.dated:
        return spec
    if resume:
        newest = latest_dated(spec.results_dir)
        if newest is None:
            raise UserError(
                f"{flag}: no earlier {what} {spec.name!r} under "
                f"{display(spec.results_dir)} — run it without {flag}, or give "
                "its folder with --results"
            )
        return dataclasses.replace(spec, results_dir=newest, dated=False)
    return dataclasses.replace(spec, results_dir=dated_folder(spec.results_dir), dated=False)


def open_folder(spec, resume: bool, final_only: bool, what: str, started: bool, say) -> list[str]:
    """A sweep's or a study's folder, opened as asked: refuse a start over earlier results,
    or a ``--resume``/``--final`` where nothing was started; check it is writable; with
    either, set every damaged table file aside (named on the console). Returns the run ids
    set aside."""
    where = display(spec.results_dir)
    say(f"results root: {where}")
    if started and not resume and not final_only:
        raise UserError(
            f"{what} {spec.name!r} already has results in {where}; pass --resume to continue "
            "it, or --results DIR for a new one"
        )
    if (resume or final_only) and not started:
        flag = "--resume" if resume else "--final"
        raise UserError(
            f"{flag}: nothing to resume in {where} (no {what} {spec.name!r} was started "
            f"there) — run it without {flag} to start one there, or give the folder of the "
            f"interrupted {what} with --results"
        )
    Storage.of(spec.results_dir).check_writable(keep=True)
    return set_aside_damaged(spec.results_dir, say) if resume or final_only else []


def report_at_end(location: str, say) -> None:
    """Write the report of a finished sweep or study, then say where the results are; a report
    that fails loses no result and says how to retry."""
    where = display(location)
    try:
        import warnings

        from analysis import write_report
        from analysis.report import report_line

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = write_report(location)
        say(report_line(report))
    except Exception as err:  # noqa: BLE001 - the results stay; only the report is missing
        say(
            f"report: not written ({type(err).__name__}: {err}); run reuse-ray report "
            f"{where} to retry"
        )
    say(f"results root: {where}")


__all__ = ["Experiment", "Plan", "open_folder", "report_at_end", "run_experiment"]
