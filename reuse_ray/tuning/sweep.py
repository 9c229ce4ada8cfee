"""Running a sweep: the validation-only search stage, the trials table and the final stage.

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

import dataclasses
import itertools
import json
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..errors import UserError
from ..results.storage import Storage, dated_folder, display, join, latest_dated
from . import reeval
from .launch import Launcher, derive_concurrency, set_aside_damaged
from .spaces import load_space
from .spec import SweepSpec
from .trials import pareto_front, search_trials, trial_row, trials_file, write_trials


@dataclass(frozen=True)
class SweepOutcome:
    results_dir: str
    trials: pd.DataFrame
    selected: list[dict[str, Any]]
    final_runs: pd.DataFrame | None


def make_searcher(spec: SweepSpec, concurrency: int = 0):
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


def make_scheduler(spec: SweepSpec, metric: str | None):
    """The search's trial scheduler (None for ``scheduler: none``): :class:`.study_search.
    MakeScheduler`'s, ranking on the searcher's metric where the Tune config names one (grid),
    else on the objective."""
    from .study_search import MakeScheduler

    s = spec.search
    if s.scheduler == "none":
        return None
    rounds = spec.run_config().fl.rounds
    make = MakeScheduler(s.scheduler, rounds, s.grace_period, s.reduction_factor, not metric)
    return make()


def sweep_folder(spec, resume: bool, what: str = "sweep"):
    """The spec (a sweep's or a study's) with its own folder: a folder of dated sweeps gets a
    fresh dated folder (``--resume``: its newest)."""
    if not spec.dated:
        return spec
    if resume:
        newest = latest_dated(spec.results_dir)
        if newest is None:
            raise UserError(
                f"--resume: no earlier {what} {spec.name!r} under "
                f"{display(spec.results_dir)} — run it without --resume, or give "
                "its folder with --results"
            )
        return dataclasses.replace(spec, results_dir=newest, dated=False)
    return dataclasses.replace(spec, results_dir=dated_folder(spec.results_dir), dated=False)


def _reference_val(spec: SweepSpec, say) -> float | None:
    """The retention objective's reference: validation accuracy of the reference run."""
    if spec.search.objective != "retention":
        return None
    from ..engine import RunHooks
    from ..runner import run_fl
    from .trainable import trial_backend

    # the trials' engine settings (device, vectorize, channels_last, workers), so the bar is
    # measured as the trials it judges are
    cfg = spec.run_config(spec.search.reference)
    say(f"retention reference run {cfg.run_id} ({spec.search.reference or 'base config'})")
    hooks = RunHooks(stage="search", evaluate_test=False, sweep=spec.name, trial_id="reference")
    summary = run_fl(cfg, backend=trial_backend(spec, cfg, "reference"), hooks=hooks)
    return summary.row["final_val_acc"]


def select(df: pd.DataFrame, spec: SweepSpec, top: int) -> pd.DataFrame:
    """The configurations the final stage reruns, chosen on validation metrics only."""
    ok = df[df["status"].eq("finished") & df["val_acc"].notna()].drop_duplicates("run_id")
    if spec.search.objective == "pareto":
        ok = ok[ok["on_pareto_front"]]
        return ok.sort_values(["val_acc", "cum_up_restricted"], ascending=[False, True]).head(top)
    return ok.sort_values(["objective_value", "val_acc"], ascending=False).head(top)


def run_sweep(
    spec: SweepSpec,
    resume: bool = False,
    final_only: bool = False,
    say=print,
    verbose: int = 0,
    mlflow: str | None = None,
    address: str | None = None,
) -> SweepOutcome:
    """Search (unless ``final_only``), write the trials table, then the final stage.

    ``verbose``: 0 prints our own trial lines only; 1 adds Tune's status tables; 2 also every
    trial's per-round lines. ``address``: the Ray cluster to join (else the base config's
    ``engine.ray_address``, else ``$RAY_ADDRESS``, else a new local Ray)."""
    spec, run = _open(spec, resume, final_only, say, verbose, mlflow, address)
    trials_path = join(spec.results_dir, trials_file(spec.name))
    reference = None
    if spec.search.searcher == "none":
        trials = _protocol_trials(spec)
    elif final_only:
        trials = _finished_search(spec, trials_path)
    else:
        reference = _reference_val(spec, say)
        trials = _search(spec, run, reference)
    chosen, trials = _choose(spec, run, trials, reference)
    trials["selected"] = trials["run_id"].isin(chosen["run_id"])
    write_trials(spec.results_dir, spec.name, trials)
    _say_choice(spec, chosen, trials, trials_path, say)
    selected = [json.loads(p) for p in chosen["params_json"]]
    final_runs = None
    if spec.final is not None and selected:
        final_runs = _final_stage(spec, run, selected, trials, chosen)
    say(f"Parquet: {display(spec.results_dir)}  (pandas.read_parquet(DIR/'rounds'))")
    report_at_end(spec.results_dir, say)
    return SweepOutcome(spec.results_dir, trials, selected, final_runs)


def _open(
    spec: SweepSpec, resume, final_only, say, verbose, mlflow, address=None
) -> tuple[SweepSpec, Launcher]:
    """Connect, name the sweep's folder (after connecting: a cluster that does not answer
    leaves no dated folder behind), refuse a start over results or a resume of nothing."""
    from ..distributed import ensure_ray

    ensure_ray(address or (spec.base.get("engine") or {}).get("ray_address"))
    spec = sweep_folder(spec, resume or final_only)
    where = display(spec.results_dir)
    # started: its Tune experiments are there, or (--final over a copied folder) its trials
    store = Storage.of(spec.results_dir)
    started = any(store.is_dir("_tune", f"{spec.name}-{s}") for s in ("search", "final"))
    started = started or (final_only and store.is_file(trials_file(spec.name)))
    open_folder(spec, resume, final_only, "sweep", started, say)
    import ray

    resources = ray.cluster_resources()
    concurrency = derive_concurrency(spec, resources)
    if verbose < 1:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
    say(
        f"sweep {spec.name}: {spec.search.searcher} over "
        f"{spec.search.space or list(spec.search.grid)} ({spec.search.objective}), "
        f"{spec.search.num_samples} samples, {concurrency} concurrent trials of "
        f"{spec.trial.bundles()} on {resources.get('CPU', 0):g} CPUs / "
        f"{resources.get('GPU', 0):g} GPUs; "
        f"results in {where}"
    )
    return spec, Launcher(concurrency, resume, say, verbose, mlflow)


def open_folder(spec, resume: bool, final_only: bool, what: str, started: bool, say) -> None:
    """A sweep's or a study's folder, opened as asked: refuse a start over earlier results,
    or a ``--resume``/``--final`` where nothing was started; check it is writable; with
    either, set every damaged table file aside (named on the console)."""
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
    if resume or final_only:
        set_aside_damaged(spec.results_dir, say)


def _protocol_trials(spec: SweepSpec) -> pd.DataFrame:
    """Searcher ``none``: every grid combination, unsearched, goes to the final stage."""
    keys = list(spec.search.grid)
    combos = [
        dict(zip(keys, v, strict=True)) for v in itertools.product(*spec.search.grid.values())
    ]
    return pd.DataFrame(
        [
            trial_row(
                sweep=spec.name,
                stage="protocol",
                run_id=spec.run_config(c).run_id,
                searcher="none",
                objective=spec.search.objective,
                params=c,
                status="not searched",
                selected=True,
            )
            for c in combos
        ]
    )


def _finished_search(spec: SweepSpec, trials_path: str) -> pd.DataFrame:
    """``--final``: the trials table an earlier search wrote."""
    store = Storage.of(spec.results_dir)
    if not store.is_file(trials_file(spec.name)):
        raise UserError(f"--final needs a finished search: {trials_path} is missing")
    return pd.read_parquet(store.path(trials_file(spec.name)), filesystem=store.fs)


def _search(spec: SweepSpec, run: Launcher, reference: float | None) -> pd.DataFrame:
    """The validation-only search stage (early-ending under its scheduler and client-round
    budget, if any); its trials table."""
    # HyperBand's brackets need every trial at once (launch._synchronous)
    alg, metric, mode, space = make_searcher(
        spec, 0 if spec.search.scheduler == "hyperband" else run.concurrency
    )
    budget = None
    if spec.search.client_rounds:
        from .budget import ClientRoundBudget

        per_round = spec.run_config().fl.clients_per_round
        budget = ClientRoundBudget(spec.search.client_rounds, per_round)
    results = run(
        spec,
        "search",
        param_space=space,
        search_alg=alg,
        metric=metric,
        mode=mode,
        scheduler=make_scheduler(spec, metric),
        stop=budget,
        num_samples=spec.search.num_samples,
        total=spec.trials_total(),
        reference=reference,
    )
    trials = search_trials(spec, results, reference)
    if budget is not None:
        run.say(
            f"client-round budget: {budget.spent()} of {spec.search.client_rounds} spent "
            f"by {len(trials)} configurations"
        )
    return trials


def _choose(
    spec: SweepSpec, run: Launcher, trials: pd.DataFrame, reference: float | None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the configurations the final stage reruns, the trials table): every protocol point;
    else the best by objective, after re-evaluation on further search seeds if asked."""
    top = spec.final.top if spec.final else 1
    if spec.search.searcher == "none":
        return trials, trials
    if spec.search.reeval_top:
        trials = reeval.run_stage(spec, trials, reference, search_trials, run)
        return reeval.choose(trials, spec, top)
    return select(trials, spec, top), trials


def _say_choice(spec: SweepSpec, chosen, trials, trials_path: str, say) -> None:
    """The console's line on what was chosen; no finished trial is the user's error, with every
    trial's error listed."""
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


def final_points(spec: SweepSpec, selected: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The final stage's runs: the selected configurations on every seed first, the references
    after (Tune starts grid points in order, so a long sweep finishes its answer before its
    controls); a reference with ``seeds`` runs on those only."""
    points = [
        dict(params, seed=seed, label=f"selected-{j}")
        for seed in spec.final.seeds
        for j, params in enumerate(selected)
    ]
    for seed in spec.final.seeds:
        for ref in spec.final.compare:
            fields = {k: v for k, v in ref.items() if k != "seeds"}
            if seed in ref.get("seeds", spec.final.seeds):
                points.append(dict(fields, seed=seed))
    return points


def _final_stage(spec: SweepSpec, run: Launcher, selected, trials, chosen) -> pd.DataFrame:
    """The selected configurations and the references on the fresh seeds, the test split read
    once at the final round; the console's per-label summary (and selection gaps)."""

    say = run.say
    points = final_points(spec, selected)
    say(
        f"final stage: {len(points)} runs on fresh seeds {list(spec.final.seeds)}, "
        "test split read once at the final round"
    )
    final_runs = run.final(spec, points)
    if spec.search.reeval_top:
        for line in reeval.gap_lines(trials, chosen, final_runs):
            say(line)
    for (label, method), grp in final_runs.groupby(["label", "cfg.method.name"]):
        say(
            f"  final {label} ({method}): test_acc mean={grp['test_acc'].mean():.4f} over "
            f"{grp['seed'].nunique()} seeds, cum_saving="
            f"{100 * grp['cum_saving_restricted'].mean():.2f}%"
        )
    return final_runs


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


__all__ = ["SweepOutcome", "derive_concurrency", "pareto_front", "run_sweep"]
