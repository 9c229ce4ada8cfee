"""What the trials table records of a trial: the runs table's record first. A trial Tune marks
errored after its run finished and was recorded (restored, after a killed driver, from a
checkpoint pruned since) keeps the finished run's status and values; a trial whose run did not
finish is ``error``. A run a killed driver left ``running`` that its resumed search never ran
again is recorded ``stopped``."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from reuse_ray.tuning.trials import _recorded

PRUNED = ValueError("Could not recover from checkpoint as it does not exist on storage anymore.")


@dataclass
class Result:
    metrics: dict = field(default_factory=dict)
    error: BaseException | None = None


def _runs(status: str, error=None) -> pd.DataFrame:
    row = {
        "run_id": "r1",
        "status": status,
        "trial_id": "t_00000",
        "final_val_acc": 0.75,
        "cum_up_restricted": 1000.0,
        "cum_saving_restricted": 0.5,
        "rounds_completed": 10,
        "error": error,
    }
    return pd.DataFrame([row]).set_index("run_id")


def test_a_run_recorded_finished_stays_finished_whatever_tune_said_afterwards():
    rec = _recorded(Result({"trial_id": "t_00000"}, PRUNED), "r1", _runs("finished"))
    assert rec["status"] == "finished" and rec["error"] is None
    assert (rec["val_acc"], rec["round_reached"], rec["trial_id"]) == (0.75, 10, "t_00000")


def test_a_trial_that_failed_before_its_run_finished_is_an_error_with_tunes_reason():
    rec = _recorded(Result({"trial_id": "t_00000"}, PRUNED), "r1", _runs("running"))
    assert rec["status"] == "error" and rec["error"].startswith("Could not recover")
    reported = Result({"status": "error", "error": "UserError: bad", "trial_id": "t_00000"})
    assert _recorded(reported, "r1", _runs("diverged"))["status"] == "error"
    # no runs row at all: what the trial reported, an error
    alone = _recorded(Result({"trial_id": "t_00000"}, PRUNED), "r1", None)
    assert alone["status"] == "error" and alone["error"].startswith("Could not recover")


def test_a_run_a_killed_driver_left_running_is_stopped_when_its_resumed_search_ends(tmp_path):
    """A resumed search that ended without running a killed run's trial again (its budget
    spent): the run is recorded ``stopped`` with its rounds; a finished run, a run of another
    stage or sweep and a run whose trial ended in an error keep their rows."""
    from types import SimpleNamespace

    from reuse_ray.results import RunWriter, read_table
    from reuse_ray.tuning.launch import settle_left_running

    rows = {
        "left": ("s", "search", "running", "t1"),
        "done": ("s", "search", "finished", "t2"),
        "broke": ("s", "search", "running", "t3"),
        "final": ("s", "final", "running", "t4"),
        "other": ("o", "search", "running", "t5"),
    }
    for run_id, (sweep, stage, status, trial) in rows.items():
        w = RunWriter(tmp_path, run_id, "fedavg")
        w.add("rounds", {"run_id": run_id, "seed": 1, "round": 1, "val_acc": 0.5})
        w.set_run_row(
            {
                "run_id": run_id,
                "seed": 1,
                "sweep": sweep,
                "stage": stage,
                "status": status,
                "trial_id": trial,
                "rounds_completed": 1,
            }
        )
        w.flush(("runs", "rounds"))
    spec = SimpleNamespace(results_dir=str(tmp_path), name="s")
    errored = [SimpleNamespace(metrics={"trial_id": "t3"}, error=RuntimeError("boom"))]
    assert settle_left_running(spec, "search", errored) == 1
    got = read_table(tmp_path, "runs").set_index("run_id")
    assert got.loc["left", "status"] == "stopped" and got.loc["left", "rounds_completed"] == 1
    assert pd.isna(got.loc["left", "error"])
    assert {r: got.loc[r, "status"] for r in ("done", "broke", "final", "other")} == {
        "done": "finished",
        "broke": "running",
        "final": "running",
        "other": "running",
    }
    assert settle_left_running(spec, "search", errored) == 0  # nothing left to settle
