"""The Tune trial: one trial is one FL run, a ``tune.Trainable`` that plays one round a step
(issue: sweeps).

Each round the trial returns validation metrics and cumulative bytes (never a test metric), and
every ``checkpoint_every`` rounds Tune saves the run's checkpoint, the whole run state — the
server's global vector and algorithm state with its caches, the ledgers and the rows written so
far — so a resumed (or paused and resumed) trial continues bit-identically and rewrites its
Parquet files without losing or duplicating a row.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from pathlib import Path
from typing import Any

from ray import tune

from ..algorithms.registry import WORKDIR_ENV
from ..engine import RunHooks
from ..errors import UserError
from ..results.writer import RunWriter
from ..runner import make_backend
from .spec import WorkloadSpec

STATE_FILE = "run_state.pt"  # reuse_ray.checkpoint: data only, never unpickled as code
# what a checkpoint Tune asks for before the run's first checkpoint round holds instead: the
# trial has no state to keep (it resumes from round 1), which a resume tells from a lost file
NO_STATE_FILE = "no_run_state"


def objective_value(
    objective: str,
    val_acc: float | None,
    saving: float | None,
    reference: float | None,
    retention: float,
) -> float:
    """The scalar a single-objective searcher maximises.

    * ``val_acc``: validation accuracy at the fixed final round;
    * ``retention``: the restricted uplink saving when validation accuracy keeps at least
      ``retention`` of the reference run's, else a penalty in [−2, −1) that grows with the gap,
      so every feasible configuration beats every infeasible one.
    """
    acc = val_acc if val_acc is not None and math.isfinite(val_acc) else 0.0
    if objective == "retention":
        ref = reference or 0.0
        if ref > 0 and acc >= retention * ref:
            return float(saving or 0.0)
        return -2.0 + (acc / ref if ref > 0 else 0.0)
    return acc


def trial_metrics(
    spec: WorkloadSpec,
    row: dict[str, Any],
    val_acc: float | None,
    reference: float | None,
    run_id: str,
    status: str,
    label: str | None = None,
) -> dict[str, Any]:
    """What a trial reports to Tune, from a ``rounds`` row (per round) or the ``runs`` row (at
    the end): validation metrics and cumulative bytes only, never a test metric."""
    saving = row["cum_saving_restricted"]
    t = row.get("round", row.get("rounds_completed")) or 0
    return {
        "round": t,
        # the latest validated accuracy and the round it was measured at (the schedulers' time
        # axis, so their rungs fall on evaluation rounds); 0.0 only for a run that never
        # validated (it diverged in round 1), whose objective is the penalty anyway
        "val_acc": val_acc if val_acc is not None else 0.0,
        "val_round": last_evaluation_round(spec, t),
        "cum_up_restricted": row["cum_up_restricted"],
        "cum_up_measured": row["cum_up_measured"],
        "cum_down_measured": row["cum_down_measured"],
        "cum_saving_restricted": saving if saving is not None else 0.0,
        "objective": objective_value(
            spec.search.objective, val_acc, saving, reference, spec.search.retention
        ),
        "run_id": run_id,
        "status": status,
        "label": label,  # a study's arm: its scheduler and budget are the arm's own
    }


def last_evaluation_round(spec: WorkloadSpec, t: int) -> int:
    """The last round ≤ t whose validation a run has: 1, multiples of ``fl.eval_every``, T."""
    fl = spec.run_config().fl
    if t <= 0:
        return 0
    if t >= fl.rounds:
        return fl.rounds
    return max(1, t // fl.eval_every * fl.eval_every)


class FLTrainable(tune.Trainable):
    """One trial is one FL run (design: Early-ending searches). ``setup`` takes the trial's
    config; each ``step`` plays one round and returns its validation metrics and bytes
    (never a test metric), the last one the runs row's with ``done``;
    ``save_checkpoint`` writes the run's latest checkpoint (the whole run state of its
    newest checkpoint round, data only) and ``load_checkpoint`` hands it to the run, which
    continues bit-identically from it; ``cleanup`` records a trial Tune stopped between
    steps (a scheduler, a spent budget, a pause) as ``stopped`` with its rows so far, a
    prefix of the full run's. Nothing waits and no thread is left: Tune stops a trial only
    between steps."""

    def setup(
        self,
        config: dict[str, Any],
        spec: WorkloadSpec,
        stage: str = "search",
        reference_val: float | None = None,
        verbose: int = 0,
        mlflow: str | None = None,
        workdir: str | None = None,
    ) -> None:
        if workdir:  # the driver's folder: a relative method.module path is read from there
            os.environ[WORKDIR_ENV] = workdir
        if verbose < 1:
            import logging

            for name in ("ray.train", "ray.tune", "ray.air"):
                logging.getLogger(name).setLevel(logging.WARNING)
        quiet_shutdown()
        self.spec, self.stage, self.reference_val = spec, stage, reference_val
        self.verbose, self.mlflow = verbose, mlflow
        self._configure(config)

    def _configure(self, config: dict[str, Any]) -> None:
        params = dict(config.get("final", config))
        self.label = params.pop("label", None)
        self.params = params
        self.run = None  # made at the first step: a checkpoint may be loaded before it
        self.resume: bytes | None = None
        self.blob: bytes | None = None  # the run's newest checkpoint
        self.ended = False

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """A reused trial process takes the next trial (``trial.reuse_actors``)."""
        self.cleanup()
        self._configure(new_config)
        return True

    def restore(self, checkpoint_path, *args, **kwargs):
        """Tune's restore, except that a checkpoint its saved state names but storage no longer
        holds (a stage begun by a version that kept each trial's newest two only, or a trial
        folder moved away to rerun it) starts the trial's run over from round 1 — the engine
        recomputes it bit for bit and rewrites its rows; a run that finished is kept — instead
        of ending the trial in an error and leaving its run ``running``."""
        try:
            return super().restore(checkpoint_path, *args, **kwargs)
        except ValueError as err:
            if "does not exist on storage" not in str(err):
                raise
        self._iteration, self._time_total, self.resume = 0, 0.0, None
        print(
            f"trial {self.trial_id}: its checkpoint is no longer on storage; its run starts "
            "over from round 1",
            flush=True,
        )
        return None

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        path = Path(checkpoint_dir) / STATE_FILE
        self.resume = path.read_bytes() if path.is_file() else None

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        if self.blob is not None:
            (Path(checkpoint_dir) / STATE_FILE).write_bytes(self.blob)
        else:  # before the first checkpoint round (or a trial that needed no run): nothing
            (Path(checkpoint_dir) / NO_STATE_FILE).write_bytes(b"")

    def step(self) -> dict[str, Any]:
        try:
            if self.run is None:
                early = self._start()
                if early is not None:
                    self.ended = True
                    return dict(early, done=True)
            return self._round()
        except UserError as err:
            # the trial's own configuration or data is wrong: a restart would fail the same
            # way, so the trial ends here, once, with the error as its last result (Tune
            # restarts only a trial whose process or node died)
            self._end_run()
            self.ended = True
            return dict(error_metrics(err, self.label), done=True)

    def _start(self) -> dict[str, Any] | None:
        """The trial's run made; or the result of a trial that needs none: this very run
        finished here before (its rows are kept)."""
        spec, stage, label = self.spec, self.stage, self.label
        cfg = spec.run_config(self.params)
        self.cfg = cfg
        if self.resume is None:
            early = _without_a_run(spec, stage, cfg, label, self.reference_val)
            if early is not None:
                return early
        from ..engine.run import Run

        hooks = trial_hooks(
            spec,
            stage,
            self.trial_id,
            label,
            checkpoint_every=spec.checkpoint_every,
            resume=self.resume,
            mlflow=self.mlflow,
        )
        progress = (lambda m: print(m, flush=True)) if self.verbose >= 2 else None
        backend = trial_backend(spec, cfg, self.trial_id or stage)
        self.run = Run(cfg, backend, hooks=hooks, force=True, progress=progress)
        return None

    def _round(self) -> dict[str, Any]:
        run, spec, rounds = self.run, self.spec, self.cfg.fl.rounds
        rec = run.step()
        if rec is not None and rec.checkpoint is not None:
            self.blob = rec.checkpoint
        if rec is not None and rec.round < rounds:
            last = rec.last_val[0] if rec.last_val else None
            return trial_metrics(
                spec, rec.row, last, self.reference_val, self.cfg.run_id, "running", self.label
            )
        if rec is not None:
            run.step()  # after round T: the run records that it finished
        summary = run.finish()
        self.ended = True
        row = summary.row
        return dict(
            trial_metrics(
                spec,
                row,
                row["final_val_acc"],
                self.reference_val,
                self.cfg.run_id,
                summary.status,
                self.label,
            ),
            done=True,
        )

    def _end_run(self) -> None:
        if self.run is not None:
            with contextlib.suppress(Exception):
                self.run.finish()

    def cleanup(self) -> None:
        """Tune stopped the trial between steps (or the experiment ended): a run still
        going is recorded ``stopped`` with its rows so far."""
        if self.run is not None and not self.ended:
            self.run.stop()
            self._end_run()
        self.run, self.ended = None, True


def kept_run(cfg, stage: str, label: str | None) -> dict | None:
    """The runs row of this very run (config and seed: its id) if it finished here before in
    ``stage`` under ``label`` — a sweep started over the shipped or an earlier sweep's Parquet,
    a search repeating a point, a final stage launched again: the engine is deterministic, so
    its rows are kept, not recomputed."""
    kept = RunWriter(cfg.results_dir, cfg.run_id, cfg.method.name).previous_result()
    if kept and (kept["status"], kept["stage"], kept["label"]) == ("finished", stage, label):
        return kept
    return None


def _without_a_run(spec: WorkloadSpec, stage: str, cfg, label, reference_val) -> dict | None:
    """The result of a trial that needs no run: its run finished here before
    (:func:`kept_run`)."""
    kept = kept_run(cfg, stage, label)
    if kept is None:
        return None
    print(f"{cfg.run_id}: already finished in this results folder; rows kept", flush=True)
    return trial_metrics(
        spec, kept, kept["final_val_acc"], reference_val, cfg.run_id, "finished", label
    )


def trial_hooks(spec: WorkloadSpec, stage: str, trial_id: str | None, label: str | None, **more):
    """How one of the stage's runs is embedded: its stage, sweep, trial and label recorded,
    the test split read only in the final stage, and a repeated identical trial recomputing
    the same rows to replace them (``force``); ``more``: further RunHooks fields."""
    return RunHooks(
        stage=stage,
        evaluate_test=stage == "final",
        sweep=spec.name,
        trial_id=trial_id,
        label=label,
        force=True,
        **more,
    )


def trial_backend(spec: WorkloadSpec, cfg, name: str):
    """The backend of one of the sweep's runs, as its trials get it: on the Ray engine a pool
    of ``trial.workers`` workers sized from the trial's own bundles, its actors named
    ``<run_id>/<name>`` in the sweep's namespace."""
    if cfg.engine.backend != "ray":
        return make_backend(cfg)
    from ..distributed import RayBackend

    t = spec.trial
    if t.gpu_fraction > 0:
        pool = {"GPU": t.workers * t.gpu_fraction}
    else:
        pool = {"CPU": t.workers * t.cpu_per_worker}
    return RayBackend(
        cfg, resources=pool, name=f"{cfg.run_id}/{name}", namespace=f"reuse_ray-{spec.name}"
    )


