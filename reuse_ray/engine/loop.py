"""The FL round loop (ALGORITHMS.md §1.5); it imports no Ray and runs behind any Backend.

Rounds are 1..T with T fixed in advance. Validation is evaluated at round 1, every
``eval_every`` rounds and at T; the test split is loaded and evaluated exactly once, after round
T, and never when a run diverged or failed (§6 items 1 and 17). Rows go to Parquet at every
evaluation round, so a crash loses at most the rounds since the last one.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..accounting import RoundBytes
from ..config import RunConfig, flatten, to_dict
from ..data import class_counts, load_dataset, make_partition
from ..data.registry import FederatedData
from ..models import init_model, resolve_model_name
from ..results import RunWriter
from ..state import StateLayout
from ..training import configure_determinism, evaluate
from .backend import Backend, RunSetup
from .local import LocalBackend
from .sampling import uniform_selection

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RunSummary:
    """The run's ``runs`` row, plus where its files went."""

    run_id: str
    status: str
    row: dict[str, Any]
    results_dir: str


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f}{unit}" if unit != "B" else f"{int(n)}B"
        n /= 1000
    return str(n)


def make_backend(cfg: RunConfig) -> Backend:
    """The backend named by ``cfg.engine.backend``; Ray is imported only when asked for."""
    if cfg.engine.backend == "local":
        return LocalBackend("cuda" if cfg.engine.device == "cuda" else "cpu")
    from ..distributed import RayBackend

    return RayBackend(cfg)


def prepare_data(cfg: RunConfig) -> tuple[FederatedData, list[np.ndarray]]:
    """Load the dataset and partition its training split over the clients."""
    data = load_dataset(cfg.data)
    p = cfg.partition
    parts = make_partition(
        data.train.y,
        cfg.fl.num_clients,
        p.kind,
        cfg.seed,
        p.alpha,
        p.min_size,
        p.shards_per_client,
    )
    return data, parts


