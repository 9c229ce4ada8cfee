"""The ``Backend`` protocol and the client worker every backend runs (ARCHITECTURE.md).

A backend receives the run's static inputs once (:class:`RunSetup`) and then, each round, the
global vector and the fresh-work tasks; it returns one :class:`ClientOutcome` per task, sorted by
client id. The worker does all client-side work — local training, the uplink codec and its
serialization — so only the encoded message travels back, and its length is the measured uplink.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from ..algorithms.base import ClientTask, ProbeTask
from ..codecs import (
    KIND_CONTROL,
    KIND_PROXY,
    encode,
    encode_laq,
    encode_skip,
    encode_vector,
    error_feedback_step,
    topk_sparsify,
)
from ..compressors import (
    ef21_step,
    effective_steps,
    laq_quantize,
    laq_upload,
    scaffold_correction,
    scaffold_new_control,
)
from ..config import RunConfig
from ..data.registry import ArraySplit, DatasetInfo
from ..models import head_parameter_names, init_model
from ..participation import participation_probs
from ..rng import Purpose
from ..state import StateLayout, int_buffers
from ..training import configure_determinism, head_proxy, local_update

if TYPE_CHECKING:
    from .server import RoundReport


@dataclass(frozen=True)
class RunSetup:
    """Everything client work needs, sent to workers once per run."""

    cfg: RunConfig
    info: DatasetInfo
    train: ArraySplit
    partitions: tuple[np.ndarray, ...]
    model_name: str

    @property
    def augment(self) -> str:
        a = self.cfg.train.augment
        return self.info.augment if a == "auto" else a

    def participation_probs(self) -> np.ndarray:
        """p_i of every client (§1.4), from the config and, where the law needs it, the labels."""
        if self.cfg.fl.participation != "adversarial":
            return participation_probs(self.cfg)  # the law does not read the data
        labels = [self.train.y[p] for p in self.partitions]
        return participation_probs(self.cfg, labels, self.info.num_classes)


@dataclass(frozen=True)
class ClientOutcome:
    """What a client sends back after fresh work: the encoded uplink message and diagnostics."""

    client: int
    round: int
    num_samples: int
    message: bytes
    mean_loss: float
    steps: int
    finite: bool
    wall_s: float
    proxy_message: bytes | None = None  # encoded refresh head proxy, when asked for
    client_state: object = None  # new client-local state (Fed-EF e_i, …): kept, not sent
    control_message: bytes | None = None  # SCAFFOLD: the encoded Δc_i


@dataclass(frozen=True)
class ProbeOutcome:
    """A gate probe's answer: the encoded head proxy HeadProxy(i, w_t, proxy_gate)."""

    client: int
    round: int
    message: bytes
    wall_s: float


class ClientError(RuntimeError):
    """Client work failed; names the client, the round and the stage. Picklable across Ray."""

    def __init__(self, client: int, round_: int, stage: str, cause: BaseException | str):
        self.client, self.round, self.stage = client, round_, stage
        self.detail = cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}"
        super().__init__(f"client {client} failed in round {round_} during {stage}: {self.detail}")

    def __reduce__(self):
        return (ClientError, (self.client, self.round, self.stage, self.detail))


