"""Every command the README and docs/ show, run: each ``reuse-ray …`` (or ``python -m …``) line
of their ``bash`` blocks is either run here as written — with a few overrides appended where it
is long (fewer rounds, samples or seeds) — or named as covered by another test that runs it, or
as needing what a CI machine lacks (a cluster, a GPU, CIFAR, hours), with the reason. A command
added to a page without a plan here fails the suite, as does a plan for a command no page shows.

The commands run in a sandbox that looks like a checkout (the shipped configs, sweeps, examples
and a copy of the shipped results) with its own home folder, so `~/reuse_ray_results` and
``$REUSE_RAY_RESULTS`` are the sandbox's and nothing is written into the repository."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ray_temp_dir, start_ray_head, stop_ray_under

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"(reuse-ray|python -m (reuse_ray|analysis)[.\w]*)\b")

# overrides that keep a documented command short; appended to what the page shows
TINY_RUN = "--set fl.rounds=1"
TINY_SWEEP = (
    "--set search.num_samples=1 --set base.fl.rounds=1 --set base.fl.eval_every=1 "
    "--set final.seeds=[1001]"
)

# documented command -> ("run", appended overrides) | ("covered", "tests/file.py::test_name")
# | ("elsewhere", why this machine cannot run it). Commands run in this order: later ones read
# what earlier ones wrote (the quickstart sweep before its --resume, --final and reports).
PLAN: dict[str, tuple[str, str]] = {
    "reuse-ray fetch fashionmnist": ("run", ""),
    "reuse-ray run configs/dg_paper.yaml --set fl.rounds=30": ("run", TINY_RUN),
    "reuse-ray run configs/dg_paper.yaml --set fl.rounds=30 --backend local --force": (
        "run",
        TINY_RUN,
    ),
    "reuse-ray run configs/dg_paper.yaml --set data.name=fashionmnist --set fl.rounds=2": (
        "run",
        "--set fl.rounds=1 --set data.train_subset=2000 --set data.test_subset=500",
    ),
    "reuse-ray run sweeps/quickstart.yaml --set method.name=fedprox": (
        "run",
        TINY_RUN + " --backend local",
    ),
    "reuse-ray run examples/my_method.yaml --backend local": ("run", "--set fl.rounds=2"),
    "reuse-ray run examples/my_method.yaml --backend ray --results my_method_on_ray": (
        "run",
        "--set fl.rounds=2",
    ),
    "reuse-ray sweep sweeps/quickstart.yaml": ("run", TINY_SWEEP),
    "reuse-ray sweep sweeps/quickstart.yaml --resume": ("run", TINY_SWEEP),
    "reuse-ray sweep sweeps/quickstart.yaml --final": ("run", TINY_SWEEP),
    "reuse-ray sweep sweeps/quickstart.yaml --set search.num_samples=20 --results results/qs20": (
        "run",
        TINY_SWEEP,
    ),
    "reuse-ray report $REUSE_RAY_RESULTS/sweeps/quickstart": ("run", ""),
    "reuse-ray report ~/reuse_ray_results/sweeps/quickstart": ("run", ""),
    "reuse-ray report RESULTS --leaderboard": ("run", ""),
    "reuse-ray compact RESULTS SHARED": (
        "covered",
        "tests/results/test_compact.py::test_every_table_reads_back_the_same_from_one_file_per_method",
    ),
    "reuse-ray compact --update RESULTS SHARED": (
        "covered",
        "tests/results/test_compact.py::test_update_adds_only_settled_runs_and_replaces_a_changed_one",
    ),
    "reuse-ray expand SHARED RESULTS2": (
        "covered",
        "tests/tuning/test_sweep_resume.py::"
        "test_a_study_continued_elsewhere_from_its_compacted_copy_chooses_and_scores_the_same",
    ),
    "reuse-ray report results/paper_fashionmnist": ("run", ""),
    'reuse-ray report results/paper_fashionmnist --round 90 --reference "fedavg [selected-0]" '
    "--target 0.9": ("run", ""),
    "reuse-ray report results/paper_fashionmnist --leaderboard": ("run", ""),
    "python -m analysis.paper results/paper_fashionmnist": ("run", ""),
    "reuse-ray sweep sweeps/study.yaml --scale small": (
        "covered",
        "tests/tuning/test_study.py::test_the_small_study_end_to_end",
    ),
    "reuse-ray sweep sweeps/study.yaml": (
        "elsewhere",
        "an hour on 2 cores; its small scale is the suite's smoke study",
    ),
    "python -m analysis.scenarios uniform=results/study_fashionmnist "
    "skewed=results/study_fashionmnist_skewed": (
        "elsewhere",
        "the skewed study's results ship when its runs end (hours on 2 cores); "
        "tests/analysis/test_scenarios.py checks the table by hand",
    ),
    "reuse-ray sweep sweeps/study_fashionmnist.yaml": (
        "elsewhere",
        "hours on 2 cores; its results ship in results/ and its small scale is tested",
    ),
}


def documented_commands() -> list[tuple[str, str]]:
    """(page, command) for every command line of every ``bash`` block, comments dropped, the
    part after ``&&`` of an install-and-run line."""
    out = []
    for page in PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
            for line in block.splitlines():
                line = line.strip().split("&&")[-1].strip()
                if COMMAND.match(line):
                    out.append((page.name, re.split(r"\s+#\s", line)[0].strip()))
    return out


def test_every_documented_command_has_a_plan_and_every_plan_a_command():
    shown = {cmd for _, cmd in documented_commands()}
    assert len(shown) >= 15
    unplanned = sorted(shown - set(PLAN))
    assert not unplanned, "documented commands without a plan here: " + "; ".join(unplanned)
    stale = sorted(set(PLAN) - shown)
    assert not stale, "plans for commands no page shows: " + "; ".join(stale)


def test_a_command_said_to_be_covered_names_a_test_that_exists():
    for cmd, (how, what) in PLAN.items():
        if how != "covered":
            continue
        path, _, name = what.partition("::")
        assert re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.M), (cmd, what)
        words = shlex.split(cmd)[2:]  # the file and flags the covering test must use
        source = (ROOT / path).read_text()
        assert Path(words[0]).name in source or Path(words[0]).stem.upper() in source, (cmd, what)


def test_every_file_a_command_names_exists():
    for _, cmd in documented_commands():
        for word in shlex.split(cmd):
            if re.match(r"^(configs|sweeps|examples)/", word):
                assert (ROOT / word).is_file(), (cmd, word)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A folder that looks like a checkout, with a home of its own, and one Ray instance of
    this module's own that every command joins (``RAY_ADDRESS``, as on a workstation with a
    ``ray start`` instance): its start-up is paid once, not once per command."""
    box = tmp_path_factory.mktemp("checkout")
    for name in ("configs", "sweeps", "examples", "search_spaces"):
        (box / name).symlink_to(ROOT / name)
    shutil.copytree(ROOT / "results" / "paper_fashionmnist", box / "results" / "paper_fashionmnist")
    home = box / "home"
    home.mkdir()
    temp = ray_temp_dir()
    env = dict(os.environ, HOME=str(home), RAY_TMPDIR=temp, RAY_AUTH_MODE="disabled")
    env["REUSE_RAY_RESULTS"] = str(home / "reuse_ray_results")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    try:
        env["RAY_ADDRESS"] = start_ray_head(env)
        yield box, env
    finally:
        stop_ray_under(temp)


