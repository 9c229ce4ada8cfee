"""The data-only checkpoint format: exact round trips, and nothing in a file runs code."""

from __future__ import annotations

import io
import json
import math
import os
import pickle

import pytest
import torch
from conftest import make_layout

from reuse_ray import checkpoint
from reuse_ray.accounting import RoundBytes
from reuse_ray.algorithms.dg_fedreuse import DGState
from reuse_ray.algorithms.table import ClientTable
from reuse_ray.codecs import SparseUpdate, pack
from reuse_ray.engine.recorder import RunCheckpoint


def test_round_trip_of_a_run_checkpoint_is_exact():
    layout = make_layout(3, 2)
    packed = pack(SparseUpdate(5, torch.tensor([1, 4]), torch.tensor([0.5, -2.0])), layout)
    state = DGState(ClientTable.from_values({3: packed}), {3: 2}, {3: torch.tensor([1.0, 2.0])})
    ck = RunCheckpoint(
        round=4,
        cum=RoundBytes(1, 2, 3, 4, 5),
        total_steps=7,
        last_val=(0.5, float("nan")),
        rows={"rounds": [{"round": 1, "val_acc": None, "x": float("inf")}], "client_events": []},
        server={
            "w": torch.arange(5.0),
            "state": state,
            "local": ClientTable.from_values({0: (0.25, 3), 1: torch.ones(2)}),
            "seen": frozenset({1, 2}),
            "b": b"",
        },
    )
    back = checkpoint.loads(checkpoint.dumps(ck))
    assert isinstance(back, RunCheckpoint) and back.round == 4 and back.cum == ck.cum
    assert back.last_val[0] == 0.5 and math.isnan(back.last_val[1])
    assert back.rows["rounds"][0] == {"round": 1, "val_acc": None, "x": float("inf")}
    assert torch.equal(back.server["w"], torch.arange(5.0))
    s = back.server["state"]
    assert isinstance(s, DGState) and s.last_fresh == {3: 2} and s.cache[3] == packed
    assert torch.equal(s.signature[3], torch.tensor([1.0, 2.0]))
    local = back.server["local"]
    assert local[0] == (0.25, 3) and torch.equal(local[1], torch.ones(2))
    assert back.server["seen"] == frozenset({1, 2}) and back.server["b"] == b""


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch PWNED_BY_CHECKPOINT",))


def test_a_crafted_pickle_never_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for blob in (pickle.dumps(_Boom()), pickle.dumps({"format": checkpoint.FORMAT, "x": _Boom()})):
        with pytest.raises(checkpoint.CheckpointError, match="not a reuse_ray checkpoint"):
            checkpoint.loads(blob)
    buf = io.BytesIO()
    torch.save({"format": checkpoint.FORMAT, "tree": "null", "tensors": [], "x": _Boom()}, buf)
    with pytest.raises(checkpoint.CheckpointError):
        checkpoint.loads(buf.getvalue())
    assert not (tmp_path / "PWNED_BY_CHECKPOINT").exists()


def _doc(tree, fmt=checkpoint.FORMAT) -> bytes:
    buf = io.BytesIO()
    torch.save({"format": fmt, "tree": json.dumps(tree), "tensors": []}, buf)
    return buf.getvalue()


def test_only_package_dataclasses_are_rebuilt_and_the_version_is_checked():
    outside = {"__dataclass__": "subprocess:CompletedProcess", "fields": {}}
    with pytest.raises(checkpoint.CheckpointError, match="outside reuse_ray; refused"):
        checkpoint.loads(_doc(outside))
    not_dc = {"__dataclass__": "reuse_ray.checkpoint:CheckpointError", "fields": {}}
    with pytest.raises(checkpoint.CheckpointError, match="not a dataclass"):
        checkpoint.loads(_doc(not_dc))
    with pytest.raises(checkpoint.CheckpointError, match="this version reads"):
        checkpoint.loads(_doc(None, fmt="reuse_ray.checkpoint/0"))


