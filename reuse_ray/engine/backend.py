"""The ``Backend`` protocol (ARCHITECTURE.md): how a run's rounds are executed.

A backend builds the run's static inputs once (:class:`~reuse_ray.engine.records.RunSetup`)
where it computes, and then plays each round with :func:`~reuse_ray.engine.round.play_round`
over its own server and worker pool. The driver sees small records only (:class:`RunFacts`,
reports, (accuracy, loss) pairs, checkpoint bytes), so a backend that computes elsewhere (the
Ray engine) leaves the driver's process without torch.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..config import RunConfig
from ..data.registry import ArraySplit, FederatedData
from ..lazy import torch
from .records import RoundReport, RunFacts, RunSetup


class Backend(Protocol):
    """``build`` makes the run's setup and returns its :class:`RunFacts`; ``start`` readies the
    server and workers from it (or from a setup given); ``run_round`` plays round t;
    ``evaluate`` gives (accuracy, loss) of w_t on the validation split, or on a split given
    (the test split, read once); ``checkpoint`` writes a
    :class:`~reuse_ray.engine.recorder.RunCheckpoint` with the server's snapshot as the file's
    bytes, and ``load_checkpoint`` reads one back (its ``server`` is what ``restore`` takes).

    Optional members ``run_fl`` uses where a backend has them (the Ray backend does):
    ``prepare()`` starts workers before the data is loaded; ``shared_train()`` returns the
    training split as the workers hold it, so the driver can drop its own copy;
    ``validate_next_round()`` returns a handle whose ``result()`` is the validation of w_t,
    run by the backend inside round t+1; and after ``start``, ``machine_note`` is a line for
    the console when the workers compute on more than one kind of machine
    (:mod:`reuse_ray.machine`), else None."""

    name: str

    def build(self, cfg: RunConfig, data: FederatedData, parts: list[np.ndarray]) -> RunFacts: ...

    def start(self, setup: RunSetup | None = None) -> None: ...

    def run_round(self, t: int, selected: list[int]) -> RoundReport: ...

    def evaluate(self, split: ArraySplit | None = None) -> tuple[float, float]: ...

    def weights(self) -> torch.Tensor: ...

    def memory_bytes(self) -> dict[str, int]: ...

    def snapshot(self) -> dict: ...

    def restore(self, snap: Any) -> None: ...

    def checkpoint(self, ckpt: Any) -> bytes: ...

    def load_checkpoint(self, blob: bytes) -> Any: ...

    def close(self) -> None: ...