def _shell(cmd: str, box: Path, env: dict) -> subprocess.CompletedProcess:
    line = cmd.replace("python -m", f"{shlex.quote(sys.executable)} -m", 1)
    return subprocess.run(
        ["bash", "-c", line], cwd=box, env=env, capture_output=True, text=True, timeout=600
    )


def _placeholders(cmd: str, box: Path, env: dict) -> str:
    """RESULTS: the quickstart sweep the commands before it wrote."""
    if "RESULTS " in cmd or cmd.endswith("RESULTS"):
        dated = sorted((Path(env["REUSE_RAY_RESULTS"]) / "sweeps" / "quickstart").iterdir())
        cmd = cmd.replace("RESULTS", shlex.quote(str(dated[-1])), 1)
    return cmd


@pytest.mark.ray
@pytest.mark.slow
def test_every_documented_command_runs(sandbox):
    box, env = sandbox
    ran, outputs = [], {}
    for cmd, (how, extra) in PLAN.items():
        if how != "run":
            continue
        line = _placeholders(f"{cmd} {extra}".strip(), box, env)
        done = _shell(line, box, env)
        assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        assert "Traceback" not in done.stdout + done.stderr, line
        outputs[cmd] = done.stdout
        ran.append(cmd)
    # the two engines give the same run: the same final line, word for word
    ray = outputs["reuse-ray run configs/dg_paper.yaml --set fl.rounds=30"]
    local = outputs[
        "reuse-ray run configs/dg_paper.yaml --set fl.rounds=30 --backend local --force"
    ]
    final = [ln for ln in ray.splitlines() if ln.startswith("run ")]
    assert final and final == [ln for ln in local.splitlines() if ln.startswith("run ")]
    # what the commands say they write is there
    assert (box / "results" / "qs20").is_dir()
    assert (box / "results" / "paper_fashionmnist" / "report" / "report.html").is_file()
    board = outputs["reuse-ray report results/paper_fashionmnist --leaderboard"]
    assert "| fedavg [selected-0] |" in board
    assert len(ran) == sum(how == "run" for how, _ in PLAN.values())
