"""A sweep file's plan (:mod:`.pipeline` runs it): one workload whose one searched arm draws its
configurations from a searcher, and the final stage's references.

Search: a Ray Tune experiment whose trials each run one FL run in a placement group reserving
everything the trial needs (its driver, and on the Ray engine its client workers), with Optuna
(TPE, NSGA-II, random) or a grid; no trial ever reads the test split. Trials table: one row per
search trial, with its parameters, objective values, Pareto membership and whether the final
stage selected it. Final: the selected configurations, and the ``compare`` references, rerun on
fresh seeds, paired, with the test split read once at the pre-set final round.

Both stages are Tune experiments under ``RESULTS/_tune``; ``resume=True`` restores them, so
finished trials are not rerun and unfinished ones continue from their last checkpoint.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..errors import UserError
from ..results.storage import Storage, display, join
from . import launch, reeval, selection
from . import trials as table
from .launch import Launcher, derive_concurrency
from .pipeline import Experiment, Plan, run_experiment
from .spaces import load_space
from .spec import ExperimentSpec, WorkloadSpec
from .trials import pareto_front, trials_file


@dataclass(frozen=True)
class SweepOutcome:
    results_dir: str
    trials: pd.DataFrame
    selected: list[dict[str, Any]]
    final_runs: pd.DataFrame | None


def make_searcher(spec: WorkloadSpec, concurrency: int = 0):
    """(search_alg, tune_metric, tune_mode, param_space) for the sweep's searcher."""
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    s = spec.search
    if s.searcher == "grid":
        space = {k: tune.grid_search(list(v)) for k, v in s.grid.items()}
        gen = BasicVariantGenerator(random_state=s.seed, max_concurrent=concurrency)
        return gen, "val_acc", "max", space
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    from .samplers import NSGAIISampler

    sampler = {
        "tpe": lambda: optuna.samplers.TPESampler(seed=s.seed),
        "nsga2": lambda: NSGAIISampler(seed=s.seed),
        "random": lambda: optuna.samplers.RandomSampler(seed=s.seed),
    }[s.searcher]()
    if s.objective == "pareto":
        metric, mode = ["val_acc", "cum_up_restricted"], ["max", "min"]
    else:
        metric, mode = ("objective", "max")
    alg = OptunaSearch(space=load_space(s.space), metric=metric, mode=mode, sampler=sampler)
    return alg, None, None, None


def _reference_val(spec: WorkloadSpec, say) -> float | None:
    """The retention objective's reference: validation accuracy of the reference run."""
    if spec.search.objective != "retention":
        return None
    from ..engine import RunHooks
    from ..results.storage import anchored
    from ..results.writer import RunWriter
    from ..runner import run_fl
    from .trainable import trial_backend

    # the trials' engine settings (device, vectorize, channels_last, workers), so the bar is
    # measured as the trials it judges are
    cfg = spec.run_config(spec.search.reference)
    # a resumed or --final sweep: the reference finished here before (the engine refuses to
    # run it again), so its recorded validation accuracy is the bar, as it was
    done = RunWriter(anchored(cfg.results_dir)[0], cfg.run_id, cfg.method.name).previous_result()
    if done is not None:
        say(f"retention reference run {cfg.run_id}: finished here before, its result kept")
        return done["final_val_acc"]
    say(f"retention reference run {cfg.run_id} ({spec.search.reference or 'base config'})")
    hooks = RunHooks(stage="search", evaluate_test=False, sweep=spec.name, trial_id="reference")
    summary = run_fl(cfg, backend=trial_backend(spec, cfg, "reference"), hooks=hooks)
    return summary.row["final_val_acc"]


def _pareto(df: pd.DataFrame, top: int) -> pd.DataFrame:
    """Objective pareto: the front's configurations, most accurate first."""
    ok = selection.eligible(df).drop_duplicates("run_id")
    ok = ok[ok["on_pareto_front"].fillna(False).astype(bool)]
    return ok.sort_values(["val_acc", "cum_up_restricted"], ascending=[False, True]).head(top)


def _bar(spec: WorkloadSpec, trials: pd.DataFrame) -> float | None:
    """The retention objective's bar: ``search.retention`` × the reference run's validation
    accuracy, as the trials table recorded it (also for ``--final``)."""
    if spec.search.objective != "retention" or "reference_val_acc" not in trials:
        return None
    ref = trials["reference_val_acc"].dropna()
    return spec.search.retention * float(ref.iloc[0]) if len(ref) and ref.iloc[0] > 0 else None


def run_sweep(spec: ExperimentSpec, **options: Any) -> SweepOutcome:
    """Search (unless ``final_only``), write the trials table, then the final stage: the
    pipeline (:func:`.pipeline.run_experiment`, which names the ``options``) over the sweep's
    one workload."""
    if spec.kind != "sweep":
        raise UserError(f"{spec.name!r} is a study file; run it with run_study")
    exp = Sweep(spec)
    [(chosen, trials, final_runs)] = run_experiment(exp, **options)
    selected = [json.loads(p) for p in chosen["params_json"]]
    return SweepOutcome(exp.spec.results_dir, trials, selected, final_runs)


