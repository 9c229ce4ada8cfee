"""Ctrl-C during a Tune stage (design: Interrupting and resuming).

On the first Ctrl-C Tune's own handler ends the experiment gently: it saves the experiment
state one last time, stops the trials (a trial waiting at its report records ``stopped``, one
busy between reports is ended and stays ``running``) and returns from ``Tuner.fit()`` as if the
stage had ended. Its handler then puts back the one it replaced, which is how an interruption is
told from an end: :class:`InterruptWatch` notes Tune's handler when the experiment starts and,
after every step, whether it is still there. The launcher then records the trials that were
live at that step as ``interrupted`` and raises :class:`~reuse_ray.errors.Interrupted`, so
nothing after the stage runs. A second Ctrl-C goes to the handler Tune put back (Python's:
``KeyboardInterrupt``) and ends the command at once.

The watch's state lives in this module, keyed by the experiment's name: a resumed experiment
runs the callback Tune unpickled from its own state, not the launcher's instance.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass, field

from ray.tune import Callback

# Tune's trial statuses that are not an end (``Trial.is_finished`` is False)
_LIVE = ("PENDING", "RUNNING", "PAUSED")


@dataclass
class _Watch:
    handler: object = None  # the SIGINT handler while the experiment runs (Tune's), or None
    live: set[str] | None = None  # the trials live when the interruption was seen
    seen: set[str] = field(default_factory=set)


_WATCHES: dict[str, _Watch] = {}


def _handler():
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.getsignal(signal.SIGINT)


class InterruptWatch(Callback):
    """Tune callback: whether (and which trials were live when) Ctrl-C ended the experiment
    ``key``; read it with :func:`interrupted_trials`."""

    def __init__(self, key: str):
        self.key = key

    def setup(self, **info):
        _WATCHES[self.key] = _Watch(handler=_handler())

    def _check(self, trials, finished_ok: bool) -> None:
        w = _WATCHES.get(self.key)
        if w is None or w.live is not None or w.handler is None:
            return
        if _handler() is w.handler:
            return  # Tune's handler is still in place: no Ctrl-C yet
        w.live = {
            t.trial_id
            for t in trials
            if t.status in _LIVE or (finished_ok and t.trial_id in w.seen and t.status != "ERROR")
        }

    def on_step_end(self, iteration, trials, **info):
        self._check(trials, finished_ok=False)
        w = _WATCHES.get(self.key)
        if w is not None and w.live is None:
            w.seen = {t.trial_id for t in trials if t.status in _LIVE}

    def on_experiment_end(self, trials, **info):
        # an interruption seen only here (Ctrl-C in the last step): the trials live at the
        # step before, which Tune has stopped since
        self._check(trials, finished_ok=True)


def start_watch(key: str) -> None:
    """Forget an earlier experiment's watch of this name (call before ``fit``)."""
    _WATCHES.pop(key, None)


def interrupted_trials(key: str) -> set[str] | None:
    """The trial ids Ctrl-C interrupted in experiment ``key``, or None if it ended by itself."""
    w = _WATCHES.get(key)
    return None if w is None else w.live
