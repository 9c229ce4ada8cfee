"""The client worker every backend runs: one model instance, the training data, and the
:class:`~reuse_ray.algorithms.api.ClientContext` a method's client side works through."""

from __future__ import annotations

import copy
import time

import torch
from torch import nn

from ..algorithms.api import ClientTask
from ..models import init_model
from ..rng import Purpose
from ..state import int_buffers
from ..training import LocalResult, configure_determinism, head_proxy, local_update
from .records import ClientError, ClientOutcome, RunSetup


class ClientWorker:
    """Runs a method's client work for any client of the run."""

    def __init__(self, setup: RunSetup, device: str = "cpu"):
        cfg = setup.cfg
        configure_determinism(cfg.train.threads)
        self.setup = setup
        self.device = device
        self.model = init_model(
            setup.model_name, setup.info.shape, setup.info.num_classes, cfg.seed, cfg.model.hidden
        )
        self.layout = setup.layout
        self.int_buffers = int_buffers(self.model)
        self._stage = "client work"

    # ----------------------------------------------------------------- ClientContext

    def num_samples(self, client: int) -> int:
        return len(self.setup.partitions[client])

    def train(
        self, task: ClientTask, w: torch.Tensor, *, mu: float = 0.0,
        correction: dict[str, torch.Tensor] | None = None, lr: float | None = None,
    ) -> LocalResult:  # fmt: skip
        """ClientUpdate (§1.3) from w on the client's partition, keyed by (seed, round, client);
        ``lr`` overrides ``train.lr`` (a method's own schedule)."""
        s, tc = self.setup, self.setup.cfg.train
        self._stage = "local training"
        res = local_update(
            self.model, self.layout, w, self.int_buffers, s.train, s.partitions[task.client],
            s.info, seed=s.cfg.seed, round_=task.round, client=task.client, epochs=tc.epochs,
            batch_size=tc.batch_size, lr=tc.lr if lr is None else lr, momentum=tc.momentum,
            weight_decay=tc.weight_decay, mu=mu, correction=correction, augment=s.augment,
            amp=tc.amp, device=self.device,
        )  # fmt: skip
        self._stage = "encoding"
        return res

    def head_proxy(
        self, task: ClientTask, w: torch.Tensor, purpose: Purpose, *, batches: int,
        batch_size: int, mode: str,
    ) -> torch.Tensor:  # fmt: skip
        """The head-gradient proxy of §2.3.4 on the keyed stream ``purpose``."""
        s = self.setup
        self._stage = "gate proxy" if purpose == Purpose.PROXY_GATE else "refresh proxy"
        head_names = list(s.method.env.head_names)
        p = head_proxy(
            self.model, self.layout, w, self.int_buffers, s.train, s.partitions[task.client],
            s.info, head_names, seed=s.cfg.seed, round_=task.round, client=task.client,
            purpose=purpose, max_batches=batches, batch_size=batch_size, augment=s.augment,
            mode=mode, device=self.device,
        )  # fmt: skip
        self._stage = "encoding"
        return p

    def warm_up(self) -> None:
        """One forward and backward pass of a throwaway copy of the model on a zero batch of
        the training shape, so the first real task does not pay the kernels' first-use cost.
        The worker's model, its buffers and every random stream are left untouched (training
        draws only from keyed generators; the global one is restored anyway)."""
        s = self.setup
        model = copy.deepcopy(self.model).to(self.device)
        n = max(2, min(s.cfg.train.batch_size, len(s.train)))  # BatchNorm needs 2 samples
        x = torch.zeros((n, *s.info.shape), device=self.device)
        y = torch.zeros(n, dtype=torch.long, device=self.device)
        with torch.random.fork_rng(devices=[]):
            model.train()
            nn.functional.cross_entropy(model(x), y).backward()

    # ----------------------------------------------------------------- running a task

    def run(self, task: ClientTask, w: torch.Tensor) -> ClientOutcome:
        start = time.perf_counter()
        self._stage = "client work"
        try:
            res = self.setup.method.client_work(self, task, w)
        except Exception as err:
            raise ClientError(task.client, task.round, self._stage, err) from err
        return ClientOutcome(
            task.client, task.round, self.num_samples(task.client), tuple(res.messages),
            res.mean_loss, res.steps, res.finite, time.perf_counter() - start, res.local,
        )  # fmt: skip
