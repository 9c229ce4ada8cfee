"""Dataset registry: train / validation / test arrays for every task of the paper's protocol
(methods: The paper's protocol).

Each loader returns :class:`FederatedData`: the training and validation arrays, and the test
split behind :meth:`FederatedData.test`, which loads it lazily. The engine calls it once, at the
final round fixed in advance (design: Validation-only search); a split can forbid it outright
(:meth:`forbid_test`)
so a search stage provably never reads it.

Images are kept in their stored dtype (uint8 for the real datasets) and normalised per batch by
:func:`to_tensor`, so a worker never holds a float copy of the whole training set.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import UserError
from ..rng import Purpose, generator
from . import idx

DOWNLOAD_HINT = (
    "run `reuse-ray fetch {name} --root {root} --download` on a machine with internet access "
    "and copy the folder here, or set data.download=true where downloads are allowed"
)


class DatasetUnavailableError(UserError):
    """A dataset's files are missing under the data root and downloading is not allowed."""


class TestSplitAccessError(RuntimeError):
    """The test split was read where it is forbidden (a search stage)."""

    __test__ = False  # not a pytest class


@dataclass(frozen=True)
class ArraySplit:
    """Images (N, C, H, W) in their stored dtype and int64 labels (N,)."""

    x: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


@dataclass(frozen=True)
class DatasetInfo:
    """What a model and the batch transform need to know about a dataset."""

    name: str
    num_classes: int
    shape: tuple[int, int, int]
    scale: float  # stored value -> [0, 1]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    augment: str  # default augmentation: "crop_flip" or "none"


@dataclass
class FederatedData:
    """Train/val arrays and a lazily loaded test split."""

    info: DatasetInfo
    train: ArraySplit
    val: ArraySplit
    _load_test: Callable[[], ArraySplit] = field(repr=False)
    _test_forbidden: bool = False
    test_reads: int = 0
    source: str | None = None  # the folder the files were read from (files on disk only)

    def forbid_test(self) -> None:
        """Make any later :meth:`test` call raise: used by the validation-only search stage."""
        self._test_forbidden = True

    def test(self) -> ArraySplit:
        """Load the test split. The engine calls this once, at the final round."""
        if self._test_forbidden:
            raise TestSplitAccessError(
                f"the test split of {self.info.name!r} was read during a validation-only stage"
            )
        self.test_reads += 1
        return self._load_test()


def default_root(root: str | None, field: str = "data.root") -> Path:
    """Data root: the config field (``field`` names it in errors), else $REUSE_RAY_DATA, else
    ~/.cache/reuse_ray/data."""
    from ..paths import user_path

    if root:
        return user_path(root, field)
    env = os.environ.get("REUSE_RAY_DATA")
    if env:
        return user_path(env, "$REUSE_RAY_DATA")
    return Path.home() / ".cache" / "reuse_ray" / "data"


