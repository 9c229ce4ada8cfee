"""Integration: the guide's cluster walk-through as written, with Ray's token authentication on —
the token created, a head started, a worker node joined with `ray start --address`, the
quickstart submitted with `ray job submit --address` and the runtime env the README and the guide
show, its report from the results root; the tool started with no address beside that head starts
its own Ray; a missing or a wrong token refused by `reuse-ray` with one line. The cluster is this
test's own (its ports, its temp dir, its HOME holding the token) and is ended by its processes,
every one of them. (A run on the Ray engine from the command line: tests/engine.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import _alive, _process_table, free_port, ray_temp_dir, stop_ray_under

from reuse_ray.results import read_table

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "guide.md").read_text()


def _ray(env: dict, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    ray_cli = shutil.which("ray")
    assert ray_cli, "the ray CLI comes with ray[default]"
    return subprocess.run(
        [ray_cli, *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def _walk_through_commands() -> list[str]:
    """The guide's walk-through block, its comments dropped (what a user types)."""
    block = GUIDE.split("## On a Ray cluster")[1].split("```bash")[1].split("```")[0]
    return [ln.split("  #")[0].strip() for ln in block.splitlines() if ln.strip()]


def test_the_token_walk_through_with_a_joined_worker(tmp_path):
    steps = _walk_through_commands()
    # the steps this test takes, in the guide's words and order
    assert steps[:3] == [
        "export RAY_AUTH_MODE=token",
        "ray get-auth-token --generate",
        "ray start --head",
    ]
    assert "#   ray start --address HEAD:6379" in steps
    text = " ".join(steps)
    assert '--runtime-env-json "{\\"working_dir\\": \\".\\", \\"env_vars\\": ' in text
    assert "--address http://127.0.0.1:8265 -- reuse-ray sweep sweeps/quickstart.yaml" in text

    temp, temp2, home = ray_temp_dir(), ray_temp_dir(), tmp_path / "home"
    home.mkdir()
    # this test's HOME holds the token (~/.ray/auth_token), never the user's own
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_TMPDIR=temp, HOME=str(home))
    for key in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(key, None)
    port, dash, agent, agent2 = free_port(), free_port(), free_port(), free_port()
    head = ["start", "--head", "--num-cpus", "1", "--port", str(port)]
    head += ["--dashboard-port", str(dash), "--dashboard-agent-listen-port", str(agent)]
    head += ["--include-dashboard", "true", "--disable-usage-stats"]
    try:
        # without a token yet, `ray start --head` fails (the guide's reason for the step)
        assert _ray(env, *head).returncode != 0
        stop_ray_under(temp)
        os.makedirs(temp, exist_ok=True)
        made = _ray(env, "get-auth-token", "--generate")
        assert made.returncode == 0 and (home / ".ray" / "auth_token").is_file(), made.stderr
        started = _ray(env, *head)
        assert started.returncode == 0, started.stdout + started.stderr
        # a worker node joins with the head's token (here: the same HOME, as if copied over);
        # it declares a resource of its own, so the trials placed on it prove it hosts them
        worker = ["start", "--address", f"127.0.0.1:{port}", "--num-cpus", "1"]
        worker += ["--resources", json.dumps({"joined": 1}), "--disable-usage-stats"]
        worker += ["--dashboard-agent-listen-port", str(agent2), "--temp-dir", temp2]
        # on one machine the worker gets a temp dir of its own: in the head's, its runtime-env
        # agent would replace the job's working-dir package under the running job
        joined = _ray(dict(env, RAY_TMPDIR=temp2), *worker)
        assert joined.returncode == 0, joined.stdout + joined.stderr
        # `ray status` reads the autoscaler's view, refreshed every few seconds: a node that has
        # just joined may be missing from the first reading
        for _ in range(30):
            status = _ray(env, "status", "--address", f"127.0.0.1:{port}")
            if status.returncode != 0 or "joined" in status.stdout:
                break
            subprocess.run(["sleep", "2"])
        assert status.returncode == 0 and "joined" in status.stdout, status.stdout + status.stderr

        root = tmp_path / "shared"
        runtime_env = {"working_dir": ".", "env_vars": {"REUSE_RAY_RESULTS": str(root)}}
        job = ["job", "submit", "--runtime-env-json", json.dumps(runtime_env)]
        job += ["--address", f"http://127.0.0.1:{dash}", "--", "reuse-ray", "sweep"]
        job += ["sweeps/quickstart.yaml", "--set", "base.fl.rounds=2", "--set"]
        job += ["search.num_samples=2", "--set", "final.seeds=[1001]"]
        job += ["--set", "trial.resources={joined: 1}"]
        done = None
        for _ in range(12):  # the job agent answers "No available agent" while it starts
            done = subprocess.run(
                [shutil.which("ray"), *job],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=900,
            )
            if "No available agent" not in done.stdout + done.stderr:
                break
            subprocess.run(["sleep", "5"])
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        said = [ln for ln in done.stdout.splitlines() if ln.startswith("results root: ")]
        folder = Path(said[-1].removeprefix("results root: "))
        assert folder.parent == root / "sweeps" / "quickstart"
        trials = read_table(folder, "trials")
        assert len(trials) == 2 and trials["status"].eq("finished").all()
        final = read_table(folder, "runs").query("stage == 'final'")
        assert len(final) == 2 and (final["test_reads"] == 1).all()  # the choice, the reference
        # nothing landed in the job's working-dir package on the head node
        assert list(Path(temp).rglob("*.parquet")) == []
        # the README's next line: a report from the stated root (its newest sweep)
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
        # with no address given, the tool starts its own local Ray (the README's word), not
        # Ray's default of joining the latest `ray start` instance on the machine (this head)
        own = subprocess.run(
            [
                sys.executable,
                "-c",
                "import ray\nfrom reuse_ray.distributed.backend import ensure_ray\n"
                "ensure_ray(num_cpus=1)\nprint('GCS', ray.get_runtime_context().gcs_address)"
                "\nray.shutdown()",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert own.returncode == 0, own.stdout[-2000:] + own.stderr[-2000:]
        gcs = [ln.split()[1] for ln in own.stdout.splitlines() if ln.startswith("GCS ")]
        assert len(gcs) == 1 and not gcs[0].endswith(f":{port}"), own.stdout

        # a missing token and a wrong one: one line from reuse-ray that says so, exit 2
        run = ["reuse-ray", "run", "sweeps/quickstart.yaml", "--address", f"127.0.0.1:{port}"]
        run += ["--set", "fl.rounds=1", "--results", str(tmp_path / "refused")]
        empty = tmp_path / "no-token"
        empty.mkdir()
        wrong = "0" * 64
        for case in (dict(env, HOME=str(empty)), dict(env, RAY_AUTH_TOKEN=wrong)):
            got = subprocess.run(
                run, env=case, cwd=ROOT, capture_output=True, text=True, timeout=300
            )
            assert got.returncode == 2, got.stdout + got.stderr
            lines = [ln for ln in got.stderr.splitlines() if ln.strip()]
            assert len(lines) == 1, got.stderr
            assert re.match(
                r"reuse-ray: Ray at 127\.0\.0\.1:\d+ refused this process's token", lines[0]
            )
            assert "RAY_AUTH_TOKEN" in lines[0] and "Traceback" not in got.stdout + got.stderr
        # the cleanup leaves nothing of this cluster: its processes, the agents and Ray Client
        # server below them (their command lines do not name the temp dir), its workers
        tree = {**_tree_of(temp), **_tree_of(temp2)}
        assert any("DashboardAgent" in cmd for cmd in tree.values()), tree
        for folder in (temp2, temp):
            stop_ray_under(folder)
        left = {p: cmd for p, cmd in tree.items() if _alive(p)}
        assert not left, left
    finally:
        for folder in (temp2, temp):  # the worker's and the head's processes: never `ray stop`
            stop_ray_under(folder)


def _tree_of(temp: str) -> dict[int, str]:
    """Every process of the cluster under ``temp``: those naming it and their descendants."""
    table = _process_table()
    tree = {p for p, (_, cmd) in table.items() if temp in cmd}
    while below := {p for p, (pp, _) in table.items() if pp in tree} - tree:
        tree |= below
    return {p: table[p][1] for p in tree}
