"""The real Fashion-MNIST files, as Debian's ``dataset-fashion-mnist`` installs them.

Where the package is absent the tests skip and say why; on CI (``CI`` set) they fail instead,
because CI installs the package (.ci/run)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import SYSTEM_DATA, small_config

from reuse_ray.config import DataConfig
from reuse_ray.data import load_dataset
from reuse_ray.data.registry import stratified_split
from reuse_ray.rng import Purpose, generator

SYSTEM = Path(SYSTEM_DATA["fashionmnist"][0])


@pytest.fixture
def real(fashion_mnist):
    return fashion_mnist


def test_the_real_files_load_with_their_published_counts(real, tmp_path):
    d = load_dataset(DataConfig(name="fashionmnist", root=str(tmp_path / "empty")))
    assert d.source == str(real)
    assert len(d.train) + len(d.val) == 60_000
    # 6,000 images of each class in training, the validation carve-out stratified (10 %)
    both = np.concatenate([d.train.y, d.val.y])
    assert np.bincount(both).tolist() == [6000] * 10
    assert np.bincount(d.val.y).tolist() == [600] * 10
    assert d.train.x.dtype == np.uint8 and d.train.x.shape[1:] == (1, 28, 28)
    test = d.test()
    assert len(test) == 10_000 and np.bincount(test.y).tolist() == [1000] * 10
    assert d.test_reads == 1


def test_the_validation_carve_out_is_disjoint_from_training(real, tmp_path):
    from reuse_ray.data import idx

    x, y = idx.read_split(idx.IDX_DATASETS["fashionmnist"], real, "train")
    keep, val = stratified_split(y, 0.1, generator(0, Purpose.DATA_SPLIT, 2))
    assert len(np.intersect1d(keep, val)) == 0 and len(keep) + len(val) == 60_000
    d = load_dataset(DataConfig(name="fashionmnist", root=str(tmp_path / "empty")))
    assert np.array_equal(d.train.x, x[keep]) and np.array_equal(d.val.x, x[val])
    assert np.array_equal(d.train.y, y[keep]) and np.array_equal(d.val.y, y[val])


@pytest.mark.slow
def test_a_two_round_run_on_real_images(real, tmp_path):
    """The paper's shallow CNN on 2 of 50 Dirichlet clients a round for 2 rounds: it learns
    (chance is 0.10) and the test split is read once, at round 2."""
    from reuse_ray.results import read_table
    from reuse_ray.runner import run_fl

    cfg = small_config(
        tmp_path,
        data={"name": "fashionmnist"},
        model={"name": "auto"},
        partition={"kind": "dirichlet", "alpha": 0.5},
        train={"epochs": 1, "batch_size": 128, "lr": 0.05, "momentum": 0.9},
        fl={"num_clients": 50, "clients_per_round": 2, "rounds": 2, "eval_every": 1},
    )
    summary = run_fl(cfg)
    assert summary.status == "finished"
    rounds = read_table(cfg.results_dir, "rounds")
    assert rounds["round"].tolist() == [1, 2]
    assert rounds["val_acc"].notna().all() and rounds["val_acc"].iloc[-1] > 0.2
    runs = read_table(cfg.results_dir, "runs")
    assert runs["test_acc"].iloc[-1] > 0.2 and runs["dataset"].iloc[-1] == "fashionmnist"
    events = read_table(cfg.results_dir, "client_events")
    assert events.groupby("round")["client_id"].nunique().tolist() == [2, 2]
