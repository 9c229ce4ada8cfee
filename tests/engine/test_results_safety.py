"""No finished result is ever lost, and no results file can run code."""

from __future__ import annotations

import os
import pickle

import pytest
from conftest import crash_at, small_config

from reuse_ray.checkpoint import CheckpointError
from reuse_ray.engine import RunHooks
from reuse_ray.errors import UserError
from reuse_ray.results import read_table
from reuse_ray.runner import run_fl


def _tables(root):
    return {t: read_table(root, t) for t in ("runs", "rounds", "client_events")}


def test_rerunning_a_finished_run_never_destroys_it(tmp_path):
    cfg = small_config(tmp_path, fl__rounds=3)
    assert run_fl(cfg).status == "finished"
    before = _tables(cfg.results_dir)
    with pytest.raises(UserError, match="already finished .* --force"):
        run_fl(cfg)
    with pytest.raises(KeyboardInterrupt):  # --force, killed at round 2
        run_fl(cfg, backend=crash_at(2), force=True)
    after = _tables(cfg.results_dir)
    assert after["runs"].iloc[0]["status"] == "finished" and len(after["rounds"]) == 3
    for t in before:
        assert (
            before[t]
            .drop(columns=["wall_s", "round_wall_s", "started_at"], errors="ignore")
            .equals(
                after[t].drop(columns=["wall_s", "round_wall_s", "started_at"], errors="ignore")
            )
        )
    # a forced attempt that finishes replaces the rows, and leaves no hidden attempt behind
    assert run_fl(cfg, force=True).status == "finished"
    again = _tables(cfg.results_dir)
    assert len(again["rounds"]) == 3 and again["runs"].iloc[0]["status"] == "finished"
    left = [p for p in cfg_files(cfg.results_dir) if ".attempt." in p]
    assert left == []


def cfg_files(root):
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]


def test_an_unfinished_attempt_is_replaced_without_force(tmp_path):
    cfg = small_config(tmp_path, fl__rounds=3, fl__eval_every=1)
    with pytest.raises(KeyboardInterrupt):
        run_fl(cfg, backend=crash_at(3))
    assert read_table(cfg.results_dir, "runs").iloc[0]["status"] == "interrupted"
    assert run_fl(cfg).status == "finished"  # not a result yet: a plain rerun replaces it
    assert len(read_table(cfg.results_dir, "rounds")) == 3


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch PWNED_BY_RESUME",))


def test_a_crafted_resume_file_runs_no_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = small_config(tmp_path)
    with pytest.raises(CheckpointError, match="not a reuse_ray checkpoint"):
        run_fl(cfg, hooks=RunHooks(resume=pickle.dumps({"round": 1, "x": _Boom()})))
    assert not (tmp_path / "PWNED_BY_RESUME").exists()


def _cli_config(tmp_path, rounds: int):
    """A quick local run config file for the CLI (digits, 10 clients, 2 a round)."""
    import yaml

    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "seed": 1,
                "data": {"name": "digits"},
                "engine": {"backend": "local"},
                "fl": {"num_clients": 10, "clients_per_round": 2, "rounds": rounds},
            }
        )
    )
    return config


def test_a_full_disk_is_one_line_and_keeps_what_was_written(tmp_path, monkeypatch, capsys):
    """Writes fail with ENOSPC after the run's first round (a filesystem filling up): the CLI
    says which file it could not write, exit 2, and the tables written before stay readable,
    with no temporary file left."""
    import errno

    import pyarrow.parquet as pq

    from reuse_ray.cli import main

    real, calls = pq.write_table, []

    def filling_up(table, where, *args, **kwargs):
        calls.append(1)
        if len(calls) > 4:  # the first flushes (clients, round 1's rows, the runs row) fit
            raise OSError(
                errno.ENOSPC,
                "Error writing bytes to file. Detail: [errno 28] No space left on device",
            )
        return real(table, where, *args, **kwargs)

    monkeypatch.setattr(pq, "write_table", filling_up)
    config = _cli_config(tmp_path, rounds=4)
    results = tmp_path / "res"
    assert main(["run", str(config), "--results", str(results)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "No space left on device" in err[0] and ".parquet" in err[0], err
    assert "the rows written before it are kept" in err[0]
    monkeypatch.setattr(pq, "write_table", real)
    written = {t: read_table(results, t) for t in ("clients", "runs")}  # readable, whole
    assert len(written["clients"]) == 10 and len(written["runs"]) == 1
    assert not [p for p in results.rglob("*") if p.name.startswith(".")]


def test_sigterm_ends_a_run_as_ctrl_c_does(tmp_path, monkeypatch, capsys):
    """``ray job stop`` or a scheduler's preemption sends SIGTERM: the CLI ends the run as on
    Ctrl-C — one line, exit 143, the runs row marked interrupted with the rounds it finished and
    the rounds table holding exactly those (it used to die with the row left 'running')."""
    import signal

    from reuse_ray.cli import main
    from reuse_ray.engine import LocalBackend

    real = LocalBackend.run_round

    def preempted(self, t, selected):
        if t == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, t, selected)

    monkeypatch.setattr(LocalBackend, "run_round", preempted)
    config = _cli_config(tmp_path, rounds=6)
    handler = signal.getsignal(signal.SIGTERM)
    assert main(["run", str(config), "--results", str(tmp_path / "res")]) == 143
    assert signal.getsignal(signal.SIGTERM) is handler  # put back when the command ends
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [
        "reuse-ray: terminated by signal 15 — the run is recorded as interrupted; rerun the "
        "command to start it again"
    ]
    runs = read_table(tmp_path / "res", "runs")
    assert runs.iloc[0]["status"] == "interrupted"
    assert runs.iloc[0]["error"] == "terminated by signal 15"
    assert runs.iloc[0]["rounds_completed"] == 2
    assert sorted(read_table(tmp_path / "res", "rounds")["round"]) == [1, 2]


def test_files_written_before_a_column_existed_read_as_nulls_beside_newer_ones(tmp_path):
    """The reader takes every file's columns (a config field added later, a method registered
    later), not only those of the first file it meets."""
    import pandas as pd

    from reuse_ray.results import read_table

    for name, frame in (
        ("a-old", pd.DataFrame({"run_id": ["a-old"], "seed": [1]})),
        ("b-new", pd.DataFrame({"run_id": ["b-new"], "seed": [2], "cfg.data.train_subset": [500]})),
    ):
        folder = tmp_path / "runs" / "method=fedavg"
        folder.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(folder / f"{name}.parquet")
    runs = read_table(tmp_path, "runs").sort_values("run_id")
    assert runs["cfg.data.train_subset"].isna().tolist() == [True, False]
    assert runs["cfg.data.train_subset"].iloc[1] == 500
    assert runs["method"].tolist() == ["fedavg", "fedavg"]
