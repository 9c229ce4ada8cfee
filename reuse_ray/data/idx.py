"""The MNIST family's own file format, read directly: IDX files, gzipped or not, wherever they are.

MNIST, Fashion-MNIST and EMNIST ship as four IDX files each (training and test images, training
and test labels). An IDX file is a 4-byte magic number — two zero bytes, a type code (``0x08``:
unsigned bytes) and the number of dimensions — then one big-endian uint32 per dimension, then
the values in C order. This module reads them with numpy alone (no torchvision, no torch), checks
the magic number, the shapes and the counts, and finds them in any of the layouts a user is
likely to have:

- torchvision's layout under the data root: ``ROOT/FashionMNIST/raw/train-images-idx3-ubyte``;
- the plain files, in a folder of the dataset's name below the data root or in the root itself
  (``ROOT/fashion-mnist/train-images-idx3-ubyte.gz``, ``ROOT/train-images-idx3-ubyte.gz``);
- the copy a system package installed (Debian's ``dataset-fashion-mnist`` puts the four
  gzipped files under ``/usr/share/datasets/fashion-mnist/``).

Each location is taken only when it holds all four files; the first such location wins, the data
root before the system copy. A file that is truncated, not gzip where its name says so, or not
an IDX file of the expected kind is one line naming it (:class:`IdxFormatError`).
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import UserError

IDX_UBYTE = 0x08


class IdxFormatError(UserError):
    """An IDX file that cannot be what its name says: truncated, foreign, or of the wrong shape."""


@dataclass(frozen=True)
class IdxDataset:
    """Where one dataset's four files are called what, and what they must hold."""

    name: str
    torchvision_folder: str  # torchvision's ROOT/<folder>/raw
    prefix: str  # EMNIST's files carry their split's name first: emnist-balanced-train-…
    folders: tuple[str, ...]  # plain folders below the data root, tried in order
    system_dirs: tuple[str, ...]  # copies a system package installs
    image_shape: tuple[int, int] = (28, 28)
    num_classes: int = 10
    # the counts of the published files; files placed by hand may hold fewer (a subset)
    counts: tuple[int, int] | None = None
    system_package: str | None = None  # Debian's package that installs the files

    def file_names(self, split: str) -> tuple[str, str]:
        """(images, labels) base names of the ``train`` or ``test`` split, without ``.gz``."""
        if self.prefix:
            return (
                f"{self.prefix}-{split}-images-idx3-ubyte",
                f"{self.prefix}-{split}-labels-idx1-ubyte",
            )
        tag = "train" if split == "train" else "t10k"
        return f"{tag}-images-idx3-ubyte", f"{tag}-labels-idx1-ubyte"


IDX_DATASETS: dict[str, IdxDataset] = {
    "mnist": IdxDataset("mnist", "MNIST", "", ("mnist",), (), counts=(60_000, 10_000)),
    "fashionmnist": IdxDataset(
        "fashionmnist",
        "FashionMNIST",
        "",
        ("fashion-mnist", "fashionmnist", "FashionMNIST"),
        ("/usr/share/datasets/fashion-mnist",),
        counts=(60_000, 10_000),
        system_package="dataset-fashion-mnist",
    ),
    "emnist_balanced": IdxDataset(
        "emnist_balanced",
        "EMNIST",
        "emnist-balanced",
        ("emnist", "EMNIST"),
        (),
        num_classes=47,
        counts=(112_800, 18_800),
    ),
}


def _file_in(folder: Path, base: str) -> Path | None:
    for name in (base, base + ".gz"):
        p = folder / name
        if p.is_file():
            return p
    return None


def candidate_folders(spec: IdxDataset, root: Path) -> list[Path]:
    """Every folder searched for ``spec``'s files, in order: the data root's layouts, then the
    system copies."""
    out = [root / spec.torchvision_folder / "raw"]
    out += [root / f for f in spec.folders]
    out.append(root)
    out += [Path(d) for d in spec.system_dirs]
    return out


def locate(spec: IdxDataset, root: Path) -> Path | None:
    """The first folder that holds all four of ``spec``'s files (each plain or gzipped)."""
    bases = spec.file_names("train") + spec.file_names("test")
    for folder in candidate_folders(spec, root):
        if all(_file_in(folder, b) is not None for b in bases):
            return folder
    return None


