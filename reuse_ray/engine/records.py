"""The records that travel between the driver, the server and the client workers.

They name no method: a client's work is whatever its method's ``client_work`` computes, and
what travels back is its encoded messages (their length is the measured uplink) and the state
the client keeps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..algorithms.api import Decision, Method
from ..config import RunConfig
from ..data.registry import ArraySplit, DatasetInfo
from ..lazy import torch
from ..state import StateLayout


@dataclass(frozen=True)
class RunSetup:
    """Everything the server and the client workers need, sent once per run."""

    cfg: RunConfig
    info: DatasetInfo
    train: ArraySplit
    partitions: tuple[np.ndarray, ...]
    model_name: str
    layout: StateLayout
    w0: torch.Tensor  # the initial global state (methods: Conventions)
    probs: tuple[float, ...]  # p_i of the participation model (methods: Conventions)
    method: Method  # built once, on the driver, from the run's config
    val: ArraySplit | None = None  # the validation split, for workers that validate w_t

    @property
    def augment(self) -> str:
        a = self.cfg.train.augment
        return self.info.augment if a == "auto" else a

    def num_samples(self) -> dict[int, int]:
        return {i: len(p) for i, p in enumerate(self.partitions)}


@dataclass(frozen=True)
class RunFacts:
    """What the driver records of a run's setup (the ``runs`` row, the ledgers' B0) and
    samples clients with; small, and free of tensors, wherever the setup was built."""

    model_name: str
    num_params: int
    dense_bytes: int
    probs: tuple[float, ...]

    @classmethod
    def of(cls, setup: RunSetup) -> RunFacts:
        return cls(setup.model_name, setup.layout.dim, setup.layout.dense_bytes, setup.probs)


@dataclass(frozen=True)
class ClientOutcome:
    """What a client sends back: its encoded messages, diagnostics and the state it keeps."""

    client: int
    round: int
    num_samples: int
    messages: tuple[bytes, ...]
    mean_loss: float | None
    steps: int
    finite: bool
    wall_s: float
    local: Any = None  # the client's new local state (None: unchanged); kept, never sent


class ClientError(RuntimeError):
    """Client work failed; names the client, the round and the stage. Picklable across Ray."""

    def __init__(self, client: int, round_: int, stage: str, cause: BaseException | str):
        self.client, self.round, self.stage = client, round_, stage
        self.detail = cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}"
        super().__init__(f"client {client} failed in round {round_} during {stage}: {self.detail}")

    def __reduce__(self):
        return (ClientError, (self.client, self.round, self.stage, self.detail))


@dataclass(frozen=True)
class ClientReport:
    """Per client of a round: decision, ledgers and diagnostics."""

    client: int
    decision: Decision
    num_samples: int
    weight: float | None
    up_restricted: int
    up_measured: int
    down_measured: int
    train_loss: float | None = None
    local_steps: int = 0
    update_norm: float | None = None
    wall_s: float | None = None
    columns: dict[str, Any] = field(default_factory=dict)  # method-specific event columns


@dataclass(frozen=True)
class RoundReport:
    """What the driver records for one round; the state itself stays with the server."""

    round: int
    clients: tuple[ClientReport, ...]
    update_norm: float
    diverged: bool
    dense_bytes: int


def combine_batches(parts: list[tuple[int, float]], n: int) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) from :func:`evaluate_batches`' parts, in batch order:
    the losses are added one batch after another in float64, so any split of the batches
    over calls gives the same bits."""
    correct, loss_sum = 0, 0.0
    for c, loss in parts:
        correct += c
        loss_sum += loss
    n = max(n, 1)
    return correct / n, loss_sum / n
