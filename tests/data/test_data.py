"""Datasets, splits, partitions; real torchvision and medmnist loaders on tiny real-format files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import write_cifar_like, write_mnist_like, write_pathmnist

from reuse_ray.config import DataConfig
from reuse_ray.data import (
    DatasetUnavailableError,
    TestSplitAccessError,
    class_counts,
    load_dataset,
    make_partition,
)
from reuse_ray.data.registry import stratified_split
from reuse_ray.rng import Purpose, generator


def test_digits_is_embedded_stratified_and_deterministic():
    a = load_dataset(DataConfig(name="digits", val_fraction=0.1))
    b = load_dataset(DataConfig(name="digits", val_fraction=0.1))
    assert a.info.shape == (1, 8, 8) and a.info.num_classes == 10
    assert np.array_equal(a.train.y, b.train.y) and np.array_equal(a.val.x, b.val.x)
    test = a.test()
    assert len(a.train) + len(a.val) + len(test) == 1797
    # stratified: every class appears in val at about 10 % of the train+val count
    tv = np.bincount(np.concatenate([a.train.y, a.val.y]), minlength=10)
    val = np.bincount(a.val.y, minlength=10)
    assert np.all(np.abs(val - 0.1 * tv) <= 1)
    c = load_dataset(DataConfig(name="digits", split_seed=1))
    assert not np.array_equal(a.val.y, c.val.y) or not np.array_equal(a.val.x, c.val.x)


def test_digits_are_scikit_learns_read_without_importing_it():
    """The embedded data is scikit-learn's digits, value for value, read from the file it
    ships; loading it imports neither scikit-learn nor SciPy (a second and a half of every run's
    start-up on it)."""
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    from reuse_ray.data.registry import digits_arrays

    images, target = digits_arrays()
    d = load_digits()
    assert np.array_equal(images, d.images) and images.dtype == d.images.dtype
    assert np.array_equal(target, d.target) and target.dtype == d.target.dtype
    probe = (
        "import sys\nfrom reuse_ray.config import DataConfig\nfrom reuse_ray.data import "
        "load_dataset\nload_dataset(DataConfig(name='digits'))\n"
        "print(sorted(m for m in ('sklearn', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr[-2000:]


def test_test_split_is_lazy_counted_and_can_be_forbidden():
    d = load_dataset(DataConfig(name="synthetic", synthetic_samples=200))
    assert d.test_reads == 0
    d.test()
    assert d.test_reads == 1
    d.forbid_test()
    with pytest.raises(TestSplitAccessError):
        d.test()


def test_stratified_split_fraction():
    y = np.repeat(np.arange(4), 50)
    keep, carve = stratified_split(y, 0.2, generator(0, Purpose.DATA_SPLIT))
    assert len(carve) == 40 and len(keep) == 160
    assert np.all(np.bincount(y[carve]) == 10)
    assert not set(keep) & set(carve)


def test_synthetic_any_shape():
    d = load_dataset(
        DataConfig(
            name="synthetic", synthetic_samples=300, synthetic_shape=(3, 5, 7), synthetic_classes=4
        )
    )
    assert d.train.x.shape[1:] == (3, 5, 7) and d.info.num_classes == 4
    assert set(np.unique(d.train.y)) == {0, 1, 2, 3}


@pytest.mark.parametrize("kind", ["dirichlet", "iid", "shards"])
def test_partitions_cover_disjoint_and_keyed(kind):
    y = np.repeat(np.arange(10), 60)
    parts = make_partition(y, 20, kind, seed=3, alpha=0.5, min_size=10, shards_per_client=2)
    again = make_partition(y, 20, kind, seed=3, alpha=0.5, min_size=10, shards_per_client=2)
    other = make_partition(y, 20, kind, seed=4, alpha=0.5, min_size=10, shards_per_client=2)
    allidx = np.concatenate(parts)
    assert len(allidx) == len(y) == len(np.unique(allidx))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    assert any(not np.array_equal(a, b) for a, b in zip(parts, other, strict=True))
    if kind == "dirichlet":
        assert min(len(p) for p in parts) >= 10
    counts = class_counts(parts, y, 10)
    assert counts.shape == (20, 10) and counts.sum() == len(y)
    if kind == "shards":
        assert max((row > 0).sum() for row in counts) <= 2


def test_dirichlet_min_size_guarantee_even_when_hard():
    y = np.repeat(np.arange(10), 30)
    parts = make_partition(y, 29, "dirichlet", seed=0, alpha=0.05, min_size=10)
    assert min(len(p) for p in parts) >= 10 and len(np.concatenate(parts)) == 300
    with pytest.raises(ValueError, match="min_size"):
        make_partition(y, 40, "dirichlet", seed=0, alpha=0.5, min_size=10)


def test_dirichlet_small_alpha_is_skewed():
    y = np.repeat(np.arange(10), 200)
    skewed = class_counts(make_partition(y, 10, "dirichlet", 0, alpha=0.1, min_size=1), y, 10)
    flat = class_counts(make_partition(y, 10, "dirichlet", 0, alpha=100.0, min_size=1), y, 10)
    frac = lambda c: (c.max(1) / c.sum(1)).mean()  # noqa: E731
    assert frac(skewed) > 0.5 > frac(flat)


# ----------------------------------------------------------------- real loaders, real formats


@pytest.mark.parametrize(
    ("name", "folder", "prefix", "classes"),
    [
        ("mnist", "MNIST", "", 10),
        ("fashionmnist", "FashionMNIST", "", 10),
        ("emnist_balanced", "EMNIST", "emnist-balanced", 47),
    ],
)
def test_torchvision_idx_loaders(tmp_path, name, folder, prefix, classes):
    arrays = write_mnist_like(
        tmp_path, folder, n_train=94, n_test=20, classes=classes, prefix=prefix
    )
    d = load_dataset(DataConfig(name=name, root=str(tmp_path), val_fraction=0.5))
    assert d.info.num_classes == classes and d.train.x.dtype == np.uint8
    assert len(d.train) + len(d.val) == 94
    test = d.test()
    expect = arrays["test_x"]
    if name == "emnist_balanced":
        expect = expect.transpose(0, 2, 1)
    assert np.array_equal(test.x[:, 0], expect)
    assert np.array_equal(test.y, arrays["test_y"])
    # every training image is one of the written ones, with its label
    written = {arrays["train_x"][i].tobytes(): arrays["train_y"][i] for i in range(94)}
    xs = d.train.x[:, 0] if name != "emnist_balanced" else d.train.x[:, 0].transpose(0, 2, 1)
    assert all(written[x.tobytes()] == y for x, y in zip(xs, d.train.y, strict=True))


@pytest.mark.parametrize("hundred", [False, True])
def test_torchvision_cifar_pickle_loaders(tmp_path, monkeypatch, hundred):
    import os

    import torchvision.datasets.cifar as tvc

    # tiny files cannot match the published md5 sums; everything else is the real parser
    monkeypatch.setattr(tvc, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))
    arrays = write_cifar_like(tmp_path, hundred=hundred, per_batch=60 if hundred else 12)
    d = load_dataset(DataConfig(name="cifar100" if hundred else "cifar10", root=str(tmp_path)))
    assert d.info.shape == (3, 32, 32) and d.info.augment == "crop_flip"
    test = d.test()
    assert np.array_equal(test.x, arrays["test_x"]) and np.array_equal(test.y, arrays["test_y"])
    assert len(d.train) + len(d.val) == len(arrays["train_y"])


class _Payload:
    """Unpickling this touches a marker file: proof that a pickle was loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("hundred", [False, True])
