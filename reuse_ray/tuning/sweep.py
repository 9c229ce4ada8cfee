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
import json
import math
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..errors import UserError
from ..results import read_table
from ..results.storage import Storage, dated_folder, display, join, latest_dated
from . import reeval
from .launch import derive_concurrency, launch
from .spaces import load_space
from .spec import SweepSpec
from .trainable import objective_value
from .trials import trial_row, trials_file, write_trials


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
    """The search's trial scheduler (None for ``scheduler: none``), on the round of each trial's
    latest validation (``val_round``), so a rung is judged on a measured accuracy. The metric
    is the searcher's when the Tune config names one (grid), else the objective."""
    s = spec.search
    if s.scheduler == "none":
        return None
    from ray.tune.schedulers import ASHAScheduler, HyperBandScheduler

    rounds = spec.run_config().fl.rounds
    target = {} if metric else {"metric": "objective", "mode": "max"}
    if s.scheduler == "asha":
        return ASHAScheduler(
            time_attr="val_round",
            max_t=rounds,
            grace_period=s.grace_period,
            reduction_factor=s.reduction_factor,
            **target,
        )
    return HyperBandScheduler(
        time_attr="val_round", max_t=rounds, reduction_factor=s.reduction_factor, **target
    )


def pareto_front(df: pd.DataFrame) -> pd.Series:
    """True where no other row has val_acc ≥ and cum_up_restricted ≤ with one strict."""
    acc, up = df["val_acc"].to_numpy(), df["cum_up_restricted"].to_numpy()
    out = []
    for i in range(len(df)):
        dominated = (acc >= acc[i]) & (up <= up[i]) & ((acc > acc[i]) | (up < up[i]))
        out.append(not dominated.any())
    return pd.Series(out, index=df.index)


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
    from ..engine import RunHooks, run_fl
    from .trainable import trial_backend

    # the trials' engine settings (device, vectorize, channels_last, workers), so the bar is
    # measured as the trials it judges are
    cfg = spec.run_config(spec.search.reference)
    say(f"retention reference run {cfg.run_id} ({spec.search.reference or 'base config'})")
    hooks = RunHooks(stage="search", evaluate_test=False, sweep=spec.name, trial_id="reference")
    summary = run_fl(cfg, backend=trial_backend(spec, cfg, "reference"), hooks=hooks)
    return summary.row["final_val_acc"]


def _trials_table(
    spec: SweepSpec, results, reference: float | None, stage: str = "search"
) -> pd.DataFrame:
    runs, per_round = _safe_runs(spec.results_dir), spec.run_config().fl.clients_per_round
    rows = []
    for r in results:
        metrics = r.metrics or {}
        if metrics.get("status") == "budget spent":
            continue  # started after the client-round budget was spent: no configuration tried
        params = dict((r.config or {}).get("final", r.config or {}))
        seed = params.pop("seed", None) if stage == "reeval" else None
        try:
            run_id = spec.run_config(params if seed is None else {**params, "seed": seed}).run_id
        except Exception:  # noqa: BLE001 - a bad parameter combination is reported as an error
            run_id = None
        status = "error" if r.error else metrics.get("status", "unknown")
        val = metrics.get("val_acc")
        saving = metrics.get("cum_saving_restricted")
        reached = metrics.get("round")
        if run_id is not None and runs is not None and run_id in runs.index:
            # the runs table is the record: a run that diverged before its first evaluation has
            # no validation accuracy there (NaN), whatever Tune was told to keep its searcher going
            status = runs.loc[run_id, "status"] if not r.error else "error"
            val = _float_or_nan(runs.loc[run_id, "final_val_acc"])
            saving = _float_or_nan(runs.loc[run_id, "cum_saving_restricted"])
            reached = int(runs.loc[run_id, "rounds_completed"])
        known = val is not None and not math.isnan(val)
        value = objective_value(
            spec.search.objective, val, saving, reference, spec.search.retention
        )
        rows.append(
            trial_row(
                sweep=spec.name,
                stage=stage,
                trial_id=metrics.get("trial_id"),
                run_id=run_id,
                searcher=spec.search.searcher,
                objective=spec.search.objective,
                params=params,
                status=str(status),
                val_acc=val,
                cum_up_restricted=metrics.get("cum_up_restricted"),
                cum_saving_restricted=saving,
                reference_val_acc=reference,
                objective_value=value if known else None,
                error=_error_text(r.error) if r.error else None,
                round_reached=reached,
                client_rounds=None if reached is None else int(reached) * per_round,
                seed=seed,
            )
        )
    df = pd.DataFrame(rows)
    if len(df):
        ok = df["status"].eq("finished") & df["val_acc"].notna()
        if ok.any():
            df.loc[ok, "on_pareto_front"] = pareto_front(df[ok]).to_numpy()
    return df


