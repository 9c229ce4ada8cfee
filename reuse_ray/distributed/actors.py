"""Thin Ray actors around the pure engine pieces (ARCHITECTURE.md "thin Ray actors").

* :class:`ClientWorkerActor` wraps one :class:`~reuse_ray.engine.worker.ClientWorker`. It
  receives the run's static inputs once, as an object ref whose numpy arrays are read zero-copy
  from the object store, and returns each task's small metadata, its encoded messages and the
  state the client keeps as three separate objects, so the driver never fetches the messages.
* :class:`ServerActor` wraps one :class:`~reuse_ray.engine.server.ServerCore`. It is the one
  place where a method's per-client values move into the object store (:func:`use_store`):
  the global vector, the method state and the clients' states live here, not on the driver.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any

import numpy as np
import ray
import torch

from ..algorithms.api import ClientTask, RoundPlan
from ..algorithms.table import use_store
from ..engine.records import ClientOutcome, RoundReport, RunSetup
from ..engine.server import ServerCore
from ..engine.worker import ClientWorker


def _as_tensor(w: np.ndarray | torch.Tensor) -> torch.Tensor:
    if isinstance(w, torch.Tensor):
        return w
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # object-store arrays are read-only; we never write w
        return torch.from_numpy(w)


@ray.remote
class ClientWorkerActor:
    """One client-worker process; virtual clients are multiplexed over a pool of these."""

    def __init__(self, device: str = "cpu"):
        """Created before the run's inputs exist, so the process starts (and imports torch)
        while the driver loads the data; :meth:`load` then builds the worker."""
        self.device = device
        self.worker: ClientWorker | None = None

    def _worker(self, setup_box: list) -> ClientWorker:
        """The worker, built on first use (also after Ray restarted this actor, whose
        constructor does not see the setup) from the box's refs: ``[setup, training split]``,
        the split an object of its own, read zero-copy."""
        if self.worker is None:
            setup, train = ray.get(setup_box)
            self.worker = ClientWorker(dataclasses.replace(setup, train=train), self.device)
        return self.worker

    def load(self, setup_box: list) -> int:
        """Build the worker and warm it up (one throwaway step), so round 1 runs warm."""
        self._worker(setup_box).warm_up()
        return os.getpid()

    def run(self, task: ClientTask, w: np.ndarray,
            setup_box: list) -> tuple[ClientOutcome, tuple[bytes, ...], Any]:  # fmt: skip
        """(small metadata, the messages, the client's new local state). ``setup_box`` is
        ``[setup_ref, train_ref]``: nested, so Ray passes the refs, not the setup, on every
        call."""
        return _three(self._worker(setup_box).run(task, _as_tensor(w)))

    def run_many(self, tasks: list[ClientTask], w: np.ndarray, setup_box: list) -> tuple:
        """:meth:`run` for several tasks, one after the other (each from the same w, as in
        separate calls): their three objects per task, in task order (called with
        ``num_returns=3 * len(tasks)``). One call for a batch of small clients saves the
        per-call round trips that otherwise leave a worker idle between them."""
        worker, w_t = self._worker(setup_box), _as_tensor(w)
        return tuple(x for task in tasks for x in _three(worker.run(task, w_t)))

    def run_group(self, tasks: list[ClientTask], w: np.ndarray, setup_box: list) -> tuple:
        """:meth:`run` for a vectorized group: its three objects per task, in task order
        (called with ``num_returns=3 * len(tasks)``)."""
        outs = self._worker(setup_box).run_group(tasks, _as_tensor(w))
        return tuple(x for out in outs for x in _three(out))

    def pid(self) -> int:
        return os.getpid()


def _three(out: ClientOutcome) -> tuple[ClientOutcome, tuple[bytes, ...], Any]:
    """An outcome as the three objects a task returns: metadata, messages, local state."""
    return dataclasses.replace(out, messages=(), local=None), out.messages, out.local


class ObjectStore:
    """Table values as Ray objects owned by the server actor: they live in the object store
    (and spill to disk under memory pressure) instead of the actor's heap."""

    def put(self, value: Any) -> ray.ObjectRef:
        return ray.put(value)

    def get(self, ref: ray.ObjectRef) -> Any:
        return ray.get(ref)


def _outcomes(metas: list[ClientOutcome], message_refs: list, local_refs: list) -> list:
    messages, locals_ = ray.get(message_refs), ray.get(local_refs)
    return [
        dataclasses.replace(m, messages=msg, local=loc)
        for m, msg, loc in zip(metas, messages, locals_, strict=True)
    ]


@ray.remote(num_cpus=0)
class ServerActor:
    """Holds the server state of one run; the driver sees plans and reports only."""

    def __init__(self, setup: RunSetup | None = None):
        """With no setup the actor only starts (and imports torch) while the driver loads the
        data; :meth:`load` then builds the server core."""
        use_store(ObjectStore())
        self.core = ServerCore(setup) if setup is not None else None

    def load(self, setup: RunSetup) -> int:
        self.core = ServerCore(setup)
        return os.getpid()

    def probes(self, t: int, selected: list[int]) -> tuple[ClientTask, ...]:
        return self.core.probes(t, selected)

    def plan(self, t: int, selected: list[int], metas: list[ClientOutcome],
             message_refs: list, local_refs: list) -> RoundPlan:  # fmt: skip
        return self.core.plan(t, selected, _outcomes(metas, message_refs, local_refs))

    def step(self, t: int, selected: list[int], plan: RoundPlan, metas: list[ClientOutcome],
             message_refs: list, local_refs: list) -> RoundReport:  # fmt: skip
        return self.core.step(t, selected, plan, _outcomes(metas, message_refs, local_refs))

    def snapshot(self) -> dict:
        return self.core.snapshot()

    @ray.method(num_returns=2)
    def snapshot_checked(self) -> tuple[dict, bool]:
        """The snapshot, and a small flag the driver fetches to know it was taken."""
        return self.core.snapshot(), True

    def restore(self, snap: dict) -> None:
        self.core.restore(snap)

    def weights(self) -> np.ndarray:
        return self.core.weights().numpy()

    def memory_bytes(self) -> dict[str, int]:
        return self.core.memory_bytes()

    def pid(self) -> int:
        return os.getpid()

    def table_handles(self) -> list:
        """The store handles of every client table in the state (to check where they live)."""
        from ..algorithms.table import ClientTable

        found: list = []

        def walk(obj: Any) -> None:
            if isinstance(obj, ClientTable):
                found.extend(obj._handles.values())
            elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
                for f in dataclasses.fields(obj):
                    walk(getattr(obj, f.name))

        walk(self.core.state)
        walk(self.core.local)
        return found
