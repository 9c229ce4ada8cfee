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

A study gives every arm its own budget: trials are grouped by the ``label`` they report (the
arm), and a group's trials stop once that group has spent the budget.
"""

from __future__ import annotations

from typing import Any

from ray.tune.stopper import Stopper


class ClientRoundBudget(Stopper):
    """Tune stopper: a search (with ``per_label``: each label's trials, a study's arm) ends
    once Σ over its trials of (rounds reached × clients a round) reaches ``budget``."""

    def __init__(self, budget: int, clients_per_round: int, per_label: bool = False):
        self.budget, self.per_round = int(budget), int(clients_per_round)
        self.per_label = per_label
        self.reached: dict[str, int] = {}
        self.group: dict[str, str | None] = {}

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        """Stop this trial, at the report it just made, once its budget is spent."""
        rounds = int(result.get("round") or 0)
        self.reached[trial_id] = max(self.reached.get(trial_id, 0), rounds)
        label = result.get("label") if self.per_label else None
        self.group[trial_id] = label
        return self.spent(label) >= self.budget

    def spent(self, label: str | None = None) -> int:
        """Client-rounds spent (with ``per_label``: by the trials of ``label``)."""
        rounds = (r for t, r in self.reached.items() if self.group.get(t) == label)
        return sum(rounds) * self.per_round

    def stop_all(self) -> bool:
        return False  # see the module's text: trials end at their own reports


def spent_in(
    results_dir: str, sweep: str, stage: str, clients_per_round: int, label: str | None = None
) -> int:
    """Client-rounds the runs of ``sweep``'s ``stage`` (of ``label``'s, when given: a study's
    arm) recorded so far (rounds written)."""
    from ..results.reader import read_table_if_any

    try:
        runs = read_table_if_any(results_dir, "runs")
    except Exception:  # noqa: BLE001 - a table being written: count what can be read next time
        return 0
    if runs is None or not len(runs):
        return 0
    mine = runs[(runs["sweep"] == sweep) & (runs["stage"] == stage)]
    if label is not None:
        mine = mine[mine["label"] == label]
    return int(mine["rounds_completed"].fillna(0).sum()) * int(clients_per_round)


__all__ = ["ClientRoundBudget", "spent_in"]
