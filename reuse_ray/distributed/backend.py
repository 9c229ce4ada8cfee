"""The Ray backend: a pool of client-worker actors and one server (issue: Ray engine).

The server lives in client worker 0's process (``engine.server_process: worker``) or in an
actor of its own (``own``). Per round the driver asks the server for the plan, submits the
fresh tasks to idle workers with the round's global vector as **one** object ref (the server's
``weights`` return value, never fetched by the driver), waits for the small task metadata, and
hands the message refs to the server, which fetches them and applies the server step.
Outcomes are sorted by client id before aggregation, and every random draw is keyed, so the
result is bit-identical to the local backend whatever the pool size or the order in which
tasks finish.

The rooms around it: :mod:`.connect` (reaching a cluster, or a local instance on 127.0.0.1),
:mod:`.scheduling` (largest-first dispatch, the validation's parts), :mod:`.recovery` (the
server survives its actor), :mod:`.proxy` (the server's calls and Ray's errors unwrapped), and
:mod:`.actors` (the thin actors themselves).

Faults: workers restart (``max_restarts=-1``) and their tasks are retried
(``max_task_retries``), and a retried task recomputes exactly the same update. Application errors
are not retried; they surface as :class:`~reuse_ray.engine.records.ClientError` naming the client
and the round.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..config import DataConfig, RunConfig
from ..data.registry import ArraySplit, FederatedData, default_root, load_apart, load_dataset
from ..engine.backend import BackendBase
from ..engine.records import RoundReport, RunFacts, RunSetup
from ..engine.round import play_round
from ..errors import UserError
from ..lazy import torch
from ..machine import mixed_kinds_note
from . import kept
from .actors import (
    ClientWorkerActor,
    ServerActor,
    ServingWorkerActor,
    _as_tensor,
)
from .connect import ensure_ray, loopback_only, resolve_device
from .proxy import RemoteServer, _get_unwrapped
from .recovery import ServerRecovery
from .resources import pool_size_from_resources
from .scheduling import (
    VALIDATION_PARTS_PER_WORKER,
    RayPool,
    ValidationPart,
    WorkerValidation,
    dispatch_batches,
    with_side_jobs,
)

TASK_RETRIES = 3


class RayBackend(ServerRecovery, BackendBase):
    """Client work on a pool of Ray actors; server state in worker 0's or its own actor."""

    name = "ray"

    def __init__(
        self,
        cfg: RunConfig,
        resources: dict[str, float] | None = None,
        name: str | None = None,
        namespace: str | None = None,
    ):
        """``name`` prefixes the actors' names (default: the run id), so the dashboard's
        Actors page shows ``<run_id>/server`` and ``<run_id>/worker-<k>``; ``namespace``
        groups them (one per sweep)."""
        self.cfg = cfg
        self.resources = resources
        self.actor_prefix = name or cfg.run_id
        self.namespace = namespace
        self.workers: list = []
        self.server = None
        self.hosted = False  # the server in worker 0's process (engine.server_process)
        self.device = "cpu"
        self._setup_box: list = []
        self._loaded: tuple = (None, None)  # (training split, its ref) from load_data
        self.sizes: dict[int, int] = {}
        self._side: list[ValidationPart] = []  # validation parts waiting for the next round
        # each worker's kind of machine (reuse_ray.machine), and a line when they differ
        self.machine_kinds: list[dict[str, str]] = []
        self.machine_note: str | None = None
        self._val_size: int | None = None  # the validation split's length (None: no split)
        self._built: tuple | None = None  # (setup ref, training split ref) once built
        self._loading: list | None = None  # the actors' load calls, issued once built
        self._shape: tuple = ()  # what a kept pool must match to serve this run (module kept)

    def prepare(self) -> None:
        """Connect to Ray and start the actors before the run's inputs exist: their processes
        start and import torch while the driver loads the data. Idempotent."""
        if self.server is not None:
            return
        e = self.cfg.engine
        ensure_ray(e.ray_address)
        resources = self.resources or ray.cluster_resources()
        self.device = resolve_device(self.cfg, resources)
        use_gpu = self.device == "cuda"
        if use_gpu and resources.get("GPU", 0.0) <= 0:
            raise UserError(
                "engine.device: cuda, but the Ray cluster offers no GPU — allowed here: cpu or auto"
            )
        size = pool_size_from_resources(
            resources,
            clients_per_round=self.cfg.fl.clients_per_round,
            use_gpu=use_gpu,
            cpu_per_worker=e.cpu_per_worker,
            gpu_fraction=e.gpu_fraction,
            num_workers=e.num_workers,
        )
        opts = {"max_restarts": -1, "max_task_retries": TASK_RETRIES}
        if use_gpu:
            opts.update(num_gpus=e.gpu_fraction, num_cpus=0)
        else:
            opts.update(num_cpus=e.cpu_per_worker)
        # the server in worker 0's process (engine.server_process: worker), or its own actor
        self.hosted = e.server_process == "worker"
        self._shape = (self.device, self.hosted, size, tuple(sorted(opts.items())), self.namespace)
        taken = kept.take(self._shape)  # inside a kept_workers() block: the last run's actors
        if taken is not None:
            self.workers, self.server = taken
            return
        self.workers = [
            ClientWorkerActor.options(**opts, **self._named(f"worker-{k}")).remote(self.device)
            for k in range(1 if self.hosted else 0, size)
        ]
        if self.hosted:
            self.server = ServingWorkerActor.options(
                **opts, **self._named("worker-0+server")
            ).remote(self.device)
            self.workers.insert(0, self.server)
        else:
            self.server = ServerActor.options(**self._named("server")).remote()

    def load_data(self, data_cfg: DataConfig) -> FederatedData:
        """Load the dataset in a short-lived task on the driver's node, so its arrays reach the
        object store once and the driver reads them zero-copy: the driver never holds a private
        copy of the training split beside the store's (at 100,000 clients that pair was the
        driver's peak). The task's process imports the data layer only (not torch) and exits
        when it returns; the objects are the driver's. A bad dataset raises its own one-line
        error, as when the driver loads it."""
        self.prepare()
        from ray.util.client import ray as ray_client

        if ray_client.is_connected():  # a ray:// client: the files are on this machine
            return load_dataset(data_cfg)
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        root = str(default_root(data_cfg.root).resolve())  # the driver's root, cwd and env
        train_ref, rest_ref = _load_remote.options(scheduling_strategy=here).remote(
            dataclasses.replace(data_cfg, root=root)
        )
        data, train = _get_unwrapped([rest_ref, train_ref])
        data.train = train
        self._loaded = (train, train_ref)
        return data

    def _train_ref(self, train) -> ray.ObjectRef:
        """The training split as an object of its own: the one :meth:`load_data` made, when
        it is that split."""
        loaded, loaded_ref = self._loaded
        return loaded_ref if train is loaded else ray.put(train)

    def _note_sizes(self, parts, val: ArraySplit | None) -> None:
        """The clients' sample counts (the pool's largest-first order) and the validation
        split's length (its evaluation's parts)."""
        self.sizes = {i: len(p) for i, p in enumerate(parts)}
        self._val_size = None if val is None else len(val)

    def _put_setup(self, setup: RunSetup) -> tuple[ray.ObjectRef, ray.ObjectRef]:
        """A setup built in this process, into the object store: (setup without its training
        split — the server needs no data —, the split)."""
        _ship_method_code(setup)
        self._note_sizes(setup.partitions, setup.val)
        return ray.put(dataclasses.replace(setup, train=None)), self._train_ref(setup.train)

    def build(self, cfg: RunConfig, data: FederatedData, parts: list) -> RunFacts:
        """The run's setup, built by client worker 0 (model, layout, w_0, the method): this
        process builds no model and so never imports torch. The setup stays in the object
        store, the driver's object (the call is the driver's), for :meth:`start`. A method
        named by ``method.module`` is built here instead: a worker on another node may not
        have its file, so its classes travel by value inside the setup."""
        self.prepare()
        if cfg.method.module is not None:
            from ..engine.setup import make_setup

            setup = make_setup(cfg, data, parts)[0]
            self._built = self._put_setup(setup)
            self._begin_loading()
            return RunFacts.of(setup)
        self._note_sizes(parts, data.val)
        train_ref = self._train_ref(data.train)
        setup_ref, facts_ref = self.workers[0].build_setup.remote(
            cfg, data.info, train_ref, data.val, list(parts)
        )
        self._built = (setup_ref, train_ref)
        facts = _get_unwrapped([facts_ref])[0]
        self._begin_loading()  # only once the setup exists: a failed build leaves no calls
        return facts

    def _begin_loading(self) -> None:
        """Every actor starts building from the setup and warming up now; :meth:`start` waits
        for them, so the driver's first writes (the clients table, the run row) overlap the
        workers' warm-up instead of preceding it."""
        # held for the run, so restarted actors can rebuild; nested in a list so Ray passes
        # the refs themselves on every call
        self._setup_box = list(self._built)
        self._loading = [w.load.remote(self._setup_box) for w in self.workers] + [
            self.server.load_server.remote(self._setup_box[0])
        ]

    def start(self, setup: RunSetup | None = None) -> None:
        """Every actor builds from the setup (default: the one :meth:`build` made; a setup
        given goes to the object store once, its training split as an object of its own) and
        the workers warm up; this returns when all are ready, so round 1 runs warm."""
        self.prepare()
        if setup is not None:
            self._built = self._put_setup(setup)
            self._loading = None
        if self._built is None:
            raise RuntimeError("RayBackend.start() needs a setup, or build() first")
        if self._loading is None:
            self._begin_loading()
        got, self._loading = ray.get(self._loading), None
        self.machine_kinds = got[: len(self.workers)]
        self.machine_note = mixed_kinds_note(self.machine_kinds)
        self.restarts = 0
        self._snap_ref = None
        self._take_snapshot(0)

    def shared_train(self):
        """The training split as the workers see it: read zero-copy from the object store."""
        return ray.get(self._setup_box[1])

    # ------------------------------------------------------------ the server survives its actor

    def _named(self, role: str) -> dict:
        """Actor options that name it ``<name>/<role>`` (``kept/<role>`` in a
        ``kept_workers()`` block; unique: a name still held by an actor of another run gets a
        numbered suffix)."""
        # a kept pool's actors serve several runs: named by the pool, not the first run
        base = f"{'kept' if kept.active() else self.actor_prefix}/{role}"
        name = base
        for k in range(2, 100):
            try:
                ray.get_actor(name, namespace=self.namespace)
            except ValueError:
                break  # free
            name = f"{base}#{k}"
        opts: dict = {"name": name}
        if self.namespace:
            opts["namespace"] = self.namespace
        return opts

    def _play(self, t: int, selected: list[int]) -> RoundReport:
        e = self.cfg.engine
        pool = RayPool(
            self.workers,
            self.sizes,
            self._setup_box,
            e.vectorize_group if e.vectorize else 0,
            side=self._side,
        )
        return play_round(RemoteServer(self.server), pool, t, selected)

    def _weights_ref(self) -> ray.ObjectRef:
        """w_t as an object the driver owns (it survives the server actor), fetched once to
        know the call succeeded (zero-copy: a numpy array, no torch here)."""

        def call():
            ref = self.server.weights.remote()
            ray.get(ref)
            return ref

        return self._survive(call)

    def _evaluation(
        self, split: ArraySplit | None = None, w_ref: ray.ObjectRef | None = None
    ) -> WorkerValidation:
        """The evaluation of w_t on ``split`` (default: the validation split) as parts of
        whole evaluation batches, up to two per worker; each part's cost is a forward pass in
        the pool's unit (a client's samples, each trained forward and backward, about three
        forwards, in every local epoch)."""
        w_ref = self._weights_ref() if w_ref is None else w_ref
        n = self._val_size if split is None else len(split)
        if n is None:
            raise ValueError("this run's setup carries no validation split")
        split_ref = None if split is None else ray.put(split)
        size = self.cfg.train.eval_batch_size
        n_batches = -(-n // size)
        pieces = max(1, min(n_batches, VALIDATION_PARTS_PER_WORKER * len(self.workers)))
        parts = []
        for k in range(pieces):
            batches = range(k * n_batches // pieces, (k + 1) * n_batches // pieces)
            samples = min(batches.stop * size, n) - batches.start * size
            cost = -(-samples // (3 * max(self.cfg.train.epochs, 1)))
            parts.append(ValidationPart(w_ref, batches, cost, split_ref))
        return WorkerValidation(parts, n, self._validate_now)

    def evaluate(
        self, split: ArraySplit | None = None, weights: ray.ObjectRef | None = None
    ) -> tuple[float, float]:
        """(accuracy, loss) of w_t (or of ``weights``, a :meth:`hold`) on ``split`` (default:
        the validation split; the test split at the end), computed now by the client workers:
        the numbers the local engine gives (same code, model, thread count and batch size; the
        batches' losses added in order)."""
        return self._evaluation(split, weights).result()

    def hold(self) -> ray.ObjectRef:
        """w_t as it is now: an object the driver owns, for a later :meth:`evaluate`."""
        return self._weights_ref()

    def validate_next_round(self) -> WorkerValidation | None:
        """The validation of w_t (the server's current weights) as tasks of round t+1's
        queue (:meth:`_evaluation`'s parts), which client workers run in their largest-first
        place (the parts are small, so they even out the round's end); ``result()`` gives
        (accuracy, loss). On two cores a validation beside the round competed with both
        workers for the whole round; as tasks it fills the round's tail instead. GPU workers
        get the parts at once, ahead of the round (a CPU pass in the queue would hold up the
        GPU's tail). None for a setup without a validation split."""
        if not self.workers or self._val_size is None:
            return None
        job = self._evaluation()
        if self.device == "cpu":
            self._side.extend(job.parts)
        else:
            self._validate_now(job)
        return job

    def _validate_now(self, job: WorkerValidation) -> None:
        """Dispatch the parts of ``job`` no round took (no round ran after it was asked
        for, or the round had no client work)."""
        for k, part in enumerate(p for p in job.parts if p.ref is None):
            if part in self._side:
                self._side.remove(part)
            part.submit(self.workers[k % len(self.workers)], self._setup_box)

    def run_round(self, t: int, selected: list[int]) -> RoundReport:
        report = self._survive(lambda: self._play(t, selected))
        every = self.cfg.engine.server_snapshot_every
        if every > 0 and t % every == 0:
            self._take_snapshot(t, selected)
        else:
            self._since.append((t, selected))
        return report

    def weights(self) -> torch.Tensor:
        return _as_tensor(self._survive(lambda: ray.get(self.server.weights.remote()))).clone()

    def memory_bytes(self) -> dict[str, int]:
        return self._survive(lambda: ray.get(self.server.memory_bytes.remote()))

    def snapshot(self) -> dict:
        return self._survive(lambda: ray.get(self.server.snapshot.remote()))

    def checkpoint(self, ckpt: Any) -> bytes:
        """The checkpoint file, written by the server with its snapshot (no torch here)."""
        return self._survive(lambda: ray.get(self.server.checkpoint_blob.remote(ckpt)))

    def load_checkpoint(self, blob: bytes) -> Any:
        """A checkpoint file, read by client worker 0: the RunCheckpoint, its ``server`` the
        snapshot's object (the driver's), which :meth:`restore` takes."""
        self.prepare()
        ckpt_ref, snap_ref = self.workers[0].load_checkpoint.remote(blob)
        return dataclasses.replace(_get_unwrapped([ckpt_ref])[0], server=snap_ref)

    def restore(self, snap: Any) -> None:
        ray.get(self.server.restore.remote(snap))
        self._snap_ref = None
        self._take_snapshot(-1)  # the resumed state is the new base

    def close(self) -> None:
        """End the run's actors, or, inside a ``kept_workers()`` block, hand them back emptied
        for the next run (:mod:`~reuse_ray.distributed.kept`)."""
        if not (self.workers and kept.keep(self._shape, self.workers, self.server, self.hosted)):
            for w in self.workers:
                ray.kill(w, no_restart=True)
            if self.server is not None and not self.hosted:
                ray.kill(self.server, no_restart=True)
        self.workers, self.server, self._setup_box = [], None, []
        self._side = []
        self._loaded = (None, None)
        self._built, self._loading = None, None
        self._snap_ref = None


# the dataset as (its training split, the rest): two objects owned by the driver. The function
# comes from a module without torch, and ``max_calls=1`` ends the process once they are stored
_load_remote = ray.remote(num_cpus=0, max_calls=1, num_returns=2, max_retries=0)(load_apart)


def _ship_method_code(setup: RunSetup) -> None:
    """A method loaded from a ``.py`` path (``method.module``) is not importable on the
    workers: its classes travel by value inside the setup, so any node can run it."""
    import sys

    from ..algorithms.registry import FILE_MODULE_PREFIX

    name = type(setup.method).__module__
    if name.startswith(FILE_MODULE_PREFIX) and name in sys.modules:
        ray.cloudpickle.register_pickle_by_value(sys.modules[name])


__all__ = [
    "RayBackend",
    "RayPool",
    "RemoteServer",
    "ValidationPart",
    "WorkerValidation",
    "dispatch_batches",
    "ensure_ray",
    "loopback_only",
    "resolve_device",
    "with_side_jobs",
]
