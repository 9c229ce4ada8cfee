"""Killing a sweep's driver mid-way and resuming it loses and duplicates no Parquet row."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ray_temp_dir, stop_ray_under

from reuse_ray.results import TIMING_COLUMNS, read_table
from reuse_ray.results.reader import read_table_if_any

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SWEEP = {
    "name": "resume",
    "base": {
        "seed": 3,
        "data": {"name": "digits"},
        "model": {"name": "cnn", "hidden": 16},
        "train": {"epochs": 2, "batch_size": 16},
        "fl": {"num_clients": 10, "clients_per_round": 4, "rounds": 10, "eval_every": 2},
        "method": {"name": "dg_fedreuse", "topk_ratio": 0.2},
    },
    "search": {
        "searcher": "grid",
        "num_samples": 1,
        "grid": {"method.dg.rho": [0.3, 0.5, 0.7, 0.9]},
    },
    "checkpoint_every": 2,
    "final": {"seeds": [91], "top": 1},
}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from reuse_ray.cli import main; raise SystemExit(main())", *args]


TEMP = ray_temp_dir()  # every Ray this module starts lives under it (RAY_TMPDIR)


def _stop_ray() -> None:
    """End the Ray this test's sweeps started (found by their temp dir), never another."""
    stop_ray_under(TEMP)


def _frames(results: Path) -> dict[str, pd.DataFrame]:
    out = {}
    drop = TIMING_COLUMNS | {"trial_id", "cfg.results_dir", "config_json"}
    for table, keys in (
        ("runs", ["run_id"]),
        ("rounds", ["run_id", "round"]),
        ("client_events", ["run_id", "round", "client_id"]),
    ):
        df = read_table(results, table)
        assert not df.duplicated(keys).any(), f"duplicated rows in {table}"
        df = df.drop(columns=[c for c in df.columns if c in drop])
        out[table] = df.sort_values(keys).reset_index(drop=True)
    return out


def test_kill_driver_then_resume_matches_an_uninterrupted_sweep(tmp_path):
    spec = tmp_path / "resume.yaml"
    spec.write_text(yaml.safe_dump(SWEEP))
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_TMPDIR=TEMP)
    env.pop("RAY_ADDRESS", None)
    calm, hit = tmp_path / "calm", tmp_path / "hit"

    proc = subprocess.Popen(
        _cli("sweep", str(spec), "--results", str(hit)),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 300
        # kill once some trial has finished and another has at most 4 of its 10 rounds written:
        # the search is then at least 6 rounds from its end, so the kill lands mid-search
        while time.time() < deadline:
            runs = read_table_if_any(hit, "runs")
            rows = read_table_if_any(hit, "rounds")
            if runs is not None and (runs["status"] == "finished").sum() >= 1:
                running = runs.loc[runs["status"] == "running", "run_id"]
                written = (
                    rows[rows["run_id"].isin(running)].groupby("run_id")["round"].max()
                    if rows is not None
                    else pd.Series(dtype=float)
                )
                if any(written.get(r, 0) <= 4 for r in running):
                    break
            time.sleep(0.2)
        else:
            pytest.fail("the sweep never reached a mid-way state")
        os.killpg(proc.pid, signal.SIGKILL)
        _stop_ray()  # the cluster's workers live outside the driver's process group
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        _stop_ray()
    # really interrupted mid-way: the search never finished, the final stage never started
    interrupted = read_table(hit, "runs")
    assert not (hit / "trials").exists() and (interrupted["stage"] == "search").all()

    done = subprocess.run(
        _cli("sweep", str(spec), "--results", str(hit), "--resume"),
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    _stop_ray()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ref = subprocess.run(
        _cli("sweep", str(spec), "--results", str(calm)),
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    _stop_ray()
    assert ref.returncode == 0, ref.stdout[-3000:] + ref.stderr[-3000:]

    a, b = _frames(calm), _frames(hit)
    for table in a:
        assert len(a[table]) == len(b[table]), table
        pd.testing.assert_frame_equal(a[table], b[table], check_exact=True)
    assert (b["runs"]["status"] == "finished").all() and len(b["runs"]) == 5
    trials = read_table(hit, "trials")
    assert len(trials) == 4 and trials["status"].eq("finished").all()
