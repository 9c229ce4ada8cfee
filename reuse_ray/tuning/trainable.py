"""The Tune function trainable: one trial is one FL run (issue: sweeps).

Each round the trial reports validation metrics and cumulative bytes (never a test metric), and
every ``checkpoint_every`` rounds it attaches a checkpoint holding the whole run state — the
server's global vector and algorithm state with its caches, the ledgers and the rows written so
far — so a resumed trial continues bit-identically and rewrites its Parquet files without losing
or duplicating a row.
"""

from __future__ import annotations

import math
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from ..engine import RunHooks
from ..engine.observers import Observer, RoundDone, StopRun
from ..errors import UserError
from ..results.writer import RunWriter
from ..runner import make_backend, run_fl
from .spec import SweepSpec

STATE_FILE = "run_state.pt"  # reuse_ray.checkpoint: data only, never unpickled as code

# How long a trial process that Tune stops at a report waits for its run to record its end
STOP_GRACE_S = 60.0
# This trial process's run, as its trainable's cleanup must know it (design: Early-ending
# searches): no run in progress (set), and a run waiting in ``tune.report`` (set)
_RUN_ENDED = threading.Event()
_RUN_ENDED.set()
_AT_REPORT = threading.Event()


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
    spec: SweepSpec,
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


def last_evaluation_round(spec: SweepSpec, t: int) -> int:
    """The last round ≤ t whose validation a run has: 1, multiples of ``fl.eval_every``, T."""
    fl = spec.run_config().fl
    if t <= 0:
        return 0
    if t >= fl.rounds:
        return fl.rounds
    return max(1, t // fl.eval_every * fl.eval_every)


class TuneReporter(Observer):
    """Reports each round of a trial to Tune (validation metrics and bytes, never a test
    metric), with the run's state as a Tune checkpoint on checkpoint rounds."""

    def __init__(
        self, spec: SweepSpec, run_id: str, reference_val: float | None, label: str | None
    ):
        self.spec, self.run_id, self.reference_val = spec, run_id, reference_val
        self.label = label
        self.rounds = spec.run_config().fl.rounds

    def on_round(self, rec: RoundDone) -> None:
        from ray import tune

        if not rec.live or rec.round >= self.rounds:
            return  # the last round is reported once, with the runs row, when the run ends
        last = rec.last_val[0] if rec.last_val else None
        metrics = trial_metrics(
            self.spec, rec.row, last, self.reference_val, self.run_id, "running", self.label
        )
        _AT_REPORT.set()
        try:
            if rec.checkpoint is None:
                tune.report(metrics)
                return
            with tempfile.TemporaryDirectory() as d:
                (Path(d) / STATE_FILE).write_bytes(rec.checkpoint)
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))
        except SystemExit:
            # Tune ends a trial its scheduler stopped by exiting the trial's thread at its next
            # report; the run ends here instead, with its rows so far and status "stopped"
            raise StopRun from None
        finally:
            _AT_REPORT.clear()


def _waits_at_report() -> bool:
    """Whether this process's run waits in ``tune.report``."""
    return _AT_REPORT.is_set()


def _await_run_end(timeout: float = STOP_GRACE_S) -> bool:
    """Wait until this process's run (if any) has recorded its end; True if it has."""
    return _RUN_ENDED.wait(timeout)


def trial_trainable(fn):
    """Tune's function trainable over ``fn`` (``trial_main`` with its parameters), whose
    cleanup lets a run stopped at its report record its end before the process goes.

    Tune stops a trial (its scheduler, or a spent client-round budget) while the trial waits in
    ``tune.report``: the cleanup releases it there, and the run ends with status ``stopped``
    and its rows so far. Tune does not wait for that thread (at the end of an experiment it
    terminates the process right after the cleanup), so a run that needed a moment to write its
    last rows was left recorded as ``running``; this cleanup waits for it (at most
    ``STOP_GRACE_S``). A run busy between reports is not waited for: it is interrupted, not
    stopped, and ``--resume`` continues it from its checkpoint."""
    from ray.tune.trainable.function_trainable import wrap_function

    base = wrap_function(fn)

    class Trial(base):
        def cleanup(self):
            # module functions only: this class travels by value, the events stay per process
            stopping_at_report = _waits_at_report()
            super().cleanup()
            if stopping_at_report:
                _await_run_end()

    Trial.__name__ = Trial.__qualname__ = base.__name__
    return Trial


