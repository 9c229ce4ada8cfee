"""Client participation, re-exported for the engine (see :mod:`reuse_ray.participation`)."""

from ..participation import (
    bernoulli_selection,
    participation_probs,
    select_clients,
    uniform_selection,
)

__all__ = ["bernoulli_selection", "participation_probs", "select_clients", "uniform_selection"]
