"""Thin Ray actors around the pure engine pieces (design: Engines).

* :class:`ClientWorkerActor` wraps one :class:`~reuse_ray.engine.worker.ClientWorker`. It
  receives the run's static inputs once, as object refs whose numpy arrays are read zero-copy
  from the object store, and returns a call's small metadata, its encoded messages and the
  states its clients keep as three separate objects, so the driver never fetches the messages.
* :class:`ServerActor` wraps one :class:`~reuse_ray.engine.server.ServerCore`. It is the one
  place where a method's per-client values move into the object store (:func:`use_store`):
  the global vector, the method state and the clients' states live here, not on the driver.
* :class:`ServingWorkerActor` is both in one process: client worker 0 hosting the server
  (``engine.server_process: worker``, the default), one torch process fewer per run.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import ray

from ..algorithms.api import ClientTask, RoundPlan
from ..algorithms.table import use_store
from ..config import RunConfig
from ..data.registry import ArraySplit, DatasetInfo
from ..engine.records import ClientOutcome, RoundReport, RunFacts, RunSetup
from ..lazy import torch
from ..machine import machine_kind

if TYPE_CHECKING:  # imported where they are built: the driver imports this module, not torch
    from ..engine.server import ServerCore
    from ..engine.worker import ClientWorker


def _as_tensor(w: np.ndarray | torch.Tensor) -> torch.Tensor:
    if isinstance(w, torch.Tensor):
        return w
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # object-store arrays are read-only; we never write w
        return torch.from_numpy(w)


class WorkerSide:
    """A client worker's calls (:class:`ClientWorkerActor`, :class:`ServingWorkerActor`)."""

    def __init__(self, device: str = "cpu"):
        """Created before the run's inputs exist, so the process starts and imports what it
        trains with (torch, the worker, the models; this module names them lazily, for the
        driver) while the data loads; :meth:`build_setup` and :meth:`load` then find them."""
        from ..engine import setup, worker  # noqa: F401 - imported now, used from load on

        self.device = device
        self.worker: ClientWorker | None = None

    def _worker(self, setup_box: list) -> ClientWorker:
        """The worker, built on first use (also after Ray restarted this actor, whose
        constructor does not see the setup) from the box's refs: ``[setup, training split]``,
        the split an object of its own, read zero-copy."""
        if self.worker is None:
            from ..engine.worker import ClientWorker

            setup, train = ray.get(setup_box)
            self.worker = ClientWorker(dataclasses.replace(setup, train=train), self.device)
        return self.worker

    @ray.method(num_returns=2)
    def build_setup(
        self,
        cfg: RunConfig,
        info: DatasetInfo,
        train: ArraySplit,
        val: ArraySplit | None,
        parts: list[np.ndarray],
    ) -> tuple[RunSetup, RunFacts]:
        """The run's setup, built in this process (the driver builds no model), without its
        training split (an object of its own), and the facts the driver records. Called by
        the driver, so both objects are the driver's and outlive this actor."""
        from ..engine.setup import build_setup

        setup = build_setup(cfg, info, train, val, parts)[0]
        return dataclasses.replace(setup, train=None), RunFacts.of(setup)

    @ray.method(num_returns=2)
    def load_checkpoint(self, blob: bytes) -> tuple[Any, dict]:
        """A checkpoint file read here (the driver holds no torch): the RunCheckpoint without
        the server's snapshot, and the snapshot, as two objects the driver owns."""
        from .. import checkpoint

        ckpt = checkpoint.loads(blob)
        return dataclasses.replace(ckpt, server=None), ckpt.server

    def load(self, setup_box: list) -> dict[str, str]:
        """Build the worker and warm it up (one throwaway step), so round 1 runs warm; returns
        the kind of machine it computes on (:func:`~reuse_ray.machine.machine_kind`). A
        worker built before (from another setup) is replaced."""
        self.worker = None
        self._worker(setup_box).warm_up()
        return machine_kind(self.device)

    def run_many(self, tasks: list[TaskHandle], w: np.ndarray, setup_box: list) -> tuple:
        """Several tasks, one after the other (each from the same w, as in separate calls), as
        three objects (called with ``num_returns=3``): the tasks' small metadata, their
        messages and the states the clients keep, each a tuple in task order. One call and
        three objects for a batch of small clients save the per-call round trips and per-object
        costs that otherwise dominate such clients. ``setup_box`` is ``[setup_ref,
        train_ref]``: nested, so Ray passes the refs, not the setup, on every call. The tasks
        come as :class:`TaskHandle` objects, fetched here."""
        worker, w_t = self._worker(setup_box), _as_tensor(w)
        return _three([worker.run(task, w_t) for task in _fetch_tasks(tasks)])

    def run_group(self, tasks: list[TaskHandle], w: np.ndarray, setup_box: list) -> tuple:
        """:meth:`run_many` for a vectorized group (``engine.vectorize``)."""
        return _three(self._worker(setup_box).run_group(_fetch_tasks(tasks), _as_tensor(w)))

    def validate(
        self, w: np.ndarray, setup_box: list, batches: range, split: ArraySplit | None = None
    ) -> list:
        """Part of the evaluation of ``w`` on ``split`` (default: the validation split;
        :meth:`ClientWorker.validate`), as a task of a round's queue or on its own."""
        return self._worker(setup_box).validate(_as_tensor(w), batches, split)

    def pid(self) -> int:
        return os.getpid()

    def release(self) -> None:
        """Drop the run's worker (its setup, data and model): the actor is kept for the next
        run (:mod:`~reuse_ray.distributed.kept`), which loads its own."""
        self.worker = None


