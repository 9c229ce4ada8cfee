"""What a run tells the world while it runs: observers of frozen records (design: Runs).

The loop records each round's Parquet rows itself (crash safety and ``rounds_completed`` depend on
it) and then hands a :class:`RoundDone` to every observer, in order. An observer has one
interface, ``on_start`` / ``on_round`` / ``on_end``, over :class:`RunStarted`, :class:`RoundDone`
and :class:`RunEnded`; it never reaches into the loop or the backend. The console, TensorBoard,
MLflow and checkpoint saving are observers here; a Tune trial's reporter is one in
:mod:`reuse_ray.tuning.trainable`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..results.tensorboard import RoundScalars, run_folder, tensorboard_dir
from ..results.tracking import MlflowRun

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RunStarted:
    """The run is set up and its backend started."""

    run_id: str
    cfg: Any  # RunConfig
    model_name: str
    num_params: int
    dense_bytes: int
    backend: str
    first_round: int  # 1, or the round after a resumed checkpoint's
    machine_note: str | None  # workers on more than one kind of machine
    label: str | None  # the run's name in TensorBoard and MLflow folders
    stage: str
    sweep: str | None


@dataclass(frozen=True)
class RoundDone:
    """Round ``round`` is recorded. ``live`` is False for the round a failing run records on
    its way out (it gets no checkpoint, and a trial does not report it)."""

    round: int
    row: dict[str, Any]  # its ``rounds`` row
    report: Any  # the backend's RoundReport
    val: tuple[float, float] | None
    last_val: tuple[float, float] | None  # the run's latest validation so far
    elapsed_s: float  # since the first round of this attempt started
    rounds_done: int  # rounds recorded by this attempt
    checkpoint: bytes | None  # the run's state after this round, on checkpoint rounds
    live: bool = True


@dataclass(frozen=True)
class RunEnded:
    """The run's ``runs`` row is written with its final status."""

    status: str  # finished | diverged | stopped | failed
    row: dict[str, Any]  # the runs row
    diverged_at: int | None
    test: tuple[float, float] | None


class StopRun(Exception):  # noqa: N818 - a request, not an error
    """Raised by an observer's ``on_round`` to end the run after that round (a trial scheduler
    stopping a trial): the run's status becomes ``stopped``, its rows are those of the rounds
    so far — a prefix of the full run's, bit for bit — and the test split is not read."""


class Observer:
    """An observer that does nothing; subclasses override what they need."""

    def on_start(self, run: RunStarted) -> None:
        """The run begins (or resumes)."""

    def on_round(self, rec: RoundDone) -> None:
        """A round's rows are recorded."""

    def on_end(self, end: RunEnded) -> None:
        """The run has ended; called for every observer whose ``on_start`` returned."""


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f}{unit}" if unit != "B" else f"{int(n)}B"
        n /= 1000
    return str(n)


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


class Console(Observer):
    """The run's console lines: what runs where, one line a round with its ETA, the end."""

    def __init__(self, say: Progress):
        self.say = say
        self.run_id, self.rounds = "", 0

    def on_start(self, run: RunStarted) -> None:
        cfg = run.cfg
        self.run_id, self.rounds = run.run_id, cfg.fl.rounds
        self.say(
            f"[{run.run_id}] {cfg.method.name} on {cfg.data.name}/{run.model_name}: "
            f"{cfg.fl.num_clients} clients, {cfg.fl.clients_per_round}/round, "
            f"{cfg.fl.rounds} rounds, d={run.num_params:,} (B0={_fmt_bytes(run.dense_bytes)}), "
            f"backend={run.backend}"
            + (f", resumed after round {run.first_round - 1}" if run.first_round > 1 else "")
        )
        if run.machine_note:
            self.say(f"[{run.run_id}] note: {run.machine_note}")

    def on_round(self, rec: RoundDone) -> None:
        row, val, t = rec.row, rec.val, rec.round
        eta = rec.elapsed_s / rec.rounds_done * (self.rounds - t) if rec.rounds_done else 0.0
        self.say(
            f"[{self.run_id}] round {t:>4}/{self.rounds} "
            + (f"val_acc={val[0]:.4f} val_loss={val[1]:.4f} " if val else "")
            + f"fresh={row['num_fresh']} reused={row['num_reused']} "
            f"up={_fmt_bytes(row['cum_up_restricted'])} "
            f"cum_saving={100 * row['cum_saving_restricted']:.3f}% "
            f"{row['round_wall_s']:.2f}s elapsed {_clock(rec.elapsed_s)} eta {_clock(eta)}"
        )

    def on_end(self, end: RunEnded) -> None:
        if end.diverged_at is not None:
            self.say(
                f"[{self.run_id}] round {end.diverged_at}: diverged (non-finite loss or "
                "update); stopping"
            )
        if end.test is not None:
            self.say(
                f"[{self.run_id}] final round {self.rounds}: test_acc={end.test[0]:.4f} "
                f"test_loss={end.test[1]:.4f} (test split read once)"
            )


