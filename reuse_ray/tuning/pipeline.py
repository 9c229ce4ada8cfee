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

One :class:`Experiment` and one :class:`Plan` per workload serve both kinds of file: a plan's
searched arms draw their points up front, or its one searched arm draws from a searcher. After
the parser, only the record (:mod:`.record`: a study's ``study.json``, the console's header)
reads which kind of file it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..errors import UserError
from ..results.folders import dated, open_folder, report_at_end
from ..results.storage import Storage, display, join
from . import record, reeval, selection
from . import trials as table
from .launch import Launcher, derive_concurrency
from .parse import arm_points
from .record import Record
from .spec import ExperimentSpec
from .trials import trials_file, write_trials


class Experiment(Record):
    """A sweep file or a study file as the pipeline runs it: its spec (name, folder), its
    record (:class:`.record.Record`) and a :class:`Plan` per workload."""

    def plans(self) -> Iterator[Plan]:
        for w in self.spec.workloads:
            yield Plan(self, w)


class Plan:
    """One workload of an experiment: ``spec`` is what each of its stages launches with.

    Its searched arms draw their points up front (``points``; a study file's arms), or its one
    searched arm draws from ``search.searcher`` (a sweep file's), which scores each trial by
    the searcher's objective (``reference``: the retention objective's reference run) and
    hands the final stage its best ``final.top``, ``selected-<j>``, beside the unsearched
    arms; drawn arms are chosen per objective and uplink level and run under their names."""

    def __init__(self, exp: Experiment, w: str):
        study = exp.spec
        self.exp, self.study, self.w = exp, study, w
        self.spec, self.reference = study.workload(w), None
        # a workload named after its experiment says nothing more on the console
        self.tag = "" if self.spec.name == study.name else f"[{w}] "
        self.points = (
            [dict(p, label=a.name) for a in study.arms if a.searched for p in arm_points(study, a)]
            if study.trials_per_arm
            else None
        )

    def search(self, run: Launcher) -> pd.DataFrame:
        """The search stage; its trials."""
        from . import search

        if self.points is not None:
            results = search.drawn_search(self.study, self.spec, self.points, run, self.w)
            return self.rows("search", self.points, results)
        if self.spec.search.searcher == "none":
            return search.protocol_trials(self.spec)
        self.reference = search.reference_val(self.spec, run.say)
        results, budget = search.searcher_search(self.spec, run, self.reference)
        trials = self.rows("search", None, results)
        if budget is not None:
            run.say(
                f"client-round budget: {budget.spent()} of {self.spec.search.client_rounds} "
                f"spent by {len(trials)} configurations"
            )
        return trials

    def finished_search(self) -> pd.DataFrame:
        """``--final``: the search the results hold (its search rows: the re-evaluation
        stage is rerun, or read back where it finished)."""
        from . import search

        spec = self.spec
        if self.points is not None:
            trials = self.rows("search", self.points, None)
            if not len(trials) or not trials["status"].eq("finished").any():
                raise UserError(
                    f"--final needs a finished search: workload {self.w!r} has no finished "
                    f"search run in {display(spec.results_dir)} — run it (or --resume it) first"
                )
            return trials
        if spec.search.searcher == "none":
            return search.protocol_trials(spec)
        store = Storage.of(spec.results_dir)
        if not store.is_file(trials_file(spec.name)):
            where = join(spec.results_dir, trials_file(spec.name))
            raise UserError(f"--final needs a finished search: {where} is missing")
        trials = pd.read_parquet(store.path(trials_file(spec.name)), filesystem=store.fs)
        if spec.search.objective == "retention":  # the reference the search was scored with
            ref = trials["reference_val_acc"].dropna()
            self.reference = float(ref.iloc[0]) if len(ref) else search.reference_val(spec, print)
        return trials[trials["stage"].ne("reeval")].reset_index(drop=True)

    def search_finished(self) -> bool:
        """The results record this workload's search as finished and chosen from (its trials
        table): --resume goes on from there, as --final does."""
        return Storage.of(self.spec.results_dir).is_file(trials_file(self.spec.name))

    def rows(self, stage: str, points, results) -> pd.DataFrame:
        """One row per trial of a stage: per point in order (its Tune result, where the stage
        ran; with a client-round budget, a point its arm's budget left untried has no row),
        or per Tune result where a searcher drew its own; a searcher's scored by its
        objective."""
        s, entries = self.spec.search, table.entries(stage, points, results)
        objective = ",".join(self.study.objectives)
        rows = table.build(self.spec, stage, entries, searcher=s.searcher, objective=objective)
        return rows if self.points is not None else table.score(rows, self.spec, self.reference)

    def readings(self) -> pd.DataFrame | None:
        """The runs' readings at the uplink levels (the ``levels`` table), None without."""
        if not self.study.uplink_levels:
            return None
        from ..results.reader import read_table_if_any

        return read_table_if_any(self.study.results_dir, "levels")

    def candidates(self, trials: pd.DataFrame) -> pd.DataFrame:
        """Robust selection's candidates."""
        if self.points is not None:
            return selection.arm_candidates(trials, self.study, self.readings())
        s = self.spec.search
        bar = selection.run_bar(self.spec, trials)
        return selection.candidates(trials, [s.objective], bar, s.reeval_top, fallback=True)

    def choose(self, trials: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
        """(arm -> {objective: the trials row chosen}, the trials marked with it), on
        validation metrics only; a searcher's best ``final.top`` are ``selected-<j>``."""
        study, main = self.study, self.study.objectives[0]
        if self.points is None:
            best, trials = selection.choose_searched(self.spec, study.final_top, trials)
            trials["selected"] = trials["run_id"].isin(best["run_id"])
            rows = enumerate(r for _, r in best.iterrows())
            return {f"selected-{j}": {main: row} for j, row in rows}, trials
        trials = selection.values(trials, study.search.reeval_seeds)
        chosen = selection.select_arms(trials, study)
        levels, self.unable, self.limits, self.why = selection.select_levels(
            trials, study, self.readings()
        )
        for arm, got in levels.items():
            chosen.setdefault(arm, {}).update(got)
        marked = selection.mark(trials, chosen).drop(columns=["trial_index"])
        return selection.ablations(chosen, study), marked

    def said_choice(self, chosen: dict, trials: pd.DataFrame, say) -> None:
        if self.points is None:
            record.say_choice(self.spec, chosen, trials, say)
            return
        study, w = self.study, self.w
        self.exp.chose(w, record.choices_record(study, chosen, self.unable, self.limits, self.why))
        lines = selection.budget_lines(trials, study, self.spec.search.client_rounds)
        lines += record.chosen_lines(study, chosen, self.unable, self.limits, self.why)
        for line in lines:
            say(self.tag + line)

    def finals(self, chosen: dict) -> list[dict[str, Any]]:
        """The final stage's runs: each a configuration with its fresh seed and label."""
        return selection.final_points(self.study, chosen) if chosen else []

    def after_final(self, chosen: dict, trials, finals: pd.DataFrame, say) -> None:
        """The console's lines on the final stage: each choice's selection gap (by the first
        objective; an ablation has none of its own), each label's means."""
        main = self.study.objectives[0]
        rows = {a: got[main] for a, got in chosen.items() if main in got and not self._ablation(a)}
        gaps = self.exp.gaps[self.w] = reeval.selection_gaps(trials, rows, finals)
        for label, gap in gaps.items():
            say(self.tag + reeval.gap_line(label, gap))
        for (label, method), grp in finals.groupby(["label", "cfg.method.name"]):
            say(
                f"  {self.tag}final {label} ({method}): test_acc mean="
                f"{grp['test_acc'].mean():.4f} over {grp['seed'].nunique()} seeds, cum_saving="
                f"{100 * grp['cum_saving_restricted'].mean():.2f}%"
            )

    def _ablation(self, name: str) -> bool:
        return any(a.name == name and a.ablation_of for a in self.study.arms)


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
    finally:
        exp.closed()
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
    aside = open_folder(
        exp.spec, resume, final_only, exp.what, exp.started(resume or final_only), say
    )
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
    seeds = list(plan.study.final_seeds)
    run.say(
        f"{plan.tag}final stage: {len(points)} runs on fresh seeds {seeds}, test split read "
        "once at the final round"
    )
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
    what = f"{plan.tag}robust selection: {len(cands)} candidate configurations"
    ran = reeval.run_stage(plan.spec, cands, run, what, reference=plan.reference)
    if ran is None:
        return trials
    return pd.concat([trials, plan.rows("reeval", *ran)], ignore_index=True)


@dataclass(frozen=True)
class SweepOutcome:
    results_dir: str
    trials: pd.DataFrame
    selected: list[dict[str, Any]]
    final_runs: pd.DataFrame | None


def run_sweep(spec: ExperimentSpec, **options: Any) -> SweepOutcome:
    """A sweep file's one workload through :func:`run_experiment` (which names the
    ``options``): its trials, the configurations its searcher chose, its final runs."""
    exp = Experiment(spec)
    [(chosen, trials, final_runs)] = run_experiment(exp, **options)
    selected = [json.loads(r["params_json"]) for got in chosen.values() for r in got.values()]
    return SweepOutcome(exp.spec.results_dir, trials, selected, final_runs)


def run_study(spec: ExperimentSpec, **options: Any) -> pd.DataFrame:
    """A study file through :func:`run_experiment` (which names the ``options``): every
    workload's final-stage runs."""
    finals = [f for _, _, f in run_experiment(Experiment(spec), **options) if f is not None]
    return pd.concat(finals, ignore_index=True) if finals else pd.DataFrame()


__all__ = [
    "Experiment",
    "Plan",
    "SweepOutcome",
    "run_experiment",
    "run_study",
    "run_sweep",
]