class ClientWorker:
    """Holds one model instance and the training data; runs tasks on request."""

    def __init__(self, setup: RunSetup, device: str = "cpu"):
        cfg = setup.cfg
        configure_determinism(cfg.train.threads)
        self.setup = setup
        self.device = device
        self.model = init_model(
            setup.model_name, setup.info.shape, setup.info.num_classes, cfg.seed, cfg.model.hidden
        )
        self.layout = StateLayout.from_model(self.model)
        self.int_buffers = int_buffers(self.model)
        self.head_names = head_parameter_names(self.model)
        self.head_layout = self.layout.subset(self.head_names)
        self.trainable_layout = self.layout.trainable_subset()
        self.trainable_mask = self.layout.trainable_mask()

    def _proxy(self, client: int, round_: int, w: torch.Tensor, purpose: Purpose) -> bytes:
        s, dg = self.setup, self.setup.cfg.method.dg
        p = head_proxy(
            self.model, self.layout, w, self.int_buffers, s.train, s.partitions[client], s.info,
            self.head_names, seed=s.cfg.seed, round_=round_, client=client, purpose=purpose,
            max_batches=dg.proxy_batches, batch_size=dg.proxy_batch_size, augment=s.augment,
            mode=dg.proxy_mode, device=self.device,
        )  # fmt: skip
        return encode_vector(p, self.head_layout, KIND_PROXY, round_, client)

    def probe(self, task: ProbeTask, w: torch.Tensor) -> ProbeOutcome:
        """The gate proxy of §2.3.4 on the keyed ``proxy_gate`` stream."""
        start = time.perf_counter()
        try:
            msg = self._proxy(task.client, task.round, w, Purpose.PROXY_GATE)
        except Exception as err:
            raise ClientError(task.client, task.round, "gate proxy", err) from err
        return ProbeOutcome(task.client, task.round, msg, time.perf_counter() - start)

    def run(self, task: ClientTask, w: torch.Tensor) -> ClientOutcome:
        s, tc = self.setup, self.setup.cfg.train
        start = time.perf_counter()
        try:
            idx = s.partitions[task.client]
            res = local_update(
                self.model,
                self.layout,
                w,
                self.int_buffers,
                s.train,
                idx,
                s.info,
                seed=s.cfg.seed,
                round_=task.round,
                client=task.client,
                epochs=tc.epochs,
                batch_size=tc.batch_size,
                lr=tc.lr,
                momentum=tc.momentum,
                weight_decay=tc.weight_decay,
                mu=task.mu,
                correction=(
                    scaffold_correction(task.memory, task.local, self.layout)
                    if task.codec == "scaffold"
                    else None
                ),
                augment=s.augment,
                amp=tc.amp,
                device=self.device,
            )
        except Exception as err:
            raise ClientError(task.client, task.round, "local training", err) from err
        try:
            msg, state, control = self._uplink(task, res.delta, res.steps, len(idx))
        except Exception as err:
            raise ClientError(task.client, task.round, "encoding", err) from err
        proxy = None
        if task.refresh_proxy:
            try:
                proxy = self._proxy(task.client, task.round, w, Purpose.PROXY_REFRESH)
            except Exception as err:
                raise ClientError(task.client, task.round, "refresh proxy", err) from err
        return ClientOutcome(
            task.client, task.round, len(idx), msg, res.mean_loss, res.steps, res.finite,
            time.perf_counter() - start, proxy, state, control,
        )  # fmt: skip

    def _uplink(
        self, task: ClientTask, delta: torch.Tensor, steps: int, n: int
    ) -> tuple[bytes, object, bytes | None]:
        """The compressor of ``task.codec``: (uplink message, new local state, control message)."""
        head = {"round_": task.round, "client": task.client, "num_samples": n}
        r, state, control = task.topk_ratio, None, None
        if task.codec == "topk":
            upd = topk_sparsify(delta, self.layout, r)
        elif task.codec == "ef":
            upd, state = error_feedback_step(delta, task.local, self.layout, r)
        elif task.codec == "ef21":
            upd, _ = ef21_step(delta, task.memory, self.layout, r, task.dense_first)
        elif task.codec == "scaffold":
            upd = topk_sparsify(delta, self.layout, r)
            tc, sc = self.setup.cfg.train, self.setup.cfg.method.scaffold
            k = effective_steps(steps, tc.momentum) if sc.steps == "momentum" else steps
            state = scaffold_new_control(task.memory, task.local, delta, self.trainable_mask,
                                         k, tc.lr)  # fmt: skip
            dc = state if task.local is None else state - task.local
            control = encode_vector(dc, self.trainable_layout, KIND_CONTROL, task.round,
                                    task.client)  # fmt: skip
        elif task.codec == "laq":
            laq = self.setup.cfg.method.laq
            eps_hat, clock = task.local if task.local is not None else (0.0, 0)
            radius, codes, q_new = laq_quantize(delta, task.memory, laq.bits)
            upload, eps = laq_upload(q_new, task.memory, delta, eps_hat, task.threshold,
                                     clock, laq.max_clock)  # fmt: skip
            if upload:
                return encode_laq(radius, codes, laq.bits, **head), (eps, 0), None
            return encode_skip(**head), (eps_hat, clock + 1), None
        else:
            raise ValueError(f"unknown uplink codec {task.codec!r}")
        return encode(upd, self.layout, skip=task.skip_tensors, **head), state, control


class Backend(Protocol):
    """How a round is executed; the round loop is the same for every backend.

    ``run_round`` plans the round on the server, runs the fresh client work with the current
    global vector, applies the server step and returns the round's report. ``weights`` returns
    ``w_t`` for evaluation on the driver.
    """

    name: str

    def start(self, setup: RunSetup) -> None: ...

    def run_round(self, t: int, selected: list[int]) -> RoundReport: ...

    def weights(self) -> torch.Tensor: ...

    def memory_bytes(self) -> dict[str, int]: ...

    def snapshot(self) -> dict: ...

    def restore(self, snap: dict) -> None: ...

    def close(self) -> None: ...