def stratified_split(
    y: np.ndarray, fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Split indices into (kept, carved) with ``fraction`` of every class carved out."""
    keep: list[np.ndarray] = []
    carve: list[np.ndarray] = []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        n = int(round(fraction * len(idx)))
        if len(idx) >= 2:
            n = min(max(n, 1), len(idx) - 1)
        else:
            n = 0
        carve.append(idx[:n])
        keep.append(idx[n:])
    return np.sort(np.concatenate(keep)), np.sort(np.concatenate(carve))


def _carve_val(
    x: np.ndarray, y: np.ndarray, fraction: float, split_seed: int
) -> tuple[ArraySplit, ArraySplit]:
    keep, val = stratified_split(y, fraction, generator(split_seed, Purpose.DATA_SPLIT, 2))
    return ArraySplit(x[keep], y[keep]), ArraySplit(x[val], y[val])


def _unavailable(
    name: str, root: Path, err: Exception | None = None, download: bool = False
) -> DatasetUnavailableError:
    if download:  # `fetch` or data.download=true: the download itself failed
        msg = (
            f"downloading dataset {name!r} into {str(root)!r} failed — check this machine's "
            "network access, or copy the dataset's files into that folder"
        )
    else:
        msg = f"dataset {name!r} is not available under data root {str(root)!r}; " + (
            DOWNLOAD_HINT.format(name=name, root=root)
        )
    if err is not None:
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        msg += f" (loader said: {lines[0] if lines else type(err).__name__})"
    return DatasetUnavailableError(msg)


# --------------------------------------------------------------------------- embedded / synthetic


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits (1,797 images of 8×8 values 0..16, their labels), read from the
    CSV file scikit-learn ships, as ``sklearn.datasets.load_digits`` reads it — without
    importing scikit-learn, whose import (SciPy's, about 1.6 s) every run, trial and worker on
    the embedded data paid. Where the file is not where it ships, that function."""
    import gzip
    import importlib.util

    package = importlib.util.find_spec("sklearn")
    where = package.submodule_search_locations if package else None
    path = Path(where[0], "datasets", "data", "digits.csv.gz") if where else None
    if path is None or not path.is_file():
        from sklearn.datasets import load_digits

        d = load_digits()
        return d.images, d.target
    with gzip.open(path, mode="rt", encoding="utf-8") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def _digits(cfg) -> FederatedData:
    images, target = digits_arrays()
    x = images.astype(np.uint8)[:, None, :, :]  # values 0..16
    y = target.astype(np.int64)
    rest, test = stratified_split(y, 0.2, generator(cfg.split_seed, Purpose.DATA_SPLIT, 1))
    train, val = _carve_val(x[rest], y[rest], cfg.val_fraction, cfg.split_seed)
    info = DatasetInfo("digits", 10, (1, 8, 8), 1 / 16, (0.30,), (0.40,), "none")
    xt, yt = x[test], y[test]
    return FederatedData(info, train, val, lambda: ArraySplit(xt, yt))


SYNTHETIC_CHUNK = 1 << 16  # samples drawn at a time: the float64 draws never exceed ~chunk·size


def _synthetic(cfg) -> FederatedData:
    """Class templates plus Gaussian noise, x = t_y + σ·ε, in float32.

    The labels come first, so the splits (which read labels only) are known before any image
    exists; the noise is then drawn in chunks from the same stream (one draw of n values and
    consecutive draws adding up to n give the same values) and each chunk's images go straight
    to their rows of the train, validation and test arrays. Building n samples therefore takes
    the three splits and one chunk of float64 draws — not a whole-dataset array beside its
    splits. The values are those of drawing all at once and indexing the splits from it."""
    rng = generator(cfg.split_seed, Purpose.SYNTHETIC_DATA)
    shape = tuple(cfg.synthetic_shape)
    k, n = cfg.synthetic_classes, cfg.synthetic_samples
    templates = rng.standard_normal((k, *shape)).astype(np.float32)
    y = rng.integers(0, k, size=n).astype(np.int64)
    rest, test = stratified_split(y, 0.2, generator(cfg.split_seed, Purpose.DATA_SPLIT, 1))
    keep, val = stratified_split(
        y[rest], cfg.val_fraction, generator(cfg.split_seed, Purpose.DATA_SPLIT, 2)
    )
    # each split's source rows, increasing (stratified_split sorts), and its images
    sources = (rest[keep], rest[val], test)
    images = [np.empty((len(src), *shape), dtype=np.float32) for src in sources]
    sigma = np.float32(cfg.synthetic_noise)
    for start in range(0, n, SYNTHETIC_CHUNK):
        stop = min(n, start + SYNTHETIC_CHUNK)
        part = rng.standard_normal((stop - start, *shape)).astype(np.float32)  # float64 draws
        part *= sigma
        part += templates[y[start:stop]]  # t_y + σ·ε, as float32 arithmetic
        for src, out in zip(sources, images, strict=True):
            lo, hi = np.searchsorted(src, [start, stop])
            out[lo:hi] = part[src[lo:hi] - start]
    train = ArraySplit(images[0], y[sources[0]])
    held = ArraySplit(images[1], y[sources[1]])
    xt, yt = images[2], y[test]
    info = DatasetInfo("synthetic", k, shape, 1.0, (0.0,) * shape[0], (1.0,) * shape[0], "none")  # type: ignore[arg-type]
    return FederatedData(info, train, held, lambda: ArraySplit(xt, yt))


# --------------------------------------------------------------------------- torchvision


def _tv_arrays(name: str, root: Path, train: bool, download: bool) -> ArraySplit:
    import torchvision.datasets as tvd

    try:
        if name == "mnist":
            ds = tvd.MNIST(str(root), train=train, download=download)
        elif name == "fashionmnist":
            ds = tvd.FashionMNIST(str(root), train=train, download=download)
        elif name == "emnist_balanced":
            ds = tvd.EMNIST(str(root), split="balanced", train=train, download=download)
        elif name == "cifar10":
            ds = tvd.CIFAR10(str(root), train=train, download=download)
        elif name == "cifar100":
            ds = tvd.CIFAR100(str(root), train=train, download=download)
        else:  # pragma: no cover - guarded by the registry
            raise KeyError(name)
    except (RuntimeError, OSError) as err:
        raise _unavailable(name, root, err, download) from None
    if name.startswith("cifar"):
        x = np.ascontiguousarray(np.asarray(ds.data, dtype=np.uint8).transpose(0, 3, 1, 2))
        y = np.asarray(ds.targets, dtype=np.int64)
    else:
        x = ds.data.numpy().astype(np.uint8)
        if name == "emnist_balanced":
            x = np.ascontiguousarray(x.transpose(0, 2, 1))  # EMNIST is stored transposed
        x = x[:, None, :, :]
        y = ds.targets.numpy().astype(np.int64)
    return ArraySplit(x, y)


_TV_INFO = {
    "mnist": DatasetInfo("mnist", 10, (1, 28, 28), 1 / 255, (0.1307,), (0.3081,), "none"),
    "fashionmnist": DatasetInfo(
        "fashionmnist", 10, (1, 28, 28), 1 / 255, (0.2860,), (0.3530,), "none"
    ),
    "emnist_balanced": DatasetInfo(
        "emnist_balanced", 47, (1, 28, 28), 1 / 255, (0.1751,), (0.3332,), "none"
    ),
    "cifar10": DatasetInfo(
        "cifar10",
        10,
        (3, 32, 32),
        1 / 255,
        (0.4914, 0.4822, 0.4465),
        (0.2470, 0.2435, 0.2616),
        "crop_flip",
    ),
    "cifar100": DatasetInfo(
        "cifar100",
        100,
        (3, 32, 32),
        1 / 255,
        (0.5071, 0.4865, 0.4409),
        (0.2673, 0.2564, 0.2762),
        "crop_flip",
    ),
}


def _idx_folder(name: str, root: Path, download: bool) -> Path:
    """The folder holding ``name``'s four IDX files: found where they are (see
    :mod:`reuse_ray.data.idx`), else downloaded by torchvision when downloads are allowed."""
    spec = idx.IDX_DATASETS[name]
    folder = idx.locate(spec, root)
    if folder is None and download:
        _tv_arrays(name, root, True, True)  # torchvision's download, into ROOT/<Class>/raw
        _tv_arrays(name, root, False, True)
        folder = idx.locate(spec, root)
    if folder is None:
        where = f"data root {str(root)!r}" + "".join(f" nor in {d}" for d in spec.system_dirs)
        raise DatasetUnavailableError(
            f"dataset {name!r} is not available under {where}; {idx.where_to_get(spec, root)}; "
            f"or " + DOWNLOAD_HINT.format(name=name, root=root)
        )
    return folder


def _idx(cfg) -> FederatedData:
    """MNIST, Fashion-MNIST and EMNIST from their IDX files, read directly (no torchvision)."""
    folder = _idx_folder(cfg.name, default_root(cfg.root), cfg.download)
    spec = idx.IDX_DATASETS[cfg.name]
    x, y = idx.read_split(spec, folder, "train")
    train, val = _carve_val(x, y, cfg.val_fraction, cfg.split_seed)

    def test() -> ArraySplit:
        return ArraySplit(*idx.read_split(spec, folder, "test"))

    return FederatedData(_TV_INFO[cfg.name], train, val, test, source=str(folder))


def _torchvision(cfg) -> FederatedData:
    root = default_root(cfg.root)
    full = _tv_arrays(cfg.name, root, train=True, download=cfg.download)
    train, val = _carve_val(full.x, full.y, cfg.val_fraction, cfg.split_seed)
    name, download = cfg.name, cfg.download
    return FederatedData(
        _TV_INFO[cfg.name], train, val, lambda: _tv_arrays(name, root, False, download)
    )


# --------------------------------------------------------------------------- medmnist


def _medmnist_arrays(root: Path, split: str, size: int, download: bool) -> ArraySplit:
    import medmnist

    kwargs = {"split": split, "root": str(root), "download": download}
    if size != 28:
        kwargs["size"] = size
    try:
        ds = medmnist.PathMNIST(**kwargs)
    except (RuntimeError, OSError, FileNotFoundError) as err:
        raise _unavailable("pathmnist", root, err, download) from None
    imgs = np.asarray(ds.imgs, dtype=np.uint8)
    if imgs.ndim == 3:
        imgs = imgs[:, :, :, None]
    x = np.ascontiguousarray(imgs.transpose(0, 3, 1, 2))
    y = np.asarray(ds.labels, dtype=np.int64).reshape(-1)
    return ArraySplit(x, y)


def _pathmnist(cfg) -> FederatedData:
    root = default_root(cfg.root)
    root.mkdir(parents=True, exist_ok=True) if cfg.download else None
    train = _medmnist_arrays(root, "train", cfg.image_size, cfg.download)
    val = _medmnist_arrays(root, "val", cfg.image_size, cfg.download)  # its own val split
    s = cfg.image_size
    info = DatasetInfo(
        "pathmnist",
        9,
        (3, s, s),
        1 / 255,
        (0.7405, 0.5330, 0.7058),
        (0.1237, 0.1768, 0.1244),
        "none",
    )
    size, download = cfg.image_size, cfg.download
    return FederatedData(info, train, val, lambda: _medmnist_arrays(root, "test", size, download))


LOADERS: dict[str, Callable] = {
    "digits": _digits,
    "synthetic": _synthetic,
    "mnist": _idx,
    "fashionmnist": _idx,
    "emnist_balanced": _idx,
    "cifar10": _torchvision,
    "cifar100": _torchvision,
    "pathmnist": _pathmnist,
}


def load_dataset(cfg) -> FederatedData:
    """Load a dataset by ``cfg.name`` (a :class:`reuse_ray.config.DataConfig`)."""
    try:
        loader = LOADERS[cfg.name]
    except KeyError:
        raise UserError(
            f"data.name: unknown dataset {cfg.name!r}; allowed: {', '.join(LOADERS)}"
        ) from None
    data = loader(cfg)
    if cfg.train_subset:
        data.train = _subset(data.train, cfg.train_subset, cfg.split_seed, cfg.name)
    if cfg.test_subset:
        whole = data._load_test
        data._load_test = lambda: _subset(
            whole(), cfg.test_subset, cfg.split_seed, cfg.name, split="test"
        )
    return data


def _subset(
    part: ArraySplit, n: int, split_seed: int, name: str, split: str = "train"
) -> ArraySplit:
    """A fixed stratified subset of about ``n`` images of the training (or test) split: every
    class in proportion (rounded per class), drawn from the ``split_seed`` stream, in row
    order. The test split's subset is drawn when the split is read, at round T."""
    if n >= len(part):
        after = " (after the validation carve-out)" if split == "train" else ""
        raise UserError(
            f"data.{split}_subset: {n} is not below the {len(part)} "
            f"{'training' if split == 'train' else 'test'} images of {name}{after}; "
            "allowed: 0 (all) or fewer"
        )
    stream = 3 if split == "train" else 4
    _, keep = stratified_split(
        part.y, n / len(part), generator(split_seed, Purpose.DATA_SPLIT, stream)
    )
    return ArraySplit(part.x[keep], part.y[keep])


def load_apart(cfg) -> tuple[ArraySplit, FederatedData]:
    """:func:`load_dataset` as (the training split, the rest with ``train=None``): the Ray
    engine's loader task returns them as two objects, so the workers' setup can name the
    training split alone. It lives here, in a module without torch, because a task's function
    is imported by module in the process that runs it."""
    data = load_dataset(cfg)
    train, data.train = data.train, None
    return train, data