def test_a_crafted_cifar_pickle_is_refused_unread(tmp_path, hundred):
    """CIFAR's files are pickles; only the published ones (their md5 sums, checked by the
    real loader before it unpickles) are read. Crafted files in the right places: one clear
    error, and no pickle was loaded."""
    import pickle

    write_cifar_like(tmp_path, hundred=hundred)
    marker = tmp_path / "unpickled"
    folder = tmp_path / ("cifar-100-python" if hundred else "cifar-10-batches-py")
    for f in folder.iterdir():
        f.write_bytes(pickle.dumps(_Payload(marker)))
    name = "cifar100" if hundred else "cifar10"
    with pytest.raises(DatasetUnavailableError, match="corrupted"):
        load_dataset(DataConfig(name=name, root=str(tmp_path)))
    assert not marker.exists()


def test_medmnist_pathmnist_uses_its_own_val_split(tmp_path):
    arrays = write_pathmnist(tmp_path)
    d = load_dataset(DataConfig(name="pathmnist", root=str(tmp_path)))
    assert d.info.num_classes == 9 and d.info.shape == (3, 28, 28)
    assert np.array_equal(d.train.x, arrays["train_images"].transpose(0, 3, 1, 2))
    assert np.array_equal(d.val.y, arrays["val_labels"].reshape(-1))
    assert np.array_equal(d.test().y, arrays["test_labels"].reshape(-1))


@pytest.mark.parametrize(
    "name", ["mnist", "fashionmnist", "emnist_balanced", "cifar10", "cifar100", "pathmnist"]
)
def test_missing_dataset_gives_one_clear_error(tmp_path, name):
    root = tmp_path / "empty"
    root.mkdir()
    with pytest.raises(DatasetUnavailableError) as exc:
        load_dataset(DataConfig(name=name, root=str(root)))
    msg = str(exc.value)
    assert repr(name) in msg and str(root) in msg and "reuse-ray fetch" in msg


def test_data_root_from_environment(tmp_path, monkeypatch):
    write_pathmnist(tmp_path / "envroot")
    monkeypatch.setenv("REUSE_RAY_DATA", str(tmp_path / "envroot"))
    assert load_dataset(DataConfig(name="pathmnist")).info.name == "pathmnist"


