"""The client worker every backend runs: one model instance, the training data, and the
:class:`~reuse_ray.algorithms.api.ClientContext` a method's client side works through."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Sequence

import torch
from torch import nn

from ..algorithms.api import ClientTask
from ..allocator import retain_freed_memory
from ..data.registry import ArraySplit
from ..models import init_model, set_memory_format
from ..rng import Purpose
from ..state import int_buffers
from ..training import (
    LocalResult,
    configure_determinism,
    evaluate_batches,
    head_proxy,
    local_update,
)
from ..vectorized import TrainRequest, batched_forward, local_update_many
from .records import ClientError, ClientOutcome, RunSetup


def _proxy_stage(purpose: Purpose) -> str:
    return "gate proxy" if purpose == Purpose.PROXY_GATE else "refresh proxy"


class ClientWorker:
    """Runs a method's client work for any client of the run."""

    def __init__(self, setup: RunSetup, device: str = "cpu"):
        cfg = setup.cfg
        configure_determinism(cfg.train.threads)
        retain_freed_memory()
        self.setup = setup
        self.device = device
        self.model = set_memory_format(
            init_model(
                setup.model_name,
                setup.info.shape,
                setup.info.num_classes,
                cfg.seed,
                cfg.model.hidden,
            ),
            cfg.engine.channels_last,
        )
        self.layout = setup.layout
        self.int_buffers = int_buffers(self.model)
        self._stage = "client work"
        self._model_lock = threading.Lock()  # the one model, in a vectorized group's threads

    # ----------------------------------------------------------------- ClientContext

    def num_samples(self, client: int) -> int:
        return len(self.setup.partitions[client])

    def train(
        self,
        task: ClientTask,
        w: torch.Tensor,
        *,
        mu: float = 0.0,
        correction: dict[str, torch.Tensor] | None = None,
        lr: float | None = None,
    ) -> LocalResult:
        """ClientUpdate (methods: Conventions) from w on the client's partition, keyed by
        (seed, round, client);
        ``lr`` overrides ``train.lr`` (a method's own schedule)."""
        s, tc = self.setup, self.setup.cfg.train
        self._stage = "local training"
        res = local_update(
            self.model,
            self.layout,
            w,
            self.int_buffers,
            s.train,
            s.partitions[task.client],
            s.info,
            seed=s.cfg.seed,
            round_=task.round,
            client=task.client,
            epochs=tc.epochs,
            batch_size=tc.batch_size,
            lr=tc.lr if lr is None else lr,
            momentum=tc.momentum,
            weight_decay=tc.weight_decay,
            mu=mu,
            correction=correction,
            augment=s.augment,
            amp=tc.amp,
            device=self.device,
        )
        self._stage = "encoding"
        return res

    def head_proxy(
        self,
        task: ClientTask,
        w: torch.Tensor,
        purpose: Purpose,
        *,
        batches: int,
        batch_size: int,
        mode: str,
    ) -> torch.Tensor:
        """The head-gradient proxy of methods: DG-FedReuse on the keyed stream ``purpose``."""
        s = self.setup
        self._stage = _proxy_stage(purpose)
        head_names = list(s.method.env.head_names)
        p = head_proxy(
            self.model,
            self.layout,
            w,
            self.int_buffers,
            s.train,
            s.partitions[task.client],
            s.info,
            head_names,
            seed=s.cfg.seed,
            round_=task.round,
            client=task.client,
            purpose=purpose,
            max_batches=batches,
            batch_size=batch_size,
            augment=s.augment,
            mode=mode,
            device=self.device,
        )
        self._stage = "encoding"
        return p

    def validate(
        self, w: torch.Tensor, batches: range | None = None, split: ArraySplit | None = None
    ) -> list[tuple[int, float]]:
        """(correct, loss sum) of ``w`` on ``split`` (default: the run's validation split), per
        evaluation batch in ``batches`` (default: all), on the CPU:
        :func:`~reuse_ray.training.evaluate_batches` with the run's model, thread count and
        batch size, so every engine gets the same numbers
        (:func:`~reuse_ray.engine.records.combine_batches` adds them). The model is reloaded
        before any later use."""
        s = self.setup
        split = s.val if split is None else split
        if split is None:
            raise ValueError("this run's setup carries no validation split")
        return evaluate_batches(
            self.model, self.layout, w, split, s.info, s.cfg.train.eval_batch_size, batches=batches
        )

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
            if s.cfg.engine.vectorize:  # the batched forward's first call (vmap's: ~1 s)
                params = {
                    k: torch.stack([p.detach()] * 2).requires_grad_(True)
                    for k, p in model.named_parameters()
                }
                batched_forward(model)(params, torch.stack([x] * 2)).sum().backward()

    # ----------------------------------------------------------------- running a task

    def run(self, task: ClientTask, w: torch.Tensor) -> ClientOutcome:
        return self._run(self, task, w)

    def _run(self, ctx, task: ClientTask, w: torch.Tensor) -> ClientOutcome:
        start = time.perf_counter()
        ctx._stage = "client work"
        try:
            res = self.setup.method.client_work(ctx, task, w)
        except Exception as err:
            raise ClientError(task.client, task.round, ctx._stage, err) from err
        return ClientOutcome(
            task.client,
            task.round,
            self.num_samples(task.client),
            tuple(res.messages),
            res.mean_loss,
            res.steps,
            res.finite,
            time.perf_counter() - start,
            res.local,
        )

    def run_group(self, tasks: Sequence[ClientTask], w: torch.Tensor) -> list[ClientOutcome]:
        """The tasks' client work with their local training vectorized (``engine.vectorize``).

        Each task's client work runs once, unchanged, in its own thread; its ``ctx.train``
        calls wait until every task of the group is waiting in one or has finished, and the
        waiting calls are then trained together (:func:`~reuse_ray.vectorized.local_update_many`).
        Outcomes come back in task order; the first failing task (in that order) raises."""
        batcher = _Batcher(self, len(tasks))
        outcomes: list[ClientOutcome | BaseException | None] = [None] * len(tasks)

        def work(k: int, task: ClientTask) -> None:
            try:
                outcomes[k] = self._run(_GroupContext(self, batcher, k), task, w)
            except BaseException as err:  # noqa: BLE001 - handed to the caller below
                outcomes[k] = err
            finally:
                batcher.done()

        threads = [
            threading.Thread(target=work, args=(k, t), daemon=True) for k, t in enumerate(tasks)
        ]
        for th in threads:
            th.start()
        batcher.serve()
        for th in threads:
            th.join()
        for out in outcomes:
            if isinstance(out, BaseException):
                raise out
        return outcomes  # type: ignore[return-value]

    def train_many(self, requests: list[TrainRequest]) -> list[LocalResult]:
        """Local training of several clients at once (vectorized)."""
        s, tc = self.setup, self.setup.cfg.train
        with self._model_lock:
            return local_update_many(
                self.model,
                self.layout,
                requests,
                s.train,
                s.info,
                seed=s.cfg.seed,
                epochs=tc.epochs,
                batch_size=tc.batch_size,
                momentum=tc.momentum,
                weight_decay=tc.weight_decay,
                augment=s.augment,
                device=self.device,
                graphs=s.cfg.engine.vectorize_graphs,
            )


