"""A study's search budget per arm, in the study's workload order, summed by hand."""

from __future__ import annotations

import pandas as pd

from analysis.studies import budget_summary, search_budget


def _row(sweep, arm, stage, status, client_rounds):
    return {
        "sweep": sweep,
        "arm": arm,
        "stage": stage,
        "status": status,
        "client_rounds": client_rounds,
    }


def test_the_budget_table_follows_the_studys_workloads_and_sums_by_hand():
    trials = pd.DataFrame(
        [  # the second workload's rows come first, as files may be read
            _row("s-fmnist", "a", "search", "finished", 200),
            _row("s-fmnist", "a", "search", "stopped", 50),
            _row("s-digits", "a", "search", "stopped", 50),
            _row("s-digits", "a", "search", "stopped", 50),
            _row("s-digits", "a", "search", "finished", 300),
            _row("s-digits", "a", "reeval", "finished", 300),
            _row("s-digits", "b", "search", "finished", 300),
            _row("s-digits", "b", "search", "finished", 100),
        ]
    )
    study = {"name": "s", "workloads": ["digits", "fmnist"], "client_rounds": {"digits": 400}}
    table = search_budget(trials, study)
    assert list(zip(table["workload"], table["arm"], strict=True)) == [
        ("digits", "a"),
        ("digits", "b"),
        ("fmnist", "a"),
    ]
    assert table["configurations"].tolist() == [3, 2, 2]
    assert table["stopped early"].tolist() == [2, 0, 1]
    assert table["client-rounds"].tolist() == [400, 400, 250]
    assert table["robust selection client-rounds"].tolist() == [300, "", ""]
    lines = budget_summary(table)
    assert lines[0] == (
        "digits: 2.5 configurations per arm (median; 2–3), 40 % of them stopped early; "
        "400 client-rounds spent per arm of 400, robust selection 300 more."
    )
    assert lines[1].startswith("fmnist: 2 configurations per arm (every arm), 50 % of them")
