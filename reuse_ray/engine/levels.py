"""Readings at uplink levels (design: Readings at uplink levels): where a run is read when its
uplink, not its round count, is the budget.

A level f of ``fl.uplink_levels`` is a budget of ``floor(f · T · K · B0)`` bytes: f of dense
FedAvg's uplink over the planned rounds T with K clients a round. A run is read at the last
round t whose cumulative uplink stays within it — the first round t+1 that crosses it is
known only once played, so the driver holds w_t until then (:meth:`Backend.hold`). Each level
is read in both ledgers (restricted and measured), each at its own round. A run that ends at T
still within a level is read at T (``cap``); one whose first round alone crosses it is read at
round 0, the initial model (``over``). The reading's round is fixed by bytes alone, so the
search reads validation there and the final stage reads the test split there, once per
distinct round.

The limits and which levels a round crossed are pure functions; :class:`LevelReader` takes
the readings of one run as its rounds are recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..accounting import RoundBytes
from ..results.schema import LEDGERS


def level_bytes(levels: tuple[float, ...], rounds: int, clients_per_round: int, b0: int) -> dict:
    """level f -> its budget in bytes, ``floor(f · T · K · B0)``."""
    dense = rounds * clients_per_round * b0
    return {f: int(f * dense) for f in levels}


def cum_up(cum: RoundBytes, ledger: str) -> int:
    """The cumulative uplink of ``ledger`` (restricted or measured)."""
    if ledger == "restricted":
        return int(cum.up_restricted)
    if ledger == "measured":
        return int(cum.up_measured)
    raise ValueError(f"unknown ledger {ledger!r}; allowed: {LEDGERS}")


def crossed(before: RoundBytes, after: RoundBytes, limits: dict) -> list[tuple[str, float]]:
    """(ledger, level) pairs a round crossed: within the level before it (≤), over it after."""
    return [
        (ledger, f)
        for ledger in LEDGERS
        for f, limit in limits.items()
        if cum_up(before, ledger) <= limit < cum_up(after, ledger)
    ]


def reading(
    run_id: str,
    seed: int,
    ledger: str,
    level: float,
    limit: int,
    status: str,
    round_: int | None = None,
    cum: int | None = None,
    val: tuple[float, float] | None = None,
    test: tuple[float, float] | None = None,
) -> dict:
    """One ``levels`` row."""
    return {
        "run_id": run_id,
        "seed": seed,
        "ledger": ledger,
        "level": float(level),
        "level_bytes": int(limit),
        "status": status,
        "round": round_,
        "cum_up": cum,
        "val_acc": val[0] if val else None,
        "val_loss": val[1] if val else None,
        "test_acc": test[0] if test else None,
        "test_loss": test[1] if test else None,
    }


class LevelReader:
    """The ``levels`` rows of one run. After each recorded round t, :meth:`on_round` reads the
    levels that round crossed at round t−1 (the held w_{t−1}: validation, and the test split
    where ``read_test`` loads it, once per reading round); :meth:`close` reads the levels the
    run ended within at T (``cap``: T's validation and test reading) or records the status
    that left them unread. ``rows`` holds every reading so far (a resumed run's restored)."""

    def __init__(
        self,
        run_id: str,
        seed: int,
        limits: dict,
        evaluate: Callable[[Any, Any], tuple[float, float]],
        read_test: Callable[[], Any] | None,
        rows: list[dict],
    ):
        self.run_id, self.seed, self.limits = run_id, seed, limits
        self.evaluate, self.read_test, self.rows = evaluate, read_test, rows
        self.last_val: tuple[int, Any] | None = None  # (round, its validation) when recorded

    def _row(self, ledger: str, f: float, status: str, *values) -> None:
        self.rows.append(
            reading(self.run_id, self.seed, ledger, f, self.limits[f], status, *values)
        )

    def on_round(self, t: int, before: RoundBytes, after: RoundBytes, held: Any, val: Any) -> None:
        """Round t was recorded (``val``: its validation or None): read the levels it crossed
        at round t−1, whose validation is reused where round t−1 was validated."""
        pairs = crossed(before, after, self.limits)
        if pairs:
            r = t - 1
            seen = self.last_val
            v = seen[1] if seen is not None and seen[0] == r else self.evaluate(None, held)
            test = self.evaluate(self.read_test(), held) if self.read_test else None
            for ledger, f in pairs:
                status = "over" if r == 0 else "crossed"
                self._row(ledger, f, status, r, cum_up(before, ledger), v, test)
        self.last_val = (t, val) if val is not None else None

    def close(
        self,
        status: str,
        t: int,
        cum: RoundBytes,
        val: tuple[float, float] | None,
        test: tuple[float, float] | None,
    ) -> None:
        """The run ended at round t with ``status``: the levels not yet read are read at t
        (``cap``) when it finished, else recorded with its status and no values."""
        done = {(r["ledger"], r["level"]) for r in self.rows}
        for ledger in LEDGERS:
            for f in self.limits:
                if (ledger, float(f)) in done:
                    continue
                if status == "finished":
                    self._row(ledger, f, "cap", t, cum_up(cum, ledger), val, test)
                else:
                    self._row(ledger, f, status)


__all__ = ["LevelReader", "crossed", "cum_up", "level_bytes", "reading"]
