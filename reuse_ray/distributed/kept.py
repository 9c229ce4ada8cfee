"""Client workers kept between runs: ``with kept_workers(): ...`` (design: Engines).

A run on the Ray engine starts its actors (client workers and the server) and ends them when it
closes; each start is a fresh process that imports torch, about 6 s of a small run's 12 on
2 cores. Inside a ``kept_workers()`` block a closing run hands its actors back instead, emptied
(no setup, no server state, none of the run's objects held), and the next run whose pool has the
same shape (device, server process, size, resources, namespace) takes them: a seed loop in a
notebook, or a module of tests, pays the start once. Each run still builds everything it
computes from its own setup (the actors' ``load``), so its numbers are a fresh pool's
(``tests/distributed/test_ray_engine.py`` holds every method to the local engine's bits on a
kept pool). The actors end when the block ends, and a block opened inside another ends the
outer one's. Outside a block nothing is kept: idle actors hold their CPUs (or GPU fractions),
which a later sweep in the same process would wait for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import ray


@dataclass
class _Kept:
    """The one pool a block keeps: its shape and its actors (``hosted``: worker 0 holds the
    server)."""

    shape: tuple | None = None
    workers: list = field(default_factory=list)
    server: Any = None
    hosted: bool = False

    def actors(self) -> list:
        """Each actor once: the workers, and the server where it has a process of its own."""
        return self.workers if self.hosted else [*self.workers, self.server]


_block: _Kept | None = None


@contextlib.contextmanager
def kept_workers() -> Iterator[None]:
    """Runs in this block on the Ray engine reuse one another's actors (see the module)."""
    global _block
    outer, _block = _block, _Kept()
    if outer is not None:  # its idle actors would hold what this block's runs need
        _end(outer)
    try:
        yield
    finally:
        inner, _block = _block, outer
        _end(inner)


def active() -> bool:
    """Whether a ``kept_workers()`` block is open."""
    return _block is not None


def take(shape: tuple) -> tuple[list, Any] | None:
    """The kept actors of this shape, alive, as ``(workers, server)``; None outside a block or
    when none of this shape are kept (a pool of another shape is ended)."""
    if _block is None or _block.shape is None:
        return None
    if _block.shape != shape:
        _end(_block)
        return None
    workers, server, actors = _block.workers, _block.server, _block.actors()
    _block.shape, _block.workers, _block.server = None, [], None
    try:
        ray.get([a.pid.remote() for a in actors], timeout=60)
    except Exception:  # noqa: BLE001 - a kept actor that died is replaced by a fresh pool
        _kill(actors)
        return None
    return workers, server


def keep(shape: tuple, workers: list, server: Any, hosted: bool) -> bool:
    """Hand a closing run's actors back, emptied; False (nothing kept) outside a block or when
    an actor cannot be emptied, so the caller ends them."""
    if _block is None:
        return False
    actors = _Kept(shape, workers, server, hosted).actors()
    try:
        ray.get([a.release.remote() for a in actors], timeout=60)
    except Exception:  # noqa: BLE001 - an actor that cannot be emptied is not kept
        return False
    _end(_block)
    _block.shape, _block.workers, _block.server, _block.hosted = shape, workers, server, hosted
    return True


def _end(kept: _Kept) -> None:
    _kill(kept.actors())
    kept.shape, kept.workers, kept.server = None, [], None


def _kill(actors: list) -> None:
    for a in actors:
        if a is not None:  # a pool ended before: no server
            with contextlib.suppress(Exception):
                ray.kill(a, no_restart=True)
