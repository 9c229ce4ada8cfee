"""``reuse-ray fetch``: where a dataset's files are (read whole, as a run reads them), or with
``--download`` a download into the data root where internet is available (guide: Data)."""

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


# where the files of the datasets read through torchvision or medmnist must lie, below the
# data root (what a user without internet copies there)
LAYOUTS = {
    "cifar10": "cifar-10-batches-py/ holding data_batch_1 … data_batch_5, test_batch and "
    "batches.meta (the python version of the CIFAR-10 archive, cifar-10-python.tar.gz, unpacked)",
    "cifar100": "cifar-100-python/ holding train, test and meta (the python version of the "
    "CIFAR-100 archive, cifar-100-python.tar.gz, unpacked)",
    "pathmnist": "pathmnist.npz (28×28) or pathmnist_{size}.npz (64, 128, 224): MedMNIST v2's "
    "file, as medmnist downloads it",
}


def _present(name: str, r: Path, image_size: int) -> bool:
    """Whether the torchvision/medmnist dataset's files lie in the data root (read as a run
    reads them)."""
    try:
        if name in _TV_INFO:
            _tv_arrays(name, r, True, False)
            _tv_arrays(name, r, False, False)
        else:
            for split in ("train", "val", "test"):
                _medmnist_arrays(r, split, image_size, False)
    except DatasetUnavailableError:
        return False
    return True


def fetch(name: str, root: str | None, image_size: int = 28, download: bool = False) -> Path:
    """The folder that holds a dataset's files, read as a run will read them; with
    ``download`` (needs internet) missing files are downloaded into the data root first.
    Without it nothing is created or fetched: a dataset not on this machine is one error that
    names its files, their layout and where they can come from."""
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
    elif r.is_dir() and _present(name, r, image_size):
        return r
    _check_folder(r)
    if not download:
        where = (
            idx.where_to_get(idx.IDX_DATASETS[name], r)
            if name in idx.IDX_DATASETS
            else f"copy {LAYOUTS[name]} into {r} (or give its folder with --root / data.root)"
        )
        raise DatasetUnavailableError(
            f"{name} is not on this machine (looked in {r}): {where}; or, where internet is "
            f"available, `reuse-ray fetch {name} --download` puts it there"
        )
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
