"""Fractional GPUs checked without a GPU: a Ray instance that declares one logical GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest
import ray
from conftest import small_config

from reuse_ray.distributed import pool_size_from_resources
from reuse_ray.distributed.actors import ClientWorkerActor
from reuse_ray.engine import make_setup, prepare_data
from reuse_ray.tuning.spec import TrialSpec

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module", autouse=True)
def ray_runtime():
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_four_quarter_gpu_workers_share_the_gpu_and_a_fifth_waits(tmp_path):
    assert (
        pool_size_from_resources(
            ray.cluster_resources(), clients_per_round=10, use_gpu=True, gpu_fraction=0.25
        )
        == 4
    )
    cfg = small_config(tmp_path)
    setup = make_setup(cfg, *prepare_data(cfg))[0]
    box = [ray.put(replace(setup, train=None)), ray.put(setup.train)]
    opts = {"num_gpus": 0.25, "num_cpus": 0}
    workers = [ClientWorkerActor.options(**opts).remote("cpu") for _ in range(5)]
    try:
        pids = [w.load.remote(box) for w in workers]  # built and warmed up
        # four processes import torch and warm up on two cores: on a busy CI machine one of
        # them once took over 120 s, so the bound is generous (a hang still fails). Which
        # four get a quarter is Ray's choice (actor creations are not placed in submission
        # order), so the test waits for any four of the five
        ready, waiting = ray.wait(pids, num_returns=4, timeout=300)
        assert len(ready) == 4  # four quarters fit on the one GPU
        late, _ = ray.wait(waiting, timeout=5)
        assert late == []  # the fifth waits for a quarter to free up
        ray.kill(workers[pids.index(ready[0])])
        late, _ = ray.wait(waiting, timeout=120)
        assert len(late) == 1  # and starts when one does
    finally:
        for w in workers:
            ray.kill(w)


def test_a_trial_placement_group_reserves_its_workers_gpu_fractions():
    trial = TrialSpec(backend="ray", cpus=1, workers=4, gpu_fraction=0.25)
    assert trial.bundles() == [{"CPU": 1}] + [{"GPU": 0.25}] * 4
    first = ray.util.placement_group(trial.bundles())
    second = ray.util.placement_group(trial.bundles())
    try:
        assert ray.get(first.ready(), timeout=60)  # one trial's four quarters fit
        ready, _ = ray.wait([second.ready()], timeout=5)
        assert ready == []  # a second trial waits: the GPU is reserved by the first
    finally:
        ray.util.remove_placement_group(first)
        ray.util.remove_placement_group(second)
