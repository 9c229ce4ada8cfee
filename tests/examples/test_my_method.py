"""examples/my_method.py: a method in one file runs on both backends with identical Parquet and
correct ledgers (restricted: 4 + ⌈d_l/8⌉ per tensor; measured: the message's length)."""

from __future__ import annotations

import json
import math

import pytest
from golden.cases import digest

from reuse_ray.configio import load_run_config
from reuse_ray.results import read_table
from reuse_ray.runner import run_fl

OVERRIDES = ["fl.rounds=3", "fl.eval_every=3", "train.epochs=1", "model.hidden=16"]


def _run(tmp_path, backend: str):
    cfg = load_run_config(
        "examples/my_method.yaml",
        [*OVERRIDES, f"engine.backend={backend}", f"results_dir={tmp_path / backend}"],
    )
    assert run_fl(cfg).status == "finished"
    return cfg


def test_example_method_ledgers_by_hand(tmp_path):
    cfg = _run(tmp_path, "local")
    runs = read_table(cfg.results_dir, "runs").iloc[0]
    ev = read_table(cfg.results_dir, "client_events")
    from reuse_ray.engine import make_setup, prepare_data

    data, parts = prepare_data(cfg)
    layout = make_setup(cfg, data, parts)[0].layout
    per_client = sum(4 + math.ceil(s.numel / 8) for s in layout.tensors)
    header = 16  # "<4sIiI"
    assert (ev["decision"] == "fresh").all() and len(ev) == 3 * 5
    assert (ev["up_restricted"] == per_client).all()
    assert (ev["up_measured"] == per_client + header).all()
    assert runs["cum_up_restricted"] == 15 * per_client
    assert runs["client_memory_bytes"] == 4 * layout.dim * ev["client_id"].nunique()  # e_i


@pytest.fixture(scope="module")
def ray_runtime():
    """One Ray for the module's two Ray tests (its start-up paid once)."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.ray
@pytest.mark.slow
def test_example_method_is_identical_on_both_backends(tmp_path, ray_runtime):
    ray_cfg = _run(tmp_path, "ray")
    local_cfg = _run(tmp_path, "local")
    assert digest(ray_cfg.results_dir) == digest(local_cfg.results_dir)


@pytest.mark.ray
@pytest.mark.slow
def test_the_example_method_sweeps_over_its_own_space(tmp_path, monkeypatch, ray_runtime):
    """``examples/my_method_sweep.yaml`` as the guide shows it: the method named by a relative
    ``method.module`` path, searched in its registered space. Tune runs each trial in its own
    folder; the path is read from the driver's (every trial failed with 'no file' before)."""
    from pathlib import Path

    from reuse_ray.cli import main

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    code = main(["sweep", "examples/my_method_sweep.yaml", "--results", str(tmp_path / "s")])
    assert code == 0
    trials = read_table(tmp_path / "s", "trials")
    assert len(trials) == 3 and trials["status"].eq("finished").all(), trials["status"]
    keys = {k for p in trials["params_json"] for k in json.loads(p)}
    assert keys == {"fl.server_lr", "method.sign_ef.memory_decay"}
    runs = read_table(tmp_path / "s", "runs")
    assert set(runs["method"]) == {"sign_ef"} and runs["status"].eq("finished").all()
