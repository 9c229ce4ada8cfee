"""Integration: a head node started with `ray start`; a run and the quickstart sweep submitted
with `ray job submit`."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ray_temp_dir, stop_ray_under

from reuse_ray.results import read_table

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _submit(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``ray job submit``, retried while the new head's job agent is still starting (it answers
    "No available agent" for a few seconds after `ray start`)."""
    for _ in range(12):
        job = subprocess.run(cmd, **kwargs)
        if "No available agent" not in job.stdout + job.stderr:
            return job
        time.sleep(5)
    return job


def test_ray_job_submit_runs_and_writes_parquet(tmp_path):
    ray_cli = shutil.which("ray")
    assert ray_cli, "the ray CLI comes with ray[default]"
    temp = ray_temp_dir()  # this test's own Ray: its own port, temp dir and processes
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_TMPDIR=temp)
    env.pop("RAY_ADDRESS", None)
    port, dash = _free_port(), _free_port()
    start = subprocess.run(
        [ray_cli, "start", "--head", "--num-cpus", "2", "--port", str(port),
         "--dashboard-port", str(dash), "--include-dashboard", "true",
         "--disable-usage-stats"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    try:
        assert start.returncode == 0, start.stdout + start.stderr
        results = tmp_path / "job-results"
        job = _submit(
            [ray_cli, "job", "submit", "--address", f"http://127.0.0.1:{dash}",
             "--working-dir", str(ROOT), "--", "reuse-ray", "run", "sweeps/quickstart.yaml",
             "--set", "fl.rounds=2", "--set", "train.epochs=1", "--results", str(results)],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        assert "succeeded" in job.stdout + job.stderr
        runs = read_table(results, "runs")
        assert runs.iloc[0]["status"] == "finished" and runs.iloc[0]["backend"] == "ray"
        assert len(read_table(results, "rounds")) == 2

        sweep_results = tmp_path / "sweep-results"
        job = _submit(
            [ray_cli, "job", "submit", "--address", f"http://127.0.0.1:{dash}",
             "--working-dir", str(ROOT), "--", "reuse-ray", "sweep", "sweeps/quickstart.yaml",
             "--set", "base.fl.rounds=3", "--set", "search.num_samples=2",
             "--set", "final.seeds=[1001]", "--results", str(sweep_results)],
            env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        assert "best configuration" in job.stdout
        trials = read_table(sweep_results, "trials")
        assert len(trials) == 2 and trials["status"].eq("finished").all()
        final = read_table(sweep_results, "runs").query("stage == 'final'")
        assert len(final) == 2 and (final["test_reads"] == 1).all()
    finally:
        stop_ray_under(temp)  # never `ray stop`: that would stop every Ray on the machine
