"""The sequential local backend: one in-process worker, tasks in ascending client order."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..algorithms.base import ClientTask
from .backend import ClientOutcome, ClientWorker, RunSetup


class LocalBackend:
    """Runs every client task in this process, one after the other."""

    name = "local"

    def __init__(self, device: str = "cpu"):
        self.device = device
        self.worker: ClientWorker | None = None

    def start(self, setup: RunSetup) -> None:
        self.worker = ClientWorker(setup, self.device)

    def run_clients(self, w: torch.Tensor, tasks: Sequence[ClientTask]) -> list[ClientOutcome]:
        if self.worker is None:
            raise RuntimeError("LocalBackend.start() was not called")
        return [self.worker.run(t, w) for t in sorted(tasks, key=lambda t: t.client)]

    def close(self) -> None:
        self.worker = None
