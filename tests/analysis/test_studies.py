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


def test_the_level_table_and_the_frontier_from_hand_made_final_runs():
    """Two arms on three seeds: the level table ranks each level's choices, pairs them by
    seed, marks an unreachable level; the frontier names the non-dominated labels; the bytes
    to the reference's target count the first validation at or above it."""
    import pandas as pd

    from analysis.frontier import bytes_to_reference_target, frontier_points, level_table
    from analysis.load import Results

    runs, rounds = [], []
    spec = {  # label -> (test acc by seed, uplink per round, val acc by round)
        "fedavg": ([0.90, 0.91, 0.92], 100e6, [0.5, 0.90]),
        "topk": ([0.88, 0.88, 0.89], 20e6, [0.6, 0.89]),
        "topk@up10": ([0.80, 0.82, 0.81], 5e6, [0.4, 0.70]),
    }
    for label, (tests, per_round, vals) in spec.items():
        for seed, test in zip((1, 2, 3), tests, strict=True):
            rid = f"{label}-{seed}"
            runs.append(
                {
                    "run_id": rid,
                    "label": label,
                    "seed": seed,
                    "test_acc": test,
                    "final_val_acc": vals[-1],
                    "stage": "final",
                    "sweep": "s-w",
                    "status": "finished",
                }
            )
            for t, v in enumerate(vals, 1):
                rounds.append(
                    {
                        "run_id": rid,
                        "seed": seed,
                        "round": t,
                        "val_acc": v,
                        "cum_up_restricted": per_round * t,
                        "cum_up_measured": per_round * t + 1,
                    }
                )
    res = Results(pd.DataFrame(runs), pd.DataFrame(rounds), pd.DataFrame(), pd.DataFrame())
    study = {
        "name": "s",
        "retention_reference": "fedavg",
        "target_of_reference": 0.98,
        "compare_to": ["topk"],
        "choices": {
            "w": {
                "level_bytes": {"up10": 20e6, "up25": 50e6},
                "arms": {
                    "fedavg": {"val_acc": {"label": "fedavg"}},
                    "topk": {
                        "val_acc": {"label": "topk"},
                        "up10": {"label": "topk@up10"},
                        "up25": {"label": "topk"},
                    },
                },
                "unable": {"fedavg": ["up10", "up25"]},
            }
        },
    }
    table = level_table(res, study)
    got = table.set_index(["level", "arm"])
    assert got.loc[("up10", "topk"), "label"] == "topk@up10"
    assert got.loc[("up10", "topk"), "test acc"] == "0.810 ± 0.010"
    assert got.loc[("up25", "topk"), "uplink MB"] == 40.0
    assert got.loc[("up25", "topk"), "seeds"] == 3
    assert got.loc[("up25", "topk"), "Δ test acc vs the level's best"] == ""  # it is the best
    assert got.loc[("up10", "fedavg"), "test acc"] == "unable"
    # a study still computing: a choice whose final runs have not finished is pending, last
    study["choices"]["w"]["arms"]["lossy"] = {"up10": {"label": "lossy@up10"}}
    up10 = level_table(res, study).query("level == 'up10'")
    assert up10["arm"].tolist()[-2:] == ["lossy", "fedavg"]
    pending = up10.set_index("arm").loc["lossy"]
    assert (pending["test acc"], pending["seeds"], pending["diverged"]) == ("pending", 0, 0)
    # its diverged final runs are counted (an interrupted one, a search run, another sweep not)
    res.excluded_runs = pd.DataFrame(
        {
            "run_id": ["x1", "x2", "x3", "x4", "x5"],
            "label": ["lossy@up10"] * 4 + ["topk@up10"],
            "status": ["diverged", "diverged", "interrupted", "diverged", "diverged"],
            "stage": ["final", "final", "final", "search", "final"],
            "sweep": ["s-w", "s-w", "s-w", "s-w", "other-w"],
        }
    )
    up10 = level_table(res, study).query("level == 'up10'").set_index("arm")
    assert up10["diverged"].to_dict() == {"topk": 0, "lossy": 2, "fedavg": ""}
    front = frontier_points(res, study).set_index("label")
    assert front["on_front"].to_dict() == {"fedavg": True, "topk": True, "topk@up10": True}
    btt = bytes_to_reference_target(res, study).set_index("label")
    assert btt.loc["fedavg", "target val acc"] == round(0.98 * 0.90, 4)
    # 0.882: fedavg reaches it at round 2 (200 MB), topk at round 2 (40 MB), topk@up10 never
    assert btt.loc["topk@up10", "censored"] == 3
    assert btt.loc["fedavg", "uplink to target MB"] == 200.0
    assert btt.loc["fedavg", "Δ MB vs topk"] == "+160.00 (3 pairs)"
