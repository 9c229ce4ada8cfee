"""Several nodes on one machine (``ray.cluster_utils.Cluster``): a head without CPUs and two
worker nodes, each with its own CPUs and a custom resource. Trials of a sweep land on both
worker nodes, one run's client workers span them, and a worker node removed mid-sweep loses no
row and duplicates none. The cluster has its own temp dir and is stopped by its own handles."""

from __future__ import annotations

import copy
import re
import threading
import time

import pandas as pd
import pytest
import ray
from conftest import ray_temp_dir, small_config, stop_ray_under
from ray.cluster_utils import Cluster

from reuse_ray.distributed import RayBackend
from reuse_ray.results import TIMING_COLUMNS, read_table
from reuse_ray.results.reader import read_table_if_any
from reuse_ray.runner import run_fl
from reuse_ray.tuning import parse_experiment, run_sweep

pytestmark = [pytest.mark.ray, pytest.mark.slow]

WORKER = {"num_cpus": 2, "resources": {"fl_worker": 2}}


@pytest.fixture(scope="module")
def cluster():
    temp = ray_temp_dir()
    c = Cluster(
        initialize_head=True,
        connect=True,
        head_node_args={"num_cpus": 0, "temp_dir": temp, "include_dashboard": False},
    )
    nodes = [c.add_node(**copy.deepcopy(WORKER)) for _ in range(2)]
    c.wait_for_nodes()
    try:
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()
        stop_ray_under(temp)


BASE = {
    "seed": 3,
    "data": {"name": "digits"},
    "model": {"name": "cnn", "hidden": 16},
    "train": {"epochs": 1, "batch_size": 32},
    "fl": {"num_clients": 8, "clients_per_round": 3, "rounds": 4, "eval_every": 1},
    "method": {"name": "fedavg"},
}


def _sweep(tmp_path, name: str, samples: int, rounds: int) -> dict:
    base = copy.deepcopy(BASE)
    base["fl"]["rounds"] = rounds
    return {
        "name": name,
        "base": base,
        "search": {"space": "fedavg", "searcher": "random", "num_samples": samples, "seed": 1},
        "trial": {"backend": "local", "cpus": 1, "resources": {"fl_worker": 1}},
        "checkpoint_every": 1,
        "results_dir": str(tmp_path / name),
    }


def _node_ids(nodes) -> set[str]:
    return {n.node_id for n in nodes}


def test_a_sweep_places_trials_on_both_worker_nodes(cluster, tmp_path):
    _, nodes = cluster
    spec = parse_experiment(_sweep(tmp_path, "spread", samples=4, rounds=2))
    out = run_sweep(spec, say=lambda m: None)
    assert len(out.trials) == 4 and out.trials["status"].eq("finished").all()
    runs = read_table(spec.results_dir, "runs")
    assert len(runs) == 4 and runs["run_id"].is_unique
    # 4 one-CPU trials at once on two 2-CPU nodes: both nodes ran trials, the head none
    assert set(runs["ray_node"]) == _node_ids(nodes)


class _Recording(RayBackend):
    """The Ray backend, noting the node of each client-worker actor it started."""

    nodes: list[str] = []

    def start(self, setup=None):
        super().start(setup)
        where = [
            w.__ray_call__.remote(lambda _self: ray.get_runtime_context().get_node_id())
            for w in self.workers
        ]
        _Recording.nodes = ray.get(where)


def test_one_runs_client_workers_span_nodes_and_change_no_number(cluster, tmp_path):
    _, nodes = cluster
    cfg = small_config(tmp_path / "ray", fl__rounds=3).replace(
        engine=small_config(tmp_path).engine.__class__(
            backend="ray", num_workers=3, cpu_per_worker=1.0
        )
    )
    assert run_fl(cfg, backend=_Recording(cfg)).status == "finished"
    assert len(_Recording.nodes) == 3 and set(_Recording.nodes) == _node_ids(nodes)
    local = small_config(tmp_path / "local", fl__rounds=3)
    assert run_fl(local).status == "finished"
    for table in ("rounds", "client_events"):
        a = read_table(cfg.results_dir, table).drop(columns=list(TIMING_COLUMNS), errors="ignore")
        b = read_table(local.results_dir, table).drop(columns=list(TIMING_COLUMNS), errors="ignore")
        assert a.equals(b), table


def test_removing_a_worker_node_mid_sweep_loses_and_duplicates_no_row(cluster, tmp_path):
    c, nodes = cluster
    rounds = 8
    spec = parse_experiment(_sweep(tmp_path, "removal", samples=4, rounds=rounds))
    victim = nodes[1]
    removed = threading.Event()

    def remove_when_a_trial_runs_there() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            runs = read_table_if_any(spec.results_dir, "runs")
            rows = read_table_if_any(spec.results_dir, "rounds")
            if runs is not None:
                there = runs[(runs["ray_node"] == victim.node_id) & (runs["status"] == "running")]
                done = pd.Series(0, index=there["run_id"].unique())  # rounds written, per run
                if rows is not None:
                    done = done.add(rows.groupby("run_id")["round"].max(), fill_value=0)
                    done = done[done.index.isin(there["run_id"])]
                if len(done) and (done <= rounds // 2).any():  # a trial there, half to come
                    c.remove_node(victim, allow_graceful=False)
                    removed.set()
                    return
            time.sleep(0.1)

    killer = threading.Thread(target=remove_when_a_trial_runs_there, daemon=True)
    killer.start()
    said: list[str] = []
    out = run_sweep(spec, say=said.append)
    killer.join(timeout=5)
    assert removed.is_set(), "the node was not removed while the sweep ran"
    assert len(out.trials) == 4 and out.trials["status"].eq("finished").all()
    runs = read_table(spec.results_dir, "runs")
    assert len(runs) == 4 and runs["run_id"].is_unique and (runs["status"] == "finished").all()
    rows = read_table(spec.results_dir, "rounds")
    assert not rows.duplicated(["run_id", "round"]).any()
    assert (
        rows.groupby("run_id")["round"].apply(sorted).map(list).tolist()
        == [list(range(1, rounds + 1))] * 4
    )
    # the console named the trials the removal hit; each was restarted from its checkpoint and
    # finished on the other worker node. (Which trials those are is read from the console: a
    # trial seen running there may still finish in the moment before the node goes.)
    restarted = {
        m.group(1)
        for line in said
        if (
            m := re.search(
                r"trial (\S+) failed \(its process or node died\); "
                r"restarting",
                line,
            )
        )
    }
    assert restarted, said
    assert set(runs["trial_id"]) >= restarted
    assert set(runs.set_index("trial_id").loc[sorted(restarted), "ray_node"]) == {nodes[0].node_id}
