"""Resource arithmetic for the client-worker pool, in one documented helper."""

from __future__ import annotations

import math

from ..errors import UserError


def pool_size_from_resources(
    resources: dict[str, float],
    *,
    clients_per_round: int,
    use_gpu: bool,
    cpu_per_worker: float = 1.0,
    gpu_fraction: float = 0.25,
    num_workers: int = 0,
) -> int:
    """How many client-worker actors a run should start.

    * On GPU, each worker asks for ``gpu_fraction`` of a GPU (0.25: four share one device), so
      the pool is ``⌊GPU / gpu_fraction⌋``.
    * On CPU, each worker asks for ``cpu_per_worker`` CPUs, so the pool is
      ``⌊CPU / cpu_per_worker⌋``.
    * More workers than clients per round would idle, so the pool is capped there.
    * ``num_workers > 0`` asks for an explicit size; it is still capped by the same limits.

    ``resources`` is what ``ray.cluster_resources()`` (or a Tune trial's placement group)
    offers. Raises ValueError when not even one worker fits.
    """
    if use_gpu:
        fit = math.floor(resources.get("GPU", 0.0) / gpu_fraction + 1e-9)
        what = f"GPU={resources.get('GPU', 0.0)} at gpu_fraction={gpu_fraction}"
    else:
        fit = math.floor(resources.get("CPU", 0.0) / cpu_per_worker + 1e-9)
        what = f"CPU={resources.get('CPU', 0.0)} at cpu_per_worker={cpu_per_worker}"
    size = min(fit, clients_per_round)
    if num_workers > 0:
        size = min(size, num_workers)
    if size < 1:
        raise UserError(
            f"engine: no client worker fits in the cluster's resources ({what}) — "
            "lower engine.cpu_per_worker / engine.gpu_fraction or add resources"
        )
    return size
