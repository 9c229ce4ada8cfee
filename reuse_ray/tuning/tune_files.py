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


def check_trial_checkpoints(results_dir: str, experiment: str) -> int:
    """Before a resume hands the experiment to Tune, read the newest checkpoint of every trial
    (``_tune/<experiment>/<trial>/checkpoint_N/run_state.pt``) the way a resumed trial will:
    data only (:func:`reuse_ray.checkpoint.loads`, nothing unpickled); a checkpoint saved
    before the run's first checkpoint round holds ``no_run_state`` instead and is passed over.
    One that is missing, truncated, foreign or of another version is named in one line, before
    any trial starts,
    instead of failing every trial that restores from it; returns how many were read."""
    import pyarrow.fs as pafs

    from ..checkpoint import CheckpointError, loads
    from .trainable import NO_STATE_FILE, STATE_FILE

    store = Storage.of(results_dir)
    top = ("_tune", experiment)
    if not store.is_dir(*top):
        return 0
    read = 0
    for trial in store.listdir(*top):
        if trial.type != pafs.FileType.Directory:
            continue
        points = [
            c.base_name
            for c in store.listdir(*top, trial.base_name)
            if c.type == pafs.FileType.Directory and c.base_name.startswith("checkpoint_")
        ]
        if not points:
            continue
        newest = max(points)
        rel = "/".join([*top, trial.base_name, newest, STATE_FILE])
        where = join(results_dir, rel)
        hint = (
            "move that trial's folder away to rerun the trial from round 1, or run the sweep "
            "into a fresh --results"
        )
        if not store.is_file(rel):
            if store.is_file(*top, trial.base_name, newest, NO_STATE_FILE):
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
