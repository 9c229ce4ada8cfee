"""The FL run (design: Runs): a :class:`Run` is set up when made, plays and records one round
per :meth:`Run.step`, and records its end in :meth:`Run.finish`; :func:`play_run` is the loop over
it. It imports no Ray.

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
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..allocator import retain_freed_memory
from ..config import RunConfig
from ..data import class_counts
from ..data.registry import FederatedData
from ..machine import check_environment
from ..results.storage import anchored
from .backend import Backend
from .driver import Played, RoundDriver
from .levels import LevelReader, level_bytes
from .observers import Observer, Progress, RoundDone, RunEnded, RunStarted, StopRun
from .recorder import Recorder, RunCheckpoint
from .run_parts import observers_of, open_writer, partition_clients, run_row


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


class Run:
    """One FL run's life. Made: the results writer opened (a complete earlier result refused,
    or staged to be replaced with ``force``), the data loaded and partitioned, the backend
    built and started (at a resumed checkpoint's state), the clients table and the first runs
    row written, the observers started. :meth:`step` plays the next round and records it;
    :meth:`finish` reads the test split (a finished run that may), closes the backend and
    writes the runs row with the run's end. A failure in either is recorded (``interrupted``
    for Ctrl-C and SIGTERM, else ``failed``) before it is raised."""

    def __init__(
        self,
        cfg: RunConfig,
        backend: Backend,
        data: FederatedData | None = None,
        hooks: RunHooks | None = None,
        force: bool = False,
        progress: Progress | None = None,
    ):
        self.hooks = hooks = hooks or RunHooks()
        self.cfg = cfg = cfg.replace(results_dir=anchored(cfg.results_dir)[0])
        check_environment(cfg)
        self.backend = backend
        self.t_start = time.perf_counter()
        self.started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        retain_freed_memory()
        self.writer = open_writer(cfg, hooks, force)
        self.row: dict[str, Any] = {}
        self.first_round, self.completed = 1, 0
        self.status, self.error = "running", None
        self.test: tuple[float, float] | None = None
        self.memory: dict[str, int] | None = None
        # the attempts before this one (a run resumed from a checkpoint): how many, when the
        # first started, the wall time they spent up to that checkpoint (None: a checkpoint
        # written before the record kept it), and its round
        self.attempts, self.first_started_at = 1, self.started_at
        self.wall_before: float | None = 0.0
        self.resumed_from: int | None = None
        self.observers: list[Observer] = []
        self.driver: RoundDriver | None = None
        self.levels: LevelReader | None = None
        self._summary: RunSummary | None = None
        owns_data = data is None  # loaded here, so this run may rebind its arrays
        try:
            self.data, resumed, self.facts = self._set_up(data)
        except BaseException:
            backend.close()  # nothing started may outlive a run that never began
            raise
        try:
            self._start(resumed, owns_data)
            begin = self._started()
            for o in observers_of(hooks, progress):
                o.on_start(begin)
                self.observers.append(o)
            self.levels = self._level_reader()
            self.driver = RoundDriver(
                cfg,
                backend,
                self.first_round,
                np.asarray(self.facts.probs),
                hooks.checkpoint_every,
                hold=self.levels is not None,
            )
            self._rounds = iter(self.driver)
            self.t_loop = time.perf_counter()
        except BaseException as err:
            self.fail(err)
            self.finish()
            raise

    def wall(self) -> tuple[float | None, float]:
        """(wall seconds over every attempt, this attempt's)."""
        mine = time.perf_counter() - self.t_start
        return (None if self.wall_before is None else self.wall_before + mine), mine

    def step(self) -> RoundDone | None:
        """Play the next round and record it; its record, or None once the run has ended
        (finished, diverged, or stopped by an observer after a recorded round). On the way
        out of a failure, the rows of the round whose validation was pending are kept."""
        if self.status != "running":
            return None
        try:
            played = next(self._rounds)
            return self._record(played)
        except StopIteration:
            if self.driver.diverged_at is None:
                self.status = "finished"
            else:
                self.status = "diverged"
                self.error = f"non-finite loss or update in round {self.driver.diverged_at}"
            return None
        except StopRun:
            self.status = "stopped"  # by an observer, after a recorded round: nothing to keep
            return None
        except BaseException as err:
            left = self.driver.drain()
            if left is not None:
                with contextlib.suppress(Exception):
                    self._record(left, live=False)
            self.fail(err)
            raise

    def stop(self) -> None:
        """Its caller ends the run between rounds (a trial scheduler, a spent budget, a
        pause): status ``stopped``, its rows so far a prefix of the full run's, the test split
        not read; :meth:`finish` records it."""
        if self.status == "running":
            self.status = "stopped"

    def fail(self, err: BaseException) -> None:
        """Record why the run ends early (once: the first cause stays)."""
        if self.status not in ("running", "finished", "diverged"):
            return
        if isinstance(err, KeyboardInterrupt):  # Ctrl-C, or SIGTERM (errors.Terminated)
            self.status, self.error = "interrupted", str(err) or "interrupted (Ctrl-C)"
        else:
            self.status, self.error = "failed", f"{type(err).__name__}: {err}"

    def finish(self) -> RunSummary:
        """The run's end: the test split read once (a finished run that may), the memory
        measured, the backend closed, the runs row written, the observers told. Called once
        more it returns the same summary."""
        if self._summary is not None:
            return self._summary
        try:
            if self.status == "finished" and self.hooks.evaluate_test:
                self.test = self.backend.evaluate(self.data.test())
            if self.status in ("finished", "diverged"):
                self.memory = self.backend.memory_bytes()
        except BaseException as err:
            self.fail(err)
            raise
        finally:
            try:
                self.backend.close()
            finally:
                end = self._end()
                for o in self.observers:
                    o.on_end(end)
                self._summary = RunSummary(
                    self.cfg.run_id, self.status, self.row, str(self.cfg.results_dir)
                )
        return self._summary

    def _set_up(self, data: FederatedData | None):
        """Data, partition, the backend's setup, the clients table and the first runs row:
        ``(data, the resumed checkpoint or None, RunFacts)``."""
        cfg, hooks, writer, backend = self.cfg, self.hooks, self.writer, self.backend
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
        self.recorder = Recorder(writer, cfg.run_id, cfg.seed, facts.dense_bytes)
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
            self.recorder.resume(resumed)
            self.first_round = resumed.round + 1
            self.attempts, self.resumed_from = resumed.attempts + 1, resumed.round
            self.first_started_at, self.wall_before = resumed.started_at, resumed.wall_s
        self.completed = self.first_round - 1
        self.row = run_row(cfg, hooks, facts, backend, self)
        writer.set_run_row(self.row)
        writer.flush()
        return data, resumed, facts

    def _start(self, resumed: RunCheckpoint | None, owns_data: bool) -> None:
        """The backend's server and workers ready, at the resumed checkpoint's state if any."""
        self.backend.start()
        shared = self.backend.shared_train() if owns_data else None
        if shared is not None:
            # the driver read the training split only to set the run up: from now on it sees
            # the backend's shared copy (zero-copy from Ray's object store), and its own is freed
            self.data.train = shared
        if resumed is not None:
            self.backend.restore(resumed.server)

    def _level_reader(self) -> LevelReader | None:
        """The readings at ``fl.uplink_levels`` (none without levels); the test split is read
        at them where this stage may read it."""
        fl = self.cfg.fl
        if not fl.uplink_levels:
            return None
        limits = level_bytes(
            fl.uplink_levels, fl.rounds, fl.clients_per_round, self.facts.dense_bytes
        )
        backend = self.backend
        return LevelReader(
            self.cfg.run_id,
            self.cfg.seed,
            limits,
            lambda split, held: backend.evaluate(split, weights=held),
            self.data.test if self.hooks.evaluate_test else None,
            self.writer.rows["levels"],
        )

    def _started(self) -> RunStarted:
        hooks, facts = self.hooks, self.facts
        label = hooks.label or (hooks.trial_id if hooks.stage == "search" else None)
        return RunStarted(
            self.cfg.run_id,
            self.cfg,
            facts.model_name,
            facts.num_params,
            facts.dense_bytes,
            self.backend.name,
            self.first_round,
            self.backend.machine_note,
            label,
            hooks.stage,
            hooks.sweep,
        )

    def _record(self, played: Played, live: bool = True) -> RoundDone:
        """Round rows, flushes and the checkpoint, then the observers, in round order. A round
        counts as completed (``rounds_completed``) once its row is recorded, so a run stopped
        mid-way never claims a round its tables lack."""
        p = played.resolved()
        recorder = self.recorder
        before = recorder.cum
        row = recorder.record(p.round, p.report, p.val, p.wall)
        if self.levels is not None:
            self.levels.on_round(p.round, before, recorder.cum, p.held, p.val)
        self.completed = p.round
        checkpoint = live and p.checkpoint
        if p.val is not None or checkpoint:
            self.writer.flush(("rounds", "client_events", "levels"))  # levels: once it has rows
        blob = None
        if checkpoint:
            total, _ = self.wall()
            state = recorder.checkpoint(p.round, self.attempts, self.first_started_at, total)
            blob = self.backend.checkpoint(state)
        rec = RoundDone(
            p.round,
            row,
            p.report,
            p.val,
            recorder.last_val,
            time.perf_counter() - self.t_loop,
            p.round - self.first_round + 1,
            blob,
            live,
        )
        for o in self.observers:
            o.on_round(rec)
        return rec

    def _end(self) -> RunEnded:
        """The runs row with the run's end, written; what the observers are told."""
        recorder, test, memory = self.recorder, self.test, self.memory
        last_val = recorder.last_val
        if self.levels is not None:
            self.levels.close(self.status, self.completed, recorder.cum, last_val, test)
        self.row.update(
            {
                "status": self.status,
                "error": self.error,
                "rounds_completed": self.completed,
                "final_round": self.completed or None,
                "final_val_acc": last_val[0] if last_val else None,
                "final_val_loss": last_val[1] if last_val else None,
                "test_acc": test[0] if test else None,
                "test_loss": test[1] if test else None,
                "test_round": self.cfg.fl.rounds if test else None,
                "test_reads": self.data.test_reads,
                **recorder.totals(),
                "server_memory_bytes": memory["server"] if memory else None,
                "client_memory_bytes": memory["client"] if memory else None,
                **dict(zip(("wall_s", "attempt_wall_s"), self.wall(), strict=True)),
            }
        )
        self.writer.set_run_row(self.row)
        self.writer.flush()
        self.writer.finish(self.status)
        diverged = self.driver.diverged_at if self.driver and self.status == "diverged" else None
        return RunEnded(self.status, self.row, diverged, test)


def play_run(
    cfg: RunConfig,
    backend: Backend,
    progress: Progress | None = None,
    data: FederatedData | None = None,
    hooks: RunHooks | None = None,
    force: bool = False,
) -> RunSummary:
    """Run one FL run to round T on ``backend`` and write its Parquet rows; returns the
    ``runs`` row (:func:`reuse_ray.runner.run_fl` picks the backend the config names).

    A complete result (finished or diverged) of the same run id in ``results_dir`` is never
    destroyed: without ``force`` (or ``hooks.force``) the run refuses to start; with it, the new
    attempt's rows replace the old ones only when it finishes."""
    run = Run(cfg, backend, data, hooks, force, progress)
    try:
        while run.step() is not None:
            pass
    except BaseException as err:
        run.fail(err)
        raise
    finally:
        summary = run.finish()
    return summary
