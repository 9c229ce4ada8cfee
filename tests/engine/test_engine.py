"""End-to-end runs of the local engine: determinism, paired schedules, ledgers, Parquet, faults."""

from __future__ import annotations

import dataclasses
import io
import json

import numpy as np
import pandas as pd
import pytest
from conftest import small_config

from reuse_ray.cli import main
from reuse_ray.config import DataConfig, FLConfig, MethodConfig, ModelConfig
from reuse_ray.data import load_dataset
from reuse_ray.engine import ClientError, LocalBackend
from reuse_ray.engine.observers import OnRound, SaveCheckpoints
from reuse_ray.engine.records import combine_batches
from reuse_ray.results import RUN_TABLES, TIMING_COLUMNS, ResultsError, read_table
from reuse_ray.runner import run_fl


def _tables(results_dir):
    return {t: read_table(results_dir, t) for t in ("runs", "rounds", "client_events", "clients")}


def _metrics(df: pd.DataFrame) -> pd.DataFrame:
    drop = [c for c in df.columns if c in TIMING_COLUMNS or c == "cfg.results_dir"]
    return df.drop(columns=drop).sort_values(list(df.columns[:1])).reset_index(drop=True)


def test_same_config_and_seed_give_bit_identical_parquet(tmp_path):
    a = small_config(tmp_path / "a")
    b = small_config(tmp_path / "b")
    assert a.run_id == b.run_id
    ra, rb = run_fl(a), run_fl(b)
    assert ra.status == rb.status == "finished"
    ta, tb = _tables(a.results_dir), _tables(b.results_dir)
    for name in ("rounds", "client_events", "clients"):
        pd.testing.assert_frame_equal(_metrics(ta[name]), _metrics(tb[name]), check_exact=True)
    keep = ["final_val_acc", "test_acc", "cum_up_restricted", "cum_up_measured", "client_steps"]
    pd.testing.assert_frame_equal(ta["runs"][keep], tb["runs"][keep], check_exact=True)
    assert ta["rounds"]["val_acc"].notna().sum() == 3  # rounds 1, 2 and the final round 3


def test_methods_with_one_seed_see_identical_partitions_and_schedules(tmp_path):
    runs = {}
    for method in ("fedavg", "fedprox", "fedadam"):
        cfg = small_config(tmp_path, method__name=method)
        run_fl(cfg)
        runs[method] = cfg
    ev = read_table(tmp_path / "results", "client_events")
    cl = read_table(tmp_path / "results", "clients")
    sched = {
        m: ev[ev.method == m][["round", "client_id"]].sort_values(["round", "client_id"]).to_numpy()
        for m in runs
    }
    parts = {
        m: cl[cl.method == m].sort_values("client_id")["class_counts"].map(tuple).tolist()
        for m in runs
    }
    assert np.array_equal(sched["fedavg"], sched["fedprox"])
    assert np.array_equal(sched["fedavg"], sched["fedadam"])
    assert parts["fedavg"] == parts["fedprox"] == parts["fedadam"]
    assert len(sched["fedavg"]) == 3 * 4
    # the methods did differ in what they learned
    rounds = read_table(tmp_path / "results", "rounds")
    finals = rounds[rounds["round"] == 3].set_index("method")["val_loss"]
    assert finals["fedavg"] != finals["fedadam"]


