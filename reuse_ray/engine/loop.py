"""The FL round loop (ALGORITHMS.md §1.5); it imports no Ray and runs behind any Backend.

Rounds are 1..T with T fixed in advance. Validation is evaluated at round 1, every
``eval_every`` rounds and at T; the test split is loaded and evaluated exactly once, after round
T, and never when a run diverged or failed, nor in a validation-only search stage (§6 items 1
and 17). Rows go to Parquet at every evaluation round, so a crash loses at most the rounds since
the last one; with a checkpoint hook the whole run state (server state and caches included) is
saved every K rounds and a resumed run continues bit-identically.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
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
from ..results import RunWriter
from ..results.storage import Storage, anchored
from ..results.tensorboard import RoundScalars, run_folder, tensorboard_dir
from ..results.tracking import MlflowRun
from ..results.writer import COMPLETE
from .backend import Backend
from .recorder import Recorder, RunCheckpoint
from .records import RunFacts
from .sampling import select_clients

Progress = Callable[[str], None]


@dataclass
class RunHooks:
    """How a caller (the CLI, a Tune trial) embeds a run."""

    stage: str = "run"  # run | search | final: recorded in the runs table
    evaluate_test: bool = True  # False in a search stage: the test split is then forbidden
    sweep: str | None = None
    trial_id: str | None = None
    # gets each round's row, and the checkpoint blob on checkpoint rounds (else None)
    on_round: Callable[[dict[str, Any], bytes | None], None] | None = None
    checkpoint_every: int = 0  # rounds between checkpoints (0: none)
    save_checkpoint: Callable[[bytes, int], None] | None = None  # (state blob, round)
    resume: bytes | None = None  # a blob from save_checkpoint to continue from
    # a complete result of this run id already in results_dir: recompute it (its rows are
    # replaced when the new attempt finishes) instead of refusing
    force: bool = False
    tensorboard: bool = True  # scalars by round under RESULTS/tensorboard/<method>[label]-seedS
    mlflow: str | None = None  # an MLflow tracking URI: params and per-round metrics there
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunSummary:
    """The run's ``runs`` row, plus where its files went."""

    run_id: str
    status: str
    row: dict[str, Any]
    results_dir: str


@dataclass(frozen=True)
class _Played:
    """A round the backend has played, waiting to be recorded; ``val`` is its validation
    (accuracy, loss), None off evaluation rounds, or a pending handle (:func:`_is_pending`)
    while it runs."""

    round: int
    report: Any
    wall: float  # client work and server step; the wait for the validation is added
    val: Any
    checkpoint: bool


def _is_pending(val: Any) -> bool:
    """A validation still running: a backend's handle with ``result()`` (the Ray backend's
    tasks on its workers)."""
    return callable(getattr(val, "result", None))


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f}{unit}" if unit != "B" else f"{int(n)}B"
        n /= 1000
    return str(n)


def check_environment(cfg: RunConfig) -> None:
    """What a run needs from this machine, checked before any data or Ray work: a writable
    results directory, and CUDA where ``engine.device=cuda`` runs in this process."""
    Storage.of(cfg.results_dir).check_writable()
    e = cfg.engine
    starts_local_ray = e.backend == "ray" and not (e.ray_address or os.environ.get("RAY_ADDRESS"))
    if e.device == "cuda" and (e.backend == "local" or starts_local_ray):
        import torch

        if not torch.cuda.is_available():
            raise UserError("engine.device: cuda, but this machine has no usable GPU — "
                            "allowed here: cpu or auto")  # fmt: skip
    cpus = os.cpu_count() or 1
    if starts_local_ray and e.device != "cuda" and e.cpu_per_worker > cpus:
        raise UserError(f"engine.cpu_per_worker: {e.cpu_per_worker:g}, but this machine has "
                        f"{cpus} CPUs — allowed: (0, {cpus}]")  # fmt: skip


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
        data.train.y, cfg.fl.num_clients, p.kind, cfg.seed, p.alpha, p.min_size,
        p.shards_per_client,
    )  # fmt: skip


def prepare_data(cfg: RunConfig) -> tuple[FederatedData, list[np.ndarray]]:
    """Load the dataset and partition its training split over the clients."""
    data = load_dataset(cfg.data)
    return data, partition_clients(cfg, data)