def _quiet_unraisable(unraisable) -> None:
    """``sys.unraisablehook`` of a trial process: the ``SystemExit`` Ray's SIGTERM handler
    raises when a stage's end or ``ray.shutdown`` ends an idle (reused) trial process lands
    where Python cannot raise it (a finalizer) and was printed as ``Exception ignored …
    SystemExit: 1``; it is the process ending as asked, so it is dropped. Anything else is
    shown as Python shows it."""
    if isinstance(unraisable.exc_value, SystemExit):
        return
    sys.__unraisablehook__(unraisable)


def quiet_shutdown() -> None:
    """Install :func:`_quiet_unraisable` in this process (once)."""
    if sys.unraisablehook is not _quiet_unraisable:
        sys.unraisablehook = _quiet_unraisable


def error_metrics(err: BaseException, label: str | None) -> dict[str, Any]:
    """The last report of a trial ended by a user error: its one-line error, the worst value
    of every objective (the searchers learn the region fails) and no round."""
    from .reeval import PENALTY

    text = str(err).splitlines()[0] if str(err) else ""
    return {
        "status": "error",
        "error": f"{type(err).__name__}: {text}",
        "objective": PENALTY,
        "val_acc": 0.0,
        "cum_up_restricted": float("inf"),
        "round": 0,
        "val_round": 0,
        "label": label,
    }
