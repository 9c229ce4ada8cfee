"""The Ray backend: a pool of client-worker actors and one server (issue: Ray engine).

The server lives in client worker 0's process (``engine.server_process: worker``) or in an
actor of its own (``own``). Per round the driver asks the server for the plan, submits the
fresh tasks to idle workers with the round's global vector as **one** object ref (the server's
``weights`` return value, never fetched by the driver), waits for the small task metadata, and
hands the message refs to the server, which fetches them and applies the server step.
Outcomes are sorted by client id before aggregation, and every random draw is keyed, so the
result is bit-identical to the local backend whatever the pool size or the order in which
tasks finish.

Faults: workers restart (``max_restarts=-1``) and their tasks are retried
(``max_task_retries``), and a retried task recomputes exactly the same update. Application errors
are not retried; they surface as :class:`~reuse_ray.engine.records.ClientError` naming the client
and the round.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import threading
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..config import DataConfig, RunConfig, ray_address_problem
from ..data.registry import ArraySplit, FederatedData, default_root, load_apart, load_dataset
from ..engine.records import ClientOutcome, RoundReport, RunFacts, RunSetup, combine_batches
from ..engine.round import play_round, vector_groups
from ..errors import UserError
from ..lazy import torch
from ..machine import mixed_kinds_note
from .actors import (
    ClientWorkerActor,
    ServerActor,
    ServerStateLost,
    ServingWorkerActor,
    TaskHandle,
    _as_tensor,
    fetch_indexed,
)
from .resources import pool_size_from_resources

TASK_RETRIES = 3
SERVER_RESTARTS = 3  # server actor deaths survived in one call before the run fails


CONNECT_TIMEOUT_S = 30.0  # $REUSE_RAY_CONNECT_TIMEOUT overrides it

CONNECT_HINT = (
    "check the address (engine.ray_address, --address or RAY_ADDRESS) and that the head node "
    "runs (`ray start --head`); with token authentication set RAY_AUTH_MODE=token and give the "
    "cluster's token (~/.ray/auth_token or RAY_AUTH_TOKEN)"
)


def _probe(address: str, timeout: float) -> None:
    """Fail fast, with one line, when nothing listens at host:port."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit():
        return  # a Ray Client address without its port: let Ray judge it
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        raise UserError(f"cannot reach a Ray cluster at {address} within {timeout:g} s "
                        f"({err.strerror or err}) — {CONNECT_HINT}") from None  # fmt: skip


