"""The sequential local backend: the server and one worker in this process, clients in id order."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .. import checkpoint
from ..algorithms.api import ClientTask
from ..config import RunConfig
from ..data.registry import ArraySplit, FederatedData
from .backend import BackendBase
from .records import ClientOutcome, RoundReport, RunFacts, RunSetup, combine_batches
from .round import play_round, vector_groups
from .server import ServerCore
from .setup import make_setup
from .worker import ClientWorker


class LocalServer(ServerCore):
    """The in-process server, as the round sees it."""

    def weights_ref(self) -> torch.Tensor:
        return self.w


class LocalPool:
    """Runs every task on the one worker, in client order."""

    def __init__(self, worker: ClientWorker, vectorize_group: int = 0):
        """``vectorize_group`` > 0: the tasks are trained in the vectorized groups of
        :func:`~reuse_ray.engine.worker.vector_groups`."""
        self.worker, self.vectorize_group = worker, vectorize_group

    def run(
        self, tasks: Sequence[ClientTask], w: torch.Tensor, main: bool = False
    ) -> list[ClientOutcome]:
        if self.vectorize_group:
            groups = vector_groups(tasks, self.vectorize_group)
            return [out for g in groups for out in self.worker.run_group(g, w)]
        return [self.worker.run(task, w) for task in sorted(tasks, key=lambda x: x.client)]


class LocalBackend(BackendBase):
    """Runs the server step and every client task in this process, one after the other."""

    name = "local"

    def __init__(self, device: str = "cpu"):
        self.device = device
        self.pool: LocalPool | None = None
        self.server: LocalServer | None = None
        self.setup: RunSetup | None = None

    def build(self, cfg: RunConfig, data: FederatedData, parts: list[np.ndarray]) -> RunFacts:
        """The run's setup, built here (:func:`~reuse_ray.engine.setup.make_setup`), for
        :meth:`start`."""
        self.setup = make_setup(cfg, data, parts)[0]
        return RunFacts.of(self.setup)

    def start(self, setup: RunSetup | None = None) -> None:
        """Server and worker from ``setup`` (default: the one :meth:`build` made)."""
        setup = setup or self.setup
        if setup is None:
            raise RuntimeError("LocalBackend.start() needs a setup, or build() first")
        self.setup = setup
        self.server = LocalServer(setup)
        e = setup.cfg.engine
        self.pool = LocalPool(
            ClientWorker(setup, self.device), e.vectorize_group if e.vectorize else 0
        )

    def _check(self) -> tuple[LocalServer, LocalPool]:
        if self.server is None or self.pool is None:
            raise RuntimeError("LocalBackend.start() was not called")
        return self.server, self.pool

    def run_round(self, t: int, selected: list[int]) -> RoundReport:
        return play_round(*self._check(), t, selected)

    def weights(self) -> torch.Tensor:
        return self._check()[0].weights()

    def evaluate(
        self, split: ArraySplit | None = None, weights: torch.Tensor | None = None
    ) -> tuple[float, float]:
        """(accuracy, loss) of w_t (or of ``weights``, a :meth:`hold`) on ``split`` (default:
        the validation split), by the worker: the numbers the Ray engine's workers give."""
        server, pool = self._check()
        w = server.weights() if weights is None else weights
        parts = pool.worker.validate(w, split=split)
        split = self.setup.val if split is None else split
        return combine_batches(parts, len(split))

    def hold(self) -> torch.Tensor:
        """w_t as it is now, for a later :meth:`evaluate`."""
        return self._check()[0].weights().clone()

    def checkpoint(self, ckpt: Any) -> bytes:
        """The checkpoint file of ``ckpt`` (a RunCheckpoint) with the server's snapshot."""
        return checkpoint.dumps(dataclasses.replace(ckpt, server=self.snapshot()))

    def load_checkpoint(self, blob: bytes) -> Any:
        """The RunCheckpoint in a file :meth:`checkpoint` wrote."""
        return checkpoint.loads(blob)

    def memory_bytes(self) -> dict[str, int]:
        return self._check()[0].memory_bytes()

    def snapshot(self) -> dict:
        return self._check()[0].snapshot()

    def restore(self, snap: dict) -> None:
        self._check()[0].restore(snap)

    def close(self) -> None:
        self.pool = None
