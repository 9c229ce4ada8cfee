"""TensorBoard scalars by FL round (issue: monitoring), for ``reuse-ray run`` and every sweep
trial: ``tensorboard --logdir RESULTS/tensorboard``.

On a remote results root the event files go to ``$REUSE_RAY_TENSORBOARD`` (a local folder), or
are not written. One folder per run, ``<method>[<label>]-seed<seed>``; the step of every scalar
is the FL round.
Validation metrics are written on evaluation rounds only (no repeated values), beside the
training loss, cumulative uplink MB in both ledgers, the restricted saving, the decision counts,
the DG gate's firing rate where the method has a gate, and the round's wall time. The writer is
tensorboardX (installed with Ray Tune); it imports no Ray.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

TENSORBOARD_ENV = "REUSE_RAY_TENSORBOARD"


def tensorboard_dir(results_dir: str) -> Path | None:
    """Where a run's event files go: ``RESULTS/tensorboard`` on a local results root; on a
    remote one (s3://…) the local folder ``$REUSE_RAY_TENSORBOARD`` if set, else nowhere (the
    writer appends to open files, which object stores cannot do)."""
    import os

    from .storage import Storage

    local = Storage.of(results_dir).local_path
    if local is not None:
        return local / "tensorboard"
    env = os.environ.get(TENSORBOARD_ENV, "").strip()
    return Path(env).expanduser() if env else None


def run_folder(method: str, seed: int, label: str | None = None) -> str:
    """``<method>[<label>]-seed<seed>``, safe as a folder name."""
    name = f"{method}[{label}]-seed{seed}" if label else f"{method}-seed{seed}"
    return re.sub(r"[^A-Za-z0-9_.\[\]=-]+", "_", name)


def gate_firing_rate(report) -> float | None:
    """Of the clients with a cached update whose decision the gate could make (a gate score
    was computed), the fraction it sent fresh (promotions by the quota excluded)."""
    scored = [
        c
        for c in report.clients
        if c.columns.get("gate_score") is not None and c.columns.get("age") is not None
    ]
    if not scored:
        return None
    fired = [c for c in scored if c.decision.fresh and not c.columns.get("promoted")]
    return len(fired) / len(scored)


class RoundScalars:
    """Writes one run's scalars; ``close`` flushes them."""

    def __init__(self, logdir: str | Path, folder: str):
        self.writer = _summary_writer()(str(Path(logdir) / folder), flush_secs=30)

    def add(self, t: int, row: dict[str, Any], report, val) -> None:
        """Round ``t``'s scalars. A value that is missing or not finite (the mean loss and
        saving of a round no client joined) is left out: the table keeps it as NaN, and
        TensorBoard would print a warning for it and draw nothing."""

        def scalar(tag: str, value: float | None, scale: float = 1.0) -> None:
            if value is not None and math.isfinite(value):
                self.writer.add_scalar(tag, value / scale, t)

        if val is not None:
            scalar("val/acc", val[0])
            scalar("val/loss", val[1])
        scalar("train/loss", row.get("train_loss"))
        scalar("bytes/cum_up_restricted_MB", row["cum_up_restricted"], 1e6)
        scalar("bytes/cum_up_measured_MB", row["cum_up_measured"], 1e6)
        scalar("bytes/cum_down_measured_MB", row["cum_down_measured"], 1e6)
        scalar("bytes/cum_saving_restricted", row.get("cum_saving_restricted"))
        names = [c.decision.name for c in report.clients]
        for name in ("fresh", "reused", "lazy"):
            scalar(f"clients/{name}", names.count(name))
        scalar("gate/firing_rate", gate_firing_rate(report))
        scalar("time/round_s", row["round_wall_s"])

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


def _summary_writer() -> type:
    """tensorboardX's SummaryWriter, imported without torch in a process that has not
    imported it (the Ray engine's driver: about 0.45 GB of PSS): tensorboardX imports torch
    only to accept tensors as values, and falls back to numpy when the import fails. These
    scalars are floats."""
    import sys

    if "torch" in sys.modules or "tensorboardX" in sys.modules:
        from tensorboardX import SummaryWriter

        return SummaryWriter
    sys.modules["torch"] = None  # type: ignore[assignment] # `import torch` raises ImportError
    try:
        from tensorboardX import SummaryWriter
    finally:
        del sys.modules["torch"]
    return SummaryWriter