def trial_hooks(spec: SweepSpec, stage: str, trial_id: str | None, label: str | None, **more):
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


def trial_backend(spec: SweepSpec, cfg, name: str):
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


def trial_main(
    config: dict[str, Any],
    spec: SweepSpec,
    stage: str = "search",
    reference_val: float | None = None,
    verbose: int = 0,
    mlflow: str | None = None,
) -> None:
    """Run one trial. ``config`` holds dotted run-config params (final stage: under "final");
    ``verbose >= 2`` prints the run's per-round lines, below 1 Tune's checkpoint chatter is
    silenced."""
    if verbose < 1:
        import logging

        for name in ("ray.train", "ray.tune", "ray.air"):
            logging.getLogger(name).setLevel(logging.WARNING)
    quiet_shutdown()
    _RUN_ENDED.clear()
    try:
        _trial(config, spec, stage, reference_val, verbose, mlflow)
    except UserError as err:
        # the trial's own configuration or data is wrong: a restart would fail the same way,
        # so the trial ends here, once, with the error as its last report (Tune restarts only a
        # trial that raised: one whose process or node died)
        from ray import tune

        tune.report(error_metrics(err, config.get("final", config).get("label")))
    finally:
        _RUN_ENDED.set()


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


def _trial(
    config: dict[str, Any],
    spec: SweepSpec,
    stage: str,
    reference_val: float | None,
    verbose: int,
    mlflow: str | None,
) -> None:
    """The trial itself (``trial_main`` marks this process's run as in progress around it)."""
    from ray import tune

    params = dict(config.get("final", config))
    label = params.pop("label", None)
    cfg = spec.run_config(params)
    ctx = tune.get_context()
    trial_id = ctx.get_trial_id() if ctx else None
    resume = None
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            resume = (Path(d) / STATE_FILE).read_bytes()

    if resume is None and stage == "search" and spec.search.client_rounds:
        from .budget import spent_in
        from .reeval import PENALTY

        spent = spent_in(spec.results_dir, spec.name, stage, cfg.fl.clients_per_round, label)
        if spent >= spec.search.client_rounds:  # the budget is spent: no run, no row
            tune.report(
                {
                    "status": "budget spent",
                    "objective": PENALTY,
                    "val_acc": 0.0,
                    "round": 0,
                    "val_round": 0,
                    "label": label,
                }
            )
            return
    if resume is None:
        kept = RunWriter(cfg.results_dir, cfg.run_id, cfg.method.name).previous_result()
        if kept and (kept["status"], kept["stage"], kept["label"]) == ("finished", stage, label):
            # this very run (config and seed: its id) finished here before — a sweep started
            # over the shipped or an earlier sweep's Parquet, or a search repeating a point:
            # the engine is deterministic, so its rows are kept, not recomputed
            print(f"{cfg.run_id}: already finished in this results folder; rows kept", flush=True)
            tune.report(
                trial_metrics(
                    spec, kept, kept["final_val_acc"], reference_val, cfg.run_id, "finished", label
                )
            )
            return
    hooks = trial_hooks(
        spec,
        stage,
        trial_id,
        label,
        checkpoint_every=spec.checkpoint_every,
        resume=resume,
        mlflow=mlflow,
        observers=(TuneReporter(spec, cfg.run_id, reference_val, label),),
    )
    summary = run_fl(
        cfg,
        backend=trial_backend(spec, cfg, trial_id or stage),
        hooks=hooks,
        progress=(lambda m: print(m, flush=True)) if verbose >= 2 else None,
    )
    row = summary.row
    if summary.status == "stopped":
        # the run is recorded; end the trial's thread the way Tune asked (it takes no further
        # report: a return would make Tune wait for one)
        raise SystemExit(0)
    tune.report(
        trial_metrics(
            spec, row, row["final_val_acc"], reference_val, cfg.run_id, summary.status, label
        )
    )
