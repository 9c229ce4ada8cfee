"""Datasets, splits and partitions (design: Keyed streams and pairing; methods: The paper's
protocol)."""

from .fetch import fetch
from .partition import class_counts, make_partition
from .registry import (
    ArraySplit,
    DatasetInfo,
    DatasetUnavailableError,
    FederatedData,
    TestSplitAccessError,
    default_root,
    load_dataset,
)

_TORCH = {"crop_flip", "to_tensor"}  # from .transforms, which imports torch


def __getattr__(name: str):
    """The batch transforms load on first use, so a process that only loads a dataset (the
    Ray engine's loader task) does not import torch."""
    if name in _TORCH:
        from . import transforms

        return getattr(transforms, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ArraySplit",
    "DatasetInfo",
    "DatasetUnavailableError",
    "FederatedData",
    "TestSplitAccessError",
    "class_counts",
    "crop_flip",
    "default_root",
    "fetch",
    "load_dataset",
    "make_partition",
    "to_tensor",
]
