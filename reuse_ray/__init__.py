"""reuse_ray: a sweep engine for federated learning with cached and stale update reuse."""

__version__ = "0.1.0"
