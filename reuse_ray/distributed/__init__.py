"""Ray engine: client-worker actors, the server actor and pool sizing."""

from .backend import RayBackend, ensure_ray
from .resources import pool_size_from_resources

__all__ = ["RayBackend", "ensure_ray", "pool_size_from_resources"]
