"""Launching a stage of a sweep or a study as a Ray Tune experiment: one call, named arguments.

Every trial reserves what it needs up front (``tune.PlacementGroupFactory`` over the trial's
bundles: its driver, and on the Ray engine its client workers); the experiment's state lives in
``RESULTS/_tune`` on the results' own filesystem, so ``resume=True`` restores it from any node,
after checking that the state is the user's own (Tune unpickles it)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from ..paths import check_tune_state_is_yours
from .spec import WorkloadSpec
from .trainable import FLTrainable
from .tune_files import (
    NO_DEFAULT_LOGGERS,
    check_trial_checkpoints,
    prune_checkpoints,
    tune_loggers,
    tune_storage,
)


def derive_concurrency(spec: WorkloadSpec, resources: dict[str, float]) -> int:
    """Trials that fit at once: min over resource kinds of ⌊available / per-trial need⌋."""
    need = spec.trial.totals()
    fits = [math.floor(resources.get(k, 0.0) / v + 1e-9) for k, v in need.items() if v > 0]
    n = min(fits) if fits else 1
    if spec.search.max_concurrent_trials > 0:
        n = min(n, spec.search.max_concurrent_trials)
    if n < 1:
        short = ", ".join(
            f"{k} {v:g} (the cluster has {resources.get(k, 0.0):g})"
            for k, v in need.items()
            if resources.get(k, 0.0) < v
        )
        raise UserError(
            f"trial: one trial needs {short}; lower trial.cpus, trial.workers, "
            f"trial.cpu_per_worker, trial.gpu_fraction or trial.resources"
        )
    return n


def _trainable(spec: WorkloadSpec, stage: str, reference, verbose: int, mlflow):
    """The stage's trial class with its arguments and what each trial reserves (its driver's
    bundle and, on the Ray engine, its client workers')."""
    from ray import tune

    return tune.with_resources(
        tune.with_parameters(
            FLTrainable,
            spec=spec,
            stage=stage,
            reference_val=reference,
            verbose=verbose,
            mlflow=mlflow,
            workdir=_workdir(),
        ),
        tune.PlacementGroupFactory(spec.trial.bundles()),
    )


