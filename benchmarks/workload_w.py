"""Workload W, shared by every engine the performance benchmarks compare.

W: 20,000 synthetic 1×28×28 training images (10 classes), 50 clients by Dirichlet 0.5, 10
clients a round drawn by reuse_ray's keyed schedule, 3 local epochs, batch 128, SGD 0.05 /
momentum 0.9 / weight decay 1e-4, dense FedAvg weighted by sample counts, the global model
evaluated on the validation split after every round. Networks: ``cnn_valid`` (the classic
unpadded MNIST CNN, hidden 512) or the project's padded ``cnn`` (hidden 128).

The plain loop and the Flower harness train a client with :func:`train_client` and evaluate
with :func:`evaluate_state`: no framework code, the same work on the same data. Nothing here
imports Ray, so the Flower harness can use it from its own virtual environment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

# W's constants and its run configuration (torch-free: the engine arms' drivers import them)
from workload_spec import (  # noqa: F401 - re-exported: W.SEED, W.run_config, ...
    ALPHA,
    BATCH,
    CLIENTS,
    EPOCHS,
    EVAL_BATCH,
    HIDDEN,
    LR,
    MIN_SIZE,
    MOMENTUM,
    PER_ROUND,
    SEED,
    WEIGHT_DECAY,
    data_config,
    run_config,
)

from reuse_ray.config import DataConfig
from reuse_ray.configio import from_dict
from reuse_ray.data import load_dataset, make_partition, to_tensor
from reuse_ray.data.registry import FederatedData
from reuse_ray.models import init_model
from reuse_ray.participation import uniform_selection


@dataclass
class Workload:
    data: FederatedData
    parts: list[np.ndarray]
    model_name: str

    def model(self) -> nn.Module:
        return init_model(self.model_name, (1, 28, 28), 10, SEED, HIDDEN[self.model_name])


def load(model: str, samples: int = 20000) -> Workload:
    data = load_dataset(from_dict(DataConfig, data_config(samples)))
    parts = make_partition(data.train.y, CLIENTS, "dirichlet", SEED, ALPHA, MIN_SIZE)
    return Workload(data, parts, model)


def schedule(round_: int) -> list[int]:
    """S_t, the clients of round t, exactly as reuse_ray draws them."""
    return uniform_selection(SEED, round_, CLIENTS, PER_ROUND)


def train_client(model: nn.Module, w: Workload, client: int, round_: int) -> int:
    """Local training of one client from the model's current weights; returns its samples."""
    idx = w.parts[client]
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    g = torch.Generator().manual_seed(round_ * 1000 + client)
    model.train()
    for _ in range(EPOCHS):
        perm = torch.randperm(len(idx), generator=g).numpy()
        for s in range(0, len(idx), BATCH):
            b = idx[perm[s : s + BATCH]]
            x = to_tensor(w.data.train.x[b], w.data.info)
            y = torch.from_numpy(w.data.train.y[b])
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    return len(idx)


@torch.no_grad()
def evaluate_state(model: nn.Module, w: Workload) -> tuple[float, float]:
    """(accuracy, mean loss) of the model's weights on the validation split."""
    model.eval()
    val = w.data.val
    correct, loss = 0, 0.0
    for s in range(0, len(val), EVAL_BATCH):
        x = to_tensor(val.x[s : s + EVAL_BATCH], w.data.info)
        y = torch.from_numpy(val.y[s : s + EVAL_BATCH])
        out = model(x)
        loss += float(nn.functional.cross_entropy(out, y, reduction="sum"))
        correct += int((out.argmax(1) == y).sum())
    return correct / len(val), loss / len(val)
