"""The server side of a round, shared by every backend (ALGORITHMS.md §1.5, §3.3).

:class:`ServerCore` owns the global vector ``w_t``, the algorithm and its state. It plans a round,
then turns the clients' encoded uplink messages into ``w_{t+1}``: decode, charge both ledgers,
call the algorithm's server step and commit the result unless it is non-finite. The local backend
holds one in process; the Ray backend holds one inside its server actor, so the state and caches
never travel to the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..accounting import REUSE_CHARGE_BYTES, restricted_bytes_of, state_nbytes
from ..algorithms import (
    CacheStore,
    FreshUpdate,
    LocalCacheStore,
    ProbeTask,
    RoundPlan,
    build_algorithm,
)
from ..codecs import (
    KIND_LAQ,
    KIND_SKIP,
    decode,
    decode_laq,
    encode_model,
    laq_payload_bytes,
    message_kind,
)
from ..models import head_parameter_names, init_model
from ..state import StateLayout
from .backend import ClientOutcome, ProbeOutcome, RunSetup


@dataclass(frozen=True)
class ClientReport:
    """Per selected client: decision, ledgers and diagnostics of one round."""

    client: int
    decision: str
    num_samples: int
    weight: float | None
    up_restricted: int
    up_measured: int
    down_measured: int
    train_loss: float | None = None
    local_steps: int = 0
    update_norm: float | None = None
    wall_s: float | None = None
    gate: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RoundReport:
    """What the driver records for one round; the state itself stays with the server."""

    round: int
    clients: tuple[ClientReport, ...]
    update_norm: float
    diverged: bool
    dense_bytes: int


class ServerCore:
    """Global state, algorithm state and the server step of one run."""

    def __init__(self, setup: RunSetup, store: CacheStore | None = None):
        cfg = setup.cfg
        model = init_model(
            setup.model_name, setup.info.shape, setup.info.num_classes, cfg.seed, cfg.model.hidden
        )
        self.layout = StateLayout.from_model(model)
        self.head_layout = self.layout.subset(head_parameter_names(model))
        self.w = self.layout.flatten(model)
        self.trainable_layout = self.layout.trainable_subset()
        self.store = store or LocalCacheStore()
        probs = setup.participation_probs().tolist()
        self.algo = build_algorithm(cfg, self.layout, self.store, probs)
        self.state = self.algo.init_state(self.w)
        self.error_feedback = cfg.method.error_feedback
        # client-local states (Fed-EF e_i, SCAFFOLD c_i, LAQ ε̂_i and clock): a real client
        # keeps them; the simulation keeps them in the store, with their sizes
        self.local: dict[int, tuple[Any, int]] = {}
        self.num_samples = {i: len(p) for i, p in enumerate(setup.partitions)}
        self._probe_bytes: dict[int, int] = {}

    def weights(self) -> torch.Tensor:
        return self.w

    def probes(self, t: int, selected: list[int]) -> tuple[ProbeTask, ...]:
        """Client work the algorithm needs before deciding the round (the DG gate)."""
        return tuple(self.algo.probes(self.state, t, selected))

    def plan(
        self, t: int, selected: list[int], probe_outcomes: list[ProbeOutcome] | None = None
    ) -> RoundPlan:
        proxies = {}
        self._probe_bytes = {}
        for o in probe_outcomes or []:
            proxies[o.client] = decode(o.message, self.head_layout).update.to_dense()
            self._probe_bytes[o.client] = len(o.message)
        plan = self.algo.plan(self.state, t, selected, proxies)
        tasks = []
        for task in plan.tasks:
            if self.error_feedback and task.codec == "topk":
                task = replace(task, codec="ef")
            if task.client in self.local:  # the client's own state goes out with its task
                task = replace(task, local=self.store.get(self.local[task.client][0]))
            tasks.append(task)
        return replace(plan, tasks=tuple(tasks))

    def _decode(self, o: ClientOutcome) -> tuple[FreshUpdate, int]:
        """A client's uplink messages as the algorithm sees them, and their restricted bytes."""
        layout = self.layout
        proxy = control = None
        if o.proxy_message is not None:
            proxy = decode(o.proxy_message, self.head_layout).update.to_dense()
        kind = message_kind(o.message)
        base = {"client": o.client, "num_samples": o.num_samples, "proxy": proxy,
                "steps": o.steps}  # fmt: skip
        if kind == KIND_SKIP:
            return FreshUpdate(update=None, skipped=True, **base), 0
        if kind == KIND_LAQ:
            radius, codes, bits = decode_laq(o.message, layout.dim)
            return FreshUpdate(update=None, quantized=(radius, codes), **base), laq_payload_bytes(
                layout.dim, bits
            )
        update = decode(o.message, layout).update
        restricted = restricted_bytes_of(update, layout)
        if o.control_message is not None:  # SCAFFOLD's Δc_i, dense over trainable coordinates
            control = decode(o.control_message, self.trainable_layout).update.to_dense()
            restricted += self.trainable_layout.dense_bytes
        return FreshUpdate(update=update, control=control, **base), restricted

    def step(
        self, t: int, selected: list[int], plan: RoundPlan, outcomes: list[ClientOutcome]
    ) -> RoundReport:
        layout = self.layout
        fresh: dict[int, FreshUpdate] = {}
        restricted: dict[int, int] = {}
        by_client = {o.client: o for o in outcomes}
        diverged = False
        for o in sorted(outcomes, key=lambda o: o.client):
            fresh[o.client], restricted[o.client] = self._decode(o)
            diverged |= not o.finite
        down = len(encode_model(self.w, layout, t)) + plan.down_extra
        result = self.algo.server_step(self.state, t, self.w, plan, fresh, self.num_samples)
        diverged |= not bool(torch.isfinite(result.w).all())
        update_norm = float((result.w - self.w).norm())
        reports = []
        for i in sorted(set(selected) | set(plan.decisions)):
            decision = result.decisions.get(i, plan.decisions[i])
            o = by_client.get(i)
            # measured: every message the client really sent this round (gate proxy, update,
            # refresh proxy, control); restricted: the field model, 16 B per reuse
            up_m = self._probe_bytes.get(i, 0)
            if o is not None:
                up_r = restricted[i]
                up_m += len(o.message) + len(o.proxy_message or b"")
                up_m += len(o.control_message or b"")
            elif decision == "reused":
                up_r = REUSE_CHARGE_BYTES
            else:
                up_r = 0
            reports.append(
                ClientReport(
                    client=i, decision=decision, num_samples=self.num_samples[i],
                    weight=result.weights.get(i), up_restricted=up_r, up_measured=up_m,
                    down_measured=down if decision != "waiting" else 0,
                    train_loss=o.mean_loss if o else None, local_steps=o.steps if o else 0,
                    update_norm=result.contribution_norms.get(i),
                    wall_s=o.wall_s if o else None, gate=dict(plan.gate.get(i, {})),
                )
            )  # fmt: skip
        if not diverged:
            self.w, self.state = result.w, result.state
            for o in outcomes:
                if o.client_state is not None:
                    self.local[o.client] = (
                        self.store.put(o.client_state),
                        state_nbytes(o.client_state),
                    )
        return RoundReport(t, tuple(reports), update_norm, diverged, layout.dense_bytes)

    def memory_bytes(self) -> dict[str, int]:
        """Bytes of state held: the server's (algorithm state, caches, memories) and the
        clients' own (Fed-EF e_i, SCAFFOLD c_i, …), which the simulation keeps for them."""
        return {
            "server": self.algo.memory_bytes(self.state),
            "client": sum(n for _, n in self.local.values()),
        }

    def snapshot(self) -> dict:
        """w and the algorithm state with cached updates materialised (for checkpoints)."""
        export = getattr(self.algo, "export_state", None)
        return {
            "w": self.w.clone(),
            "state": export(self.state) if export else self.state,
            "local": {i: self.store.get(h) for i, (h, _) in self.local.items()},
        }

    def restore(self, snap: dict) -> None:
        load = getattr(self.algo, "import_state", None)
        self.w = snap["w"].clone()
        self.state = load(snap["state"]) if load else snap["state"]
        self.local = {i: (self.store.put(v), state_nbytes(v))
                      for i, v in snap.get("local", {}).items()}  # fmt: skip

    def cache_bytes(self) -> int:
        """Bytes of cached updates held (0 for methods without a cache)."""
        f = getattr(self.algo, "cache_bytes", None)
        return f(self.state) if f else 0
