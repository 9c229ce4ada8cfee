"""Readings at uplink levels: the model read at the last round whose cumulative uplink stays
within a byte budget, in both ledgers, validation and (once per reading round) test."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import small_config

from reuse_ray.accounting import RoundBytes
from reuse_ray.config import ConfigError
from reuse_ray.engine import RunHooks
from reuse_ray.engine.levels import crossed, level_bytes
from reuse_ray.engine.observers import SaveCheckpoints
from reuse_ray.results import read_table
from reuse_ray.results.reader import read_table_if_any
from reuse_ray.runner import run_fl

DENSE = {"method__topk_ratio": 1.0, "fl__rounds": 6, "fl__eval_every": 3}


def _levels(results_dir) -> pd.DataFrame:
    lv = read_table(results_dir, "levels")
    return lv.sort_values(["ledger", "level"]).reset_index(drop=True)


def test_level_bytes_and_crossings_by_hand():
    # T = 6 rounds, K = 4 clients, B0 = 100 bytes: dense uplink 2,400 bytes
    assert level_bytes((0.1, 0.25, 1.0), 6, 4, 100) == {0.1: 240, 0.25: 600, 1.0: 2400}
    limits = {0.1: 240, 0.25: 600}
    before = RoundBytes(up_restricted=200, up_measured=240)
    after = RoundBytes(up_restricted=400, up_measured=481)
    # restricted: 200 <= 240 < 400 crosses 0.1 only; measured: 240 <= 240 < 481 crosses 0.1,
    # and neither reaches 600
    assert crossed(before, after, limits) == [("restricted", 0.1), ("measured", 0.1)]
    # exactly at the limit is within it
    assert crossed(before, RoundBytes(up_restricted=240, up_measured=240), limits) == []
    # one round may cross several levels
    big = RoundBytes(up_restricted=700, up_measured=700)
    assert crossed(before, big, limits) == [
        ("restricted", 0.1),
        ("restricted", 0.25),
        ("measured", 0.1),
        ("measured", 0.25),
    ]


def test_levels_are_fractions_in_0_1(tmp_path):
    for bad in ([0.0], [1.5]):
        with pytest.raises(ConfigError, match="uplink_levels"):
            small_config(tmp_path, fl__uplink_levels=bad)


def test_a_level_crossed_between_validations_is_read_at_its_last_round_within(tmp_path):
    """Dense FedAvg, 6 rounds of 4 clients, validation at 1, 3, 6. Each round costs 4·B0
    restricted and 4·(B0 + h) measured bytes. Level 0.4 (9.6 rounds' worth of a client…: 2.4
    rounds) is crossed by round 3: read at round 2, which is no validation round; its numbers
    are round 2's in a run validating every round. A level set just above two rounds'
    restricted bytes is read at round 2 in the restricted ledger and at round 1 in the measured
    one (its headers cross it). Level 1.0 holds T rounds' restricted bytes exactly (cap, read at
    T) and is crossed by the measured ledger in round 6 (read at 5)."""
    first = small_config(tmp_path / "probe", **DENSE)
    run_fl(first)
    b0 = int(read_table(first.results_dir, "runs").iloc[0]["dense_bytes"])
    dense = 6 * 4 * b0
    just_above_two = (2 * 4 * b0 + 1) / dense  # within 2 rounds restricted, not measured
    assert level_bytes((just_above_two,), 6, 4, b0)[just_above_two] >= 2 * 4 * b0
    levels = [0.4, just_above_two, 1.0]
    cfg = small_config(tmp_path / "levels", **DENSE, fl__uplink_levels=levels)
    summary = run_fl(cfg)
    assert summary.status == "finished"
    lv = _levels(cfg.results_dir)
    every = small_config(tmp_path / "every", **{**DENSE, "fl__eval_every": 1})
    run_fl(every)
    rounds = read_table(every.results_dir, "rounds").set_index("round")
    plain = read_table(first.results_dir, "rounds").set_index("round")

    got = {(r.ledger, r.level): (r.status, r.round) for r in lv.itertuples()}
    assert got == {
        ("restricted", 0.4): ("crossed", 2),
        ("measured", 0.4): ("crossed", 2),
        ("restricted", just_above_two): ("crossed", 2),
        ("measured", just_above_two): ("crossed", 1),
        ("restricted", 1.0): ("cap", 6),
        ("measured", 1.0): ("crossed", 5),
    }
    for r in lv.itertuples():
        # the reading is that round's model: the validation of a run validating every round
        assert r.val_acc == rounds.loc[r.round, "val_acc"]
        assert r.val_loss == rounds.loc[r.round, "val_loss"]
        assert r.cum_up == plain.loc[r.round, f"cum_up_{r.ledger}"] <= r.level_bytes
        if r.status == "crossed":
            assert plain.loc[r.round + 1, f"cum_up_{r.ledger}"] > r.level_bytes
        assert pd.notna(r.test_acc)
    # the test split: once at T and once per distinct earlier reading round (1, 2, 5)
    runs = read_table(cfg.results_dir, "runs").iloc[0]
    assert runs["test_reads"] == 4
    cap = lv[lv.status.eq("cap")].iloc[0]
    assert cap.test_acc == runs["test_acc"] and cap.val_acc == runs["final_val_acc"]
    # the readings change no number of the run
    keep = ["round", "val_acc", "cum_up_restricted", "cum_up_measured", "train_loss"]
    pd.testing.assert_frame_equal(
        read_table(cfg.results_dir, "rounds")[keep].sort_values("round").reset_index(drop=True),
        plain.reset_index()[keep].sort_values("round").reset_index(drop=True),
        check_exact=True,
    )


def test_a_level_below_one_round_reads_the_initial_model_and_a_search_no_test(tmp_path):
    cfg = small_config(tmp_path, **DENSE, fl__uplink_levels=[0.05])  # 1.2 clients' uploads
    run_fl(cfg, hooks=RunHooks(stage="search", evaluate_test=False))
    lv = _levels(cfg.results_dir)
    assert lv["status"].tolist() == ["over", "over"] and lv["round"].tolist() == [0, 0]
    assert lv["cum_up"].tolist() == [0, 0]
    assert lv["val_acc"].notna().all() and lv["test_acc"].isna().all()
    assert read_table(cfg.results_dir, "runs").iloc[0]["test_reads"] == 0


def test_a_run_without_levels_writes_no_levels_table(tmp_path):
    cfg = small_config(tmp_path)
    run_fl(cfg)
    assert read_table_if_any(cfg.results_dir, "levels") is None


def test_a_diverged_run_records_the_levels_it_never_read(tmp_path):
    cfg = small_config(tmp_path, **DENSE, train__lr=1e6, fl__uplink_levels=[0.9])
    summary = run_fl(cfg)
    assert summary.status == "diverged"
    lv = _levels(cfg.results_dir)
    assert lv["status"].eq("diverged").all() and lv["val_acc"].isna().all()


def test_a_resumed_run_reads_its_levels_as_an_undisturbed_one(tmp_path):
    kw = {
        **DENSE,
        "method__name": "dg_fedreuse",
        "method__topk_ratio": 0.3,
        "method__dg__tau0": 0.3,
        "method__dg__tau_min": 0.2,
        "fl__uplink_levels": [0.1, 0.15, 0.25],
    }
    straight = small_config(tmp_path / "straight", **kw)
    blobs = {}
    run_fl(
        straight,
        hooks=RunHooks(
            checkpoint_every=2, observers=(SaveCheckpoints(lambda b, t: blobs.setdefault(t, b)),)
        ),
    )
    a = _levels(straight.results_dir)
    assert a["status"].eq("crossed").any()
    for t in (2, 4):
        resumed = small_config(tmp_path / f"resumed{t}", **kw)
        run_fl(resumed, hooks=RunHooks(resume=blobs[t]))
        pd.testing.assert_frame_equal(a, _levels(resumed.results_dir), check_exact=True)


def test_readings_are_on_disk_with_the_rounds_while_the_run_goes_on(tmp_path):
    """Readings flush with the rounds (at validation rounds): a watcher, or a run killed
    outright later, finds them before the run ends."""
    from reuse_ray.engine.observers import OnRound

    cfg = small_config(tmp_path, **DENSE, fl__uplink_levels=[0.3])  # crossed in round 2
    seen = {}

    def look(row, blob):
        if row["round"] == 3:  # a validation round, after the reading at round 1
            seen["levels"] = read_table_if_any(cfg.results_dir, "levels")

    run_fl(cfg, hooks=RunHooks(observers=(OnRound(look),)))
    assert seen["levels"] is not None
    assert sorted(seen["levels"]["round"].tolist()) == [1, 1]