def run_fl(
    cfg: RunConfig,
    backend: Backend | None = None,
    progress: Progress | None = None,
    data: FederatedData | None = None,
) -> RunSummary:
    """Run one FL run to round T and write its Parquet rows; returns the ``runs`` row."""
    t_start = time.perf_counter()
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    configure_determinism(cfg.train.threads)
    say = progress or (lambda _msg: None)
    run_id = cfg.run_id
    writer = RunWriter(cfg.results_dir, run_id, cfg.method.name)
    writer.clear_previous()

    if data is None:
        data, parts = prepare_data(cfg)
    else:
        p = cfg.partition
        parts = make_partition(
            data.train.y,
            cfg.fl.num_clients,
            p.kind,
            cfg.seed,
            p.alpha,
            p.min_size,
            p.shards_per_client,
        )
    info = data.info
    model_name = resolve_model_name(cfg.model.name, cfg.data.name)
    model = init_model(model_name, info.shape, info.num_classes, cfg.seed, cfg.model.hidden)
    layout = StateLayout.from_model(model)
    b0 = layout.dense_bytes
    backend = backend or make_backend(cfg)

    counts = class_counts(parts, data.train.y, info.num_classes)
    for i, p in enumerate(parts):
        writer.add(
            "clients",
            {
                "run_id": run_id,
                "seed": cfg.seed,
                "client_id": i,
                "num_samples": len(p),
                "class_counts": counts[i].tolist(),
            },
        )

    run_row: dict[str, Any] = {
        "run_id": run_id,
        "seed": cfg.seed,
        "status": "running",
        "error": None,
        "dataset": cfg.data.name,
        "model": model_name,
        "backend": backend.name,
        "rounds_planned": cfg.fl.rounds,
        "rounds_completed": 0,
        "num_params": layout.dim,
        "dense_bytes": b0,
        "started_at": started_at,
        "config_json": json.dumps(to_dict(cfg), sort_keys=True),
        **{f"cfg.{k}": v for k, v in flatten(cfg).items()},
    }
    writer.set_run_row(run_row)
    writer.flush()
    say(
        f"[{run_id}] {cfg.method.name} on {cfg.data.name}/{model_name}: "
        f"{cfg.fl.num_clients} clients, {cfg.fl.clients_per_round}/round, {cfg.fl.rounds} rounds, "
        f"d={layout.dim:,} (B0={_fmt_bytes(b0)}), backend={backend.name}"
    )

    cum = RoundBytes()
    total_steps = 0
    last_val: tuple[float, float] | None = None
    status, error = "running", None
    completed = 0
    w = None
    try:
        backend.start(RunSetup(cfg, info, data.train, tuple(parts), model_name))
        for t in range(1, cfg.fl.rounds + 1):
            t0 = time.perf_counter()
            selected = uniform_selection(cfg.seed, t, cfg.fl.num_clients, cfg.fl.clients_per_round)
            report = backend.run_round(t, selected)
            if report.diverged:
                status = "diverged"
                error = f"non-finite loss or update in round {t}"
                say(f"[{run_id}] round {t}: diverged (non-finite loss or update); stopping")
                break
            rb = RoundBytes()
            for c in report.clients:
                rb = rb + RoundBytes(c.up_restricted, b0, b0, c.up_measured, c.down_measured)
            cum = cum + rb
            completed = t
            steps = sum(c.local_steps for c in report.clients)
            total_steps += steps
            losses = [c.train_loss for c in report.clients if c.train_loss is not None]
            val = None
            if t == 1 or t % cfg.fl.eval_every == 0 or t == cfg.fl.rounds:
                w = backend.weights()
                val = evaluate(model, layout, w, data.val, info, cfg.train.eval_batch_size)
                last_val = val
            wall = time.perf_counter() - t0
            num_reused = sum(1 for c in report.clients if c.decision == "reused")
            num_fresh = sum(1 for c in report.clients if c.decision == "fresh")
            writer.add("rounds", {
                "run_id": run_id, "seed": cfg.seed, "round": t,
                "num_selected": len(report.clients), "num_fresh": num_fresh,
                "num_reused": num_reused,
                "train_loss": float(np.mean(losses)) if losses else None,
                "val_acc": val[0] if val else None, "val_loss": val[1] if val else None,
                "up_restricted": rb.up_restricted, "down_sensitivity": rb.down_sensitivity,
                "dense_reference": rb.dense_reference, "up_measured": rb.up_measured,
                "down_measured": rb.down_measured,
                "cum_up_restricted": cum.up_restricted,
                "cum_down_sensitivity": cum.down_sensitivity,
                "cum_dense_reference": cum.dense_reference, "cum_up_measured": cum.up_measured,
                "cum_down_measured": cum.down_measured,
                "saving_restricted": rb.saving_restricted,
                "cum_saving_restricted": cum.saving_restricted,
                "cum_saving_bidirectional": cum.saving_bidirectional,
                "client_steps": steps, "update_norm": report.update_norm,
                "round_wall_s": wall,
            })  # fmt: skip
            for c in report.clients:
                writer.add("client_events", {
                    "run_id": run_id, "seed": cfg.seed, "round": t, "client_id": c.client,
                    "decision": c.decision, "num_samples": c.num_samples, "weight": c.weight,
                    "train_loss": c.train_loss, "local_steps": c.local_steps,
                    "up_restricted": c.up_restricted, "up_measured": c.up_measured,
                    "down_measured": c.down_measured, "update_norm": c.update_norm,
                    "gate_score": c.gate.get("gate_score"), "tau": c.gate.get("tau"),
                    "age": c.gate.get("age"), "promoted": c.gate.get("promoted"),
                    "wall_s": c.wall_s,
                })  # fmt: skip
            val_s = f"val_acc={val[0]:.4f} val_loss={val[1]:.4f} " if val else ""
            say(f"[{run_id}] round {t:>4}/{cfg.fl.rounds} {val_s}"
                f"fresh={num_fresh} reused={num_reused} up={_fmt_bytes(cum.up_restricted)} "
                f"cum_saving={100 * cum.saving_restricted:.3f}% {wall:.2f}s")  # fmt: skip
            if val is not None:
                writer.flush(("rounds", "client_events"))
        else:
            status = "finished"
    except BaseException as err:
        status = "failed"
        error = f"{type(err).__name__}: {err}"
        raise
    finally:
        test = None
        memory = None
        try:
            if status == "finished":
                w = backend.weights()
                test = evaluate(model, layout, w, data.test(), info, cfg.train.eval_batch_size)
                say(
                    f"[{run_id}] final round {cfg.fl.rounds}: test_acc={test[0]:.4f} "
                    f"test_loss={test[1]:.4f} (test split read once)"
                )
            if status in ("finished", "diverged"):
                memory = backend.memory_bytes()
        finally:
            backend.close()
        run_row.update(
            {
                "status": status,
                "error": error,
                "rounds_completed": completed,
                "final_round": completed or None,
                "final_val_acc": last_val[0] if last_val else None,
                "final_val_loss": last_val[1] if last_val else None,
                "test_acc": test[0] if test else None,
                "test_loss": test[1] if test else None,
                "test_round": cfg.fl.rounds if test else None,
                "cum_up_restricted": cum.up_restricted,
                "cum_down_sensitivity": cum.down_sensitivity,
                "cum_dense_reference": cum.dense_reference,
                "cum_up_measured": cum.up_measured,
                "cum_down_measured": cum.down_measured,
                "cum_saving_restricted": cum.saving_restricted if cum.dense_reference else None,
                "cum_saving_bidirectional": cum.saving_bidirectional
                if cum.dense_reference
                else None,
                "server_memory_bytes": memory,
                "client_steps": total_steps,
                "wall_s": time.perf_counter() - t_start,
            }
        )
        writer.set_run_row(run_row)
        writer.flush()
    return RunSummary(run_id, status, run_row, str(cfg.results_dir))
