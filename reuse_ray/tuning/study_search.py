"""A study's search with early stopping and an equal budget per arm (design: Validation-only
search): every arm's configurations are drawn up front (:func:`.parse.arm_points`); Tune
runs them arm by arm through :class:`ArmPoints`, which stops offering an arm's points once the
search's ledger (:class:`.budget.ClientRoundBudget`, also its stopper) says the arm has spent
``budget.client_rounds``; :class:`PerArm` gives every arm its own ASHA or HyperBand, so an arm's
trials are stopped only against the same arm's rungs (a weak method is not cut by a strong
one's accuracy).
"""

from __future__ import annotations

import pickle
from typing import Any

from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher


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
        kind: str,
        max_t: int,
        grace_period: int,
        reduction_factor: int,
        own_metric: bool = True,
    ):
        self.kind, self.max_t = kind, max_t
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
        if self.kind == "asha":
            return ASHAScheduler(
                max_t=self.max_t,
                grace_period=self.grace_period,
                reduction_factor=self.reduction_factor,
                **common,
            )
        return HyperBandScheduler(
            max_t=self.max_t, reduction_factor=self.reduction_factor, **common
        )


__all__ = ["ArmPoints", "MakeScheduler", "PerArm"]
