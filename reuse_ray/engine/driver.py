"""The round driver: plays rounds and hands them over in order, each with its validation.

Validation runs at round 1, every ``eval_every`` rounds and at T (design: Runs). A
backend may validate w_t inside round t+1 (:meth:`Backend.validate_next_round`, the Ray engine's
workers); round t is then handed over once round t+1 has trained and its validation is in, so
rounds still reach the loop one by one, in order. Checkpoint rounds and the last round validate in
line, so a checkpoint never waits on a later round.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import RunConfig
from .backend import Backend
from .sampling import select_clients


@dataclass(frozen=True)
class Played:
    """A played round. ``val`` is its validation (accuracy, loss), None off evaluation rounds,
    or a pending handle (``result()``) while it runs; ``wall`` is the client work and server
    step, plus the wait for the validation once resolved."""

    round: int
    report: Any
    wall: float
    val: Any
    checkpoint: bool
    held: Any = None  # w_{t-1}, held before the round played (a run with uplink levels)

    @property
    def pending(self) -> bool:
        return callable(getattr(self.val, "result", None))

    def resolved(self) -> Played:
        """This round with its validation in (waiting for it if it still runs)."""
        if not self.pending:
            return self
        waited = time.perf_counter()
        val = self.val.result()
        return dataclasses.replace(self, val=val, wall=self.wall + time.perf_counter() - waited)


class RoundDriver:
    """Iterating plays rounds ``first``..T and yields each :class:`Played` in round order.

    It stops early when a round diverges (``diverged_at``; that round is not yielded). When
    playing raises, the round still waiting for its validation stays in :meth:`drain`, so the
    caller can keep its rows."""

    def __init__(
        self,
        cfg: RunConfig,
        backend: Backend,
        first: int,
        probs: np.ndarray,
        checkpoint_every: int = 0,
        hold: bool = False,
    ):
        """``hold``: keep w_{t-1} with each round (:attr:`Played.held`), for readings at
        uplink levels (:mod:`~reuse_ray.engine.levels`)."""
        self.cfg, self.backend, self.first, self.probs = cfg, backend, first, probs
        self.checkpoint_every, self.hold = checkpoint_every, hold
        self.diverged_at: int | None = None
        self._pending: Played | None = None

    def __iter__(self) -> Iterator[Played]:
        fl, backend = self.cfg.fl, self.backend
        for t in range(self.first, fl.rounds + 1):
            held = backend.hold() if self.hold else None
            t0 = time.perf_counter()
            report = backend.run_round(t, select_clients(self.cfg, t, self.probs))
            wall = time.perf_counter() - t0
            if self._pending is not None:  # round t-1, validated while round t trained
                done, self._pending = self._pending, None  # handed over once, come what may
                yield done
            if report.diverged:
                self.diverged_at = t
                return
            ckpt = bool(self.checkpoint_every and t % self.checkpoint_every == 0 and t < fl.rounds)
            val: Any = None
            if t == 1 or t % fl.eval_every == 0 or t == fl.rounds:
                if not ckpt and t < fl.rounds:
                    # w_t validated while round t+1 trains, as tasks of that round: the same
                    # numbers, off the round's critical path (None: this backend validates in line)
                    val = backend.validate_next_round()
                if val is None:
                    e0 = time.perf_counter()
                    val = backend.evaluate()
                    wall += time.perf_counter() - e0  # validated in line: part of the round
            played = Played(t, report, wall, val, ckpt, held)
            if played.pending:
                self._pending = played
            else:
                yield played

    def drain(self) -> Played | None:
        """The round whose validation was still pending when playing stopped, if any."""
        p, self._pending = self._pending, None
        return p
