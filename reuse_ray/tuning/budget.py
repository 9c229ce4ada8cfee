"""A search budget in client training rounds (design: Validation-only search): the search
stops once its trials together have trained ``search.client_rounds`` client-rounds, so a
scheduler that stops weak trials early buys more configurations with the same budget.

A client-round is one selected client in one round (``fl.clients_per_round`` per round a trial
reached), the unit FedHPO-B-style benchmarks count a federated search's cost in. Trials running
when the budget is spent stop at their next report, as a scheduler stops them (status
``stopped``, rows a prefix of the full run's). A trial that starts once the budget is spent
(:func:`spent_in`, from the runs table) ends at once without a run and is left out of the trials
table. Nothing is stopped from outside its own report: Tune ends a trial process that is busy
between reports by killing it, which would leave its run recorded as ``running``.
"""

from __future__ import annotations

from typing import Any

from ray.tune.stopper import Stopper


class ClientRoundBudget(Stopper):
    """Tune stopper: the whole search ends once Σ over trials of (rounds reached × clients a
    round) reaches ``budget``."""

    def __init__(self, budget: int, clients_per_round: int):
        self.budget, self.per_round = int(budget), int(clients_per_round)
        self.reached: dict[str, int] = {}

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        """Stop this trial, at the report it just made, once the budget is spent."""
        rounds = int(result.get("round") or 0)
        self.reached[trial_id] = max(self.reached.get(trial_id, 0), rounds)
        return self.spent() >= self.budget

    def spent(self) -> int:
        return sum(self.reached.values()) * self.per_round

    def stop_all(self) -> bool:
        return False  # see the module's text: trials end at their own reports


def spent_in(results_dir: str, sweep: str, stage: str, clients_per_round: int) -> int:
    """Client-rounds the runs of ``sweep``'s ``stage`` recorded so far (rounds written)."""
    from ..results.reader import read_table_if_any

    try:
        runs = read_table_if_any(results_dir, "runs")
    except Exception:  # noqa: BLE001 - a table being written: count what can be read next time
        return 0
    if runs is None or not len(runs):
        return 0
    mine = runs[(runs["sweep"] == sweep) & (runs["stage"] == stage)]
    return int(mine["rounds_completed"].fillna(0).sum()) * int(clients_per_round)


__all__ = ["ClientRoundBudget", "spent_in"]