def test_topk_fedavg_cumulative_saving_and_downlink_sensitivity(tmp_path):
    cfg = small_config(
        tmp_path,
        data__name="synthetic",
        data__synthetic_shape=[1, 28, 28],
        data__synthetic_samples=400,
        model__hidden=128,
        fl__rounds=2,
        fl__eval_every=1,
    )
    run_fl(cfg)
    rounds = read_table(cfg.results_dir, "rounds").sort_values("round")
    last = rounds.iloc[-1]
    assert 0.76875 <= last["cum_saving_restricted"] < 0.76876
    # dense-downlink sensitivity: exactly half of the uplink saving, in integer bytes
    up, down, ref = (
        int(last[c]) for c in ("cum_up_restricted", "cum_down_sensitivity", "cum_dense_reference")
    )
    # by hand: every event is a fresh Top-K upload of the same layout, charged B0 of reference
    # and of downlink sensitivity
    from reuse_ray.codecs import restricted_update_bytes
    from reuse_ray.engine import make_setup, prepare_data

    events = len(read_table(cfg.results_dir, "client_events"))
    layout = make_setup(cfg, *prepare_data(cfg))[0].layout
    assert ref == events * layout.dense_bytes and down == ref
    assert up == events * restricted_update_bytes(layout, cfg.method.topk_ratio)
    assert last["cum_saving_bidirectional"] == pytest.approx(
        last["cum_saving_restricted"] / 2, rel=1e-12
    )
    # the measured ledger is the field model plus real framing, both ways
    assert (rounds["up_measured"] > rounds["up_restricted"]).all()
    assert (rounds["down_measured"] > rounds["down_sensitivity"]).all()


@pytest.mark.slow
def test_resnet18_topk_run_has_the_76_88_saving(tmp_path):
    cfg = small_config(
        tmp_path,
        data__name="synthetic",
        data__synthetic_shape=[3, 32, 32],
        data__synthetic_samples=60,
        model__name="resnet18",
        fl__num_clients=2,
        fl__clients_per_round=2,
        fl__rounds=1,
        partition__min_size=2,
        train__batch_size=16,
    )
    summary = run_fl(cfg)
    assert summary.row["dense_bytes"] == 44_764_968
    assert 0.76875 <= summary.row["cum_saving_restricted"] < 0.76876
    assert summary.row["cum_saving_bidirectional"] == pytest.approx(
        summary.row["cum_saving_restricted"] / 2, rel=1e-12
    )


def test_test_split_is_read_exactly_once_at_the_final_round(tmp_path):
    cfg = small_config(tmp_path, fl__rounds=4)
    data = load_dataset(cfg.data)
    summary = run_fl(cfg, data=data)
    assert data.test_reads == 1
    assert summary.row["test_round"] == 4 and summary.row["test_acc"] is not None


def test_rows_follow_the_declared_schema(tmp_path):
    import pyarrow.parquet as pq

    cfg = small_config(tmp_path, fl__uplink_levels=[0.5])  # every run table written
    run_fl(cfg)
    for table, schema in RUN_TABLES.items():
        files = list((tmp_path / "results" / table).rglob("*.parquet"))
        assert len(files) == 1
        assert pq.read_schema(files[0]).remove_metadata().equals(schema)
    runs = read_table(cfg.results_dir, "runs")
    row = runs.iloc[0]
    assert row["status"] == "finished" and row["cfg.method.topk_ratio"] == 0.2
    ev = read_table(cfg.results_dir, "client_events")
    assert set(ev["decision"]) == {"fresh"} and ev["gate_score"].isna().all()
    assert (ev.groupby("round")["weight"].sum() - 1.0).abs().max() < 1e-12


class _CrashingBackend(LocalBackend):
    def run_round(self, t, selected):
        if t == 3:
            raise ClientError(selected[0], 3, "local training", ValueError("corrupt data"))
        return super().run_round(t, selected)


def test_a_crash_marks_the_run_failed_and_keeps_written_rows(tmp_path):
    cfg = small_config(tmp_path, fl__rounds=5, fl__eval_every=1)
    with pytest.raises(ClientError, match="client .* failed in round 3"):
        run_fl(cfg, backend=_CrashingBackend())
    runs = read_table(cfg.results_dir, "runs")
    assert runs.iloc[0]["status"] == "failed" and "corrupt data" in runs.iloc[0]["error"]
    assert runs.iloc[0]["rounds_completed"] == 2 and pd.isna(runs.iloc[0]["test_acc"])
    assert sorted(read_table(cfg.results_dir, "rounds")["round"]) == [1, 2]
    leftovers = [p for p in (tmp_path / "results").rglob("*") if p.name.startswith(".")]
    assert leftovers == []