class Sweep(Experiment):
    """A sweep file as the pipeline runs it: one workload (:class:`SweepPlan`); no record of
    its own."""

    what = "sweep"

    def __init__(self, spec: ExperimentSpec):
        self.spec = spec

    def started(self, final_only: bool) -> bool:
        # its Tune experiments are there, or (a copied folder) its trials table
        store, name = Storage.of(self.spec.results_dir), self.spec.name
        started = any(store.is_dir("_tune", f"{name}-{s}") for s in ("search", "final"))
        return started or store.is_file(trials_file(name))

    def header(self, run: Launcher, resources: dict[str, float]) -> str:
        s = self.spec
        return (
            f"sweep {s.name}: {s.search.searcher} over "
            f"{s.search.space or list(s.search.grid)} ({s.search.objective}), "
            f"{s.search.num_samples} samples, {run.concurrency} concurrent "
            f"trial{'s' if run.concurrency != 1 else ''} of "
            f"{s.trial.bundles()} on {resources.get('CPU', 0):g} CPUs / "
            f"{resources.get('GPU', 0):g} GPUs; "
            f"results in {display(s.results_dir)}"
        )

    def plans(self):
        yield SweepPlan(self.spec)

    def finished(self, outcomes: list, say) -> None:
        say(f"Parquet: {display(self.spec.results_dir)}  (pandas.read_parquet(DIR/'rounds'))")


class SweepPlan(Plan):
    """A sweep's one workload: its searched arm — or unsearched grid — is chosen from, then
    rerun with the final stage's references (its unsearched arms)."""

    def __init__(self, exp: ExperimentSpec):
        self.exp, self.spec, self.reference = exp, exp.workload(exp.name), None

    def search(self, run: Launcher) -> pd.DataFrame:
        if self.spec.search.searcher == "none":
            return _protocol_trials(self.spec)
        self.reference = _reference_val(self.spec, run.say)
        results, budget = _search(self.spec, run, self.reference)
        trials = self.rows("search", None, results)
        if budget is not None:
            run.say(
                f"client-round budget: {budget.spent()} of {self.spec.search.client_rounds} "
                f"spent by {len(trials)} configurations"
            )
        return trials

    def finished_search(self) -> pd.DataFrame:
        """``--final``: the trials table an earlier search wrote (its search rows: the
        re-evaluation stage is rerun, or read back where it finished)."""
        spec = self.spec
        if spec.search.searcher == "none":
            return _protocol_trials(spec)
        store = Storage.of(spec.results_dir)
        if not store.is_file(trials_file(spec.name)):
            where = join(spec.results_dir, trials_file(spec.name))
            raise UserError(f"--final needs a finished search: {where} is missing")
        trials = pd.read_parquet(store.path(trials_file(spec.name)), filesystem=store.fs)
        if spec.search.objective == "retention":  # the reference the search was scored with
            ref = trials["reference_val_acc"].dropna()
            self.reference = float(ref.iloc[0]) if len(ref) else _reference_val(spec, print)
        return trials[trials["stage"].ne("reeval")].reset_index(drop=True)

    def search_finished(self) -> bool:
        return Storage.of(self.spec.results_dir).is_file(trials_file(self.spec.name))

    def rows(self, stage: str, points, results) -> pd.DataFrame:
        """One row per trial of a stage (``search``: per Tune result, the searcher's draws;
        ``reeval``: per point), scored by the sweep's objective."""
        s, entries = self.spec.search, table.entries(stage, points, results)
        rows = table.build(self.spec, stage, entries, searcher=s.searcher, objective=s.objective)
        return table.score(rows, self.spec, self.reference)

    def candidates(self, trials: pd.DataFrame) -> pd.DataFrame:
        s = self.spec.search
        return selection.candidates(
            trials, [s.objective], _bar(self.spec, trials), s.reeval_top, fallback=True
        )

    def reeval_line(self, n: int) -> str:
        return f"robust selection: the best {n} configurations"

    def choose(self, trials: pd.DataFrame):
        top = self.exp.final.top if self.exp.final else 1
        chosen, trials = _choose(self.spec, top, trials)
        trials["selected"] = trials["run_id"].isin(chosen["run_id"])
        return chosen, trials

    def said_choice(self, chosen, trials: pd.DataFrame, say) -> None:
        _say_choice(self.spec, chosen, trials, say)

    def finals(self, chosen) -> list[dict[str, Any]]:
        if self.exp.final is None or not len(chosen):
            return []
        return final_points(self.exp, [json.loads(p) for p in chosen["params_json"]])

    def final_line(self, n: int) -> str:
        return (
            f"final stage: {n} runs on fresh seeds {list(self.exp.final.seeds)}, "
            "test split read once at the final round"
        )

    def after_final(self, chosen, trials, finals: pd.DataFrame, say) -> None:
        if self.spec.search.reeval_top:
            rows = {f"selected-{j}": row for j, (_, row) in enumerate(chosen.iterrows())}
            for label, gap in reeval.selection_gaps(trials, rows, finals).items():
                say(reeval.gap_line(label, gap))
        for (label, method), grp in finals.groupby(["label", "cfg.method.name"]):
            say(
                f"  final {label} ({method}): test_acc mean={grp['test_acc'].mean():.4f} over "
                f"{grp['seed'].nunique()} seeds, cum_saving="
                f"{100 * grp['cum_saving_restricted'].mean():.2f}%"
            )