@contextlib.contextmanager
def loopback_only():
    """While inside, a Ray instance this process starts listens on 127.0.0.1 only.

    On Linux Ray gives a new local node its outward address (``_node_ip_address="127.0.0.1"``
    is rewritten to it) and its gRPC servers (GCS, raylet, workers) listen on every interface.
    Ray's single-machine mode — the one it uses on macOS and Windows — names the node
    127.0.0.1 and binds every server (GCS, raylet, agents, workers) there; it is switched by
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``, read by ``ray_constants`` at import and inherited by
    the processes Ray starts (so it is set only while they are started). Only for an instance
    started here: a cluster the user connects to keeps its own addresses."""
    from ray._private import ray_constants

    name = ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR
    before_env, before = os.environ.get(name), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[name] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before
        if before_env is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before_env


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to ``address`` (or $RAY_ADDRESS), else start a local Ray; no-op if connected.

    An unreachable address or a refused token is one clear line within a bounded time
    ($REUSE_RAY_CONNECT_TIMEOUT, default 30 s), never a hang."""
    if ray.is_initialized():
        return
    if not address and (env := os.environ.get("RAY_ADDRESS")):
        if problem := ray_address_problem(env):
            raise UserError(f"RAY_ADDRESS={problem}")
        address = env
    address = address or None
    kwargs: dict = {"include_dashboard": False} if address is None else {}
    if address is None and num_cpus is not None:
        kwargs["num_cpus"] = num_cpus
    if address not in (None, "auto", "local"):
        _probe(address, float(os.environ.get("REUSE_RAY_CONNECT_TIMEOUT", CONNECT_TIMEOUT_S)))
    # ray.init installs Ray's own SIGTERM handler (it prints a stack and exits 1), replacing a
    # Python one this process set (the CLI's: SIGTERM ends a command as Ctrl-C does); that one
    # is put back after it
    term = signal.getsignal(signal.SIGTERM)
    try:
        with loopback_only() if address is None else contextlib.nullcontext():
            # no address: a new local instance, as documented — not Ray's default of joining
            # the latest `ray start` instance on this machine (that is address "auto")
            ray.init(address=address or "local", log_to_driver=True, **kwargs)
        if callable(term) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, term)
    except (ConnectionError, RuntimeError) as err:
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if address is None and not any(k in text.lower() for k in ("auth", "token")):
            raise
        raise UserError(f"cannot connect to Ray at {address or 'a new local instance'} "
                        f"({text[:200]}) — {CONNECT_HINT}") from None  # fmt: skip


def resolve_device(cfg: RunConfig, resources: dict[str, float]) -> str:
    if cfg.engine.device == "auto":
        return "cuda" if resources.get("GPU", 0.0) > 0 else "cpu"
    return cfg.engine.device


class RayBackend:
    """Client work on a pool of Ray actors; server state in worker 0's or its own actor."""

    name = "ray"

    def __init__(self, cfg: RunConfig, resources: dict[str, float] | None = None,
                 name: str | None = None, namespace: str | None = None):  # fmt: skip
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
            raise UserError("engine.device: cuda, but the Ray cluster offers no GPU — allowed "
                            "here: cpu or auto")  # fmt: skip
        size = pool_size_from_resources(
            resources, clients_per_round=self.cfg.fl.clients_per_round, use_gpu=use_gpu,
            cpu_per_worker=e.cpu_per_worker, gpu_fraction=e.gpu_fraction,
            num_workers=e.num_workers,
        )  # fmt: skip
        opts = {"max_restarts": -1, "max_task_retries": TASK_RETRIES}
        if use_gpu:
            opts.update(num_gpus=e.gpu_fraction, num_cpus=0)
        else:
            opts.update(num_cpus=e.cpu_per_worker)
        # the server in worker 0's process (engine.server_process: worker), or its own actor
        self.hosted = e.server_process == "worker"
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
        """Actor options that name it ``<name>/<role>`` (unique: a name still held by an actor
        of another run gets a numbered suffix)."""
        base = f"{self.actor_prefix}/{role}"
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

    def _take_snapshot(self, t: int, selected: list[int] | None = None) -> None:
        """Keep the server's state after round t as an object the driver owns, so it outlives
        the server actor; the rounds played since are replayed after a restart. A server that
        dies before the snapshot is taken leaves the last good one in place (and round t joins
        the rounds to replay)."""
        snap_ref, ok_ref = self.server.snapshot_checked.remote()
        try:
            ray.get(ok_ref)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as err:
            if self._snap_ref is None or not _server_gone(err):
                raise  # another failure, or no earlier snapshot to fall back on
            self._since.append((t, selected or []))
            return
        self._snap_ref = snap_ref
        self._snap_round = t
        self._since: list[tuple[int, list[int]]] = []

    def _recover(self) -> None:
        """A new server from the last snapshot, then the rounds since, replayed: every draw
        is keyed and client work is recomputed bit for bit, so nothing changes. A server of
        its own is a new actor; one hosted by worker 0 is rebuilt in the process Ray
        restarted that worker in (its calls wait there until the restart is done)."""
        self.restarts += 1
        if self.hosted:
            ray.get(self.server.load_server.remote(self._setup_box[0]))
        else:
            try:
                ray.kill(self.server, no_restart=True)
            except Exception:  # noqa: BLE001 - it is already gone
                pass
            self.server = ServerActor.options(**self._named(f"server-{self.restarts}")).remote(
                self._setup_box[0]
            )
        ray.get(self.server.restore.remote(self._snap_ref))
        for t, selected in self._since:
            self._play(t, selected)

    def _play(self, t: int, selected: list[int]) -> RoundReport:
        e = self.cfg.engine
        pool = RayPool(self.workers, self.sizes, self._setup_box,
                       e.vectorize_group if e.vectorize else 0, side=self._side)  # fmt: skip
        return play_round(RemoteServer(self.server), pool, t, selected)

    def _weights_ref(self) -> ray.ObjectRef:
        """w_t as an object the driver owns (it survives the server actor), fetched once to
        know the call succeeded (zero-copy: a numpy array, no torch here)."""

        def call():
            ref = self.server.weights.remote()
            ray.get(ref)
            return ref

        return self._survive(call)

    def _evaluation(self, split: ArraySplit | None = None) -> WorkerValidation:
        """The evaluation of w_t on ``split`` (default: the validation split) as parts of
        whole evaluation batches, up to two per worker; each part's cost is a forward pass in
        the pool's unit (a client's samples, each trained forward and backward, about three
        forwards, in every local epoch)."""
        w_ref = self._weights_ref()
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

    def evaluate(self, split: ArraySplit | None = None) -> tuple[float, float]:
        """(accuracy, loss) of w_t on ``split`` (default: the validation split; the test split
        at the end), computed now by the client workers: the numbers the local engine gives
        (same code, model, thread count and batch size; the batches' losses added in order)."""
        return self._evaluation(split).result()

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

    def _survive(self, call):
        """``call()``, restarting the server from its snapshot when its actor died (or the
        worker hosting it restarted without it)."""
        every = self.cfg.engine.server_snapshot_every
        for attempt in range(SERVER_RESTARTS + 1):
            try:
                return call()
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as err:
                if (not _server_gone(err) or every <= 0 or attempt == SERVER_RESTARTS
                        or not self._server_dead()):  # fmt: skip
                    raise
                self._recover()
        raise AssertionError("unreachable")  # pragma: no cover

    def _server_dead(self) -> bool:
        """Whether the server's state is gone: its actor does not answer, or (hosted by a
        worker) the worker's restarted process holds none."""
        try:
            return not ray.get(self.server.has_server.remote(), timeout=30)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return True

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


