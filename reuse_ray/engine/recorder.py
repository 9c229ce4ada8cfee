"""What the driver records of a run (design: Ledgers): ledgers, rows and the checkpoint.

:class:`Recorder` turns each :class:`~reuse_ray.engine.records.RoundReport` into a ``rounds`` row
and ``client_events`` rows, keeps the ledgers' running sums (charging each client by its
decision's rule), and fills the ``runs`` row at the end. :class:`RunCheckpoint` is the typed
state a resumed run continues from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..accounting import RoundBytes
from ..results import RunWriter
from .records import RoundReport

EVENT_COLUMNS = ("gate_score", "tau", "age", "promoted")  # method columns of client_events


@dataclass(frozen=True)
class RunCheckpoint:
    """Everything a resumed run needs: the driver's sums and rows, and the server snapshot."""

    round: int
    cum: RoundBytes
    total_steps: int
    last_val: tuple[float, float] | None
    rows: dict[str, list[dict[str, Any]]]  # rounds, client_events (and levels) so far
    server: Any  # the server's snapshot (a backend's handle to it, on the Ray driver)
    # the attempts that got the run here: how many, when the first started, and their wall
    # seconds up to this checkpoint (a checkpoint written before these were kept reads the
    # defaults: one attempt, start and time unknown)
    attempts: int = 1
    started_at: str | None = None
    wall_s: float | None = None


def round_bytes(report: RoundReport, b0: int) -> RoundBytes:
    """One round in both ledgers (design: Ledgers): every reported client's uplink and downlink,
    and B0 of
    dense reference and of downlink sensitivity per client of S_t. Work done outside S_t
    (``oracle``, ``fill``) is uplink and downlink, never reference."""
    rb = RoundBytes()
    for c in report.clients:
        ref = b0 if c.decision.selected else 0
        rb = rb + RoundBytes(c.up_restricted, ref, ref, c.up_measured, c.down_measured)
    return rb


class Recorder:
    """The rows of one run and the running sums of its ledgers."""

    def __init__(self, writer: RunWriter, run_id: str, seed: int, b0: int):
        self.writer, self.run_id, self.seed, self.b0 = writer, run_id, seed, b0
        self.cum = RoundBytes()
        self.total_steps = 0
        self.last_val: tuple[float, float] | None = None

    def resume(self, ckpt: RunCheckpoint) -> None:
        self.cum, self.total_steps, self.last_val = ckpt.cum, ckpt.total_steps, ckpt.last_val
        for table in ("rounds", "client_events", "levels"):
            self.writer.rows[table] = list(ckpt.rows.get(table, []))

    def record(self, t: int, report: RoundReport, val, wall: float) -> dict[str, Any]:
        """Add round t's rows; returns its ``rounds`` row."""
        rb = round_bytes(report, self.b0)
        self.cum = self.cum + rb
        steps = sum(c.local_steps for c in report.clients)
        self.total_steps += steps
        if val is not None:
            self.last_val = val
        cum = self.cum
        losses = [c.train_loss for c in report.clients if c.train_loss is not None]
        row = {
            "run_id": self.run_id,
            "seed": self.seed,
            "round": t,
            "num_selected": sum(1 for c in report.clients if c.decision.selected),
            "num_fresh": sum(1 for c in report.clients if c.decision.fresh),
            "num_reused": sum(1 for c in report.clients if c.decision.reused),
            "train_loss": float(np.mean(losses)) if losses else None,
            "val_acc": val[0] if val else None,
            "val_loss": val[1] if val else None,
            "up_restricted": rb.up_restricted,
            "down_sensitivity": rb.down_sensitivity,
            "dense_reference": rb.dense_reference,
            "up_measured": rb.up_measured,
            "down_measured": rb.down_measured,
            "cum_up_restricted": cum.up_restricted,
            "cum_down_sensitivity": cum.down_sensitivity,
            "cum_dense_reference": cum.dense_reference,
            "cum_up_measured": cum.up_measured,
            "cum_down_measured": cum.down_measured,
            "saving_restricted": rb.saving_restricted,
            "cum_saving_restricted": cum.saving_restricted,
            "cum_saving_bidirectional": cum.saving_bidirectional,
            "client_steps": steps,
            "update_norm": report.update_norm,
            "round_wall_s": wall,
        }
        self.writer.add("rounds", row)
        for c in report.clients:
            self.writer.add(
                "client_events",
                {
                    "run_id": self.run_id,
                    "seed": self.seed,
                    "round": t,
                    "client_id": c.client,
                    "decision": c.decision.name,
                    "num_samples": c.num_samples,
                    "weight": c.weight,
                    "train_loss": c.train_loss,
                    "local_steps": c.local_steps,
                    "up_restricted": c.up_restricted,
                    "up_measured": c.up_measured,
                    "down_measured": c.down_measured,
                    "update_norm": c.update_norm,
                    **{k: c.columns.get(k) for k in EVENT_COLUMNS},
                    "wall_s": c.wall_s,
                },
            )
        return row

    def checkpoint(
        self,
        t: int,
        attempts: int = 1,
        started_at: str | None = None,
        wall_s: float | None = None,
    ) -> RunCheckpoint:
        """The run's state after round t, with the attempts that got it there; the backend
        fills ``server`` (its snapshot) where it writes the file
        (:meth:`~reuse_ray.engine.backend.Backend.checkpoint`)."""
        rows = {k: list(self.writer.rows[k]) for k in ("rounds", "client_events")}
        if self.writer.rows["levels"]:  # a run with uplink levels: its readings so far
            rows["levels"] = list(self.writer.rows["levels"])
        return RunCheckpoint(
            t, self.cum, self.total_steps, self.last_val, rows, None, attempts, started_at, wall_s
        )

    def totals(self) -> dict[str, Any]:
        """The ledger and step columns of the ``runs`` row."""
        cum = self.cum
        return {
            "cum_up_restricted": cum.up_restricted,
            "cum_down_sensitivity": cum.down_sensitivity,
            "cum_dense_reference": cum.dense_reference,
            "cum_up_measured": cum.up_measured,
            "cum_down_measured": cum.down_measured,
            "cum_saving_restricted": cum.saving_restricted if cum.dense_reference else None,
            "cum_saving_bidirectional": (cum.saving_bidirectional if cum.dense_reference else None),
            "client_steps": self.total_steps,
        }