def test_an_interrupt_during_a_rounds_validation_claims_no_round_the_tables_lack(
    tmp_path, monkeypatch
):
    """Ctrl-C while round 3 validates (its training and server step done, its row not yet
    recorded): the runs row counts the 2 rounds the rounds table holds."""
    real, calls = LocalBackend.evaluate, []

    def evaluate(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(LocalBackend, "evaluate", evaluate)
    cfg = small_config(tmp_path, fl__rounds=5, fl__eval_every=1)
    with pytest.raises(KeyboardInterrupt):
        run_fl(cfg)
    runs = read_table(cfg.results_dir, "runs")
    assert runs.iloc[0]["status"] == "interrupted" and runs.iloc[0]["rounds_completed"] == 2
    assert runs.iloc[0]["final_round"] == 2
    assert sorted(read_table(cfg.results_dir, "rounds")["round"]) == [1, 2]


def test_divergence_is_recorded_with_last_finite_metrics(tmp_path):
    cfg = small_config(tmp_path, train__lr=2.0, fl__rounds=6, fl__eval_every=1)
    summary = run_fl(cfg)
    assert summary.status == "diverged"
    row = summary.row
    assert row["test_acc"] is None and 1 <= row["rounds_completed"] < 6
    assert f"round {row['rounds_completed'] + 1}" in row["error"]
    rounds = read_table(cfg.results_dir, "rounds")
    assert len(rounds) == row["rounds_completed"]
    last = rounds.sort_values("round").iloc[-1]
    assert np.isfinite(last["val_acc"]) and row["final_val_acc"] == last["val_acc"]


def test_corrupt_parquet_gives_a_clear_error(tmp_path):
    cfg = small_config(tmp_path, fl__rounds=1)
    run_fl(cfg)
    f = next((tmp_path / "results" / "rounds").rglob("*.parquet"))
    f.write_bytes(b"not parquet at all")
    with pytest.raises(ResultsError, match="corrupt Parquet file .*rounds"):
        read_table(cfg.results_dir, "rounds")


@pytest.mark.slow
def test_plain_fedavg_learns_digits(tmp_path):
    cfg = small_config(tmp_path)
    cfg = dataclasses.replace(
        cfg,
        model=ModelConfig(name="cnn", hidden=64),
        fl=FLConfig(num_clients=20, clients_per_round=10, rounds=15, eval_every=5),
        train=dataclasses.replace(cfg.train, epochs=2, batch_size=16),
        method=MethodConfig(name="fedavg", topk_ratio=1.0),
        data=DataConfig(name="digits"),
    )
    summary = run_fl(cfg)
    assert summary.row["final_val_acc"] > 0.8  # chance is 0.1
    assert summary.row["cum_saving_restricted"] == 0.0


@pytest.mark.slow
@pytest.mark.ray  # the quickstart's run is on the Ray engine: it starts a local Ray
def test_cli_run_and_bad_config(tmp_path, capsys):
    rc = main(
        [
            "run",
            "sweeps/quickstart.yaml",
            "--set",
            "fl.rounds=2",
            "--set",
            "train.epochs=1",
            "--results",
            str(tmp_path / "cli"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "round    2/2" in out and "test_acc=" in out
    assert len(read_table(tmp_path / "cli", "rounds")) == 2
    rc = main(["run", "sweeps/quickstart.yaml", "--set", "method.name=nope"])
    err = capsys.readouterr().err
    assert rc == 2 and "method.name" in err and "allowed: fedavg" in err


@pytest.mark.parametrize(
    "method", ["fedadam", "dg_fedreuse", "scaffold", "fedluar", "laq", "fedsteer", "mifa"]
)
def test_checkpoint_resume_is_bit_identical(tmp_path, method):
    from reuse_ray.engine import RunHooks

    kw = {"method__name": method, "fl__rounds": 5}
    kw.update(
        {
            "dg_fedreuse": {"method__dg__tau0": 0.3, "method__dg__tau_min": 0.2},
            "laq": {"method__laq__bits": 4},
            "fedsteer": {"method__fedsteer__core_size": 3},
        }.get(method, {})
    )
    if method in ("laq", "fedsteer"):
        kw["method__topk_ratio"] = 1.0
    straight = small_config(tmp_path / "straight", **kw)
    blobs = {}

    def blobs_at(blob, t):
        blobs[t] = blob

    run_fl(
        straight,
        hooks=RunHooks(checkpoint_every=2, observers=(SaveCheckpoints(blobs_at),)),
    )
    assert sorted(blobs) == [2, 4]
    resumed = small_config(tmp_path / "resumed", **kw)
    # a crashed first attempt that got to round 2, then a resume from its checkpoint
    run_fl(resumed, hooks=RunHooks(resume=blobs[2]))
    a, b = _tables(straight.results_dir), _tables(resumed.results_dir)
    for name in ("rounds", "client_events"):
        pd.testing.assert_frame_equal(_metrics(a[name]), _metrics(b[name]), check_exact=True)
    assert a["runs"].iloc[0]["test_acc"] == b["runs"].iloc[0]["test_acc"]
    for col in ("server_memory_bytes", "client_memory_bytes"):
        assert a["runs"].iloc[0][col] == b["runs"].iloc[0][col]
    assert len(b["rounds"]) == 5


def test_search_stage_never_reads_the_test_split(tmp_path):
    from reuse_ray.engine import RunHooks

    cfg = small_config(tmp_path)
    data = load_dataset(cfg.data)
    summary = run_fl(cfg, data=data, hooks=RunHooks(stage="search", evaluate_test=False))
    assert summary.status == "finished" and data.test_reads == 0
    row = read_table(cfg.results_dir, "runs").iloc[0]
    assert row["stage"] == "search" and row["test_reads"] == 0 and pd.isna(row["test_acc"])


def test_every_cfg_column_groups_in_pandas(tmp_path):
    """Scalars only in cfg.* columns (list fields are JSON strings), across several methods."""
    for method in ("fedavg", "mifa"):
        cfg = small_config(
            tmp_path,
            method__name=method,
            fl__rounds=1,
            fl__participation="groups",
            fl__group_probs=[0.5, 1.0],
        )
        run_fl(cfg)
    runs = read_table(cfg.results_dir, "runs")
    cols = [c for c in runs.columns if c.startswith("cfg.")]
    for c in cols:
        runs.groupby(c, dropna=False).size()  # raises TypeError on an unhashable value
    assert len(runs.drop_duplicates(cols)) == 2
    assert json.loads(runs["cfg.fl.group_probs"].iloc[0]) == [0.5, 1.0]
    assert json.loads(runs["cfg.data.synthetic_shape"].iloc[0]) == [1, 8, 8]


class _Deferred:
    """A validation the loop collects later (``result()``), as the Ray engine's tasks."""

    def __init__(self, compute):
        self.compute = compute

    def result(self):
        return self.compute()


class _OverlappingBackend(LocalBackend):
    """The local backend, validated the way the Ray engine is: w_t taken when round t ends,
    its validation collected after round t+1 has trained."""

    def __init__(self):
        super().__init__()
        self.deferred = self.inline = 0

    def validate_next_round(self):
        self.deferred += 1
        w = self.weights().clone()
        worker = self.pool.worker
        return _Deferred(lambda: combine_batches(worker.validate(w), len(self.setup.val)))

    def evaluate(self, split=None):
        self.inline += 1
        return super().evaluate(split)


def test_validation_overlapping_the_next_round_changes_no_number(tmp_path):
    from reuse_ray.engine import RunHooks

    seen = []
    kw = {"fl__rounds": 7, "fl__eval_every": 1, "method__name": "dg_fedreuse"}
    plain, overlapped = small_config(tmp_path / "a", **kw), small_config(tmp_path / "b", **kw)
    run_fl(plain)
    blobs = {}
    hooks = RunHooks(
        checkpoint_every=3,
        observers=(
            OnRound(lambda row, blob: seen.append((row["round"], row["val_acc"]))),
            SaveCheckpoints(lambda b, t: blobs.__setitem__(t, b)),
        ),
    )
    backend = _OverlappingBackend()
    run_fl(overlapped, backend=backend, hooks=hooks)
    a, b = _tables(plain.results_dir), _tables(overlapped.results_dir)
    for name in ("rounds", "client_events"):
        pd.testing.assert_frame_equal(_metrics(a[name]), _metrics(b[name]), check_exact=True)
    for col in ("test_acc", "final_val_acc", "cum_up_measured", "rounds_completed"):
        assert a["runs"].iloc[0][col] == b["runs"].iloc[0][col]
    # rounds reach the caller in order, each with its own validation
    assert [r for r, _ in seen] == list(range(1, 8))
    assert [v for _, v in seen] == a["rounds"].sort_values("round")["val_acc"].tolist()
    # the overlapped run deferred rounds 1, 2, 4 and 5; it validated the checkpoint rounds 3
    # and 6, the last round and the test split inline
    assert (backend.deferred, backend.inline) == (4, 4)
    assert sorted(blobs) == [3, 6]


class _OverlapCrash(_CrashingBackend, _OverlappingBackend):
    """Crashes in round 3 while round 2's validation runs beside it."""


def test_a_crash_while_a_validation_is_pending_keeps_that_rounds_rows(tmp_path):
    cfg = small_config(tmp_path, fl__rounds=5, fl__eval_every=1)
    with pytest.raises(ClientError, match="client .* failed in round 3"):
        run_fl(cfg, backend=_OverlapCrash())
    runs = read_table(cfg.results_dir, "runs")
    assert runs.iloc[0]["status"] == "failed" and runs.iloc[0]["rounds_completed"] == 2
    rounds = read_table(cfg.results_dir, "rounds").sort_values("round")
    assert rounds["round"].tolist() == [1, 2] and rounds["val_acc"].notna().all()


def test_a_hook_that_raises_on_an_overlapped_round_records_it_once(tmp_path):
    from reuse_ray.engine import RunHooks

    def stop_at_round_2(row, _blob):
        if row["round"] == 2:
            raise RuntimeError("stopped by the caller")

    cfg = small_config(tmp_path, fl__rounds=5, fl__eval_every=1)
    with pytest.raises(RuntimeError, match="stopped by the caller"):
        hooks = RunHooks(observers=(OnRound(stop_at_round_2),))
        run_fl(cfg, backend=_OverlappingBackend(), hooks=hooks)
    rounds = read_table(cfg.results_dir, "rounds")
    assert sorted(rounds["round"]) == [1, 2]  # each once, though round 3 had already trained


@pytest.mark.parametrize("augment", ["none", "crop_flip"])
def test_channels_last_local_update_matches_the_default_layout(augment):
    """``engine.channels_last``: the same ClientUpdate with channels-last convolutions — every
    element of Δ within float tolerance, the weights stay channels-last through a load."""
    import torch

    from reuse_ray.models import init_model, set_memory_format
    from reuse_ray.state import StateLayout
    from reuse_ray.training import local_update

    data = load_dataset(DataConfig(name="digits"))
    deltas = []
    for cl in (False, True):
        model = set_memory_format(init_model("cnn", data.info.shape, 10, seed=3, hidden=32), cl)
        layout = StateLayout.from_model(model)
        w0 = layout.flatten(model)
        res = local_update(
            model,
            layout,
            w0,
            {},
            data.train,
            np.arange(150),
            data.info,
            seed=5,
            round_=1,
            client=2,
            epochs=2,
            batch_size=32,
            lr=0.05,
            momentum=0.9,
            weight_decay=1e-4,
            augment=augment,
        )
        weight = model.conv2.weight  # 32 input channels (conv1's single one fits both layouts)
        assert weight.is_contiguous(memory_format=torch.channels_last) == cl
        assert weight.is_contiguous() != cl
        deltas.append(res.delta)
    assert torch.allclose(deltas[0], deltas[1], rtol=0, atol=1e-5)


def test_channels_last_runs_have_their_own_run_id_and_refuse_vectorize(tmp_path):
    base = small_config(tmp_path)
    cl = dataclasses.replace(base, engine=dataclasses.replace(base.engine, channels_last=True))
    assert cl.run_id != base.run_id
    assert run_fl(cl).status == "finished"
    with pytest.raises(ValueError, match="engine.channels_last"):
        small_config(tmp_path, engine__channels_last=True, engine__vectorize=True)


def test_a_backend_whose_workers_span_machine_kinds_says_so_once(tmp_path):
    """A backend's ``machine_note`` (the Ray backend's, when its workers run on several kinds
    of machine) is one progress line at the run's start; the numbers do not change."""
    from reuse_ray.machine import mixed_kinds_note

    note = mixed_kinds_note(
        [
            {"cpu": "A", "torch": "t", "capability": "X"},
            {"cpu": "B", "torch": "t", "capability": "X"},
        ]
    )

    class Mixed(LocalBackend):
        machine_note = note

    cfg = dataclasses.replace(
        small_config(tmp_path / "a"), fl=FLConfig(num_clients=4, clients_per_round=2, rounds=1)
    )
    lines: list[str] = []
    assert run_fl(cfg, backend=Mixed(), progress=lines.append).status == "finished"
    assert [ln for ln in lines if "note:" in ln] == [f"[{cfg.run_id}] note: {note}"]
    plain: list[str] = []
    run_fl(dataclasses.replace(cfg, results_dir=str(tmp_path / "b")), progress=plain.append)
    assert not any("note:" in ln for ln in plain)


def test_a_resumed_run_records_its_attempts_and_an_older_checkpoint_still_resumes(tmp_path):
    """The runs row says how a run got to its end: attempts, the round it resumed from, the
    first start and wall time over every attempt; a checkpoint written before these were kept
    (no such fields in its tree) resumes, its earlier time recorded as unknown."""
    import torch

    from reuse_ray import checkpoint
    from reuse_ray.engine import RunHooks

    kw = {"fl__rounds": 5}
    straight = small_config(tmp_path / "straight", **kw)
    blobs = {}
    run_fl(
        straight,
        hooks=RunHooks(
            checkpoint_every=2,
            observers=(SaveCheckpoints(lambda blob, t: blobs.__setitem__(t, blob)),),
        ),
    )
    first = read_table(straight.results_dir, "runs").iloc[0]
    assert first["attempts"] == 1 and pd.isna(first["resumed_from_round"])
    assert first["wall_s"] == first["attempt_wall_s"]
    assert first["started_at"] == first["attempt_started_at"]
    state = checkpoint.loads(blobs[2])
    assert state.attempts == 1 and state.started_at == first["started_at"]
    assert 0 < state.wall_s < first["wall_s"]

    resumed = small_config(tmp_path / "resumed", **kw)
    run_fl(resumed, hooks=RunHooks(resume=blobs[2]))
    row = read_table(resumed.results_dir, "runs").iloc[0]
    assert row["attempts"] == 2 and row["resumed_from_round"] == 2
    assert row["started_at"] == first["started_at"] <= row["attempt_started_at"]
    assert row["wall_s"] == pytest.approx(state.wall_s + row["attempt_wall_s"])
    assert row["test_acc"] == first["test_acc"]

    # the same checkpoint as an older version wrote it: no attempt fields in its tree
    doc = torch.load(io.BytesIO(blobs[2]), weights_only=True)
    tree = json.loads(doc["tree"])
    for name in ("attempts", "started_at", "wall_s"):
        del tree["fields"][name]
    doc["tree"] = json.dumps(tree)
    buf = io.BytesIO()
    torch.save(doc, buf)
    old = small_config(tmp_path / "old", **kw)
    run_fl(old, hooks=RunHooks(resume=buf.getvalue()))
    row = read_table(old.results_dir, "runs").iloc[0]
    assert row["attempts"] == 2 and row["resumed_from_round"] == 2
    assert pd.isna(row["started_at"]) and pd.isna(row["wall_s"]) and row["attempt_wall_s"] > 0
    assert row["test_acc"] == first["test_acc"]