# one result of a client task on Ray: the refs of its call's (metadata, messages, local states)
# tuples, and the task's index in them
Result = tuple[ray.ObjectRef, ray.ObjectRef, ray.ObjectRef, int]


VALIDATION_PARTS_PER_WORKER = 2  # a validation's parts: at most this many per worker
DISPATCH_SPREAD = 4  # a batch holds at most 1 / (spread × workers) of the work still queued


def dispatch_batches(costs: list[int], workers: int, items: list, spread: int = DISPATCH_SPREAD
                     ) -> list[list]:  # fmt: skip
    """Cut ``items`` (already in LPT order, largest first; ``costs`` theirs) into the batches
    one worker call runs back to back: each batch takes items while its cost stays within
    the work still queued ÷ (``spread`` × ``workers``), and at least one item. Large clients
    therefore go alone, as in plain LPT, and small ones travel together, in batches that
    shrink towards the round's end, so the workers finish together. Where a call's round trip
    is comparable to a client's training (many small clients, or a GPU), the workers would
    otherwise idle between calls. Results do not depend on the batching: every client is
    computed from the same inputs, whichever call runs it."""
    batches: list[list] = []
    remaining = sum(costs)
    k = 0
    while k < len(items):
        target = remaining / (spread * max(workers, 1))
        batch, cost = [items[k]], costs[k]
        k += 1
        while k < len(items) and cost + costs[k] <= target:
            batch.append(items[k])
            cost += costs[k]
            k += 1
        batches.append(batch)
        remaining -= cost
    return batches


class ValidationPart:
    """Some evaluation batches of an evaluation (of the validation split, or of a split in
    the object store), one worker task."""

    def __init__(self, w_ref: ray.ObjectRef, batches: range, cost: int,
                 split_ref: ray.ObjectRef | None = None):  # fmt: skip
        self.w_ref, self.batches, self.cost, self.ref = w_ref, batches, cost, None
        self.split_ref = split_ref

    def submit(self, worker, setup_box: list) -> ray.ObjectRef:
        self.ref = worker.validate.remote(self.w_ref, setup_box, self.batches, self.split_ref)
        return self.ref


