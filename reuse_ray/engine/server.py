"""The server side of a round, shared by every backend (design: Runs, Ledgers).

:class:`ServerCore` owns the global vector ``w_t``, the method's state and the clients' own
states (which a real client would keep; the simulation keeps them for it). It plans a round,
then turns the clients' messages into ``w_{t+1}``: the method decodes each message and names its
restricted bytes, the measured ledger is the messages' length, a :class:`Decision` says how a
client without a message is charged, the method's server step runs, and the result is committed
unless it is non-finite. The local backend holds one in process; the Ray backend holds one inside
its server actor, so the state never travels to the driver.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ..algorithms.api import ClientTask, Received, RoundPlan
from ..algorithms.table import ClientTable
from ..codecs import encode_model
from .records import ClientOutcome, ClientReport, RoundReport, RunSetup


class ServerCore:
    """Global state, method state, client-local states and the server step of one run."""

    def __init__(self, setup: RunSetup):
        self.method = setup.method
        self.layout = setup.layout
        self.w = setup.w0.clone()
        self.state = self.method.init_state(self.w)
        self.local = ClientTable.empty()
        self.num_samples = setup.num_samples()
        self._probes: dict[int, ClientTask] = {}
        self._probe_bytes: dict[int, tuple[int, int]] = {}  # client -> (measured, restricted)

    def weights(self) -> torch.Tensor:
        return self.w

    def _with_local(self, task: ClientTask) -> ClientTask:
        local = self.local.get(task.client)
        return task if local is None else replace(task, local=local)

    def probes(self, t: int, selected: list[int]) -> tuple[ClientTask, ...]:
        """Client work the method needs before deciding the round (e.g. the DG gate)."""
        tasks = tuple(self._with_local(p) for p in self.method.probes(self.state, t, selected))
        self._probes = {p.client: p for p in tasks}
        return tasks

    def _decode(self, task: ClientTask, o: ClientOutcome) -> tuple[Received, int]:
        value, restricted = self.method.decode(task, o.messages)
        return Received(o.client, o.num_samples, value, o.steps), restricted

    def plan(self, t: int, selected: list[int], probe_outcomes: list[ClientOutcome]) -> RoundPlan:
        answers, self._probe_bytes = {}, {}
        for o in sorted(probe_outcomes, key=lambda o: o.client):
            answers[o.client], restricted = self._decode(self._probes[o.client], o)
            self._probe_bytes[o.client] = (sum(len(m) for m in o.messages), restricted)
        plan = self.method.plan(self.state, t, selected, answers)
        return replace(plan, tasks=tuple(self._with_local(task) for task in plan.tasks))

    def step(
        self, t: int, selected: list[int], plan: RoundPlan, outcomes: list[ClientOutcome]
    ) -> RoundReport:
        tasks = {task.client: task for task in plan.tasks}
        uploads: dict[int, Received] = {}
        restricted: dict[int, int] = {}
        by_client = {o.client: o for o in outcomes}
        diverged = False
        for o in sorted(outcomes, key=lambda o: o.client):
            uploads[o.client], restricted[o.client] = self._decode(tasks[o.client], o)
            diverged |= not o.finite
        down = len(encode_model(self.w, self.layout, t)) + plan.down_extra
        result = self.method.server_step(self.state, t, self.w, plan, uploads, self.num_samples)
        diverged |= not bool(torch.isfinite(result.w).all())
        update_norm = float((result.w - self.w).norm())
        reports = []
        for i in sorted(set(selected) | set(plan.decisions)):
            decision = result.decisions.get(i, plan.decisions[i])
            o = by_client.get(i)
            # measured: every message the client really sent this round (probe answers
            # included); restricted: what the method's decoder names, or the decision's charge
            up_m, up_r = self._probe_bytes.get(i, (0, 0))
            if o is not None:
                up_r += restricted[i]
                up_m += sum(len(m) for m in o.messages)
            else:
                up_r += decision.idle_uplink
            reports.append(
                ClientReport(
                    client=i,
                    decision=decision,
                    num_samples=self.num_samples[i],
                    weight=result.weights.get(i),
                    up_restricted=up_r,
                    up_measured=up_m,
                    down_measured=down if decision.downlink else 0,
                    train_loss=o.mean_loss if o else None,
                    local_steps=o.steps if o else 0,
                    update_norm=result.contribution_norms.get(i),
                    wall_s=o.wall_s if o else None,
                    columns=dict(plan.columns.get(i, {})),
                )
            )
        if not diverged:
            self.w, self.state = result.w, result.state
            kept = {o.client: o.local for o in outcomes if o.local is not None}
            if kept:
                self.local = self.local.updated(kept)
        return RoundReport(t, tuple(reports), update_norm, diverged, self.layout.dense_bytes)

    def memory_bytes(self) -> dict[str, int]:
        """Bytes of state held: the server's (method state, caches, memories) and the
        clients' own (error memories, control variates, …), which the simulation keeps."""
        return {"server": self.method.memory_bytes(self.state), "client": self.local.nbytes()}

    def snapshot(self) -> dict[str, Any]:
        """w, the method state and the clients' states, as values (tables pickle as values)."""
        return {"w": self.w.clone(), "state": self.state, "local": self.local}

    def restore(self, snap: dict[str, Any]) -> None:
        self.w = snap["w"].clone()
        self.state = snap["state"]
        local = snap.get("local", ClientTable.empty())
        self.local = local if isinstance(local, ClientTable) else ClientTable.from_values(local)
