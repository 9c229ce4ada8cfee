"""The ``Backend`` protocol (design: Engines): how a run's rounds are executed.

A backend builds the run's static inputs once (:class:`~reuse_ray.engine.records.RunSetup`)
where it computes, and then plays each round with :func:`~reuse_ray.engine.round.play_round`
over its own server and worker pool. The driver sees small records only (:class:`RunFacts`,
reports, (accuracy, loss) pairs, checkpoint bytes), so a backend that computes elsewhere (the
Ray engine) leaves the driver's process without torch.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..config import DataConfig, RunConfig
from ..data.registry import ArraySplit, FederatedData, load_dataset
from .records import RoundReport, RunFacts, RunSetup


class Backend(Protocol):
    """Everything :class:`~reuse_ray.engine.run.Run` asks of a backend, in the order it asks.

    Before the run: ``prepare`` (start workers while the data loads), ``load_data`` (the
    dataset, wherever the backend keeps it), ``load_checkpoint`` (a resumed run's file),
    ``build`` (the run's setup, where the backend computes; returns :class:`RunFacts`).
    Then ``start`` readies the server and workers; ``machine_note`` is a console line when the
    workers compute on more than one kind of machine (:mod:`reuse_ray.machine`), else None;
    ``shared_train`` returns the training split as the workers hold it, so the driver can drop
    its own copy (None: keep it); ``restore`` takes a checkpoint's server state.
    Each round: ``run_round`` plays round t; on evaluation rounds ``validate_next_round``
    returns a handle whose ``result()`` is the validation of w_t, run inside round t+1 (None:
    validate in line), and ``evaluate`` gives (accuracy, loss) of w_t on the validation split,
    or on a split given (the test split, read once); ``hold`` keeps w_t as it is now (a handle
    ``evaluate(split, weights=handle)`` reads later: a run with uplink levels holds each
    round's start, since a level's reading round is known once the next round has played).
    ``checkpoint`` writes a
    :class:`~reuse_ray.engine.recorder.RunCheckpoint` with the server's snapshot as bytes.
    At the end ``memory_bytes`` and ``close``.

    :class:`BackendBase` gives the optional members their defaults; a backend derives from it
    and overrides what it does differently, so no member is ever probed for."""

    name: str

    def prepare(self) -> None: ...

    def load_data(self, data_cfg: DataConfig) -> FederatedData: ...

    def load_checkpoint(self, blob: bytes) -> Any: ...

    def build(self, cfg: RunConfig, data: FederatedData, parts: list[np.ndarray]) -> RunFacts: ...

    def start(self, setup: RunSetup | None = None) -> None: ...

    @property
    def machine_note(self) -> str | None: ...

    def shared_train(self) -> ArraySplit | None: ...

    def restore(self, snap: Any) -> None: ...

    def run_round(self, t: int, selected: list[int]) -> RoundReport: ...

    def validate_next_round(self) -> PendingValidation | None: ...

    def evaluate(
        self, split: ArraySplit | None = None, weights: Any = None
    ) -> tuple[float, float]: ...

    def hold(self) -> Any: ...

    def checkpoint(self, ckpt: Any) -> bytes: ...

    def memory_bytes(self) -> dict[str, int]: ...

    def close(self) -> None: ...


class PendingValidation(Protocol):
    """A validation running inside the next round; ``result()`` waits for (accuracy, loss)."""

    def result(self) -> tuple[float, float]: ...


class BackendBase:
    """The defaults of :class:`Backend`'s optional members: nothing to prepare, the dataset
    loaded in this process, one kind of machine, the driver keeps its training split, every
    validation in line."""

    name = "base"
    machine_note: str | None = None

    def prepare(self) -> None:
        """Nothing starts before the data is loaded."""

    def load_data(self, data_cfg: DataConfig) -> FederatedData:
        return load_dataset(data_cfg)

    def shared_train(self) -> ArraySplit | None:
        return None

    def validate_next_round(self) -> PendingValidation | None:
        return None
