"""The FL run (design: Runs): set up, drive rounds, finish; it imports no Ray.

Rounds are 1..T with T fixed in advance. Validation is evaluated at round 1, every
``eval_every`` rounds and at T (:mod:`~reuse_ray.engine.driver`); the test split is loaded and
evaluated exactly once, after round T, and never when a run diverged or failed, nor in a
validation-only search stage. Rows go to Parquet at every evaluation round, so a crash loses at
most the rounds since the last one; with ``checkpoint_every`` the whole run state (server state
and caches included) is saved every K rounds and a resumed run continues bit-identically. What
the run tells the world (console, TensorBoard, MLflow, checkpoints, a Tune trial) goes through
observers (:mod:`~reuse_ray.engine.observers`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..allocator import retain_freed_memory
from ..config import RunConfig, flatten, to_dict
from ..data import class_counts, load_dataset, make_partition
from ..data.registry import FederatedData
from ..errors import UserError
from ..machine import check_environment
from ..results import RunWriter
from ..results.storage import anchored
from ..results.writer import COMPLETE
from .backend import Backend
from .driver import Played, RoundDriver
from .observers import (
    Console,
    Mlflow,
    Observer,
    RoundDone,
    RunEnded,
    RunStarted,
    StopRun,
    TensorBoard,
)
from .recorder import Recorder, RunCheckpoint
from .records import RunFacts

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RunHooks:
    """How a caller (the CLI, a Tune trial) embeds a run: what it is, what it may do, and who
    watches it."""

    # what the run is (recorded in the runs table)
    stage: str = "run"  # run | search | final
    sweep: str | None = None
    trial_id: str | None = None
    label: str | None = None  # a final-stage arm's name (selected-0, compare-1, a study's arm)
    # what it may do
    evaluate_test: bool = True  # False in a search stage: the test split is then forbidden
    checkpoint_every: int = 0  # rounds between checkpoints (0: none)
    resume: bytes | None = None  # a checkpoint's bytes to continue from
    # a complete result of this run id already in results_dir: recompute it (its rows are
    # replaced when the new attempt finishes) instead of refusing
    force: bool = False
    # who watches: TensorBoard scalars (RESULTS/tensorboard/<method>[label]-seedS), an MLflow
    # tracking URI, and the caller's own observers (a Tune reporter, a checkpoint saver), in order
    tensorboard: bool = True
    mlflow: str | None = None
    observers: tuple[Observer, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class RunSummary:
    """The run's ``runs`` row, plus where its files went."""

    run_id: str
    status: str
    row: dict[str, Any]
    results_dir: str


@dataclass
class _Run:
    """The loop's own state: the writer and recorder, the runs row, and how far it got."""

    cfg: RunConfig
    hooks: RunHooks
    writer: RunWriter
    t_start: float
    started_at: str
    recorder: Recorder | None = None
    row: dict[str, Any] = field(default_factory=dict)
    first_round: int = 1
    completed: int = 0
    status: str = "running"
    error: str | None = None
    test: tuple[float, float] | None = None
    memory: dict[str, int] | None = None
    # the attempts before this one (a run resumed from a checkpoint): how many, when the first
    # started, the wall time they spent up to that checkpoint (None: a checkpoint written
    # before the record kept it), and its round
    attempts: int = 1
    first_started_at: str | None = None
    wall_before: float | None = 0.0
    resumed_from: int | None = None

    def wall(self) -> tuple[float | None, float]:
        """(wall seconds over every attempt, this attempt's)."""
        mine = time.perf_counter() - self.t_start
        return (None if self.wall_before is None else self.wall_before + mine), mine


def run_fl(
    cfg: RunConfig,
    backend: Backend | None = None,
    progress: Progress | None = None,
    data: FederatedData | None = None,
    hooks: RunHooks | None = None,
    force: bool = False,
) -> RunSummary:
    """Run one FL run to round T and write its Parquet rows; returns the ``runs`` row.

    A complete result (finished or diverged) of the same run id in ``results_dir`` is never
    destroyed: without ``force`` (or ``hooks.force``) the run refuses to start; with it, the new
    attempt's rows replace the old ones only when it finishes."""
    hooks = hooks or RunHooks()
    cfg = cfg.replace(results_dir=anchored(cfg.results_dir)[0])
    check_environment(cfg)
    run = _open_run(cfg, hooks, force)
    backend = backend or make_backend(cfg)
    owns_data = data is None  # loaded here, so this run may rebind its arrays
    try:
        data, resumed, facts = _set_up(run, backend, data)
    except BaseException:
        backend.close()  # nothing started may outlive a run that never began
        raise
    started: list[Observer] = []
    driver: RoundDriver | None = None
    try:
        _start(backend, data, resumed, owns_data)
        begin = _started(run, facts, backend)
        for o in _observers(hooks, progress):
            o.on_start(begin)
            started.append(o)
        driver = RoundDriver(
            cfg, backend, run.first_round, np.asarray(facts.probs), hooks.checkpoint_every
        )
        _drive(run, driver, backend, started)
        if run.status == "finished" and hooks.evaluate_test:
            run.test = backend.evaluate(data.test())
        if run.status in ("finished", "diverged"):
            run.memory = backend.memory_bytes()
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM (errors.Terminated)
        run.status, run.error = "interrupted", str(err) or "interrupted (Ctrl-C)"
        raise
    except BaseException as err:
        run.status, run.error = "failed", f"{type(err).__name__}: {err}"
        raise
    finally:
        try:
            backend.close()
        finally:
            end = _finish(run, data, driver.diverged_at if driver else None)
            for o in started:
                o.on_end(end)
    return RunSummary(cfg.run_id, run.status, run.row, str(cfg.results_dir))


