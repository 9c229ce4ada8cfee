"""The readings table's verdict column and its lines in words, against hand-computed paired
differences: `within` where the t 95 % interval holds 0, `behind`/`ahead` only where the
interval and the Holm-adjusted p-value agree, no verdict below five pairs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.frontier import _reading_rows, verdict, verdict_lines


@pytest.mark.parametrize(
    ("pairs", "lo", "hi", "p", "word"),
    [
        (5, -0.010, 0.020, 0.60, "within"),
        (5, -0.030, 0.000, 0.05, "within"),  # an interval that touches 0 holds it
        (5, -0.030, -0.010, 0.010, "behind"),
        (5, -0.030, -0.010, 0.200, "behind before Holm"),
        (6, 0.010, 0.030, 0.001, "ahead"),
        (4, math.nan, math.nan, math.nan, "4 pairs: undecided"),
    ],
)
def test_a_difference_in_words(pairs, lo, hi, p, word):
    assert verdict(pairs, lo, hi, p) == word


def _arm(name: str, accs: list[float]) -> tuple:
    ok = pd.DataFrame(
        {
            "seed": range(1001, 1001 + len(accs)),
            "test_acc": accs,
            "round": 40,
            "cum_up": 1e6,
        }
    )
    return (name, name, ok, 0, 0.9)


def test_each_arm_gets_the_verdict_its_paired_differences_give():
    lead = [0.85, 0.86, 0.84, 0.87, 0.85]
    # differences -0.02, -0.02, -0.01, -0.03, -0.02: mean -0.02, SD 0.00707, t_4 = 2.776,
    # half width 2.776 * 0.00707 / sqrt(5) = 0.00878: [-0.029, -0.011]; t = -6.32, p = 0.0032
    behind = [0.83, 0.84, 0.83, 0.84, 0.83]
    # differences +0.01, -0.01, +0.01, -0.01, 0.00: mean 0, the interval holds 0
    level = [0.86, 0.85, 0.85, 0.86, 0.85]
    rows = _reading_rows([_arm("a", lead), _arm("b", behind), _arm("c", level)], 0.1)
    words = {r["arm"]: r["verdict"] for r in rows}
    assert words == {"a": "leader", "b": "behind", "c": "within"}
    b = next(r for r in rows if r["arm"] == "b")
    assert b["Δ test acc vs the leader"] == "-0.020 [-0.029, -0.011]"
    d = np.array(behind) - np.array(lead)
    t = d.mean() / (d.std(ddof=1) / math.sqrt(5))
    assert t == pytest.approx(-6.325, abs=1e-3)
    # Holm over two comparisons: b's p (the smaller) times 2, below 0.05
    assert float(b["p (Holm)"]) < 0.05


def test_four_pairs_leave_a_difference_undecided():
    rows = _reading_rows([_arm("a", [0.9] * 4), _arm("b", [0.5] * 4)], 0.1)
    assert rows[1]["verdict"] == "4 pairs: undecided" and rows[1]["p (Holm)"] == ""


def test_the_lines_name_the_leader_and_each_verdict_with_its_interval():
    table = pd.DataFrame(
        [
            ("w", "up10", "a", "0.850 ± 0.010", "", "leader"),
            ("w", "up10", "b", "0.848 ± 0.010", "-0.002 [-0.010, +0.006]", "within"),
            ("w", "up10", "c", "0.800 ± 0.010", "-0.050 [-0.060, -0.040]", "behind"),
            ("w", "up10", "d", "0.840 ± 0.010", "-0.010 [-0.019, -0.001]", "behind before Holm"),
            ("w", "up10", "e", "0.700 ± 0.010", "-0.150 (3 pairs)", "3 pairs: undecided"),
            ("w", "up10", "f", "unable: over", "", "unable"),
            ("w", "up25", "g", "unable", "", "unable"),
        ],
        columns=["workload", "level", "arm", "test acc", "Δ test acc vs the leader", "verdict"],
    )
    assert verdict_lines(table) == [
        "w up10: a leads (0.850 ± 0.010); within its interval: b; "
        "behind: c -0.050 [-0.060, -0.040]; behind before Holm: d -0.010 [-0.019, -0.001]; "
        "undecided (too few pairs): e; unable: f",
        "w up25: no arm was read (g unable)",
    ]
