"""One FL run as a user or the experiment layer starts it: the backend its config names, then
the engine's loop (:func:`reuse_ray.engine.run.play_run`). The engine itself makes no backend and
imports nothing from :mod:`reuse_ray.distributed`; Ray is imported here, and only when the
config asks for it."""

from __future__ import annotations

from .config import RunConfig
from .engine.backend import Backend


def make_backend(cfg: RunConfig) -> Backend:
    """The backend named by ``cfg.engine.backend``; Ray is imported only when asked for."""
    if cfg.engine.backend == "local":
        from .engine.local import LocalBackend

        return LocalBackend("cuda" if cfg.engine.device == "cuda" else "cpu")
    from .distributed import RayBackend

    return RayBackend(cfg)


def run_fl(
    cfg: RunConfig,
    backend: Backend | None = None,
    progress=None,
    data=None,
    hooks=None,
    force: bool = False,
):
    """:func:`reuse_ray.engine.run.play_run` on ``backend``, or on the one ``cfg`` names."""
    from .engine.run import play_run

    return play_run(cfg, backend or make_backend(cfg), progress, data, hooks, force)


__all__ = ["make_backend", "run_fl"]
