"""The one error type for user mistakes (issue: every bad input a one-line error).

Anything the user gave — a config field, a YAML file, a sweep spec, a command-line argument, a
results root, the environment a run asks for (a GPU, enough CPUs, a writable folder) — that is
wrong raises a :class:`UserError` as early as possible. The CLI prints it as one line,
``reuse-ray: <what> — <allowed / what to do>``, and exits 2; ``--debug`` (or
``REUSE_RAY_DEBUG=1``) adds the traceback. Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(ValueError):
    """A mistake in what the user gave; its message says what and what is allowed."""


class UserCodeError(UserError):
    """An exception raised by the user's own code (a ``method.module`` file): the message names
    the file and line, ``frames`` holds the user's own traceback frames, which the command line
    shows under it (the package's frames only with ``--debug``)."""

    def __init__(self, message: str, frames: str = ""):
        super().__init__(message)
        self.frames = frames


class Terminated(KeyboardInterrupt):
    """SIGTERM (``ray job stop``, a scheduler's preemption, ``kill``), raised where Ctrl-C
    would be: a run's ``finally`` records what it finished and marks it failed, a sweep stops
    as on Ctrl-C, so ``--resume`` continues it."""

    def __init__(self, signum: int = 15):
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a Tune stage: Tune stopped the stage's trials and saved its state, the
    unfinished runs are recorded ``interrupted``, and nothing after the stage runs (no
    selection, no final stage, no report), so ``--resume`` continues where it stopped."""

    def __init__(self, stage: str = "", runs: int = 0):
        where = f" in the {stage} stage" if stage else ""
        super().__init__(f"interrupted{where} ({runs} unfinished runs recorded as interrupted)")
        self.stage, self.runs = stage, runs
