"""``reuse-ray fetch``: where a dataset's files are, or a download into the data root where
internet is available (guide: Data)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from . import idx
from .registry import (
    _TV_INFO,
    DatasetUnavailableError,
    _idx_folder,
    _medmnist_arrays,
    _tv_arrays,
    default_root,
)

FETCHABLE = ("mnist", "fashionmnist", "emnist_balanced", "cifar10", "cifar100", "pathmnist")
MEDMNIST_SIZES = (28, 64, 128, 224)


def _check_folder(root: Path) -> None:
    """Refuse a data root that cannot be a folder: a path through a file."""
    for parent in (root, *root.parents):
        if parent.exists():
            if not parent.is_dir():
                raise UserError(
                    f"fetch --root: {str(root)!r} cannot be a folder — "
                    f"{str(parent)!r} is a file; give a folder"
                )
            return


def fetch(name: str, root: str | None, image_size: int = 28) -> Path:
    """Download a dataset's files into the data root (needs internet) and return the folder that
    holds them; a dataset already on this machine (the data root, or for Fashion-MNIST Debian's
    ``dataset-fashion-mnist``) is only located."""
    if name in ("digits", "synthetic"):
        return default_root(root, "fetch --root")  # embedded or generated: nothing to download
    if name not in FETCHABLE:
        raise UserError(f"fetch: unknown dataset {name!r} — allowed: {', '.join(FETCHABLE)}")
    if name == "pathmnist" and image_size not in MEDMNIST_SIZES:
        raise UserError(
            f"fetch --image-size: {image_size} — allowed: " + ", ".join(map(str, MEDMNIST_SIZES))
        )
    r = default_root(root, "fetch --root")
    if name in idx.IDX_DATASETS:
        spec = idx.IDX_DATASETS[name]
        found = idx.locate(spec, r)
        if found is not None:  # already here (the data root, or a system package's copy),
            idx.verify(spec, found)  # and whole: read as a run will read it
            return found
    _check_folder(r)
    try:
        r.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(
            f"fetch --root: cannot create {str(r)!r} ({err.strerror or err}) — "
            "give a writable folder"
        ) from None
    if name in idx.IDX_DATASETS:
        try:
            return _idx_folder(name, r, download=True)
        except DatasetUnavailableError as err:
            raise DatasetUnavailableError(
                f"{err} — without internet: {idx.where_to_get(idx.IDX_DATASETS[name], r)}"
            ) from None
    if name in _TV_INFO:
        _tv_arrays(name, r, True, True)
        _tv_arrays(name, r, False, True)
    elif name == "pathmnist":
        for split in ("train", "val", "test"):
            _medmnist_arrays(r, split, image_size, True)
    return r