def test_synthetic_data_drawn_in_chunks_equals_one_draw(monkeypatch):
    """The generator draws its noise in chunks (to bound memory at 100,000 clients); the
    values are those of one draw of every sample, split as before."""
    import numpy as np

    from reuse_ray.config import DataConfig
    from reuse_ray.configio import from_dict
    from reuse_ray.data import load_dataset, registry
    from reuse_ray.rng import Purpose, generator

    monkeypatch.setattr(registry, "SYNTHETIC_CHUNK", 1000)
    n, shape, sigma = 2500, (2, 3, 4), 0.7
    d = load_dataset(
        from_dict(
            DataConfig,
            {
                "name": "synthetic",
                "synthetic_samples": n,
                "synthetic_shape": list(shape),
                "synthetic_noise": sigma,
            },
        )
    )
    rng = generator(0, Purpose.SYNTHETIC_DATA)
    templates = rng.standard_normal((10, *shape)).astype(np.float32)
    y = rng.integers(0, 10, size=n).astype(np.int64)
    x = templates[y] + np.float32(sigma) * rng.standard_normal((n, *shape)).astype(np.float32)
    rest, test = registry.stratified_split(y, 0.2, generator(0, Purpose.DATA_SPLIT, 1))
    keep, val = registry.stratified_split(y[rest], 0.1, generator(0, Purpose.DATA_SPLIT, 2))
    assert np.array_equal(d.train.x, x[rest][keep]) and np.array_equal(d.train.y, y[rest][keep])
    assert np.array_equal(d.val.x, x[rest][val]) and np.array_equal(d.test().x, x[test])
    assert d.train.x.dtype == np.float32


def test_loading_a_dataset_imports_no_torch():
    """The Ray engine's loader task imports the data layer only: its process stays small."""
    import subprocess
    import sys

    code = "import sys, reuse_ray.config, reuse_ray.data.registry; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_training_subset_is_fixed_stratified_and_only_its_own_run_id_changes(tmp_path):
    import numpy as np

    from reuse_ray.config import DataConfig, RunConfig
    from reuse_ray.data import load_dataset
    from reuse_ray.errors import UserError

    full = load_dataset(DataConfig(name="digits"))
    part = load_dataset(DataConfig(name="digits", train_subset=500))
    again = load_dataset(DataConfig(name="digits", train_subset=500))
    assert abs(len(part.train) - 500) <= 10 and np.array_equal(part.train.x, again.train.x)
    np.testing.assert_array_equal(part.val.y, full.val.y)  # validation as without a subset
    # every class in proportion to the whole training split
    whole = np.bincount(full.train.y) / len(full.train)
    mine = np.bincount(part.train.y) / len(part.train)
    assert np.abs(whole - mine).max() < 0.01
    # rows of the training split itself, none of validation
    rows = {r.tobytes() for r in full.train.x}
    assert all(r.tobytes() in rows for r in part.train.x)
    # a run id changes only for a run that asks for a subset
    assert RunConfig().run_id == RunConfig(data=DataConfig()).run_id
    assert RunConfig(data=DataConfig(train_subset=500)).run_id != RunConfig().run_id
    # and the shipped paper runs keep theirs: a sweep started over them finds them finished
    from pathlib import Path

    from reuse_ray.tuning import load_spec

    root = Path(__file__).resolve().parents[2]
    spec = load_spec(root / "sweeps/paper_fashionmnist.yaml", ["base.engine.channels_last=true"])
    spec = spec.workload(spec.name)
    run_id = spec.run_config({"method.name": "fedavg", "seed": 101}).run_id
    shipped = root / "results/paper_fashionmnist/runs/method=fedavg" / f"{run_id}.parquet"
    assert shipped.is_file(), run_id
    with pytest.raises(UserError, match="data.train_subset: 5000 is not below"):
        load_dataset(DataConfig(name="digits", train_subset=5000))


def test_a_test_subset_is_fixed_stratified_read_once_and_only_its_own_run_id_changes():
    from reuse_ray.config import RunConfig
    from reuse_ray.data import load_dataset
    from reuse_ray.data.registry import TestSplitAccessError
    from reuse_ray.errors import UserError

    full = load_dataset(DataConfig(name="digits")).test()  # 359 of digits' 1,797 images
    part = load_dataset(DataConfig(name="digits", test_subset=90))
    assert part.test_reads == 0  # nothing read before round T
    x = part.test()
    assert part.test_reads == 1 and abs(len(x) - 90) <= 10
    np.testing.assert_array_equal(
        x.x, load_dataset(DataConfig(name="digits", test_subset=90)).test().x
    )
    # every class in proportion, rows of the test split itself
    assert np.abs(np.bincount(full.y) / len(full) - np.bincount(x.y) / len(x)).max() < 0.02
    rows = {r.tobytes() for r in full.x}
    assert all(r.tobytes() in rows for r in x.x)
    # training and validation as without it
    plain = load_dataset(DataConfig(name="digits"))
    np.testing.assert_array_equal(part.train.x, plain.train.x)
    np.testing.assert_array_equal(part.val.x, plain.val.x)
    # a validation-only stage still may not read it
    part.forbid_test()
    with pytest.raises(TestSplitAccessError):
        part.test()
    assert RunConfig(data=DataConfig(test_subset=90)).run_id != RunConfig().run_id
    with pytest.raises(UserError, match=r"data.test_subset: 359 is not below the 359 test images"):
        load_dataset(DataConfig(name="digits", test_subset=len(full))).test()
