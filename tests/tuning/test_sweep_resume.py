"""Killing a sweep's driver mid-way and resuming it loses and duplicates no Parquet row."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ray_temp_dir, start_ray_head, stop_ray_under

from reuse_ray.results import ATTEMPT_COLUMNS, TIMING_COLUMNS, read_table
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
        "grid": {"method.dg.rho": [0.3, 0.6, 0.9]},
    },
    "checkpoint_every": 2,
    "final": {"seeds": [91], "top": 1},
}


# the CLI, and at its end the heavy modules its driver imported (a sweep's driver schedules
# trials and writes tables and the report: it has no use for torch, ~0.45 GB and ~2 s)
CLI = (
    "import sys; from reuse_ray.cli import main; code = main(); "
    "print('driver imported:', sorted({'torch', 'tensorboardX'} & set(sys.modules)), "
    "file=sys.stderr); raise SystemExit(code)"
)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", CLI, *args]


TEMP = ray_temp_dir()  # every Ray an interrupted or killed sweep starts lives under it
HEAD: dict[str, str] = {}  # the module's own Ray, which the undisturbed sweeps join


@pytest.fixture(scope="module", autouse=True)
def _head():
    """One Ray instance of this module's own (its own temp dir) that every sweep run to its end
    undisturbed joins (``RAY_ADDRESS``): its start-up is paid once. A sweep interrupted or
    killed starts its own Ray, which ends with it (a killed driver's cluster is killed too)."""
    temp = ray_temp_dir()
    try:
        HEAD["address"] = start_ray_head(dict(_env(), RAY_TMPDIR=temp))
        yield
    finally:
        HEAD.clear()
        stop_ray_under(temp)


def _stop_ray() -> None:
    """End the Ray this test's sweeps started (found by their temp dir), never another."""
    stop_ray_under(TEMP)


def _frames(results: Path) -> dict[str, pd.DataFrame]:
    out = {}
    drop = TIMING_COLUMNS | ATTEMPT_COLUMNS | {"trial_id", "cfg.results_dir", "config_json"}
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


def _env(joined: bool = False) -> dict[str, str]:
    """The CLI's environment: a Ray of its own under TEMP, or (``joined``) the module's."""
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_TMPDIR=TEMP)
    env.pop("RAY_ADDRESS", None)
    if joined:
        env["RAY_ADDRESS"] = HEAD["address"]
    return env


def _args(spec: Path, results: Path) -> list[str]:
    return ["sweep", str(spec), "--results", str(results)]


def _kill_when(args: list[str], hit: Path, ready, deadline_s: float, never: str) -> None:
    """Run the CLI with ``args`` (writing into ``hit``) and SIGKILL its driver (and the Ray it
    started) as soon as ``ready(runs, written)`` holds: the runs table, and the last round
    written per running run (0 for one with none yet)."""
    proc = subprocess.Popen(
        _cli(*args),
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + deadline_s
        while time.time() < deadline:
            runs = read_table_if_any(hit, "runs")
            rows = read_table_if_any(hit, "rounds")
            if runs is not None:
                running = runs.loc[runs["status"] == "running", "run_id"]
                last = rows.groupby("run_id")["round"].max() if rows is not None else {}
                written = pd.Series({r: int(last.get(r, 0)) for r in running}, dtype=int)
                if ready(runs, written):
                    break
            time.sleep(0.2)
        else:
            pytest.fail(never)
        os.killpg(proc.pid, signal.SIGKILL)
        _stop_ray()  # the cluster's workers live outside the driver's process group
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        _stop_ray()


def _checkpoints(results: Path, experiment: str) -> dict[str, list[int]]:
    """The numbers of every trial's checkpoints on disk, by trial folder."""
    top = results / "_tune" / experiment
    return {
        t.name: sorted(int(c.name.split("_")[1]) for c in t.glob("checkpoint_*"))
        for t in top.iterdir()
        if t.is_dir() and any(t.glob("checkpoint_*"))
    }


def _finished(runs: pd.DataFrame) -> int:
    return int((runs["status"] == "finished").sum())


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory) -> Path:
    spec = tmp_path_factory.mktemp("spec") / "resume.yaml"
    spec.write_text(yaml.safe_dump(SWEEP))
    return spec


@pytest.fixture(scope="module")
def calm(sweep_file, tmp_path_factory) -> Path:
    """The sweep run once, undisturbed: what every interrupted and resumed one must equal."""
    out = tmp_path_factory.mktemp("calm") / "res"
    done = _sweep_to_the_end(sweep_file, out)
    assert "driver imported: []" in done.stderr, done.stderr[-2000:]
    return out


