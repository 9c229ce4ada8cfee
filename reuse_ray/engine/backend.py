"""The ``Backend`` protocol (ARCHITECTURE.md): how a run's rounds are executed.

A backend receives the run's static inputs once (:class:`~reuse_ray.engine.records.RunSetup`)
and then plays each round with :func:`~reuse_ray.engine.round.play_round` over its own server
and worker pool.
"""

from __future__ import annotations

from typing import Protocol

import torch

from .records import RoundReport, RunSetup


class Backend(Protocol):
    """``run_round`` plays round t; ``weights`` returns ``w_t`` for evaluation on the driver.

    Optional members ``run_fl`` uses where a backend has them (the Ray backend does):
    ``prepare()`` starts workers before the data is loaded; ``shared_train()`` returns the
    training split as the workers hold it, so the driver can drop its own copy;
    ``overlaps_validation = True`` lets the driver validate w_t while round t+1 runs;
    ``validate_next_round()`` returns a handle whose ``result()`` is that validation, run by
    the backend inside round t+1 (None: the driver validates on its own thread); and after
    ``start``, ``machine_note`` is a line for the console when the workers compute on more than
    one kind of machine (:mod:`reuse_ray.machine`), else None."""

    name: str

    def start(self, setup: RunSetup) -> None: ...

    def run_round(self, t: int, selected: list[int]) -> RoundReport: ...

    def weights(self) -> torch.Tensor: ...

    def memory_bytes(self) -> dict[str, int]: ...

    def snapshot(self) -> dict: ...

    def restore(self, snap: dict) -> None: ...

    def close(self) -> None: ...