def _error_text(err: BaseException) -> str:
    """One line naming what failed in a trial: the original exception, not Ray's wrapper."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException) and cause is not err:
        return f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}"
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in str(err).splitlines()]
    lines = [ln for ln in lines if ln]
    return lines[-1] if lines else type(err).__name__


def _float_or_nan(v: Any) -> float:
    return float("nan") if v is None or pd.isna(v) else float(v)


def _safe_runs(results_dir: str) -> pd.DataFrame | None:
    try:
        runs = read_table(results_dir, "runs")
    except Exception:  # noqa: BLE001 - no runs yet
        return None
    return runs.drop_duplicates("run_id", keep="last").set_index("run_id")


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
) -> SweepOutcome:
    """Search (unless ``final_only``), write the trials table, then the final stage.

    ``verbose``: 0 prints our own trial lines only; 1 adds Tune's status tables; 2 also every
    trial's per-round lines."""
    from ..distributed import ensure_ray

    # connect first: a cluster that does not answer leaves no (dated) folder behind
    ensure_ray((spec.base.get("engine") or {}).get("ray_address"))
    spec = sweep_folder(spec, resume or final_only)
    store = Storage.of(spec.results_dir)
    where = display(spec.results_dir)
    say(f"results root: {where}")
    import ray

    resources = ray.cluster_resources()
    concurrency = derive_concurrency(spec, resources)
    if verbose < 1:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
    started = any(store.is_dir("_tune", f"{spec.name}-{stage}") for stage in ("search", "final"))
    if started and not resume and not final_only:
        raise UserError(
            f"sweep {spec.name!r} already has results in {where}; pass --resume to continue "
            "it, or --results DIR for a new one"
        )
    if resume and not started:
        raise UserError(
            f"--resume: nothing to resume in {where} (no sweep {spec.name!r} was started "
            "there) — run it without --resume to start one there, or give the folder of the "
            "interrupted sweep with --results"
        )
    store.check_writable(keep=True)

    say(
        f"sweep {spec.name}: {spec.search.searcher} over "
        f"{spec.search.space or list(spec.search.grid)} ({spec.search.objective}), "
        f"{spec.search.num_samples} samples, {concurrency} concurrent trials of "
        f"{spec.trial.bundles()} on {resources.get('CPU', 0):g} CPUs / "
        f"{resources.get('GPU', 0):g} GPUs; "
        f"results in {where}"
    )
    trials_path = join(spec.results_dir, trials_file(spec.name))
    reference = None
    if spec.search.searcher == "none":
        import itertools

        keys = list(spec.search.grid)
        combos = [
            dict(zip(keys, v, strict=True)) for v in itertools.product(*spec.search.grid.values())
        ]
        trials = pd.DataFrame(
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
    elif final_only:
        if not store.is_file(trials_file(spec.name)):
            raise UserError(f"--final needs a finished search: {trials_path} is missing")
        trials = pd.read_parquet(store.path(trials_file(spec.name)), filesystem=store.fs)
    else:
        reference = _reference_val(spec, say)
        alg, metric, mode, space = make_searcher(spec, concurrency)
        budget = None
        if spec.search.client_rounds:
            from .budget import ClientRoundBudget

            per_round = spec.run_config().fl.clients_per_round
            budget = ClientRoundBudget(spec.search.client_rounds, per_round)
        results = launch(
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
            concurrency=concurrency,
            resume=resume,
            reference=reference,
            say=say,
            verbose=verbose,
            mlflow=mlflow,
        )
        trials = _trials_table(spec, results, reference)
        if budget is not None:
            say(
                f"client-round budget: {budget.spent()} of {spec.search.client_rounds} spent "
                f"by {len(trials)} configurations"
            )
    top = spec.final.top if spec.final else 1
    if spec.search.searcher == "none":
        chosen = trials
    elif spec.search.reeval_top:
        trials = reeval.run_stage(
            spec, trials, reference, _trials_table, concurrency, resume, say, verbose, mlflow
        )
        chosen, trials = reeval.choose(trials, spec, top)
    else:
        chosen = select(trials, spec, top)
    trials["selected"] = trials["run_id"].isin(chosen["run_id"])
    write_trials(spec.results_dir, spec.name, trials)
    selected = [json.loads(p) for p in chosen["params_json"]]
    if spec.search.searcher == "none":
        say(f"protocol: {len(chosen)} grid configurations go straight to the final stage")
    elif len(chosen):
        best = chosen.iloc[0]
        say(
            f"best configuration (validation only): val_acc={best.val_acc:.4f} "
            f"cum_saving={100 * (best.cum_saving_restricted or 0):.2f}% params={best.params_json}"
        )
    else:
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
    final_runs = None
    if spec.final is not None and selected:
        # the selected configurations on every seed first, the references after: Tune starts
        # grid points in order, so a long sweep finishes its answer before its controls
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
        from ray import tune

        say(
            f"final stage: {len(points)} runs on fresh seeds {list(spec.final.seeds)}, "
            "test split read once at the final round"
        )
        launch(
            spec,
            "final",
            param_space={"final": tune.grid_search(points)},
            concurrency=concurrency,
            resume=resume,
            say=say,
            verbose=verbose,
            total=len(points),
            mlflow=mlflow,
        )
        runs = read_table(spec.results_dir, "runs")
        final_runs = runs[(runs["stage"] == "final") & (runs["sweep"] == spec.name)]
        if spec.search.reeval_top:
            for line in reeval.gap_lines(trials, chosen, final_runs):
                say(line)
        for (label, method), grp in final_runs.groupby(["label", "cfg.method.name"]):
            say(
                f"  final {label} ({method}): test_acc mean={grp['test_acc'].mean():.4f} over "
                f"{grp['seed'].nunique()} seeds, cum_saving="
                f"{100 * grp['cum_saving_restricted'].mean():.2f}%"
            )
    say(f"Parquet: {where}  (pandas.read_parquet(DIR/'rounds'))")
    report_at_end(spec.results_dir, say)
    return SweepOutcome(spec.results_dir, trials, selected, final_runs)


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
