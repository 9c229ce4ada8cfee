"""One round, written once for every backend (design: Runs): probe → plan → train → step.

A backend supplies the server (in process, or a handle to the Ray server actor) and a pool that
maps client tasks over workers; the sequence below is the same for both, so both backends give
bit-identical rounds. The driver records the returned report.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..algorithms.api import ClientTask, RoundPlan
from .records import RoundReport


class Server(Protocol):
    """The server side as the round sees it (a :class:`ServerCore` or a remote handle). A
    remote server hands out tasks as handles with the task's ``client`` (what a pool schedules
    by) and a plan whose ``tasks`` are such handles: the tasks themselves travel from the
    server to the workers, not through the driver."""

    def weights_ref(self) -> Any: ...

    def probes(self, t: int, selected: list[int]) -> Sequence[ClientTask]: ...

    def plan(self, t: int, selected: list[int], probe_results: list[Any]) -> RoundPlan: ...

    def step(
        self, t: int, selected: list[int], plan: RoundPlan, results: list[Any]
    ) -> RoundReport: ...


class Pool(Protocol):
    """Maps client tasks over workers; results come back in client order. ``main`` marks the
    round's client work (not its probes): a pool may queue its own side work beside it (the
    Ray pool: the validation of the weights the round starts from)."""

    def run(self, tasks: Sequence[ClientTask], w: Any, main: bool = False) -> list[Any]: ...


def play_round(server: Server, pool: Pool, t: int, selected: list[int]) -> RoundReport:
    """Probe the clients the method asks about, plan, run the client work, step the server."""
    w = server.weights_ref()
    probes = server.probes(t, selected)
    answers = pool.run(probes, w) if probes else []
    plan = server.plan(t, selected, answers)
    results = pool.run(plan.tasks, w, main=True) if plan.tasks else []
    return server.step(t, selected, plan, results)


def vector_groups(tasks: Sequence[ClientTask], size: int) -> list[list[ClientTask]]:
    """The groups a vectorized round trains together: the tasks in client-id order, in chunks
    of ``size``. Fixed by the tasks alone, so every engine and pool size forms the same
    groups (and gets the same bits)."""
    ordered = sorted(tasks, key=lambda x: x.client)
    return [ordered[k : k + size] for k in range(0, len(ordered), size)]
