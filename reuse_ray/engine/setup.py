"""A run's static inputs (:class:`~reuse_ray.engine.records.RunSetup`), built where the
backend computes: in the driver's process for the local engine, on client worker 0 for the Ray
engine (so the Ray engine's driver never builds a model, hence never imports torch)."""

from __future__ import annotations

import numpy as np
from torch import nn

from ..algorithms import MethodEnv, build_method
from ..config import RunConfig
from ..data.registry import ArraySplit, DatasetInfo, FederatedData
from ..errors import UserError
from ..models import head_parameter_names, init_model, resolve_model_name, set_memory_format
from ..participation import participation_probs
from ..state import StateLayout
from ..vectorized import check_vectorizable
from .records import RunSetup


def make_setup(
    cfg: RunConfig, data: FederatedData, parts: list[np.ndarray]
) -> tuple[RunSetup, nn.Module]:
    """The run's static inputs (data, partitions, the model's layout and w_0, p_i, the method),
    and the model instance they were built from."""
    return build_setup(cfg, data.info, data.train, data.val, parts)


def build_setup(
    cfg: RunConfig,
    info: DatasetInfo,
    train: ArraySplit,
    val: ArraySplit | None,
    parts: list[np.ndarray],
) -> tuple[RunSetup, nn.Module]:
    """:func:`make_setup` from the dataset's parts."""
    model_name = resolve_model_name(cfg.model.name, cfg.data.name)
    model = init_model(model_name, info.shape, info.num_classes, cfg.seed, cfg.model.hidden)
    set_memory_format(model, cfg.engine.channels_last)
    layout = StateLayout.from_model(model)
    if cfg.engine.vectorize:
        try:
            check_vectorizable(model)
        except ValueError as err:
            raise UserError(
                f"engine.vectorize: model {model_name!r} cannot be vectorized: "
                f"{err} — allowed: models without BatchNorm (cnn, cnn_valid), or "
                "engine.vectorize: false"
            ) from None
    if cfg.fl.participation == "adversarial":  # the law reads each client's labels
        labels = [train.y[p] for p in parts]
        probs = participation_probs(cfg, labels, info.num_classes)
    else:
        probs = participation_probs(cfg)
    env = MethodEnv.from_config(cfg, layout, head_parameter_names(model), probs)
    setup = RunSetup(
        cfg,
        info,
        train,
        tuple(parts),
        model_name,
        layout,
        layout.flatten(model),
        env.probs,
        build_method(cfg, env),
        val=val,
    )
    return setup, model
