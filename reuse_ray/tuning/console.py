"""A quiet sweep console (issue: monitoring): one line when a trial starts (its label and
parameters to 3 significant digits), one when it ends (validation accuracy, saving, status),
a progress line (``k/N trials, best so far``), and a line when a trial whose process or node
died is restarted. Tune's own tables appear only with ``-v``."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from ray.tune import Callback


def short(value: Any) -> str:
    """A parameter value as a person reads it: numbers to 3 significant digits."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:.3g}"


def describe(config: dict[str, Any]) -> str:
    params = dict(config.get("final", config))
    label = params.pop("label", None)
    text = " ".join(f"{k.removeprefix('method.')}={short(v)}" for k, v in sorted(params.items()))
    return f"[{label}] {text}" if label else text


def trial_label(stage: str, trial) -> str:
    """A trial's name in Tune and on the dashboard: stage, id and short parameters."""
    text = describe(trial.config).replace(" ", ",").replace("[", "").replace("]", "")
    name = f"{stage}-{trial.trial_id}-{text}"
    safe = "".join(c if c.isalnum() or c in "-_.,=" else "_" for c in name)
    return safe[:120]


class ConsoleReporter(Callback):
    """Trial start/end lines and a progress line, through ``say``."""

    stopper = "the scheduler"  # who stops trials early (a reporter pickled before it: this)

    def __init__(
        self,
        say: Callable[[str], None],
        stage: str,
        total: int | str,
        stopper: str = "the scheduler",
    ):
        """``total``: the stage's trials, or a text such as "at most 384" where a budget
        decides how many run; ``stopper``: what stops a trial early, as the console names it
        ("the scheduler", "the client-round budget")."""
        self.say, self.stage, self.total, self.stopper = say, stage, total, stopper
        self.done = 0
        self.best: tuple[float, str] | None = None

    def on_trial_start(self, iteration, trials, trial, **info):
        self.say(f"  {self.stage} trial {trial.trial_id} start: {describe(trial.config)}")

    def _end(self, trial, status: str) -> None:
        self.done += 1
        r = trial.last_result or {}
        acc, saving = r.get("val_acc"), r.get("cum_saving_restricted")
        acc_s = f"{acc:.4f}" if isinstance(acc, float) and math.isfinite(acc) else "n/a"
        sav_s = f"{100 * saving:.2f}%" if isinstance(saving, float) else "n/a"
        self.say(
            f"  {self.stage} trial {trial.trial_id} {status}: val_acc={acc_s} "
            f"saving={sav_s}"
            + ("" if status.startswith("stopped") else f" ({r.get('status', status)})")
        )
        if isinstance(acc, float) and math.isfinite(acc) and status == "done":
            if self.best is None or acc > self.best[0]:
                self.best = (acc, trial.trial_id)
        best = f"best so far val_acc={self.best[0]:.4f} ({self.best[1]})" if self.best else ""
        of = f"/{self.total}" if isinstance(self.total, int) else f" of {self.total}"
        self.say(f"  {self.stage}: {self.done}{of} trials finished; {best}".rstrip("; "))

    def on_trial_complete(self, iteration, trials, trial, **info):
        # a trial whose last report is a round's ("running") ended because the scheduler
        # stopped it; one that finished reports its runs row last
        r = trial.last_result or {}
        if r.get("status") == "error":  # a user error ended it (not restarted)
            self._end(trial, "error")
            self.say(f"    {r.get('error')}")
        elif r.get("status") == "running":
            self._end(trial, f"stopped by {self.stopper} after round {r.get('round')}")
        else:
            self._end(trial, "done")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._end(trial, "error")

    def on_trial_recover(self, iteration, trials, trial, **info):
        """A trial whose process or node died, restarted from its last checkpoint."""
        r = trial.last_result or {}
        where = f"after round {r['round']}" if r.get("round") is not None else "from the start"
        self.say(
            f"  {self.stage} trial {trial.trial_id} failed (its process or node died); "
            f"restarting {where}, from its last checkpoint"
        )


def quiet_tune() -> None:
    """Our own console lines only: no experiment box, no INFO chatter from Tune, and not its
    warning that the experiment state is snapshotted often. That warning comes whenever trials
    checkpoint every few seconds (``checkpoint_every`` rounds of a short run); on a fast machine
    the quickstart printed it nine times, three lines each. A threshold the user set is
    kept."""
    import logging

    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    for name in ("ray.tune", "ray.train", "ray.air"):
        logging.getLogger(name).setLevel(logging.WARNING)


class _TuneRestoreHints:
    """A logging filter: Tune's lines on Ctrl-C ("Stop signal received…", "Experiment has been
    interrupted… Resume experiment with: Tuner.restore(…)") speak of its Python API; the
    command's own line says what to do (``--resume``)."""

    HIDDEN = ("Stop signal received", "has been interrupted, but the most recent state")

    def filter(self, record) -> bool:
        text = str(record.msg)
        return not any(h in text for h in self.HIDDEN)


def hide_tune_restore_hints() -> None:
    import logging

    log = logging.getLogger("ray.tune.tune")
    if not any(isinstance(f, _TuneRestoreHints) for f in log.filters):
        log.addFilter(_TuneRestoreHints())
