"""The sequential local backend: the server and one worker in this process, clients in id order."""

from __future__ import annotations

import torch

from .backend import ClientWorker, RunSetup
from .server import RoundReport, ServerCore


def _client(task) -> int:
    return task.client


class LocalBackend:
    """Runs the server step and every client task in this process, one after the other."""

    name = "local"

    def __init__(self, device: str = "cpu"):
        self.device = device
        self.worker: ClientWorker | None = None
        self.server: ServerCore | None = None

    def start(self, setup: RunSetup) -> None:
        self.server = ServerCore(setup)
        self.worker = ClientWorker(setup, self.device)

    def _check(self) -> tuple[ServerCore, ClientWorker]:
        if self.server is None or self.worker is None:
            raise RuntimeError("LocalBackend.start() was not called")
        return self.server, self.worker

    def run_round(self, t: int, selected: list[int]) -> RoundReport:
        server, worker = self._check()
        w = server.weights()
        probes = [worker.probe(p, w) for p in sorted(server.probes(t, selected), key=_client)]
        plan = server.plan(t, selected, probes)
        outcomes = [worker.run(task, w) for task in sorted(plan.tasks, key=lambda x: x.client)]
        return server.step(t, selected, plan, outcomes)

    def weights(self) -> torch.Tensor:
        return self._check()[0].weights()

    def memory_bytes(self) -> dict[str, int]:
        return self._check()[0].memory_bytes()

    def snapshot(self) -> dict:
        return self._check()[0].snapshot()

    def restore(self, snap: dict) -> None:
        self._check()[0].restore(snap)

    def close(self) -> None:
        self.worker = None