class TensorBoard(Observer):
    """Scalars by round under ``RESULTS/tensorboard/<method>[label]-seedS``."""

    def __init__(self) -> None:
        self.scalars: RoundScalars | None = None

    def on_start(self, run: RunStarted) -> None:
        logdir = tensorboard_dir(run.cfg.results_dir)
        if logdir is not None:
            self.scalars = RoundScalars(
                logdir, run_folder(run.cfg.method.name, run.cfg.seed, run.label)
            )

    def on_round(self, rec: RoundDone) -> None:
        if self.scalars is not None:
            self.scalars.add(rec.round, rec.row, rec.report, rec.val)

    def on_end(self, end: RunEnded) -> None:
        if self.scalars is not None:
            self.scalars.close()


class Mlflow(Observer):
    """The run's parameters and per-round metrics in an MLflow tracking store."""

    def __init__(self, uri: str):
        self.uri = uri
        self.tracked: MlflowRun | None = None

    def on_start(self, run: RunStarted) -> None:
        from ..config import flatten

        cfg = run.cfg
        self.tracked = MlflowRun(
            self.uri,
            run.sweep or "reuse_ray",
            run_folder(cfg.method.name, cfg.seed, run.label),
            {"run_id": run.run_id, "stage": run.stage, **flatten(cfg)},
        )

    def on_round(self, rec: RoundDone) -> None:
        if self.tracked is not None:
            self.tracked.log_round(rec.round, rec.row, rec.val)

    def on_end(self, end: RunEnded) -> None:
        if self.tracked is None:
            return
        row = end.row
        self.tracked.close(
            end.status,
            row["rounds_completed"],
            {
                "final_val_acc": row.get("final_val_acc"),
                "test_acc": row.get("test_acc"),
                "final_cum_saving_restricted": row.get("cum_saving_restricted"),
                "final_cum_up_measured_MB": row.get("cum_up_measured", 0) / 1e6,
            },
        )


class StopAfter(Observer):
    """Ends the run after round ``t`` (status ``stopped``): a trial a scheduler stopped there,
    recomputed with the same rows."""

    def __init__(self, t: int):
        self.t = t

    def on_round(self, rec: RoundDone) -> None:
        if rec.live and rec.round >= self.t:
            raise StopRun


class SaveCheckpoints(Observer):
    """Hands each checkpoint's bytes and round to ``save(blob, t)``."""

    def __init__(self, save: Callable[[bytes, int], None]):
        self.save = save

    def on_round(self, rec: RoundDone) -> None:
        if rec.live and rec.checkpoint is not None:
            self.save(rec.checkpoint, rec.round)


class OnRound(Observer):
    """Calls ``fn(row, blob)`` for every live round: the round's row with ``last_val_acc`` (the
    latest validation accuracy, None before the first) and its checkpoint bytes or None."""

    def __init__(self, fn: Callable[[dict[str, Any], bytes | None], None]):
        self.fn = fn

    def on_round(self, rec: RoundDone) -> None:
        if rec.live:
            last = rec.last_val
            self.fn(dict(rec.row, last_val_acc=last[0] if last else None), rec.checkpoint)
