"""Workload W's constants and run configuration (see :mod:`workload_w`), without torch: the
engine arms of ``engine_overhead.py`` build their config from here, so the Ray engine's driver
process imports no torch, as a user's does."""

from __future__ import annotations

from typing import Any

SEED = 1
CLIENTS = 50
PER_ROUND = 10
EPOCHS = 3
BATCH = 128
LR, MOMENTUM, WEIGHT_DECAY = 0.05, 0.9, 1e-4
ALPHA, MIN_SIZE = 0.5, 10
EVAL_BATCH = 1024
HIDDEN = {"cnn_valid": 512, "cnn": 128}


def data_config(samples: int = 20000) -> dict[str, Any]:
    """The ``data`` section: ``samples`` training images after the validation/test carve-outs."""
    return {
        "name": "synthetic",
        "synthetic_samples": int(samples / 0.72),
        "synthetic_shape": [1, 28, 28],
        "synthetic_classes": 10,
    }


def run_config(model: str, rounds: int, samples: int, backend: str, results: str) -> dict:
    """W as a reuse_ray run configuration (validation after every round)."""
    return {
        "seed": SEED,
        "data": data_config(samples),
        "model": {"name": model, "hidden": HIDDEN[model]},
        "train": {
            "epochs": EPOCHS,
            "batch_size": BATCH,
            "lr": LR,
            "momentum": MOMENTUM,
            "weight_decay": WEIGHT_DECAY,
            "threads": 1,
        },
        "fl": {
            "num_clients": CLIENTS,
            "clients_per_round": PER_ROUND,
            "rounds": rounds,
            "eval_every": 1,
        },
        "partition": {"kind": "dirichlet", "alpha": ALPHA, "min_size": MIN_SIZE},
        "method": {"name": "fedavg", "topk_ratio": 1.0},
        "engine": {"backend": backend},
        "results_dir": results,
    }
