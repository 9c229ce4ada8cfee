"""What a run (:mod:`~reuse_ray.engine.run`) is made of, beside its life: the results writer it
opens, its first runs row, the observers its hooks name and the client partition (design:
Runs).
"""

from __future__ import annotations

import json
import socket
import sys
from typing import Any

import numpy as np

from ..config import RunConfig, flatten, to_dict
from ..data import load_dataset, make_partition
from ..data.registry import FederatedData
from ..errors import UserError
from ..results import RunWriter
from ..results.writer import COMPLETE
from .backend import Backend
from .observers import Console, Mlflow, Observer, Progress, TensorBoard
from .records import RunFacts


def open_writer(cfg: RunConfig, hooks, force: bool) -> RunWriter:
    """The run's writer. A complete earlier result of this run id is refused, or with
    ``force`` staged to be replaced when this attempt finishes; an incomplete one is cleared."""
    writer = RunWriter(cfg.results_dir, cfg.run_id, cfg.method.name)
    if hooks.resume is not None:
        return writer
    previous = writer.previous_status()
    if previous not in COMPLETE:
        writer.clear_previous()
    elif force or hooks.force:
        writer.stage()
    else:
        raise UserError(
            f"run {cfg.run_id} already {previous} in {cfg.results_dir} — nothing was "
            "recomputed; pass --force to recompute it (the old rows stay until the new "
            "attempt finishes)"
        )
    return writer


def observers_of(hooks, progress: Progress | None) -> list[Observer]:
    out: list[Observer] = [Console(progress)] if progress is not None else []
    if hooks.tensorboard:
        out.append(TensorBoard())
    if hooks.mlflow:
        out.append(Mlflow(hooks.mlflow))
    return out + list(hooks.observers)


def partition_clients(cfg: RunConfig, data: FederatedData) -> list[np.ndarray]:
    p = cfg.partition
    return make_partition(
        data.train.y,
        cfg.fl.num_clients,
        p.kind,
        cfg.seed,
        p.alpha,
        p.min_size,
        p.shards_per_client,
    )


def prepare_data(cfg: RunConfig) -> tuple[FederatedData, list[np.ndarray]]:
    """Load the dataset and partition its training split over the clients."""
    data = load_dataset(cfg.data)
    return data, partition_clients(cfg, data)


def run_row(cfg: RunConfig, hooks, facts: RunFacts, backend: Backend, run) -> dict[str, Any]:
    """The ``runs`` row a run starts with (``run``: its :class:`~.run.Run`, for the attempt
    columns); the end's columns are filled in when it ends."""
    return {
        "run_id": cfg.run_id,
        "seed": cfg.seed,
        "status": "running",
        "error": None,
        "stage": hooks.stage,
        "sweep": hooks.sweep,
        "trial_id": hooks.trial_id,
        "label": hooks.label,
        "dataset": cfg.data.name,
        "model": facts.model_name,
        "backend": backend.name,
        "rounds_planned": cfg.fl.rounds,
        "rounds_completed": 0,
        "num_params": facts.num_params,
        "dense_bytes": facts.dense_bytes,
        "started_at": run.first_started_at,
        "attempts": run.attempts,
        "resumed_from_round": run.resumed_from,
        "attempt_started_at": run.started_at,
        "test_reads": 0,
        "host": socket.gethostname(),
        "ray_node": _ray_node(),
        "config_json": json.dumps(to_dict(cfg), sort_keys=True),
        **{
            f"cfg.{k}": json.dumps(v) if isinstance(v, list) else v for k, v in flatten(cfg).items()
        },
    }


def _ray_node() -> str | None:
    """The Ray node id of this process when it runs inside Ray (a trial, a Ray-backed driver);
    Ray is not imported for it."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - where it ran is a courtesy, never a failure
        return None
