"""The IDX reader: files found in every layout, bad files named in one line, fetch offline."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import tiny_images, write_idx, write_mnist_like

from reuse_ray.config import DataConfig
from reuse_ray.data import DatasetUnavailableError, fetch, idx, load_dataset
from reuse_ray.data.idx import IdxFormatError, read_idx

FMNIST = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def write_plain(folder, n_train=30, n_test=10, compress=True, classes=10):
    """The four files as the MNIST family distributes them, side by side in ``folder``."""
    out = {}
    for tag, n, seed in (("train", n_train, 0), ("t10k", n_test, 1)):
        x, y = tiny_images(n, (28, 28), classes, seed)
        write_idx(folder / f"{tag}-images-idx3-ubyte", x, compress=compress)
        write_idx(folder / f"{tag}-labels-idx1-ubyte", y.astype(np.uint8), compress=compress)
        out[tag] = (x, y)
    return out


def test_read_idx_hand_made_bytes(tmp_path):
    """An oracle written byte by byte: magic 0x00000803, dims 2×2×3, then the values."""
    payload = bytes(range(12))
    raw = b"\x00\x00\x08\x03" + (2).to_bytes(4, "big") + (2).to_bytes(4, "big")
    raw += (3).to_bytes(4, "big") + payload
    (tmp_path / "a").write_bytes(raw)
    got = read_idx(tmp_path / "a", 3)
    assert got.shape == (2, 2, 3) and got.dtype == np.uint8
    assert got.ravel().tolist() == list(range(12))
    with gzip.open(tmp_path / "a.gz", "wb") as f:
        f.write(raw)
    assert np.array_equal(read_idx(tmp_path / "a.gz", 3), got)


@pytest.mark.parametrize("layout", ["root", "named", "torchvision", "system"])
@pytest.mark.parametrize("compress", [True, False])
def test_fashionmnist_found_in_every_layout(tmp_path, monkeypatch, layout, compress):
    root = tmp_path / "data"
    folder = {
        "root": root,
        "named": root / "fashion-mnist",
        "torchvision": root / "FashionMNIST" / "raw",
        "system": tmp_path / "usr-share" / "fashion-mnist",
    }[layout]
    arrays = write_plain(folder, compress=compress)
    if layout == "system":
        spec = idx.IDX_DATASETS["fashionmnist"]
        monkeypatch.setitem(
            idx.IDX_DATASETS,
            "fashionmnist",
            spec.__class__(**{**spec.__dict__, "system_dirs": (str(folder),)}),
        )
    d = load_dataset(DataConfig(name="fashionmnist", root=str(root), val_fraction=0.2))
    assert d.source == str(folder)
    assert len(d.train) + len(d.val) == 30 and d.train.x.shape[1:] == (1, 28, 28)
    test = d.test()
    assert np.array_equal(test.x[:, 0], arrays["t10k"][0])
    assert np.array_equal(test.y, arrays["t10k"][1])


def test_the_data_root_wins_over_the_system_copy(tmp_path, monkeypatch):
    mine, system = tmp_path / "mine", tmp_path / "system"
    write_plain(mine, n_train=20)
    write_plain(system, n_train=40)
    spec = idx.IDX_DATASETS["fashionmnist"]
    monkeypatch.setitem(
        idx.IDX_DATASETS,
        "fashionmnist",
        spec.__class__(**{**spec.__dict__, "system_dirs": (str(system),)}),
    )
    d = load_dataset(DataConfig(name="fashionmnist", root=str(mine), val_fraction=0.5))
    assert d.source == str(mine) and len(d.train) + len(d.val) == 20


def test_a_location_needs_all_four_files(tmp_path):
    root = tmp_path / "data"
    write_plain(root)
    (root / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DatasetUnavailableError, match="dataset-fashion-mnist"):
        load_dataset(DataConfig(name="fashionmnist", root=str(root)))


def test_mnist_and_emnist_read_from_the_plain_layout(tmp_path):
    write_plain(tmp_path / "mnist")
    d = load_dataset(DataConfig(name="mnist", root=str(tmp_path), val_fraction=0.5))
    assert d.info.name == "mnist" and d.source == str(tmp_path / "mnist")
    # EMNIST's files carry the split's name and are stored transposed
    arrays = write_mnist_like(
        tmp_path, "EMNIST", n_train=47, n_test=47, classes=47, prefix="emnist-balanced"
    )
    plain = tmp_path / "emnist"
    shutil.copytree(tmp_path / "EMNIST" / "raw", plain)
    shutil.rmtree(tmp_path / "EMNIST")
    e = load_dataset(DataConfig(name="emnist_balanced", root=str(tmp_path), val_fraction=0.5))
    assert e.source == str(plain)
    assert np.array_equal(e.test().x[:, 0], arrays["test_x"].transpose(0, 2, 1))


def _corrupt(folder, name, how):
    path = folder / (name + ".gz")
    data = gzip.decompress(path.read_bytes())
    if how == "truncated gzip":
        path.write_bytes(path.read_bytes()[:-30])
    elif how == "not gzip":
        path.write_bytes(data)  # plain bytes under a .gz name
    elif how == "short payload":
        path.write_bytes(gzip.compress(data[:-5]))
    elif how == "foreign magic":
        path.write_bytes(gzip.compress(b"\x00\x00\x0d\x03" + data[4:]))
    elif how == "labels for images":
        other = folder / "train-labels-idx1-ubyte.gz"
        path.write_bytes(other.read_bytes())
    return path


@pytest.mark.parametrize(
    ("name", "how", "says"),
    [
        ("train-images-idx3-ubyte", "truncated gzip", "ends early"),
        ("train-images-idx3-ubyte", "not gzip", "cannot be read"),
        ("t10k-images-idx3-ubyte", "short payload", "truncated"),
        ("train-labels-idx1-ubyte", "foreign magic", "magic number 0x00000d03"),
        ("train-images-idx3-ubyte", "labels for images", "expected 0x00000803"),
    ],
)
def test_a_bad_file_is_one_line_naming_it(tmp_path, name, how, says):
    root = tmp_path / "data"
    write_plain(root)
    path = _corrupt(root, name, how)
    with pytest.raises(IdxFormatError) as exc:
        d = load_dataset(DataConfig(name="fashionmnist", root=str(root)))
        d.test()
    msg = str(exc.value)
    assert str(path) in msg and says in msg and "\n" not in msg


def test_images_and_labels_must_pair(tmp_path):
    root = tmp_path / "data"
    write_plain(root)
    x, _ = tiny_images(31, (28, 28), 10, 0)
    write_idx(root / "train-images-idx3-ubyte", x, compress=True)
    with pytest.raises(IdxFormatError, match="30 labels for the 31 images"):
        load_dataset(DataConfig(name="fashionmnist", root=str(root)))


def test_fetch_offline_says_where_the_files_come_from(tmp_path, monkeypatch):
    from reuse_ray.data import registry

    def offline(name, root, train, download):  # what torchvision's download does offline
        raise registry._unavailable(name, root, OSError("no route to host"), download)

    monkeypatch.setattr(registry, "_tv_arrays", offline)
    with pytest.raises(DatasetUnavailableError) as exc:
        fetch("fashionmnist", str(tmp_path / "r"), 28)
    msg = str(exc.value)
    assert "apt-get install dataset-fashion-mnist" in msg and "--root" in msg
    assert "train-images-idx3-ubyte.gz" in msg


def test_fetch_finds_files_already_here(tmp_path):
    write_plain(tmp_path / "fashion-mnist")
    assert fetch("fashionmnist", str(tmp_path), 28) == tmp_path / "fashion-mnist"


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "reuse_ray", *args], capture_output=True, text=True, timeout=120
    )


def test_fetch_under_a_file_and_fetch_of_embedded_data(tmp_path):
    (tmp_path / "f").write_text("x")
    out = _cli("fetch", "digits", "--root", str(tmp_path / "f" / "d"))
    assert out.returncode == 0 and "nothing to fetch" in out.stdout
    assert str(tmp_path / "f") not in out.stdout
    out = _cli("fetch", "mnist", "--root", str(tmp_path / "f" / "d"))
    assert out.returncode == 2 and "is a file" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_split_read_again_is_a_fresh_copy_and_a_changed_file_is_read_anew(tmp_path):
    folder = tmp_path / "fm"
    write_plain(folder, n_train=30)
    spec = idx.IDX_DATASETS["fashionmnist"]
    x, y = idx.read_split(spec, folder, "train")
    x[:] = 0  # the caller's own copy: the next read is untouched
    again, _ = idx.read_split(spec, folder, "train")
    assert again.any() and not np.shares_memory(x, again)
    write_plain(folder, n_train=40)  # replaced files: decoded again, not served from before
    assert len(idx.read_split(spec, folder, "train")[0]) == 40
    _corrupt(folder, "train-labels-idx1-ubyte", "short payload")
    with pytest.raises(IdxFormatError, match="train-labels"):
        idx.read_split(spec, folder, "train")