@dataclasses.dataclass(frozen=True)
class TaskHandle:
    """A client task as the driver handles it: the client's id (what the pool schedules by)
    and the task's own object, which only the worker that runs it fetches. A task carries the
    method's instructions and the client's own state, often tensors; they go from the server
    to the worker, never through the driver."""

    client: int
    ref: ray.ObjectRef


def _fetch_tasks(handles: list[TaskHandle]) -> list[ClientTask]:
    return ray.get([h.ref for h in handles])


def _three(outs: list[ClientOutcome]) -> tuple[tuple, tuple, tuple]:
    """Outcomes as the three objects a call returns: metadata, messages, local states."""
    return (
        tuple(dataclasses.replace(o, messages=(), local=None) for o in outs),
        tuple(o.messages for o in outs),
        tuple(o.local for o in outs),
    )


def fetch_indexed(pairs: list, get=ray.get) -> list:
    """The values of ``(ref, index)`` pairs: each ref (a worker call's tuple) fetched once,
    with ``get``."""
    refs = list(dict.fromkeys(ref for ref, _ in pairs))
    values = dict(zip(refs, get(refs), strict=True))
    return [values[ref][k] for ref, k in pairs]


class ObjectStore:
    """Table values as Ray objects owned by the server actor: they live in the object store
    (and spill to disk under memory pressure) instead of the actor's heap."""

    def put(self, value: Any) -> ray.ObjectRef:
        return ray.put(value)

    def get(self, ref: ray.ObjectRef) -> Any:
        return ray.get(ref)


def _outcomes(metas: list[ClientOutcome], message_refs: list, local_refs: list) -> list:
    """Whole outcomes from the driver's metadata and ``(ref, index)`` pairs of the messages
    and local states (a worker call returns each kind for all its tasks as one tuple)."""
    messages, locals_ = fetch_indexed(message_refs), fetch_indexed(local_refs)
    return [
        dataclasses.replace(m, messages=msg, local=loc)
        for m, msg, loc in zip(metas, messages, locals_, strict=True)
    ]


def _server_core(setup: RunSetup) -> ServerCore:
    from ..engine.server import ServerCore

    return ServerCore(setup)


class ServerStateLost(RuntimeError):
    """A server call reached a process that holds no server state: the client worker that
    hosts the server (``engine.server_process: worker``) died and Ray restarted it empty.
    The backend then restores the last snapshot there and replays the rounds since."""


