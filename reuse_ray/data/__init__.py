"""Datasets, splits and partitions (ALGORITHMS.md §1.6, §4.1)."""

from .partition import class_counts, make_partition
from .registry import (
    ArraySplit,
    DatasetInfo,
    DatasetUnavailableError,
    FederatedData,
    TestSplitAccessError,
    default_root,
    fetch,
    load_dataset,
)
from .transforms import crop_flip, to_tensor

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