class WorkerValidation:
    """A validation of fixed weights that client workers run as tasks of a round's queue
    (:meth:`RayBackend.validate_next_round`), cut into parts of whole evaluation batches so
    the smallest tasks come last and even out the round's end; ``result()`` is its
    (accuracy, loss), the parts' batches added in order (:func:`combine_batches`)."""

    def __init__(self, parts: list[ValidationPart], n: int, dispatch_now):
        self.parts, self.n = parts, n
        self._dispatch_now = dispatch_now  # for parts no round took

    def result(self) -> tuple[float, float]:
        if any(part.ref is None for part in self.parts):
            self._dispatch_now(self)
        got = _get_unwrapped([part.ref for part in self.parts])
        return combine_batches([b for part in got for b in part], self.n)


def with_side_jobs(queue: list, jobs: list, cost) -> list:
    """``queue`` (batches in LPT order) with each side job inserted, on its own, before the
    first batch that costs less (``cost(batch)``): the jobs take their LPT place."""
    out = list(queue)
    for job in jobs:
        cheaper = (i for i, b in enumerate(out)
                   if not isinstance(b, ValidationPart) and cost(b) < job.cost)  # fmt: skip
        k = next(cheaper, len(out))
        out.insert(k, job)
    return out


class RayPool:
    """Client tasks over a pool of worker actors, largest clients first (LPT), small ones in
    batches (:func:`dispatch_batches`)."""

    def __init__(self, workers: list, sizes: dict[int, int], setup_box: list,
                 vectorize_group: int = 0, side: list | None = None):  # fmt: skip
        """``setup_box``: ``[setup ref, training split ref]`` (:meth:`ClientWorkerActor.load`).
        ``vectorize_group`` > 0: tasks go to workers in the vectorized groups of
        :func:`~reuse_ray.engine.worker.vector_groups` (one call trains a group). ``side``:
        :class:`ValidationPart` tasks the round's main run takes into its queue (and removes
        from the list)."""
        self.workers, self.sizes, self.setup_box = workers, sizes, setup_box
        self.vectorize_group = vectorize_group
        self.side = side if side is not None else []

    def run(self, tasks: list[TaskHandle], w_ref: ray.ObjectRef,
            main: bool = False) -> list[Result]:  # fmt: skip
        """Run every task on idle workers; the refs come back in client order. The main run
        also runs the side jobs, each in its LPT place, and returns when they are done too."""
        refs: dict[int, Result] = {}
        pending: dict[ray.ObjectRef, int] = {}

        def cost(group: list[TaskHandle]) -> int:
            return sum(self.sizes.get(x.client, 0) for x in group)

        # largest clients (or groups) first (LPT scheduling) keeps the pool busy until the
        # round's end; results do not depend on which worker runs what, or in which order
        if self.vectorize_group:
            queue = sorted(vector_groups(tasks, self.vectorize_group),
                           key=lambda g: (-cost(g), g[0].client))  # fmt: skip
        else:
            lpt = sorted(tasks, key=lambda x: (-self.sizes.get(x.client, 0), x.client))
            queue = dispatch_batches([self.sizes.get(x.client, 0) for x in lpt],
                                     len(self.workers), lpt)  # fmt: skip
        if main and self.side:
            queue = with_side_jobs(queue, self.side, cost)
            self.side.clear()
        idle = list(range(len(self.workers)))
        while queue or pending:
            while queue and idle:
                group, wid = queue.pop(0), idle.pop(0)
                if isinstance(group, ValidationPart):
                    pending[group.submit(self.workers[wid], self.setup_box)] = wid
                    continue
                method = "run_group" if self.vectorize_group else "run_many"
                run = getattr(self.workers[wid], method).options(num_returns=3)
                out = run.remote(group, w_ref, self.setup_box)
                for k, task in enumerate(group):
                    refs[task.client] = (*out, k)
                pending[out[0]] = wid
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                idle.append(pending.pop(ref))
        return [refs[c] for c in sorted(refs)]


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

    def _handles(self, clients_ref: ray.ObjectRef, source_ref: ray.ObjectRef
                 ) -> tuple[TaskHandle, ...]:  # fmt: skip
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

    def step(self, t: int, selected: list[int], plan: RemotePlan,
             results: list[Result]) -> RoundReport:  # fmt: skip
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
