"""Two scenarios side by side, by hand: ranks, the leaders, unable rows and arms of one only."""

from __future__ import annotations

import pandas as pd

from analysis.scenarios import leaders, main, scenario_table


def _readings(rows):
    cols = ["workload", "level", "arm", "label", "test acc", "Δ test acc vs the leader"]
    return pd.DataFrame([dict(zip(cols, r, strict=True)) for r in rows])


UNIFORM = _readings(
    [
        ("w", "up10", "a", "a@up10", "0.85 ± 0.01", ""),
        ("w", "up10", "b", "b", "0.84 ± 0.01", "-0.010 [-0.020, +0.000]"),
        ("w", "up10", "c", "", "unable: over", ""),
        ("w", "up50", "b", "b", "0.88 ± 0.01", ""),
    ]
)
SKEWED = _readings(
    [
        ("w", "up10", "b", "b", "0.80 ± 0.02", ""),
        ("w", "up10", "a", "a@up10", "0.70 ± 0.05", "-0.100 [-0.150, -0.050]"),
        ("w", "up10", "d", "d", "0.60 ± 0.01", "-0.200 [-0.210, -0.190]"),
    ]
)


def test_each_arm_has_its_rank_and_difference_in_each_scenario():
    t = scenario_table({"uniform": UNIFORM, "skewed": SKEWED})
    rows = {(r.level, r.arm): r for r in t.itertuples(index=False)}
    # the first scenario's order: its leader first, the unable row after the read ones, then
    # an arm only the second scenario holds; the next level after
    order = [("up10", "a"), ("up10", "b"), ("up10", "c"), ("up10", "d"), ("up50", "b")]
    assert list(zip(t["level"], t["arm"], strict=True)) == order
    a = t.iloc[0]
    assert (a["uniform: rank"], a["skewed: rank"]) == ("1", "2")
    assert a["skewed: Δ vs leader"] == "-0.100 [-0.150, -0.050]" and a["uniform: Δ vs leader"] == ""
    assert rows[("up10", "c")][5] == "-"  # unable: no rank, its reason kept
    assert t.iloc[2]["uniform: test acc"] == "unable: over" and t.iloc[2]["skewed: rank"] == "-"
    assert t.iloc[3]["uniform: rank"] == "-" and t.iloc[3]["skewed: rank"] == "3"
    assert t.iloc[4]["skewed: test acc"] == ""  # the skewed study has no 50 % level here


def test_the_leaders_are_named_per_level_and_scenario():
    assert leaders({"uniform": UNIFORM, "skewed": SKEWED}) == [
        "- w, up10: uniform — a; skewed — b",
        "- w, up50: uniform — b",
    ]


def test_a_scenario_without_a_name_or_a_study_is_one_line_and_exit_2(capsys, tmp_path):
    assert main(["just/a/folder"]) == 2
    assert "NAME=FOLDER" in capsys.readouterr().err
    assert main([f"x={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no study.json" in err


def test_a_verdict_column_comes_along_where_the_readings_have_one():
    uniform = UNIFORM.assign(verdict=["leader", "within", "unable", "leader"])
    t = scenario_table({"uniform": uniform, "skewed": SKEWED})
    assert t["uniform: verdict"].tolist() == ["leader", "within", "unable", "", "leader"]
    assert "skewed: verdict" not in t
