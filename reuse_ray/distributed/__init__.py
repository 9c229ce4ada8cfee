"""Ray engine: client-worker actors, the server actor and pool sizing."""

from .backend import RayBackend, ensure_ray
from .kept import kept_workers
from .resources import pool_size_from_resources

__all__ = ["RayBackend", "ensure_ray", "kept_workers", "pool_size_from_resources"]
