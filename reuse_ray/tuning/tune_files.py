"""Tune's files for a stage: where its experiment state lives (beside the Parquet tables),
which per-trial files Tune writes, and the checks made of that state before ``--resume``
hands it to Tune, which unpickles it."""

from __future__ import annotations

from ..errors import UserError
from ..results.storage import Storage, join

# Tune's switch for its default loggers (CSV, JSON, TensorBoard), read when a fit starts
NO_DEFAULT_LOGGERS = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"


def tune_loggers() -> list:
    """Tune's per-trial ``progress.csv`` and ``result.json``, as Tune writes them by default,
    without its third default logger: TensorBoard event files by trial step, which import
    torch into the driver (~2 s and ~0.45 GB) and repeat, on another axis, the scalars every
    run writes by round under ``RESULTS/tensorboard``. :func:`_fit` switches Tune's defaults off
    (``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS``), so these two are the stage's loggers."""
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    return [CSVLoggerCallback(), JsonLoggerCallback()]


def _checkpoints(store: Storage, top: tuple[str, ...]):
    """(trial folder, its ``checkpoint_N`` folder names sorted oldest first) of every trial of
    the experiment under ``top`` that has one."""
    import pyarrow.fs as pafs

    if not store.is_dir(*top):
        return
    for trial in store.listdir(*top):
        if trial.type != pafs.FileType.Directory:
            continue
        points = sorted(
            c.base_name
            for c in store.listdir(*top, trial.base_name)
            if c.type == pafs.FileType.Directory and c.base_name.startswith("checkpoint_")
        )
        if points:
            yield trial.base_name, points


def prune_checkpoints(results_dir: str, experiment: str) -> int:
    """After a stage's experiment has ended (every trial done, Tune's state saved at its end):
    each trial's checkpoints but its newest deleted. While the stage runs none is (Tune's
    state may name an older one than the newest, and a resume restores that one); after its
    end no trial of it is restored from an older one, and the newest is what a later resume
    of an errored trial would start from. Returns how many checkpoints were deleted."""
    store = Storage.of(results_dir)
    top = ("_tune", experiment)
    gone = 0
    for trial, points in _checkpoints(store, top):
        for old in points[:-1]:
            store.delete_dir(*top, trial, old)
            gone += 1
    return gone


def check_trial_checkpoints(results_dir: str, experiment: str) -> int:
    """Before a resume hands the experiment to Tune, read the newest checkpoint of every trial
    (``_tune/<experiment>/<trial>/checkpoint_N/run_state.pt``) the way a resumed trial will:
    data only (:func:`reuse_ray.checkpoint.loads`, nothing unpickled); a checkpoint saved
    before the run's first checkpoint round holds ``no_run_state`` instead and is passed over.
    One that is missing, truncated, foreign or of another version is named in one line, before
    any trial starts,
    instead of failing every trial that restores from it; returns how many were read."""
    from ..checkpoint import CheckpointError, loads
    from .trainable import NO_STATE_FILE, STATE_FILE

    store = Storage.of(results_dir)
    top = ("_tune", experiment)
    read = 0
    for trial, points in _checkpoints(store, top):
        newest = points[-1]
        rel = "/".join([*top, trial, newest, STATE_FILE])
        where = join(results_dir, rel)
        hint = (
            "move that trial's folder away to rerun the trial from round 1, or run the sweep "
            "into a fresh --results"
        )
        if not store.is_file(rel):
            if store.is_file(*top, trial, newest, NO_STATE_FILE):
                continue  # saved before the run's first checkpoint round: it starts at round 1
            raise UserError(f"sweep --resume: {where} is missing — {hint}")
        try:
            loads(store.read_bytes(rel))
        except CheckpointError as err:
            raise UserError(f"sweep --resume: {where}: {err} — {hint}") from None
        read += 1
    return read


def tune_storage(results_dir: str):
    """(storage_path, storage_filesystem) of a sweep's Tune experiments: ``RESULTS/_tune`` on
    the results location's own filesystem, so trial checkpoints and the experiment state live
    beside the Parquet tables and ``--resume`` works from any node."""
    store = Storage.of(results_dir)
    if store.local_path is not None:
        return str(store.local_path / "_tune"), None
    return store.path("_tune"), store.fs
