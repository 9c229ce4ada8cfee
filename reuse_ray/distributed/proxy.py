"""The driver's view of the server actor: its calls as methods, the task handles it returns, and
Ray's errors unwrapped into the run's own (a client's ClientError, a lost server)."""

from __future__ import annotations

import dataclasses

import ray

from ..engine.records import ClientOutcome, RoundReport
from ..errors import UserError
from .actors import ServerStateLost, TaskHandle, fetch_indexed

# one result of a client task on Ray: the refs of its call's (metadata, messages, local states)
# tuples, and the task's index in them
Result = tuple[ray.ObjectRef, ray.ObjectRef, ray.ObjectRef, int]


@dataclasses.dataclass(frozen=True)
class RemotePlan:
    """A plan as the driver holds it: its tasks' handles and the plan's object, which the
    server's step reads (the driver never does)."""

    tasks: tuple[TaskHandle, ...]
    ref: ray.ObjectRef


class RemoteServer:
    """The server actor as the round sees it: the driver fetches only small metadata (client
    ids, outcomes' metadata, the report); tasks and plans stay objects it never reads."""

    def __init__(self, actor):
        self.actor = actor

    def weights_ref(self) -> ray.ObjectRef:
        return self.actor.weights.remote()  # one ref per round, never fetched by the driver

    def _handles(
        self, clients_ref: ray.ObjectRef, source_ref: ray.ObjectRef
    ) -> tuple[TaskHandle, ...]:
        """One handle per task, each task an object of its own (:meth:`ServerSide.each_task`)."""
        clients = ray.get(clients_ref)
        if not clients:
            return ()
        refs = self.actor.each_task.options(num_returns=len(clients)).remote(source_ref)
        refs = [refs] if len(clients) == 1 else refs
        return tuple(TaskHandle(c, r) for c, r in zip(clients, refs, strict=True))

    def probes(self, t: int, selected: list[int]) -> tuple[TaskHandle, ...]:
        return self._handles(*self.actor.probes.remote(t, selected))

    @staticmethod
    def _split(results: list[Result]) -> tuple[list[ClientOutcome], list, list]:
        """The tasks' metadata (fetched: small), and ``(ref, index)`` pairs of their messages
        and local states for the server actor to fetch."""
        metas = fetch_indexed([(r[0], r[3]) for r in results], _get_unwrapped)
        return metas, [(r[1], r[3]) for r in results], [(r[2], r[3]) for r in results]

    def plan(self, t: int, selected: list[int], results: list[Result]) -> RemotePlan:
        clients_ref, plan_ref = self.actor.plan.remote(t, selected, *self._split(results))
        return RemotePlan(self._handles(clients_ref, plan_ref), plan_ref)

    def step(
        self, t: int, selected: list[int], plan: RemotePlan, results: list[Result]
    ) -> RoundReport:
        return ray.get(self.actor.step.remote(t, selected, plan.ref, *self._split(results)))


def _server_gone(err: Exception) -> bool:
    """Whether a Ray error means the server's state is gone: its actor died, or the call
    found a process without it (:class:`ServerStateLost`, the restarted host worker)."""
    if isinstance(err, ray.exceptions.RayActorError):
        return True
    return isinstance(getattr(err, "cause", None), ServerStateLost)


def _get_unwrapped(refs: list) -> list:
    """ray.get, re-raising a worker's ClientError (it names client and round) or a task's
    UserError (a bad input's one line) as itself, not inside Ray's wrapper."""
    from ..engine.records import ClientError

    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as err:
        cause = getattr(err, "cause", None)
        if isinstance(cause, ClientError):
            raise ClientError(cause.client, cause.round, cause.stage, cause.detail) from None
        if isinstance(cause, UserError):
            raise cause.with_traceback(None) from None
        raise