def _workdir() -> str | None:
    """The driver's folder, None where it is gone (a job's package folder removed under it)."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        return None


def _tune_config(spec, stage, search_alg, scheduler, num_samples, metric, mode, concurrency):
    """Tune's ``TuneConfig`` of a new stage: its searcher, scheduler and concurrency, trial
    names after our labels, one trial process reused trial after trial."""
    from ray import tune

    from .console import trial_label

    return tune.TuneConfig(
        search_alg=search_alg,
        scheduler=scheduler,
        num_samples=num_samples,
        metric=metric,
        mode=mode,
        max_concurrent_trials=_limit(spec, stage, search_alg, num_samples, concurrency),
        trial_name_creator=lambda trial: trial_label(stage, trial),
        trial_dirname_creator=lambda trial: trial_label(stage, trial),
        # one trial process serves trial after trial: no fresh Ray worker, no repeated
        # imports; every run builds its own state from its config and seed
        reuse_actors=spec.trial.reuse_actors,
    )


def _restore(spec: WorkloadSpec, path: str, name: str, trainable, fs):
    """The stage's Tune experiment as it was left, after checking that its state is the
    user's own and that every trial's newest checkpoint reads."""
    from ray import tune

    if fs is None:  # a local or mounted folder: its owner and modes say who wrote it
        check_tune_state_is_yours(path)
    check_trial_checkpoints(spec.results_dir, name)
    return tune.Tuner.restore(
        path,
        trainable=trainable,
        resume_unfinished=True,
        resume_errored=True,
        storage_filesystem=fs,
    )


def _run_config(spec: WorkloadSpec, name: str, storage, fs, verbose: int, callbacks, stop):
    """Tune's ``RunConfig`` of a stage: where its state lives, restarts after a dead process,
    our console and Ctrl-C watch, and a checkpoint every ``checkpoint_every`` rounds."""
    from ray import tune

    return tune.RunConfig(
        name=name,
        storage_path=storage,
        storage_filesystem=fs,
        verbose=min(verbose, 3),
        # a trial whose process or node died continues from its last checkpoint
        failure_config=tune.FailureConfig(max_failures=int(spec.trial.max_failures)),
        callbacks=callbacks,
        # a trial's step is one round: Tune saves its run's checkpoint every
        # checkpoint_every rounds (and when a scheduler pauses it), and deletes none while the
        # stage runs: its state, snapshotted now and then, may name an older checkpoint than
        # the newest, and a driver killed after Tune deleted that one left a trial that could
        # not be restored (num_to_keep=2 did); the stage's end keeps each trial's newest
        # (tune_files.prune_checkpoints)
        checkpoint_config=tune.CheckpointConfig(
            num_to_keep=None, checkpoint_frequency=int(spec.checkpoint_every)
        ),
        stop=stop,
    )


def recompute_missing(spec: WorkloadSpec, stage: str, results, say) -> int:
    """After a resumed stage: a trial Tune kept as ended whose run has no runs row in the
    results (its files were set aside as damaged) is recomputed here, in the driver, with the
    trial's own hooks — to the round a scheduler stopped it at, if it did — so the stage's
    tables are whole again. Returns how many runs were recomputed."""
    from ..engine.observers import StopAfter
    from ..results.writer import RunWriter
    from ..runner import run_fl
    from .trainable import trial_backend, trial_hooks

    done = 0
    for result in results:
        m, config = result.metrics or {}, result.config or {}
        if m.get("status") not in ("finished", "diverged", "running") or not m.get("run_id"):
            continue  # an error, an unrun point of a spent budget
        params = dict(config.get("final", config))
        label = params.pop("label", None)
        cfg = spec.run_config(params)
        if cfg.run_id != m["run_id"]:
            continue
        if RunWriter(cfg.results_dir, cfg.run_id, cfg.method.name).previous_status():
            continue
        trial_id = m.get("trial_id")
        stop = m["status"] == "running"  # its last report a round's: a scheduler stopped it
        say(f"  {stage}: recomputing {cfg.run_id} (trial {trial_id}), whose files were damaged")
        more = {"observers": (StopAfter(int(m["round"])),)} if stop else {}
        hooks = trial_hooks(spec, stage, trial_id, label, **more)
        run_fl(cfg, backend=trial_backend(spec, cfg, trial_id or stage), hooks=hooks)
        done += 1
    return done


def settle_left_running(spec: WorkloadSpec, stage: str, results=()) -> int:
    """After a resumed search has ended (no trial of it lives): a run a killed driver left
    ``running`` that the search never ran again — its arm's client-round budget was spent, or
    a scheduler ended it — is recorded ``stopped`` with its rows so far, as it would be had
    its trial been stopped in a live process; one whose trial ended in an error (in
    ``results``, Tune's) keeps its row. Returns how many runs were marked."""
    failed = {(r.metrics or {}).get("trial_id") for r in results if r.error is not None}
    return _mark(spec, stage, lambda t: ~t.isin(failed - {None}), "stopped", None, ("running",))


def record_interrupted(spec: WorkloadSpec, stage: str, trial_ids: set[str]) -> int:
    """The runs of ``stage``'s interrupted trials recorded ``interrupted`` after their trial
    processes ended (a run stopped at its report recorded ``stopped``, one killed between
    reports ``running``; a run that reached another status keeps it); how many."""
    why, left = "interrupted (Ctrl-C); --resume continues it", ("running", "stopped")
    return _mark(spec, stage, lambda t: t.isin(trial_ids), "interrupted", why, left)


def _mark(spec: WorkloadSpec, stage: str, pick, status: str, why, left) -> int:
    """The runs of ``stage`` whose trial ids ``pick`` selects (a mask of the ``trial_id``
    column), those in a status of ``left``, rewritten to ``status`` with ``why``."""
    from ..results.reader import read_table_if_any
    from ..results.writer import mark_runs

    runs = read_table_if_any(spec.results_dir, "runs")
    if runs is None:
        return 0
    mine = runs[(runs["sweep"] == spec.name) & (runs["stage"] == stage)]
    mine = mine[pick(mine["trial_id"])]
    pairs = list(zip(mine["method"], mine["run_id"], strict=True))
    return mark_runs(spec.results_dir, pairs, status, why, left)


def _limit(spec, stage, search_alg, num_samples, concurrency) -> int | None:
    """Tune's ``max_concurrent_trials``: none for a grid generator (it carries its own limit,
    set in ``make_searcher``); for HyperBand over a searcher (TPE, random), every sample at
    once — Tune creates one pending trial at a time for a searcher unless its concurrency is
    limited, and a bracket that never fills halves nothing; else the stage's concurrency."""
    if _is_variant_generator(search_alg):
        return None
    return max(num_samples, 1) if _synchronous(spec, stage) else concurrency


def _synchronous(spec: WorkloadSpec, stage: str) -> bool:
    """HyperBand halves a bracket only once the bracket is full: its search creates every
    trial at once (pending until the cluster has room; a paused trial frees its place), where
    trials created as places free up would each find the bracket unfilled and go on."""
    return stage == "search" and spec.search.scheduler == "hyperband"


def _stopper(scheduler: Any, stop: Any) -> str:
    """What stops a stage's trials early, as the console names it."""
    if scheduler is not None and stop is not None:
        return "the scheduler or the client-round budget"
    return "the client-round budget" if stop is not None else "the scheduler"


def _fit(tuner, spec: WorkloadSpec, stage: str, name: str):
    """``tuner.fit()``, and after it the SIGINT handler it replaced (Tune leaves its own in
    place when an experiment ends by itself, and that one would swallow the next Ctrl-C). A
    Ctrl-C that ended the experiment records its live trials' runs as interrupted and raises
    :class:`Interrupted` (module ``interrupt``)."""
    import signal
    import threading

    from ..errors import Interrupted
    from .interrupt import interrupted_trials, start_watch

    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT) if main else None
    start_watch(name)
    loggers = os.environ.get(NO_DEFAULT_LOGGERS)
    os.environ[NO_DEFAULT_LOGGERS] = "1"  # the stage's own: tune_loggers()
    try:
        results = tuner.fit()
    finally:
        if loggers is None:
            os.environ.pop(NO_DEFAULT_LOGGERS, None)
        else:
            os.environ[NO_DEFAULT_LOGGERS] = loggers
        if main and before is not None:
            signal.signal(signal.SIGINT, before)
    live = interrupted_trials(name)
    if live is None:
        return results
    raise Interrupted(stage, record_interrupted(spec, stage, live))