class _Marker:
    """Unpickling this touches a file: the proof that something was unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_resume_reads_every_trials_newest_checkpoint_first_and_names_a_bad_one(tmp_path):
    from reuse_ray.errors import UserError
    from reuse_ray.tuning.tune_files import check_trial_checkpoints

    exp = tmp_path / "_tune" / "s-search"
    good = checkpoint.dumps({"round": 4, "w": torch.arange(3.0)})

    def put(trial: str, point: str, blob: bytes | None) -> None:
        (exp / trial / point).mkdir(parents=True, exist_ok=True)
        if blob is not None:
            (exp / trial / point / "run_state.pt").write_bytes(blob)

    put("trial-a", "checkpoint_000000", b"garbage of an older point, never read")
    put("trial-a", "checkpoint_000001", good)
    put("trial-b", "checkpoint_000000", good)
    (exp / "trial-c").mkdir()  # a trial that never checkpointed
    assert check_trial_checkpoints(str(tmp_path), "s-search") == 2
    assert check_trial_checkpoints(str(tmp_path), "s-final") == 0  # not started

    put("trial-b", "checkpoint_000001", good[: len(good) // 2])  # truncated
    with pytest.raises(UserError, match=r"trial-b/checkpoint_000001/run_state\.pt: not a reuse"):
        check_trial_checkpoints(str(tmp_path), "s-search")
    marker = tmp_path / "unpickled"
    put("trial-b", "checkpoint_000001", pickle.dumps(_Marker(str(marker))))  # foreign
    with pytest.raises(UserError, match=r"trial-b/checkpoint_000001/run_state\.pt") as err:
        check_trial_checkpoints(str(tmp_path), "s-search")
    assert not marker.exists() and "\n" not in str(err.value)
    (exp / "trial-b" / "checkpoint_000001" / "run_state.pt").unlink()
    with pytest.raises(UserError, match=r"checkpoint_000001/run_state\.pt is missing"):
        check_trial_checkpoints(str(tmp_path), "s-search")
    # a checkpoint Tune asked for before the run's first checkpoint round says it holds no
    # state (the trial starts at round 1): not a lost file
    (exp / "trial-b" / "checkpoint_000001" / "no_run_state").write_bytes(b"")
    assert check_trial_checkpoints(str(tmp_path), "s-search") == 1


def test_a_stage_that_ended_keeps_each_trials_newest_checkpoint_only(tmp_path):
    from reuse_ray.tuning.tune_files import prune_checkpoints

    exp = tmp_path / "_tune" / "s-search"
    for trial, points in (("trial-a", (0, 1, 2, 10)), ("trial-b", (3,)), ("trial-c", ())):
        (exp / trial).mkdir(parents=True)
        (exp / trial / "result.json").write_text("{}")
        for i in points:
            (exp / trial / f"checkpoint_{i:06d}").mkdir()
            (exp / trial / f"checkpoint_{i:06d}" / "run_state.pt").write_bytes(b"x")
    other = tmp_path / "_tune" / "s-final" / "trial-d"
    for i in (0, 1):
        (other / f"checkpoint_{i:06d}").mkdir(parents=True)
    assert prune_checkpoints(str(tmp_path), "s-search") == 3
    assert sorted(p.name for p in (exp / "trial-a").iterdir()) == [
        "checkpoint_000010",  # the newest by number, not 000002 by name length
        "result.json",
    ]
    assert (exp / "trial-a" / "checkpoint_000010" / "run_state.pt").read_bytes() == b"x"
    assert sorted(p.name for p in (exp / "trial-b").iterdir()) == [
        "checkpoint_000003",
        "result.json",
    ]
    assert [p.name for p in (exp / "trial-c").iterdir()] == ["result.json"]
    assert len(list(other.iterdir())) == 2  # another stage's: untouched
    assert prune_checkpoints(str(tmp_path), "s-search") == 0
    assert prune_checkpoints(str(tmp_path), "s-never") == 0
