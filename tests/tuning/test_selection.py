"""One selection rule for a sweep's arm and a study's arms (tuning/selection.py), on hand-made
trials tables: hand-checked choices for each objective, ties, the retention fallback a sweep's
searcher needs, robust selection's candidates and means."""

from __future__ import annotations

import pandas as pd
import pytest

from reuse_ray.tuning import selection
from reuse_ray.tuning.reeval import PENALTY


def _rows(specs, arm=None):
    """(val_acc, saving, status) per search row, in drawn order."""
    rows = [
        {
            "stage": "search",
            "run_id": f"r{k}",
            "params_json": f'{{"k": {k}}}',
            "status": status,
            "val_acc": val,
            "cum_saving_restricted": saving,
            "seed": 5,
        }
        for k, (val, saving, status) in enumerate(specs)
    ]
    out = pd.DataFrame(rows)
    return out if arm is None else out.assign(arm=arm)


TABLE = [
    (0.90, 0.10, "finished"),  # r0: most accurate, saves little
    (0.90, 0.20, "finished"),  # r1: as accurate, drawn later
    (0.88, 0.70, "finished"),  # r2: keeps a 0.98 × 0.90 = 0.882 bar? no (0.88 < 0.882)
    (0.885, 0.60, "finished"),  # r3: keeps the bar, saves most among those that do
    (0.95, 0.99, "stopped"),  # r4: stopped early: never chosen
    (None, 0.90, "diverged"),  # r5: diverged
]


def test_val_acc_picks_the_most_accurate_and_a_tie_goes_to_the_first_drawn():
    got = selection.choose(selection.values(_rows(TABLE), ()), ["val_acc"], None, top=2)
    assert got[None]["val_acc"]["run_id"].tolist() == ["r0", "r1"]


def test_retention_keeps_the_bar_then_saves_most_and_a_sweep_falls_back_below_it():
    bar = 0.98 * 0.90
    rows = selection.values(_rows(TABLE), ())
    assert selection.choose(rows, ["retention"], bar, top=1)[None]["retention"][
        "run_id"
    ].tolist() == ["r3"]
    # below the bar: a sweep's searcher still needs a ranking, most accurate first
    ranked = selection.ranking(selection.eligible(rows), "retention", bar, fallback=True)
    assert ranked["run_id"].tolist() == ["r3", "r1", "r0", "r2"]
    # no row keeps a bar of 0.99: a study chooses nothing for retention, a sweep the best val
    assert selection.choose(rows, ["retention"], 0.99) == {}
    assert selection.choose(rows, ["retention"], 0.99, fallback=True)[None]["retention"][
        "run_id"
    ].tolist() == ["r0"]


def test_a_study_chooses_per_arm_and_a_sweep_table_read_back_is_one_arm():
    table = pd.concat([_rows(TABLE[:2], "a"), _rows(TABLE[2:4], "b")], ignore_index=True)
    got = selection.choose(selection.values(table, ()), ["val_acc"], None)
    assert {arm: g["val_acc"]["run_id"].tolist() for arm, g in got.items()} == {
        "a": ["r0"],
        "b": ["r1"],  # b's rows are r0, r1 of their own table: 0.88, 0.885
    }
    read_back = _rows(TABLE).assign(arm=None)  # a sweep's trials table has an empty arm column
    assert list(selection.choose(selection.values(read_back, ()), ["val_acc"], None)) == [None]


def test_robust_selection_chooses_among_candidates_by_the_mean_and_a_failed_rerun_is_the_penalty():
    search = _rows(TABLE)
    cands = selection.candidates(search, ["val_acc"], None, top=2)
    assert cands["run_id"].tolist() == ["r0", "r1"]
    again = pd.DataFrame(
        [  # r0 again: 0.70 (lucky at first); r1 again: diverged (the penalty)
            {
                "stage": "reeval",
                "run_id": "q0",
                "params_json": '{"k": 0}',
                "status": "finished",
                "val_acc": 0.70,
                "cum_saving_restricted": 0.10,
                "seed": 7,
            },
            {
                "stage": "reeval",
                "run_id": "q1",
                "params_json": '{"k": 1}',
                "status": "diverged",
                "val_acc": None,
                "cum_saving_restricted": None,
                "seed": 7,
            },
        ]
    )
    values = selection.values(pd.concat([search, again], ignore_index=True), (7,))
    mean = values.set_index("run_id")["selection_mean"]
    assert mean["r0"] == pytest.approx((0.90 + 0.70) / 2)
    assert mean["r1"] == pytest.approx((0.90 + PENALTY) / 2)
    assert mean[["r2", "r3"]].isna().all()  # not candidates: no mean, never chosen
    got = selection.choose(values, ["val_acc"], None, top=3, robust=True)
    assert got[None]["val_acc"]["run_id"].tolist() == ["r0", "r1"]