def _run_row(cfg: RunConfig, run_id: str, hooks: RunHooks, facts: RunFacts, backend: Backend,
             started_at: str) -> dict[str, Any]:  # fmt: skip
    return {
        "run_id": run_id, "seed": cfg.seed, "status": "running", "error": None,
        "stage": hooks.stage, "sweep": hooks.sweep, "trial_id": hooks.trial_id,
        "label": hooks.extra.get("label"),
        "dataset": cfg.data.name, "model": facts.model_name, "backend": backend.name,
        "rounds_planned": cfg.fl.rounds, "rounds_completed": 0, "num_params": facts.num_params,
        "dense_bytes": facts.dense_bytes, "started_at": started_at, "test_reads": 0,
        "host": socket.gethostname(), "ray_node": _ray_node(),
        "config_json": json.dumps(to_dict(cfg), sort_keys=True),
        **{f"cfg.{k}": json.dumps(v) if isinstance(v, list) else v
           for k, v in flatten(cfg).items()},
    }  # fmt: skip


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


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def _progress_line(run_id: str, t: int, rounds: int, row: dict[str, Any], val, cum,
                   elapsed: float, done: int) -> str:  # fmt: skip
    """One round: metrics, bytes, the round's time, elapsed time and the ETA of the run."""
    eta = elapsed / done * (rounds - t) if done else 0.0
    return (f"[{run_id}] round {t:>4}/{rounds} "
            + (f"val_acc={val[0]:.4f} val_loss={val[1]:.4f} " if val else "")
            + f"fresh={row['num_fresh']} reused={row['num_reused']} "
            f"up={_fmt_bytes(cum.up_restricted)} "
            f"cum_saving={100 * cum.saving_restricted:.3f}% "
            f"{row['round_wall_s']:.2f}s elapsed {_clock(elapsed)} eta {_clock(eta)}")  # fmt: skip


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
    t_start = time.perf_counter()
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    retain_freed_memory()
    say = progress or (lambda _msg: None)
    run_id = cfg.run_id
    writer = RunWriter(cfg.results_dir, run_id, cfg.method.name)
    resumed: RunCheckpoint | None = None  # read by the backend, once it runs (below)
    if hooks.resume is None:
        previous = writer.previous_status()
        if previous in COMPLETE:
            if not (force or hooks.force):
                raise UserError(
                    f"run {run_id} already {previous} in {cfg.results_dir} — nothing was "
                    "recomputed; pass --force to recompute it (the old rows stay until the new "
                    "attempt finishes)"
                )
            writer.stage()
        else:
            writer.clear_previous()

    backend = backend or make_backend(cfg)
    owns_data = data is None  # loaded here, so this run may rebind its arrays
    try:
        prepare = getattr(backend, "prepare", None)
        if prepare is not None:
            prepare()  # a remote backend's workers start while the data loads
        if data is None:  # a remote backend loads it into its object store
            data = getattr(backend, "load_data", load_dataset)(cfg.data)
        if not hooks.evaluate_test:
            data.forbid_test()  # a validation-only stage provably never reads the test split
        if hooks.resume is not None:
            resumed = backend.load_checkpoint(hooks.resume)
        parts = partition_clients(cfg, data)
        # built where the backend computes (on a Ray worker: this process holds no model)
        facts = backend.build(cfg, data, parts)
        info = data.info
        recorder = Recorder(writer, run_id, cfg.seed, facts.dense_bytes)

        counts = class_counts(parts, data.train.y, info.num_classes)
        for i, p in enumerate(parts):
            writer.add("clients", {"run_id": run_id, "seed": cfg.seed, "client_id": i,
                                   "num_samples": len(p),
                                   "class_counts": counts[i].tolist()})  # fmt: skip
        run_row = _run_row(cfg, run_id, hooks, facts, backend, started_at)
        first_round = 1
        if resumed is not None:
            recorder.resume(resumed)
            first_round = resumed.round + 1
        writer.set_run_row(run_row)
        writer.flush()
    except BaseException:
        backend.close()  # nothing started may outlive a run that never began
        raise
    say(f"[{run_id}] {cfg.method.name} on {cfg.data.name}/{facts.model_name}: "
        f"{cfg.fl.num_clients} clients, {cfg.fl.clients_per_round}/round, {cfg.fl.rounds} rounds, "
        f"d={facts.num_params:,} (B0={_fmt_bytes(facts.dense_bytes)}), backend={backend.name}"
        + (f", resumed after round {first_round - 1}" if resumed else ""))  # fmt: skip

    status, error = "running", None
    scalars: RoundScalars | None = None
    tracked: MlflowRun | None = None
    completed = first_round - 1
    test = None
    memory = None
    try:
        probs = np.asarray(facts.probs)
        backend.start()
        note = getattr(backend, "machine_note", None)  # workers on several kinds of machine
        if note:
            say(f"[{run_id}] note: {note}")
        shared_train = getattr(backend, "shared_train", None)
        if owns_data and shared_train is not None:
            # the driver reads the training split only to set the run up: from now on it
            # sees the backend's shared copy (zero-copy from Ray's object store) and its own
            # is freed, so the split is held once, not twice
            data.train = shared_train()
        if resumed is not None:
            backend.restore(resumed.server)
        label = hooks.extra.get("label") or (hooks.trial_id if hooks.stage == "search"
                                             else None)  # fmt: skip
        folder = run_folder(cfg.method.name, cfg.seed, label)
        logdir = tensorboard_dir(cfg.results_dir) if hooks.tensorboard else None
        if logdir is not None:
            scalars = RoundScalars(logdir, folder)
        if hooks.mlflow:
            tracked = MlflowRun(
                hooks.mlflow,
                hooks.sweep or "reuse_ray",
                folder,
                {"run_id": run_id, "stage": hooks.stage, **flatten(cfg)},
            )
        t_loop = time.perf_counter()
        # a backend that validates w_t as part of round t+1 (the Ray engine, on its workers)
        beside = getattr(backend, "validate_next_round", None)
        pending: _Played | None = None

        def finish(p: _Played, notify: bool = True) -> None:
            """Record a played round once its validation is in: rows, scalars, progress,
            flushes, the checkpoint and the caller's hook, in round order. A round counts as
            completed (the runs row's ``rounds_completed``) once its row is recorded, so a run
            stopped mid-way never claims a round its tables lack."""
            nonlocal completed
            t, val = p.round, p.val
            wall = p.wall
            if _is_pending(val):
                waited = time.perf_counter()
                val = val.result()
                wall += time.perf_counter() - waited
            row = recorder.record(t, p.report, val, wall)
            completed = t
            if scalars is not None:
                scalars.add(t, row, p.report, val)
            if tracked is not None:
                tracked.log_round(t, row, val)
            say(_progress_line(run_id, t, cfg.fl.rounds, row, val, recorder.cum,
                               time.perf_counter() - t_loop, t - first_round + 1))  # fmt: skip
            if val is not None:
                writer.flush(("rounds", "client_events"))
            if not notify:
                return
            blob = None
            if p.checkpoint:
                writer.flush(("rounds", "client_events"))
                blob = backend.checkpoint(recorder.checkpoint(t))
            if hooks.on_round is not None:
                last = recorder.last_val
                hooks.on_round(dict(row, last_val_acc=last[0] if last else None), blob)
            if blob is not None and hooks.save_checkpoint is not None:
                hooks.save_checkpoint(blob, t)

        try:
            for t in range(first_round, cfg.fl.rounds + 1):
                t0 = time.perf_counter()
                selected = select_clients(cfg, t, probs)
                report = backend.run_round(t, selected)
                wall = time.perf_counter() - t0
                if pending is not None:  # round t-1, validated while round t trained
                    done, pending = pending, None  # recorded once, even if a hook raises
                    finish(done)
                if report.diverged:
                    status, error = "diverged", f"non-finite loss or update in round {t}"
                    say(f"[{run_id}] round {t}: diverged (non-finite loss or update); stopping")
                    break
                ckpt = bool(hooks.checkpoint_every and t % hooks.checkpoint_every == 0
                            and t < cfg.fl.rounds)  # fmt: skip
                val: Any = None
                if t == 1 or t % cfg.fl.eval_every == 0 or t == cfg.fl.rounds:
                    if beside is not None and not ckpt and t < cfg.fl.rounds:
                        # validate w_t while round t+1 trains, as tasks of that round on the
                        # client workers: the same numbers, off the round's critical path
                        val = beside()
                    if val is None:
                        e0 = time.perf_counter()
                        val = backend.evaluate()
                        wall += time.perf_counter() - e0  # validated in line: part of the round
                played = _Played(t, report, wall, val, ckpt)
                if _is_pending(val):
                    pending = played
                else:
                    finish(played)
            else:
                status = "finished"
        except BaseException:
            if pending is not None:  # keep the last played round's rows
                with contextlib.suppress(Exception):
                    finish(pending, notify=False)
                pending = None
            raise
        if status == "finished" and hooks.evaluate_test:
            test = backend.evaluate(data.test())
            say(f"[{run_id}] final round {cfg.fl.rounds}: test_acc={test[0]:.4f} "
                f"test_loss={test[1]:.4f} (test split read once)")  # fmt: skip
        if status in ("finished", "diverged"):
            memory = backend.memory_bytes()
    except BaseException as err:
        status = "failed"
        error = f"{type(err).__name__}: {err}"
        raise
    finally:
        try:
            backend.close()
            if scalars is not None:
                scalars.close()
        finally:
            last_val = recorder.last_val
            run_row.update({
                "status": status, "error": error, "rounds_completed": completed,
                "final_round": completed or None,
                "final_val_acc": last_val[0] if last_val else None,
                "final_val_loss": last_val[1] if last_val else None,
                "test_acc": test[0] if test else None, "test_loss": test[1] if test else None,
                "test_round": cfg.fl.rounds if test else None, "test_reads": data.test_reads,
                **recorder.totals(),
                "server_memory_bytes": memory["server"] if memory else None,
                "client_memory_bytes": memory["client"] if memory else None,
                "wall_s": time.perf_counter() - t_start,
            })  # fmt: skip
            writer.set_run_row(run_row)
            writer.flush()
            writer.finish(status)
            if tracked is not None:
                tracked.close(status, completed, {
                    "final_val_acc": run_row.get("final_val_acc"),
                    "test_acc": run_row.get("test_acc"),
                    "final_cum_saving_restricted": run_row.get("cum_saving_restricted"),
                    "final_cum_up_measured_MB": run_row.get("cum_up_measured", 0) / 1e6,
                })  # fmt: skip
    return RunSummary(run_id, status, run_row, str(cfg.results_dir))
