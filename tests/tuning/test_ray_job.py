"""Integration: a head node started with `ray start`; the quickstart sweep submitted with
`ray job submit` as the README shows it (a run on the Ray engine from the command line:
tests/engine/test_engine.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import _alive, _process_table, free_port, ray_temp_dir, stop_ray_under

from reuse_ray.results import read_table

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _submit(dash: int, env: dict, job: list[str], timeout: int) -> subprocess.CompletedProcess:
    """``ray job submit --address … JOB`` to the head's dashboard, retried while its job agent
    is still starting (it answers "No available agent" for a few seconds after `ray start`)."""
    cmd = [shutil.which("ray") or "ray", "job", "submit", "--address", f"http://127.0.0.1:{dash}"]
    for _ in range(12):
        done = subprocess.run(cmd + job, env=env, capture_output=True, text=True, timeout=timeout)
        if "No available agent" not in done.stdout + done.stderr:
            return done
        time.sleep(5)
    return done


def test_ray_job_submit_runs_and_writes_parquet(tmp_path):
    ray_cli = shutil.which("ray")
    assert ray_cli, "the ray CLI comes with ray[default]"
    temp = ray_temp_dir()  # this test's own Ray: its own port, temp dir and processes
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_TMPDIR=temp)
    env.pop("RAY_ADDRESS", None)
    port, dash, agent = free_port(), free_port(), free_port()
    # the job agent on a port of its own: another Ray instance on the machine (the one started
    # below) takes the default agent port, and jobs then find "No available agent"
    start = subprocess.run(
        [
            ray_cli,
            "start",
            "--head",
            "--num-cpus",
            "2",
            "--port",
            str(port),
            "--dashboard-port",
            str(dash),
            "--dashboard-agent-listen-port",
            str(agent),
            "--include-dashboard",
            "true",
            "--disable-usage-stats",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert start.returncode == 0, start.stdout + start.stderr
        # with no address given, the tool starts its own local Ray (the README's word), not
        # Ray's default of joining the latest `ray start` instance on the machine (this one)
        own = subprocess.run(
            [
                sys.executable,
                "-c",
                "import ray\nfrom reuse_ray.distributed.backend import "
                "ensure_ray\nensure_ray(num_cpus=1)\nprint('GCS', ray.get_runtime_context()"
                ".gcs_address)\nray.shutdown()",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,  # the head's temp dir
        )
        assert own.returncode == 0, own.stdout[-2000:] + own.stderr[-2000:]
        gcs = [ln.split()[1] for ln in own.stdout.splitlines() if ln.startswith("GCS ")]
        assert len(gcs) == 1 and not gcs[0].endswith(f":{port}"), own.stdout
        # the quickstart sweep submitted as a user would: no --results; the results root
        # comes with the job's runtime env, the package with working_dir + py_modules (two
        # submissions get two dated folders: tests/results/test_storage.py)
        root = tmp_path / "root"
        runtime_env = {
            "working_dir": str(ROOT),
            "py_modules": [str(ROOT / m) for m in ("reuse_ray", "analysis", "search_spaces")],
            "env_vars": {"REUSE_RAY_RESULTS": str(root)},
        }
        job = _submit(
            dash,
            env,
            ["--runtime-env-json", json.dumps(runtime_env), "--", "reuse-ray", "sweep"]
            + ["sweeps/quickstart.yaml", "--set", "base.fl.rounds=2", "--set"]
            + ["search.num_samples=2", "--set", "final.seeds=[1001]"],
            timeout=900,
        )
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        assert "best configuration" in job.stdout
        said = [ln for ln in job.stdout.splitlines() if ln.startswith("results root: ")]
        assert len(said) == 2 and said[0] == said[-1]  # printed at the start and the end
        folder = Path(said[0].removeprefix("results root: "))
        assert folder.parent == root / "sweeps" / "quickstart"  # a dated folder under the root
        trials = read_table(folder, "trials")
        assert len(trials) == 2 and trials["status"].eq("finished").all()
        final = read_table(folder, "runs").query("stage == 'final'")
        assert len(final) == 2 and (final["test_reads"] == 1).all()
        # nothing landed in the job's working-dir package on the head node
        assert list(Path(temp).rglob("*.parquet")) == []
        # a report from the stated root (its newest sweep)
        report = subprocess.run(
            ["reuse-ray", "report", str(root / "sweeps" / "quickstart")],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert report.returncode == 0, report.stderr
        assert f"reporting the newest: {folder}" in report.stdout
        assert (folder / "report" / "report.html").is_file()
        # the cleanup leaves nothing of this cluster: its processes, the agents and Ray Client
        # server below them (their command lines do not name the temp dir), its workers
        tree = _tree_of(temp)
        assert any("DashboardAgent" in cmd for cmd in tree.values()), tree
        stop_ray_under(temp)
        left = {p: cmd for p, cmd in tree.items() if _alive(p)}
        assert not left, left
    finally:
        stop_ray_under(temp)  # never `ray stop`: that would stop every Ray on the machine


def _tree_of(temp: str) -> dict[int, str]:
    """Every process of the cluster under ``temp``: those naming it and their descendants."""
    table = _process_table()
    tree = {p for p, (_, cmd) in table.items() if temp in cmd}
    while below := {p for p, (pp, _) in table.items() if pp in tree} - tree:
        tree |= below
    return {p: table[p][1] for p in tree}