def _open_run(cfg: RunConfig, hooks: RunHooks, force: bool) -> _Run:
    t_start = time.perf_counter()
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    retain_freed_memory()
    writer = _open_writer(cfg, hooks, force)
    return _Run(cfg, hooks, writer, t_start, started_at, first_started_at=started_at)


def _start(
    backend: Backend, data: FederatedData, resumed: RunCheckpoint | None, owns_data: bool
) -> None:
    """The backend's server and workers ready, at the resumed checkpoint's state if any."""
    backend.start()
    shared = backend.shared_train() if owns_data else None
    if shared is not None:
        # the driver read the training split only to set the run up: from now on it sees the
        # backend's shared copy (zero-copy from Ray's object store), and its own is freed
        data.train = shared
    if resumed is not None:
        backend.restore(resumed.server)


def _open_writer(cfg: RunConfig, hooks: RunHooks, force: bool) -> RunWriter:
    """The run's writer. A complete earlier result of this run id is refused, or with
    ``force`` staged to be replaced when this attempt finishes; an incomplete one is cleared."""
    writer = RunWriter(cfg.results_dir, cfg.run_id, cfg.method.name)
    if hooks.resume is not None:
        return writer
    previous = writer.previous_status()
    if previous not in COMPLETE:
        writer.clear_previous()
    elif force or hooks.force:
        writer.stage()
    else:
        raise UserError(
            f"run {cfg.run_id} already {previous} in {cfg.results_dir} — nothing was "
            "recomputed; pass --force to recompute it (the old rows stay until the new "
            "attempt finishes)"
        )
    return writer


def _set_up(run: _Run, backend: Backend, data: FederatedData | None):
    """Data, partition, the backend's setup, the clients table and the first runs row:
    ``(data, the resumed checkpoint or None, RunFacts)``."""
    cfg, hooks, writer = run.cfg, run.hooks, run.writer
    backend.prepare()  # a remote backend's workers start while the data loads
    if data is None:  # a remote backend loads it into its object store
        data = backend.load_data(cfg.data)
    if not hooks.evaluate_test:
        data.forbid_test()  # a validation-only stage provably never reads the test split
    resumed: RunCheckpoint | None = None
    if hooks.resume is not None:
        resumed = backend.load_checkpoint(hooks.resume)
    parts = partition_clients(cfg, data)
    # built where the backend computes (on a Ray worker: this process holds no model)
    facts = backend.build(cfg, data, parts)
    run.recorder = Recorder(writer, cfg.run_id, cfg.seed, facts.dense_bytes)
    counts = class_counts(parts, data.train.y, data.info.num_classes)
    for i, p in enumerate(parts):
        writer.add(
            "clients",
            {
                "run_id": cfg.run_id,
                "seed": cfg.seed,
                "client_id": i,
                "num_samples": len(p),
                "class_counts": counts[i].tolist(),
            },
        )
    if resumed is not None:
        run.recorder.resume(resumed)
        run.first_round = resumed.round + 1
        run.attempts, run.resumed_from = resumed.attempts + 1, resumed.round
        run.first_started_at, run.wall_before = resumed.started_at, resumed.wall_s
    run.row = _run_row(cfg, cfg.run_id, hooks, facts, backend, run)
    run.completed = run.first_round - 1
    writer.set_run_row(run.row)
    writer.flush()
    return data, resumed, facts


def _observers(hooks: RunHooks, progress: Progress | None) -> list[Observer]:
    out: list[Observer] = [Console(progress)] if progress is not None else []
    if hooks.tensorboard:
        out.append(TensorBoard())
    if hooks.mlflow:
        out.append(Mlflow(hooks.mlflow))
    return out + list(hooks.observers)


def _started(run: _Run, facts: RunFacts, backend: Backend) -> RunStarted:
    hooks = run.hooks
    label = hooks.label or (hooks.trial_id if hooks.stage == "search" else None)
    return RunStarted(
        run.cfg.run_id,
        run.cfg,
        facts.model_name,
        facts.num_params,
        facts.dense_bytes,
        backend.name,
        run.first_round,
        backend.machine_note,
        label,
        hooks.stage,
        hooks.sweep,
    )