def _read_bytes(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as err:  # BadGzipFile is an OSError
        why = "it ends early" if isinstance(err, EOFError) else (str(err) or type(err).__name__)
        raise IdxFormatError(
            f"{path}: cannot be read ({why}) — replace it with the dataset's original file"
        ) from None


def read_idx(path: Path, ndim: int) -> np.ndarray:
    """An IDX file of unsigned bytes with ``ndim`` dimensions, as a uint8 array.

    The magic number, the number of dimensions and the payload's length are checked; anything
    else is an :class:`IdxFormatError` naming the file."""
    data = _read_bytes(path)
    if len(data) < 4:
        raise IdxFormatError(f"{path}: {len(data)} bytes, too short for an IDX file")
    zero, kind, dims = int.from_bytes(data[:2], "big"), data[2], data[3]
    if zero != 0 or kind != IDX_UBYTE or dims != ndim:
        raise IdxFormatError(
            f"{path}: magic number 0x{int.from_bytes(data[:4], 'big'):08x}, expected "
            f"0x{(IDX_UBYTE << 8) | ndim:08x} (an IDX file of unsigned bytes with {ndim} "
            "dimension" + ("s" if ndim > 1 else "") + ") — not the file its name says"
        )
    header = 4 + 4 * ndim
    if len(data) < header:
        raise IdxFormatError(f"{path}: the header ends early ({len(data)} bytes)")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    need = int(np.prod(shape, dtype=np.int64))
    have = len(data) - header
    if have != need:
        raise IdxFormatError(
            f"{path}: the header says {shape} ({need} values) but the file "
            f"holds {have} — truncated or not the original file"
        )
    # a copy: frombuffer's view of the bytes is read-only, and torch warns on such arrays
    return np.frombuffer(data, dtype=np.uint8, count=need, offset=header).reshape(shape).copy()


_DECODED: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}  # this process's last few splits


def read_split(spec: IdxDataset, folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 1, H, W) uint8, labels (N,) int64) of one split from ``folder``.

    Images and labels must agree in number, images must be ``spec.image_shape``, labels lie in
    ``[0, num_classes)``. EMNIST's images are stored transposed and come back upright. A process
    that reads the same unchanged files again (a trial process serving trial after trial) gets
    a fresh copy of what it decoded before (keyed by path, size and modification time)."""
    img_name, lab_name = spec.file_names(split)
    img_path, lab_path = _file_in(folder, img_name), _file_in(folder, lab_name)
    if img_path is None or lab_path is None:
        missing = img_name if img_path is None else lab_name
        raise IdxFormatError(f"{folder / missing}(.gz): missing")
    key = (
        spec.name,
        *((str(q), q.stat().st_size, q.stat().st_mtime_ns) for q in (img_path, lab_path)),
    )
    if key not in _DECODED:
        if len(_DECODED) >= 4:
            _DECODED.pop(next(iter(_DECODED)))
        _DECODED[key] = _decode(spec, img_path, lab_path)
    x, y = _DECODED[key]
    return x.copy(), y.copy()


def _decode(spec: IdxDataset, img_path: Path, lab_path: Path) -> tuple[np.ndarray, np.ndarray]:
    x = read_idx(img_path, 3)
    y = read_idx(lab_path, 1)
    if x.shape[1:] != spec.image_shape:
        raise IdxFormatError(
            f"{img_path}: images of {x.shape[1]}×{x.shape[2]} pixels, "
            f"{spec.name} has {spec.image_shape[0]}×{spec.image_shape[1]}"
        )
    if len(x) != len(y):
        raise IdxFormatError(
            f"{lab_path}: {len(y)} labels for the {len(x)} images of "
            f"{img_path.name} — the two files are not a pair"
        )
    if len(y) and int(y.max()) >= spec.num_classes:
        raise IdxFormatError(
            f"{lab_path}: label {int(y.max())} — {spec.name} has classes 0 to "
            f"{spec.num_classes - 1}"
        )
    if spec.name == "emnist_balanced":
        x = x.transpose(0, 2, 1)
    return np.ascontiguousarray(x[:, None, :, :]), y.astype(np.int64)


def verify(spec: IdxDataset, folder: Path) -> dict[str, int]:
    """Read both splits in ``folder`` the way a run will (magic numbers, dimensions, lengths,
    images and labels paired, labels in range); :class:`IdxFormatError` names a bad file.
    Returns the number of images per split."""
    return {split: len(read_split(spec, folder, split)[1]) for split in ("train", "test")}


def where_to_get(spec: IdxDataset, root: Path) -> str:
    """What a user without internet can do to make ``spec``'s files visible."""
    files = ", ".join(b + ".gz" for b in spec.file_names("train") + spec.file_names("test"))
    ways = []
    if spec.system_package:
        where = f"; it puts the files in {spec.system_dirs[0]}" if spec.system_dirs else ""
        ways.append(
            f"install Debian's package {spec.system_package} (`apt-get install "
            f"{spec.system_package}`{where})"
        )
    ways.append(
        f"copy the four files ({files}, gzipped or not) into {root / spec.folders[0]} "
        f"or give their folder with --root / data.root"
    )
    return "; or ".join(ways)