def _protocol_trials(spec: WorkloadSpec) -> pd.DataFrame:
    """Searcher ``none``: every grid combination, unsearched, goes to the final stage."""
    keys = list(spec.search.grid)
    combos = [
        dict(zip(keys, v, strict=True)) for v in itertools.product(*spec.search.grid.values())
    ]
    trials = table.build(
        spec,
        "protocol",
        [table.Entry(c) for c in combos],
        searcher="none",
        objective=spec.search.objective,
        missing="not searched",
    )
    return trials.assign(selected=True)


def _search(spec: WorkloadSpec, run: Launcher, reference: float | None):
    """The validation-only search stage (early-ending under its scheduler and client-round
    budget, if any); (its Tune results, the budget's ledger or None)."""
    # HyperBand's brackets need every trial at once (launch._synchronous)
    alg, metric, mode, space = make_searcher(
        spec, 0 if spec.search.scheduler == "hyperband" else run.concurrency
    )
    from .budget import ClientRoundBudget
    from .study_search import MakeScheduler

    budget, make = ClientRoundBudget.of(spec), MakeScheduler.of(spec, own_metric=not metric)
    results = run(
        spec,
        "search",
        param_space=space,
        search_alg=alg,
        metric=metric,
        mode=mode,
        scheduler=make() if make else None,
        stop=budget,
        num_samples=spec.search.num_samples,
        total=spec.trials_total(),
        reference=reference,
    )
    return results, budget


def _choose(spec: WorkloadSpec, top: int, trials: pd.DataFrame):
    """(the configurations the final stage reruns, the trials table): every protocol point;
    the Pareto front; else the best by :mod:`.selection`'s rule (the searcher's objective,
    with a fallback below the retention bar), by the means over the further search seeds
    where robust selection re-evaluated its candidates (:func:`.pipeline.reevaluate`)."""
    s = spec.search
    if s.searcher == "none":
        return trials, trials
    if s.objective == "pareto":
        return _pareto(trials, top), trials
    bar = _bar(spec, trials)
    values = selection.values(trials, s.reeval_seeds)
    once = values.drop_duplicates("run_id")  # a searcher that repeated a point: chosen once
    got = selection.choose(once, [s.objective], bar, top, bool(s.reeval_top), fallback=True)
    chosen = got.get(None, {}).get(s.objective, values.head(0))
    drop = ["sel_val", "sel_saving"] + ([] if s.reeval_top else ["selection_mean"])
    return chosen.drop(columns=drop), values.drop(columns=drop)


def _say_choice(spec: WorkloadSpec, chosen, trials, say) -> None:
    """The console's line on what was chosen; no finished trial is the user's error, with every
    trial's error listed."""
    trials_path = join(spec.results_dir, trials_file(spec.name))
    if spec.search.searcher == "none":
        say(f"protocol: {len(chosen)} grid configurations go straight to the final stage")
        return
    if len(chosen):
        best = chosen.iloc[0]
        say(
            f"best configuration (validation only): val_acc={best.val_acc:.4f} "
            f"cum_saving={100 * (best.cum_saving_restricted or 0):.2f}% params={best.params_json}"
        )
        return
    say(f"no search trial finished ({len(trials)} trials); trials table: {trials_path}")
    for _, t in trials.iterrows():
        say(
            f"  trial {t['trial_id'] or '?'} {t['status']}: {t['error'] or 'no error text'} "
            f"params={t['params_json']}"
        )
    raise UserError(
        f"sweep {spec.name!r}: no search trial finished — every trial's error "
        f"is listed above and in {trials_path}"
    )


def final_points(spec: ExperimentSpec, selected: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The final stage's runs (:func:`.launch.final_points`): the selected configurations,
    ``selected-<j>``, then the references, the unsearched arms (a long sweep finishes its
    answer before its controls)."""
    configs = [(f"selected-{j}", params) for j, params in enumerate(selected)]
    return launch.final_points(configs, spec.final.seeds, spec.compare)


__all__ = ["SweepOutcome", "derive_concurrency", "pareto_front", "run_sweep"]
