"""Thin Ray actors around the pure engine pieces (ARCHITECTURE.md "thin Ray actors").

* :class:`ClientWorkerActor` wraps one :class:`~reuse_ray.engine.backend.ClientWorker`. It
  receives the run's static inputs once, as an object ref whose numpy arrays are read zero-copy
  from the object store, and returns each task's small metadata and its encoded uplink message
  as two separate objects, so the driver never fetches the message bytes.
* :class:`ServerActor` wraps one :class:`~reuse_ray.engine.server.ServerCore`: the global vector,
  the algorithm state and the per-client caches live here, not on the driver.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import ray
import torch

from ..algorithms.base import ClientTask, ProbeTask, RoundPlan
from ..codecs import PackedUpdate
from ..engine.backend import ClientOutcome, ClientWorker, ProbeOutcome, RunSetup
from ..engine.server import RoundReport, ServerCore


def _as_tensor(w: np.ndarray | torch.Tensor) -> torch.Tensor:
    if isinstance(w, torch.Tensor):
        return w
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # object-store arrays are read-only; we never write w
        return torch.from_numpy(w)


@ray.remote
class ClientWorkerActor:
    """One client-worker process; virtual clients are multiplexed over a pool of these."""

    def __init__(self, setup: RunSetup, device: str = "cpu"):
        self.worker = ClientWorker(setup, device)

    def run(self, task: ClientTask, w: np.ndarray) -> tuple[ClientOutcome, bytes, object]:
        """(small metadata, the uplink message, the client-local state such as Fed-EF's e_i)."""
        out = self.worker.run(task, _as_tensor(w))
        return (
            dataclasses.replace(out, message=b"", client_state=None),
            out.message,
            out.client_state,
        )

    def probe(self, task: ProbeTask, w: np.ndarray) -> ProbeOutcome:
        return self.worker.probe(task, _as_tensor(w))

    def pid(self) -> int:
        import os

        return os.getpid()


class ObjectStoreCache:
    """Cached updates as Ray objects owned by the server actor: they live in the object store
    (and spill to disk under memory pressure) instead of the actor's heap."""

    def put(self, packed: PackedUpdate) -> ray.ObjectRef:
        return ray.put(packed)

    def get(self, ref: ray.ObjectRef) -> PackedUpdate:
        return ray.get(ref)


@ray.remote(num_cpus=0)
class ServerActor:
    """Holds the server state of one run; the driver sees plans and reports only."""

    def __init__(self, setup: RunSetup):
        self.core = ServerCore(setup, store=ObjectStoreCache())

    def probes(self, t: int, selected: list[int]) -> tuple[ProbeTask, ...]:
        return self.core.probes(t, selected)

    def plan(self, t: int, selected: list[int], probes: list[ProbeOutcome]) -> RoundPlan:
        return self.core.plan(t, selected, probes)

    def cache_bytes(self) -> int:
        return self.core.cache_bytes()

    def snapshot(self) -> dict:
        return self.core.snapshot()

    def restore(self, snap: dict) -> None:
        self.core.restore(snap)

    def weights(self) -> np.ndarray:
        return self.core.weights().numpy()

    def step(
        self,
        t: int,
        selected: list[int],
        plan: RoundPlan,
        metas: list[ClientOutcome],
        message_refs: list[ray.ObjectRef],
        state_refs: list[ray.ObjectRef],
    ) -> RoundReport:
        messages, states = ray.get(message_refs), ray.get(state_refs)
        outcomes = [
            dataclasses.replace(m, message=msg, client_state=st)
            for m, msg, st in zip(metas, messages, states, strict=True)
        ]
        return self.core.step(t, selected, plan, outcomes)

    def memory_bytes(self) -> dict[str, int]:
        return self.core.memory_bytes()
