"""The search stage (design: Validation-only search): no trial reads the test split.

A study's arms draw their configurations up front (:func:`.parse.arm_points`, a seeded random
draw from each arm's space and the shared knobs); Tune runs them as a grid or, with a scheduler
or a client-round budget, through :class:`ArmPoints`, which stops offering an arm's points once
the search's ledger (:class:`.budget.ClientRoundBudget`, also its stopper) says the arm has
spent its budget, and :class:`PerArm` gives every arm (and uplink level) its own ASHA or
HyperBand, so a trial is stopped only against its own arm's rungs. A sweep's one searched arm
draws from its searcher instead (:func:`make_searcher`: TPE, NSGA-II, random with Optuna, or a
grid), with the retention objective's reference run measured first; searcher ``none`` sends
its grid unsearched to the final stage (:func:`protocol_trials`).
"""

from __future__ import annotations

import itertools
import pickle
from typing import Any

import pandas as pd
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

from . import trials as table
from .launch import Launcher
from .spaces import load_space
from .spec import ExperimentSpec, WorkloadSpec


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


def reference_val(spec: WorkloadSpec, say) -> float | None:
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


def protocol_trials(spec: WorkloadSpec) -> pd.DataFrame:
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


def searcher_search(spec: WorkloadSpec, run: Launcher, reference: float | None):
    """The validation-only search stage (early-ending under its scheduler and client-round
    budget, if any); (its Tune results, the budget's ledger or None)."""
    # HyperBand's brackets need every trial at once (launch._synchronous)
    alg, metric, mode, space = make_searcher(
        spec, 0 if spec.search.scheduler == "hyperband" else run.concurrency
    )
    from .budget import ClientRoundBudget

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


def drawn_search(spec: ExperimentSpec, sweep: WorkloadSpec, points: list, run, w: str):
    """The workload's validation-only search stage: every arm's points, each arm's budget;
    its Tune results."""
    budget, n = sweep.search.client_rounds, spec.trials_per_arm
    run.say(
        f"[{w}] search: {len(points)} trials ({n} per arm), {run.concurrency} at a time"
        if not budget
        else f"[{w}] search: up to {n} configurations per arm, {budget} client-rounds per "
        f"arm, {run.concurrency} trial{'s' if run.concurrency != 1 else ''} at a time"
    )
    return run(
        sweep,
        "search",
        total=f"at most {len(points)}" if budget else len(points),
        **_drawn_args(spec, sweep, points),
    )


def _drawn_args(spec: ExperimentSpec, sweep: WorkloadSpec, points: list) -> dict:
    """How Tune gets the search's points: a plain grid, or (with a scheduler or a client-round
    budget) :class:`.search.ArmPoints` with a scheduler per arm and a budget per arm."""
    s = sweep.search
    if not s.client_rounds and s.scheduler == "none":
        from ray import tune

        return {"param_space": {"final": tune.grid_search(points)}}
    from .budget import ClientRoundBudget

    ledger = ClientRoundBudget.of(sweep, [a.name for a in spec.arms if a.searched])
    return {
        "param_space": {},
        "search_alg": ArmPoints(points, ledger),
        "num_samples": len(points),
        "scheduler": None
        if s.scheduler == "none"
        else PerArm(MakeScheduler.of(sweep), spec.uplink_levels, route_at=s.grace_period),
        "stop": ledger,
    }


def _label(config: dict[str, Any]) -> str | None:
    return (config.get("final") or config).get("label")


class ArmPoints(Searcher):
    """Offers ``points`` (each a Tune ``final`` config with its arm as ``label``) in order;
    with a ``ledger`` (the search's :class:`.budget.ClientRoundBudget`), an arm's remaining
    points are skipped once the ledger says the arm has spent its budget."""

    def __init__(self, points: list[dict[str, Any]], ledger=None):
        super().__init__(metric="objective", mode="max")
        self.points, self.ledger, self.next = list(points), ledger, 0

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        while self.next < len(self.points):
            point = self.points[self.next]
            self.next += 1
            if self.ledger is not None and self.ledger.exhausted(point["label"]):
                continue  # this arm's budget is spent: its further points are never tried
            return {"final": dict(point)}
        return Searcher.FINISHED

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        pass  # the ledger counts the rounds (as the search's stopper)

    def save(self, checkpoint_path: str) -> None:
        # where it is in the points; the ledger is the stopper's, restored with it
        state = {k: v for k, v in self.__dict__.items() if k != "ledger"}
        with open(checkpoint_path, "wb") as f:  # read back only after launch's ownership checks
            pickle.dump(state, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)  # noqa: S301 - the user's own Tune state
        for old in ("budget", "per_round", "arm_of", "reached", "ledger"):  # an older state's
            state.pop(old, None)
        self.__dict__.update(state)


