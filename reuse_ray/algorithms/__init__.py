"""Federated methods, one module each, found through the registry (docs/methods.md).

Every method module defines its config block, its search space, its server side (pure functions
over explicit state), its client side and its wire format, and registers itself with
:func:`~reuse_ray.algorithms.registry.register`. :func:`build_method` builds the method a run
config names; nothing else in the package lists methods.
"""

from __future__ import annotations

from typing import Any

from .api import (
    DECISIONS,
    FILL,
    FRESH,
    LAZY,
    ORACLE,
    REUSED,
    WAITING,
    ClientContext,
    ClientResult,
    ClientTask,
    Decision,
    Method,
    MethodEnv,
    Received,
    RoundPlan,
    StepResult,
    fedavg_aggregate,
    sample_weights,
    weighted_sum,
)
from .registry import MethodSpec, get_method, method_names, register
from .table import ClientTable, use_store


def build_method(cfg: Any, env: MethodEnv) -> Method:
    """The method named by ``cfg.method.name``, built from its own config block."""
    spec = get_method(cfg.method.name)
    return spec.build(cfg.method.params, env)


__all__ = [
    "DECISIONS",
    "FILL",
    "FRESH",
    "LAZY",
    "ORACLE",
    "REUSED",
    "WAITING",
    "ClientContext",
    "ClientResult",
    "ClientTable",
    "ClientTask",
    "Decision",
    "Method",
    "MethodEnv",
    "MethodSpec",
    "Received",
    "RoundPlan",
    "StepResult",
    "build_method",
    "fedavg_aggregate",
    "get_method",
    "method_names",
    "register",
    "sample_weights",
    "use_store",
    "weighted_sum",
]
