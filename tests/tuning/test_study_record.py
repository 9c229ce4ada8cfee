"""A study's record (``study.json``) while it runs: rewritten every ``heartbeat_s`` with the
wall time so far, so a launch killed without a word (its machine or session ended) loses at
most that much of its wall time; never rewritten as running once the study has ended."""

from __future__ import annotations

import json
import time

from reuse_ray.tuning import parse_experiment
from reuse_ray.tuning.record import Record

STUDY = {
    "name": "rec",
    "kind": "study",
    "budget": {"trials_per_arm": 1},
    "final": {"seeds": [1001]},
    "workloads": {
        "digits": {
            "seed": 1,
            "data": {"name": "digits"},
            "fl": {"num_clients": 4, "clients_per_round": 2, "rounds": 2},
        }
    },
    "arms": {"fedavg": {"fixed": {"method.name": "fedavg"}}},
}


def _meta(folder) -> dict:
    return json.loads((folder / "study.json").read_text())


def _wait_for(predicate, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_a_running_study_records_its_wall_time_as_it_goes_and_its_end_stays(tmp_path):
    rec = Record(parse_experiment(dict(STUDY, results_dir=str(tmp_path))))
    rec.heartbeat_s = 0.05
    assert not rec.started(False)
    rec.opened(False)
    first = _meta(tmp_path)
    assert first["status"] == "running" and len(first["attempts"]) == 1
    # nobody calls the record again, and still its wall time goes on
    assert _wait_for(lambda: _meta(tmp_path)["wall_s"] > first["wall_s"] + 0.1)
    rec.finished([], say=lambda line: None)
    end = _meta(tmp_path)
    assert end["status"] == "finished" and end["finished_at"]
    time.sleep(0.3)  # six heartbeats' time: none of them overwrote the end
    assert _meta(tmp_path) == end


def test_an_interrupted_study_stays_interrupted_and_a_resume_goes_on_from_its_wall_time(tmp_path):
    spec = parse_experiment(dict(STUDY, results_dir=str(tmp_path)))
    rec = Record(spec)
    rec.heartbeat_s = 0.05
    rec.started(False)
    rec.opened(False)
    assert _wait_for(lambda: _meta(tmp_path)["wall_s"] > 0.1)
    rec.interrupted()
    stopped = _meta(tmp_path)
    time.sleep(0.3)
    assert _meta(tmp_path) == stopped and stopped["status"] == "interrupted"
    again = Record(spec)
    assert again.started(True)
    again.opened(False)
    meta = _meta(tmp_path)
    assert meta["wall_s"] >= stopped["wall_s"] and len(meta["attempts"]) == 2
    again.closed()