def uplink_bin(levels: tuple[float, ...], result: dict[str, Any]) -> str:
    """The uplink level a trial's result falls in so far: the smallest level at least its
    cumulative restricted uplink as a fraction of the dense reference (1 − saving), or
    ``above`` (the study's level names: ``up10`` …)."""
    from .spec import level_name

    fraction = 1.0 - float(result.get("cum_saving_restricted") or 0.0)
    return next((level_name(v) for v in levels if fraction <= v + 1e-12), "above")


class PerArm(FIFOScheduler):
    """One trial scheduler per arm, made by ``make()`` when the arm's first trial arrives;
    every event goes to the scheduler of the trial's arm.

    With uplink ``levels`` (a study's ``uplink_levels``), one scheduler per arm and level: a
    trial joins the scheduler of the level its uplink has measured so far when it reaches the
    first rung (``route_at``, in its time attribute, before which no scheduler judges it), so a
    compressed configuration is judged against others of its level, not stopped because a
    denser one of its arm is more accurate: every level an arm can reach keeps candidates."""

    def __init__(self, make, levels: tuple[float, ...] = (), route_at: int = 0):
        super().__init__()
        self.make, self.arms = make, {}
        self.levels, self.route_at = tuple(levels), int(route_at)
        self.routed: dict[str, str] = {}  # trial id -> its scheduler's key (levels only)

    def _get(self, key: str) -> TrialScheduler:
        if key not in self.arms:
            self.arms[key] = self.make()
        return self.arms[key]

    def _of(self, trial) -> TrialScheduler | None:
        if not self.levels:
            return self._get(_label(trial.config))
        key = self.routed.get(trial.trial_id)
        return None if key is None else self._get(key)

    def set_search_properties(self, metric, mode, **spec) -> bool:
        return True  # every arm's scheduler names its metric and mode itself

    def on_trial_add(self, tune_controller, trial) -> None:
        if not self.levels:  # with levels: added to its level's scheduler at its first rung
            self._of(trial).on_trial_add(tune_controller, trial)

    def on_trial_error(self, tune_controller, trial) -> None:
        if (s := self._of(trial)) is not None:
            s.on_trial_error(tune_controller, trial)

    def on_trial_result(self, tune_controller, trial, result) -> str:
        s = self._of(trial)
        if s is None:
            if (result.get("val_round") or 0) < self.route_at:
                return TrialScheduler.CONTINUE
            key = f"{_label(trial.config)}|{uplink_bin(self.levels, result)}"
            self.routed[trial.trial_id] = key
            s = self._get(key)
            s.on_trial_add(tune_controller, trial)
        return s.on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller, trial, result) -> None:
        if (s := self._of(trial)) is not None:
            s.on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller, trial) -> None:
        if (s := self._of(trial)) is not None:
            s.on_trial_remove(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller):
        for s in self.arms.values():
            trial = s.choose_trial_to_run(tune_controller)
            if trial is not None:
                return trial
        return super().choose_trial_to_run(tune_controller)

    def debug_string(self) -> str:
        return "\n".join(f"{a}: {s.debug_string()}" for a, s in self.arms.items())


class MakeScheduler:
    """The one factory of a search's trial scheduler (a sweep's, and each arm's in a study):
    ASHA or HyperBand on the round of each trial's latest validation (``val_round``), so a
    rung is judged on a measured accuracy; picklable (Tune saves the scheduler with its state).
    ``own_metric``: the scheduler ranks on the objective itself; else on the metric the Tune
    config names (a grid search's)."""

    def __init__(
        self,
        scheduler: str,
        max_t: int,
        grace_period: int,
        reduction_factor: int,
        own_metric: bool = True,
    ):
        self.scheduler, self.max_t = scheduler, max_t
        self.grace_period, self.reduction_factor = grace_period, reduction_factor
        self.own_metric = own_metric

    @classmethod
    def of(cls, spec, own_metric: bool = True) -> MakeScheduler | None:
        """The factory of a workload's search (:class:`.spec.WorkloadSpec`): its
        ``search.scheduler`` over its rounds; None for ``scheduler: none``."""
        s = spec.search
        if s.scheduler == "none":
            return None
        rounds = spec.run_config().fl.rounds
        return cls(s.scheduler, rounds, s.grace_period, s.reduction_factor, own_metric)

    def __call__(self) -> TrialScheduler:
        from ray.tune.schedulers import ASHAScheduler, HyperBandScheduler

        common = {"time_attr": "val_round"}
        if self.own_metric:
            common.update(metric="objective", mode="max")
        if self.scheduler == "asha":
            return ASHAScheduler(
                max_t=self.max_t,
                grace_period=self.grace_period,
                reduction_factor=self.reduction_factor,
                **common,
            )
        return HyperBandScheduler(
            max_t=self.max_t, reduction_factor=self.reduction_factor, **common
        )


__all__ = [
    "ArmPoints",
    "MakeScheduler",
    "PerArm",
    "drawn_search",
    "make_searcher",
    "protocol_trials",
    "reference_val",
    "searcher_search",
]