class ServerSide:
    """The server's calls: it holds the server state of one run; the driver sees plans and
    reports only (:class:`ServerActor`, :class:`ServingWorkerActor`)."""

    def __init__(self, setup: RunSetup | None = None):
        """With no setup the actor only starts (and imports torch) while the driver loads the
        data; :meth:`load_server` then builds the server core."""
        use_store(ObjectStore())
        self._core = _server_core(setup) if setup is not None else None

    @property
    def core(self) -> ServerCore:
        if self._core is None:
            raise ServerStateLost(f"no server state in process {os.getpid()}")
        return self._core

    def load_server(self, setup: RunSetup) -> int:
        self._core = _server_core(setup)
        return os.getpid()

    def has_server(self) -> bool:
        return self._core is not None

    @ray.method(num_returns=2)
    def probes(self, t: int, selected: list[int]) -> tuple[tuple[int, ...], tuple]:
        """The probe tasks' client ids (for the driver) and the tasks (for :meth:`each_task`)."""
        tasks = self.core.probes(t, selected)
        return tuple(x.client for x in tasks), tasks

    @ray.method(num_returns=2)
    def plan(
        self,
        t: int,
        selected: list[int],
        metas: list[ClientOutcome],
        message_refs: list,
        local_refs: list,
    ) -> tuple[tuple[int, ...], RoundPlan]:
        """The planned tasks' client ids (for the driver) and the plan, an object the driver
        owns and hands to :meth:`each_task` and :meth:`step` unread."""
        plan = self.core.plan(t, selected, _outcomes(metas, message_refs, local_refs))
        return tuple(x.client for x in plan.tasks), plan

    def each_task(self, source: RoundPlan | tuple) -> Any:
        """The tasks of a plan (or probe tasks), each as an object of its own: called with
        ``num_returns`` = their number, so each worker fetches only the tasks it runs."""
        tasks = tuple(source.tasks if isinstance(source, RoundPlan) else source)
        return tasks[0] if len(tasks) == 1 else tasks

    def step(
        self,
        t: int,
        selected: list[int],
        plan: RoundPlan,
        metas: list[ClientOutcome],
        message_refs: list,
        local_refs: list,
    ) -> RoundReport:
        return self.core.step(t, selected, plan, _outcomes(metas, message_refs, local_refs))

    def snapshot(self) -> dict:
        return self.core.snapshot()

    def checkpoint_blob(self, ckpt: Any) -> bytes:
        """The checkpoint file of ``ckpt`` (a RunCheckpoint) with this server's snapshot,
        written here: the driver holds no torch."""
        from .. import checkpoint

        return checkpoint.dumps(dataclasses.replace(ckpt, server=self.core.snapshot()))

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

    def release(self) -> None:
        """Drop the run's server state (its tables' objects with it): the actor is kept for
        the next run, whose :meth:`load_server` builds its own."""
        self._core = None

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


@ray.remote
class ClientWorkerActor(WorkerSide):
    """One client-worker process; virtual clients are multiplexed over a pool of these."""


@ray.remote(num_cpus=0)
class ServerActor(ServerSide):
    """The run's server in an actor process of its own (``engine.server_process: own``)."""


@ray.remote
class ServingWorkerActor(WorkerSide, ServerSide):
    """A client worker whose process also holds the run's server (``engine.server_process:
    worker``, the default): the server's calls come between rounds, when the worker is idle,
    so they cost no round time, and the run has one torch process fewer (peak PSS on W 1.90
    against 2.29 GB, ``benchmarks/engine_overhead.py``). Ray restarts it like any worker; the state
    its server held is then gone (:class:`ServerStateLost`) and the backend restores it."""

    def __init__(self, device: str = "cpu"):
        WorkerSide.__init__(self, device)
        ServerSide.__init__(self)

    def release(self) -> None:
        WorkerSide.release(self)
        ServerSide.release(self)