@dataclass(frozen=True)
class Launcher:
    """What every stage of one sweep or study is launched with: ``launcher(spec, stage, ...)``
    launches one stage with these settings (a study's workloads each have their own spec)."""

    concurrency: int
    resume: bool
    say: Callable[[str], Any] = print
    verbose: int = 0
    mlflow: str | None = None
    set_aside: tuple[str, ...] = ()  # the run ids a resume set aside as damaged

    def __call__(
        self,
        spec: WorkloadSpec,
        stage: str,
        *,
        param_space: Any,
        search_alg: Any = None,
        metric: Any = None,
        mode: Any = None,
        num_samples: int = 1,
        scheduler: Any = None,
        stop: Any = None,
        reference: float | None = None,
        total: int | str | None = None,
    ):
        """Run (or, resuming, restore and finish) the Tune experiment ``<name>-<stage>``:
        ``num_samples`` trials over ``param_space`` (a searcher's, or a grid of points), at
        most ``concurrency`` at once, each reporting to the console as ``stage`` (of
        ``total``)."""
        from ray import tune

        from .console import ConsoleReporter, hide_tune_restore_hints, quiet_tune
        from .interrupt import InterruptWatch

        if self.verbose < 1:
            quiet_tune()
        hide_tune_restore_hints()
        storage, fs = tune_storage(spec.results_dir)
        name = f"{spec.name}-{stage}"
        trainable = _trainable(spec, stage, reference, self.verbose, self.mlflow)
        path = f"{storage}/{name}"
        if self.resume and tune.Tuner.can_restore(path, storage_filesystem=fs):
            tuner = _restore(spec, path, name, trainable, fs)
        else:
            tune_config = _tune_config(
                spec, stage, search_alg, scheduler, num_samples, metric, mode, self.concurrency
            )
            callbacks = [
                ConsoleReporter(self.say, stage, total or num_samples, _stopper(scheduler, stop)),
                InterruptWatch(name),
                *tune_loggers(),
            ]
            run_config = _run_config(spec, name, storage, fs, self.verbose, callbacks, stop)
            tuner = tune.Tuner(
                trainable, param_space=param_space, tune_config=tune_config, run_config=run_config
            )
        results = _fit(tuner, spec, stage, name)
        prune_checkpoints(spec.results_dir, name)  # no trial of the stage is restored again
        if self.resume:
            recompute_missing(spec, stage, results, self.say)
            if stage == "search":
                settle_left_running(spec, stage, results)
        return results

    def final(self, spec: WorkloadSpec, points: list[dict[str, Any]]):
        """The final stage of a sweep or of a study's workload: every point (a configuration
        with its fresh seed and label) once, the test split read once at round T; returns
        the stage's runs as the runs table records them."""
        from ray import tune

        from ..results import read_table

        # a point whose run finished here before (a stage launched again, a copied folder)
        # needs no trial: its rows are kept, as a trial would keep them, and no trial process
        # is started for it
        todo = [p for p in points if not _kept(spec, p)]
        if len(todo) < len(points):
            self.say(f"  final: {len(points) - len(todo)} runs already finished here; rows kept")
        if todo:
            self(spec, "final", param_space={"final": tune.grid_search(todo)}, total=len(todo))
        runs = read_table(spec.results_dir, "runs")
        return runs[(runs["stage"] == "final") & (runs["sweep"] == spec.name)]


def _kept(spec: WorkloadSpec, point: dict[str, Any]) -> bool:
    from .trainable import kept_run

    params = dict(point)
    label = params.pop("label", None)
    return kept_run(spec.run_config(params), "final", label) is not None


def _is_variant_generator(alg) -> bool:
    from ray.tune.search.basic_variant import BasicVariantGenerator

    return isinstance(alg, BasicVariantGenerator)