class _Batcher:
    """Collects a group's ``ctx.train`` calls until no task can go on without its result."""

    def __init__(self, worker: ClientWorker, n: int):
        self.worker = worker
        self.cv = threading.Condition()
        self.running = n  # tasks neither waiting in train nor finished
        self.waiting: dict[int, TrainRequest] = {}
        self.results: dict[int, LocalResult | BaseException] = {}

    def train(self, k: int, request: TrainRequest) -> LocalResult:
        with self.cv:
            self.waiting[k] = request
            self.running -= 1
            self.cv.notify_all()
            self.cv.wait_for(lambda: k in self.results)
            out = self.results.pop(k)
        if isinstance(out, BaseException):
            raise out
        return out

    def done(self) -> None:
        with self.cv:
            self.running -= 1
            self.cv.notify_all()

    def serve(self) -> None:
        """Train every batch of waiting calls until all tasks have finished."""
        while True:
            with self.cv:
                self.cv.wait_for(lambda: self.running == 0)
                if not self.waiting:
                    return
                batch, self.waiting = self.waiting, {}
            keys = sorted(batch)
            try:
                results: list = self.worker.train_many([batch[k] for k in keys])
            except Exception as err:  # noqa: BLE001 - each waiting task raises it
                results = [err] * len(keys)
            with self.cv:
                self.results.update(zip(keys, results, strict=True))
                self.running += len(keys)
                self.cv.notify_all()


class _GroupContext:
    """The ClientContext one task of a vectorized group works through."""

    def __init__(self, worker: ClientWorker, batcher: _Batcher, k: int):
        self.worker, self.batcher, self.k = worker, batcher, k
        self._stage = "client work"

    def num_samples(self, client: int) -> int:
        return self.worker.num_samples(client)

    def train(
        self,
        task: ClientTask,
        w: torch.Tensor,
        *,
        mu: float = 0.0,
        correction: dict[str, torch.Tensor] | None = None,
        lr: float | None = None,
    ) -> LocalResult:
        s = self.worker.setup
        self._stage = "local training"
        res = self.batcher.train(
            self.k,
            TrainRequest(
                task.client,
                task.round,
                w,
                s.partitions[task.client],
                s.cfg.train.lr if lr is None else lr,
                mu,
                correction,
            ),
        )
        self._stage = "encoding"
        return res

    def head_proxy(self, task: ClientTask, w: torch.Tensor, purpose: Purpose, **kw) -> torch.Tensor:
        self._stage = _proxy_stage(purpose)
        with self.worker._model_lock:
            out = self.worker.head_proxy(task, w, purpose, **kw)
        self._stage = "encoding"
        return out