def _assert_same_as(calm: Path, hit: Path) -> None:
    a, b = _frames(calm), _frames(hit)
    for table in a:
        assert len(a[table]) == len(b[table]), table
        pd.testing.assert_frame_equal(a[table], b[table], check_exact=True)
    assert (b["runs"]["status"] == "finished").all() and len(b["runs"]) == 4
    trials = read_table(hit, "trials")
    assert len(trials) == 3 and trials["status"].eq("finished").all()


def _ctrl_c(
    args: list[str], results: Path, stage: str, after_round: int = 1, finished: int = 0
) -> subprocess.CompletedProcess:
    """Run the CLI in its own process group and send SIGINT to the group, as a terminal's
    Ctrl-C does, once a running run of ``stage`` has written ``after_round`` rounds and
    ``finished`` of its runs have finished."""
    proc = subprocess.Popen(
        _cli(*args),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            runs = read_table_if_any(results, "runs")
            rows = read_table_if_any(results, "rounds")
            if runs is not None and rows is not None:
                mine = runs[runs["stage"] == stage]
                live = mine.loc[mine["status"] == "running", "run_id"]
                reached = rows.loc[rows["run_id"].isin(live), "round"]
                done = _finished(mine) >= finished
                if len(reached) and reached.max() >= after_round and done:
                    os.killpg(proc.pid, signal.SIGINT)
                    break
            time.sleep(0.1)
        else:
            pytest.fail(f"the command never reached its {stage} stage")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        _stop_ray()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


INTERRUPTED_LINE = "interrupted — rerun with --resume to continue"


def _sweep_to_the_end(sweep_file: Path, results: Path, *more: str) -> subprocess.CompletedProcess:
    """The sweep (with ``more`` arguments, e.g. --resume) run to its end, successfully, on the
    module's Ray."""
    done = subprocess.run(
        _cli("sweep", str(sweep_file), "--results", str(results), *more),
        env=_env(joined=True),
        capture_output=True,
        text=True,
        timeout=900,
    )
    _stop_ray()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_ctrl_c_a_killed_driver_and_ctrl_c_again_then_resume_matches_an_uninterrupted_sweep(
    tmp_path, sweep_file, calm
):
    """One sweep interrupted three ways, resumed after each: Ctrl-C in the search stage, the
    driver killed mid-search (SIGKILL: nothing recorded on the way out), Ctrl-C in the final
    stage; its Parquet at the end is the undisturbed sweep's."""
    hit = tmp_path / "hit"
    # Ctrl-C in the search stage: exit 130, one line, nothing chosen, no final stage, no report
    first = _ctrl_c(_args(sweep_file, hit), hit, "search")
    assert first.returncode == 130, first.stdout[-2000:] + first.stderr[-2000:]
    assert INTERRUPTED_LINE in first.stderr
    assert "best configuration" not in first.stdout and "final stage" not in first.stdout
    assert "Tuner.restore" not in first.stdout + first.stderr  # Tune's own hint is not ours
    assert not (hit / "trials").exists() and not (hit / "report").exists()
    runs = read_table(hit, "runs")
    assert runs["stage"].eq("search").all()
    assert runs["status"].eq("interrupted").any() and not runs["status"].eq("stopped").any()
    assert runs["status"].isin(["finished", "interrupted"]).all()
    # --resume, its driver killed once some trial has finished and another has at most 4 of
    # its 10 rounds written: the search is then at least 6 rounds from its end
    _kill_when(
        [*_args(sweep_file, hit), "--resume"],
        hit,
        lambda runs, written: _finished(runs) >= 1 and (written <= 4).any(),
        300,
        "the resumed sweep never reached a mid-way state",
    )
    killed = read_table(hit, "runs")
    assert not (hit / "trials").exists() and killed["stage"].eq("search").all()
    # while a stage runs no checkpoint is deleted: Tune's state, snapshotted now and then, may
    # name an older one than a trial's newest, and a resume restores that one (a kept-two
    # limit once left a trial that could not be restored); the finished trial has all five
    kept = _checkpoints(hit, "resume-search")
    assert all(points == list(range(len(points))) for points in kept.values()), kept
    assert max(map(len, kept.values())) >= 5, kept
    # --resume, then Ctrl-C in the final stage: the same, and no final-stage summary
    # (after round 3: the run has a checkpoint, from round 2, to resume from)
    again = [*_args(sweep_file, hit), "--resume"]
    second = _ctrl_c(again, hit, "final", after_round=3)
    assert second.returncode == 130, second.stdout[-2000:] + second.stderr[-2000:]
    assert INTERRUPTED_LINE in second.stderr
    assert "test_acc mean" not in second.stdout and not (hit / "report").exists()
    final = read_table(hit, "runs").query("stage == 'final'")
    assert final["status"].eq("interrupted").all() and final["test_acc"].isna().all()
    # --resume to the end: the same Parquet as the undisturbed sweep
    _sweep_to_the_end(sweep_file, hit, "--resume")
    _assert_same_as(calm, hit)
    assert (hit / "report" / "report.html").exists()
    # a stage that ended keeps each trial's newest checkpoint only
    for stage in ("search", "final"):
        assert all(len(p) == 1 for p in _checkpoints(hit, f"resume-{stage}").values())
    resumed = read_table(hit, "runs").query("stage == 'final'").iloc[0]
    assert resumed["attempts"] == 2 and resumed["resumed_from_round"] >= 2
    assert resumed["wall_s"] > resumed["attempt_wall_s"]  # both attempts' time
    assert resumed["started_at"] < resumed["attempt_started_at"]


STUDY = {
    "name": "tiny",
    "kind": "study",
    "budget": {"trials_per_arm": 2, "seed": 0},
    "shared": {"train.lr": [0.02, 0.1, "log"]},
    "objectives": ["val_acc"],
    "retention_reference": "fedavg",
    "final": {"seeds": [1001]},
    "trial": {"backend": "local", "cpus": 1},
    "checkpoint_every": 2,
    # six rounds: a run checkpoints at rounds 2 and 4 (a resumed one goes on from there)
    "workloads": {"digits": {**SWEEP["base"], "fl": {**SWEEP["base"]["fl"], "rounds": 6}}},
    "arms": {
        "fedavg": {"fixed": {"method.name": "fedavg", "method.topk_ratio": 1.0}, "space": "fedavg"},
        "dg": {"fixed": {"method.name": "dg_fedreuse"}, "space": "dg_fedreuse"},
    },
}


def test_resume_sets_a_damaged_result_aside_and_recomputes_it(tmp_path, sweep_file, calm):
    """A finished sweep with a truncated final run file and a truncated trials table:
    ``--resume`` names both, keeps them aside, and ends with the undisturbed sweep's Parquet."""
    import shutil

    hit = tmp_path / "hit"
    shutil.copytree(calm, hit)
    final = read_table(calm, "runs").query("stage == 'final'").iloc[0]
    bad = hit / "rounds" / f"method={final['method']}" / f"{final['run_id']}.parquet"
    trials = next((hit / "trials").rglob("*.parquet"))
    for f in (bad, trials):
        f.write_bytes(f.read_bytes()[:100])
    done = _sweep_to_the_end(sweep_file, hit, "--resume")
    named = [ln for ln in done.stdout.splitlines() if ln.startswith("damaged result:")]
    assert len(named) == 2 and any(final["run_id"] in ln for ln in named)
    assert f"recomputing {final['run_id']}" in done.stdout
    aside = list((hit / "_damaged").rglob("*.parquet"))
    assert len(aside) == 5  # the run's four files and the trials table, kept
    _assert_same_as(calm, hit)


def test_each_run_table_damaged_in_a_finished_sweep_is_recomputed(tmp_path, sweep_file, calm):
    """Each of the four run tables truncated to half its bytes, each in another run (three of
    the search, whose trials table is intact, and the final run): ``--resume`` names every
    file, and recomputes every run (the search's by walking its search again) — no run is lost
    from the choice or the tables."""
    import shutil

    hit = tmp_path / "hit"
    shutil.copytree(calm, hit)
    runs = read_table(calm, "runs").sort_values(["stage", "run_id"])
    search = runs.query("stage == 'search'")
    final = runs.query("stage == 'final'")
    targets = dict(zip(["runs", "client_events", "clients"], search.itertuples(), strict=False))
    targets["rounds"] = next(final.itertuples())
    for table, row in targets.items():
        f = hit / table / f"method={row.method}" / f"{row.run_id}.parquet"
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    done = _sweep_to_the_end(sweep_file, hit, "--resume")
    named = [ln for ln in done.stdout.splitlines() if ln.startswith("damaged result:")]
    assert len(named) == 4, done.stdout[-3000:]
    for table, row in targets.items():
        assert any(f"/{table}/" in ln and row.run_id in ln for ln in named), table
        assert f"recomputing {row.run_id}" in done.stdout, (table, done.stdout[-3000:])
    assert "the search resumes to recompute them" in done.stdout
    _assert_same_as(calm, hit)
    clients = read_table(hit, "clients")
    assert set(clients["run_id"]) == set(runs["run_id"])


def test_a_budgeted_search_killed_and_resumed_spends_its_budget_once(tmp_path):
    """The client-round ledger survives a killed driver: Tune's restored stopper starts empty,
    and the ledger reads what the runs table recorded as spent — else the resumed search would
    spend its budget a second time (here: up to every configuration to its end)."""
    raw = json.loads(json.dumps(SWEEP))
    raw["search"]["client_rounds"] = 120  # three full runs of 10 rounds x 4 clients
    raw["search"]["grid"]["method.dg.rho"] = [0.2, 0.3, 0.5, 0.7, 0.8, 0.9]
    raw["final"] = None
    spec = tmp_path / "budget.yaml"
    spec.write_text(yaml.safe_dump({k: v for k, v in raw.items() if v is not None}))
    hit = tmp_path / "hit"
    # kill once two trials finished and the next have begun, well short of the 40 rounds left
    _kill_when(
        _args(spec, hit),
        hit,
        lambda runs, written: _finished(runs) >= 2 and 0 < written.sum() <= 6,
        600,
        "the search never reached its third trial",
    )
    assert not (hit / "trials").exists()  # killed mid-search
    done = _sweep_to_the_end(spec, hit, "--resume")
    runs = _frames(hit)["runs"]  # and no row duplicated
    spent = int(runs["rounds_completed"].sum()) * 4
    # the budget, give or take the round each running trial trained before it heard
    assert 120 <= spent <= 120 + 2 * 4, (spent, runs[["status", "rounds_completed"]])
    # the budget ended the search: the six configurations on offer were not all tried, and
    # a trial still training when it ran out (if the resumed search had two) was stopped there
    assert len(runs) < 6 and set(runs["status"]) <= {"finished", "stopped"}, runs
    unfinished = runs[runs["rounds_completed"] < 10]
    assert unfinished["status"].eq("stopped").all(), runs
    assert "client-round budget: " in done.stdout


def test_a_study_continued_elsewhere_from_its_compacted_copy_chooses_and_scores_the_same(
    tmp_path,
):
    """The long studies' own path across machines: a study stopped by Ctrl-C mid-search
    (recorded interrupted), its settled runs carried in ``compact --update RESULTS SHARED``,
    ``expand``ed and ``--resume``d: the same choices in ``study.json`` and the same final rows
    as the study run undisturbed. (A driver killed outright: the sweep tests above.)"""
    from reuse_ray.cli import main

    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(STUDY))
    calm, hit = tmp_path / "calm", tmp_path / "hit"
    _sweep_to_the_end(spec, calm)
    first = _ctrl_c(_args(spec, hit), hit, "search", finished=1)
    assert first.returncode == 130, first.stdout[-2000:] + first.stderr[-2000:]
    assert INTERRUPTED_LINE in first.stderr and "final:" not in first.stdout
    meta = json.loads((hit / "study.json").read_text())
    assert meta["status"] == "interrupted" and meta["wall_s"] > 0
    assert not (hit / "report").exists()
    shared, there = tmp_path / "shared", tmp_path / "there"
    assert main(["compact", "--update", str(hit), str(shared)]) == 0
    left = read_table(hit, "runs")
    assert left["status"].eq("interrupted").any()  # left for a later copy
    settled = left["status"].isin(["finished", "diverged", "failed", "stopped"])
    assert set(read_table(shared, "runs")["run_id"]) == set(left.loc[settled, "run_id"])
    assert main(["expand", str(shared), str(there)]) == 0
    assert not (there / "_tune").exists()
    _sweep_to_the_end(spec, there, "--resume")
    a, b = (json.loads((f / "study.json").read_text()) for f in (calm, there))
    # the same choices (Tune names its trials afresh in every experiment)
    assert [d for d in _differing(a["choices"], b["choices"]) if ".trial_id:" not in d] == []
    assert len(b["attempts"]) == 2  # the record carried over: both launches
    keys = ["run_id", "label", "test_acc", "final_val_acc", "cum_up_measured"]
    got = [
        read_table(f, "runs").query("stage == 'final'")[keys].sort_values("run_id")
        for f in (calm, there)
    ]
    pd.testing.assert_frame_equal(got[0].reset_index(drop=True), got[1].reset_index(drop=True))
    # the copy updated from there then holds every row of every run table
    assert main(["compact", "--update", str(there), str(shared)]) == 0
    for table in ("runs", "rounds", "client_events", "clients"):
        x, y = read_table(there, table), read_table(shared, table)
        assert len(x) == len(y) and set(x["run_id"]) == set(y["run_id"]), table


def _differing(a, b, at: str = "") -> list[str]:
    """The paths where two JSON values differ (a failure names them)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            d for k in sorted(set(a) | set(b)) for d in _differing(a.get(k), b.get(k), f"{at}.{k}")
        ]
    return [] if a == b else [f"{at}: {a!r} != {b!r}"]
