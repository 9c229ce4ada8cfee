"""A search budget in client training rounds (design: Validation-only search): the search
stops once its trials together have trained ``search.client_rounds`` client-rounds, so a
scheduler that stops weak trials early buys more configurations with the same budget.

A client-round is one selected client in one round (``fl.clients_per_round`` per round a trial
reached), the unit FedHPO-B-style benchmarks count a federated search's cost in. Trials running
when the budget is spent stop at their next report, as a scheduler stops them (status
``stopped``, rows a prefix of the full run's); no further trial starts.
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
        rounds = int(result.get("round") or 0)
        self.reached[trial_id] = max(self.reached.get(trial_id, 0), rounds)
        return False

    def spent(self) -> int:
        return sum(self.reached.values()) * self.per_round

    def stop_all(self) -> bool:
        return self.spent() >= self.budget


__all__ = ["ClientRoundBudget"]