def _drive(run: _Run, driver: RoundDriver, backend: Backend, observers: list[Observer]) -> None:
    """Record every round the driver plays; on the way out of a failure, keep the rows of the
    round whose validation was pending."""
    t_loop = time.perf_counter()
    try:
        for played in driver:
            _record(run, played, backend, observers, t_loop)
    except StopRun:
        run.status = "stopped"  # by an observer, after a recorded round: nothing to keep
        return
    except BaseException:
        left = driver.drain()
        if left is not None:
            with contextlib.suppress(Exception):
                _record(run, left, backend, observers, t_loop, live=False)
        raise
    if driver.diverged_at is None:
        run.status = "finished"
    else:
        run.status = "diverged"
        run.error = f"non-finite loss or update in round {driver.diverged_at}"


def _record(
    run: _Run,
    played: Played,
    backend: Backend,
    observers: list[Observer],
    t_loop: float,
    live: bool = True,
) -> None:
    """Round rows, flushes and the checkpoint, then the observers, in round order. A round
    counts as completed (``rounds_completed``) once its row is recorded, so a run stopped
    mid-way never claims a round its tables lack."""
    p = played.resolved()
    recorder = run.recorder
    row = recorder.record(p.round, p.report, p.val, p.wall)
    run.completed = p.round
    checkpoint = live and p.checkpoint
    if p.val is not None or checkpoint:
        run.writer.flush(("rounds", "client_events"))
    blob = None
    if checkpoint:
        total, _ = run.wall()
        state = recorder.checkpoint(p.round, run.attempts, run.first_started_at, total)
        blob = backend.checkpoint(state)
    rec = RoundDone(
        p.round,
        row,
        p.report,
        p.val,
        recorder.last_val,
        time.perf_counter() - t_loop,
        p.round - run.first_round + 1,
        blob,
        live,
    )
    for o in observers:
        o.on_round(rec)


def _finish(run: _Run, data: FederatedData, diverged_at: int | None) -> RunEnded:
    """The runs row with the run's end, written; what the observers are told."""
    recorder, test, memory = run.recorder, run.test, run.memory
    last_val = recorder.last_val
    run.row.update(
        {
            "status": run.status,
            "error": run.error,
            "rounds_completed": run.completed,
            "final_round": run.completed or None,
            "final_val_acc": last_val[0] if last_val else None,
            "final_val_loss": last_val[1] if last_val else None,
            "test_acc": test[0] if test else None,
            "test_loss": test[1] if test else None,
            "test_round": run.cfg.fl.rounds if test else None,
            "test_reads": data.test_reads,
            **recorder.totals(),
            "server_memory_bytes": memory["server"] if memory else None,
            "client_memory_bytes": memory["client"] if memory else None,
            **dict(zip(("wall_s", "attempt_wall_s"), run.wall(), strict=True)),
        }
    )
    run.writer.set_run_row(run.row)
    run.writer.flush()
    run.writer.finish(run.status)
    return RunEnded(run.status, run.row, diverged_at if run.status == "diverged" else None, test)


def make_backend(cfg: RunConfig) -> Backend:
    """The backend named by ``cfg.engine.backend``; Ray is imported only when asked for."""
    if cfg.engine.backend == "local":
        from .local import LocalBackend

        return LocalBackend("cuda" if cfg.engine.device == "cuda" else "cpu")
    from ..distributed import RayBackend

    return RayBackend(cfg)


def partition_clients(cfg: RunConfig, data: FederatedData) -> list[np.ndarray]:
    p = cfg.partition
    return make_partition(
        data.train.y,
        cfg.fl.num_clients,
        p.kind,
        cfg.seed,
        p.alpha,
        p.min_size,
        p.shards_per_client,
    )


def prepare_data(cfg: RunConfig) -> tuple[FederatedData, list[np.ndarray]]:
    """Load the dataset and partition its training split over the clients."""
    data = load_dataset(cfg.data)
    return data, partition_clients(cfg, data)


def _run_row(
    cfg: RunConfig, run_id: str, hooks: RunHooks, facts: RunFacts, backend: Backend, run: _Run
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "seed": cfg.seed,
        "status": "running",
        "error": None,
        "stage": hooks.stage,
        "sweep": hooks.sweep,
        "trial_id": hooks.trial_id,
        "label": hooks.label,
        "dataset": cfg.data.name,
        "model": facts.model_name,
        "backend": backend.name,
        "rounds_planned": cfg.fl.rounds,
        "rounds_completed": 0,
        "num_params": facts.num_params,
        "dense_bytes": facts.dense_bytes,
        "started_at": run.first_started_at,
        "attempts": run.attempts,
        "resumed_from_round": run.resumed_from,
        "attempt_started_at": run.started_at,
        "test_reads": 0,
        "host": socket.gethostname(),
        "ray_node": _ray_node(),
        "config_json": json.dumps(to_dict(cfg), sort_keys=True),
        **{
            f"cfg.{k}": json.dumps(v) if isinstance(v, list) else v for k, v in flatten(cfg).items()
        },
    }


def _ray_node() -> str | None:
    """The Ray node id of this process when it runs inside Ray (a trial, a Ray-backed driver);
    Ray is not imported for it."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - where it ran is a courtesy, never a failure
        return None
