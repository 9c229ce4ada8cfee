"""A search budget in client training rounds (design: Validation-only search): the search
stops once its trials together have trained ``search.client_rounds`` client-rounds, so a
scheduler that stops weak trials early buys more configurations with the same budget.

A client-round is one selected client in one round (``fl.clients_per_round`` per round a trial
reached), the unit FedHPO-B-style benchmarks count a federated search's cost in.

The budget is enforced in one place, :class:`ClientRoundBudget`: the search's one ledger (the
rounds each run reached, from its trials' reports) and its one rule (a group has spent its
budget once its runs' rounds × clients a round reach it). Tune consults it as the search's
stopper: a trial that reports for a spent group stops there (status ``stopped``, its rows a
prefix of the full run's), and once every group has spent its budget the search ends — Tune
starts no further trial and stops the running ones between their rounds. A study gives every
arm its own budget (the groups are the arms, by the ``label`` their trials report), and its
searcher (:class:`.search.ArmPoints`) asks the same ledger before it offers an arm's
next configuration.

The ledger survives a restart: Tune restores the stopper and the searcher from one pickle (so
they share it), and on its first use after that the ledger reads the rounds the runs table
recorded for the search's runs, its own finished runs kept from a copied folder included.
"""

from __future__ import annotations

from typing import Any

from ray.tune.stopper import Stopper


class ClientRoundBudget(Stopper):
    """The client-round ledger and rule of one search stage: ``budget`` client-rounds per
    group (with ``labels``: a study's arms, each its own; else the whole search), counted as
    Σ over the group's runs of (rounds reached × ``clients_per_round``). ``results`` (the
    results folder and the sweep's name) seeds the ledger, once, from the runs table."""

    @classmethod
    def of(cls, spec, labels: list[str] | None = None) -> ClientRoundBudget | None:
        """The ledger of a workload's search (:class:`.spec.WorkloadSpec`): its
        ``search.client_rounds`` per group, seeded from its runs table; None without a
        budget."""
        if not spec.search.client_rounds:
            return None
        per_round = spec.run_config().fl.clients_per_round
        return cls(spec.search.client_rounds, per_round, labels, (spec.results_dir, spec.name))

    def __init__(
        self,
        budget: int,
        clients_per_round: int,
        labels: list[str] | tuple[str, ...] | None = None,
        results: tuple[str, str] | None = None,
    ):
        self.budget, self.per_round = int(budget), int(clients_per_round)
        self.per_label = labels is not None
        self.labels = tuple(labels or ())
        self.results = results
        self.reached: dict[str, int] = {}  # run id -> the most rounds it reached
        self.group: dict[str, str | None] = {}  # run id -> its group (a study's arm)
        self.seeded = False

    def __setstate__(self, state: dict[str, Any]) -> None:
        # restored by Tune (tuner.pkl, pickled when the stage began): the runs table is the
        # record of what was spent, read again on first use; the trials' reports add to it
        self.__dict__.update(state)
        self.__dict__.setdefault("labels", ())
        self.__dict__.setdefault("results", None)
        self.reached, self.group, self.seeded = {}, {}, False

    def record(self, run: str, label: str | None, rounds: int) -> None:
        """``run`` (of ``label``'s group) reached ``rounds``."""
        self.reached[run] = max(self.reached.get(run, 0), int(rounds))
        self.group[run] = label if self.per_label else None

    def spent(self, label: str | None = None) -> int:
        """Client-rounds spent (with labels: by the runs of ``label``)."""
        self._seed()
        rounds = (r for run, r in self.reached.items() if self.group.get(run) == label)
        return sum(rounds) * self.per_round

    def exhausted(self, label: str | None = None) -> bool:
        """The rule: the group has spent its budget."""
        return self.spent(label if self.per_label else None) >= self.budget

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        """Stop this trial, at the report it just made, once its group's budget is spent."""
        self._seed()
        label = result.get("label")
        self.record(result.get("run_id") or trial_id, label, int(result.get("round") or 0))
        return self.exhausted(label)

    def stop_all(self) -> bool:
        """Every group has spent its budget: the search ends."""
        groups = self.labels if self.per_label else (None,)
        return bool(groups) and all(self.exhausted(g) for g in groups)

    def _seed(self) -> None:
        """The rounds the runs table recorded for this search's runs (once per process)."""
        if self.seeded:
            return
        self.seeded = True
        if self.results is None:
            return
        import pandas as pd

        from ..results.reader import read_table_if_any

        results_dir, sweep = self.results
        try:
            runs = read_table_if_any(results_dir, "runs")
        except Exception:  # noqa: BLE001 - a table being written: the reports count instead
            return
        if runs is None or not len(runs):
            return
        mine = runs[(runs["sweep"] == sweep) & (runs["stage"] == "search")]
        for _, r in mine.drop_duplicates("run_id", keep="last").iterrows():
            label = r["label"] if isinstance(r["label"], str) else None
            rounds = r["rounds_completed"]
            self.record(str(r["run_id"]), label, 0 if pd.isna(rounds) else int(rounds))


__all__ = ["ClientRoundBudget"]
