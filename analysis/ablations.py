"""A study's ablations, compared as ablations: an ablation arm (``ablation_of`` in the study
file) reruns each of its parent's chosen configurations with one setting changed and every
other setting shared, on the same fresh seeds — so its difference to the parent is paired run
for run and isolates that setting. Per workload, ablation and objective (its val_acc choice,
each uplink level and ledger): the setting it changes, the paired difference in test accuracy
(at the final round; at a level, read at the level) and in uplink, with t 95 % intervals over
the seeds both finished. A control that is tuned on its own is not an ablation and is not
here: it is an arm of the leaderboard.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .frontier import _all_finals, objective_level
from .load import Results
from .stats import paired_text, t_ci

COLUMNS = (
    "workload",
    "ablation",
    "of",
    "objective",
    "changes",
    "pairs",
    "test acc (ablation)",
    "test acc (of)",
    "Δ test acc",
    "Δ uplink MB",
)


def _changes(params: dict, parent: dict) -> str:
    keys = sorted(k for k in params.keys() | parent.keys() if params.get(k) != parent.get(k))
    return ", ".join(f"{k}: {params.get(k)}" for k in keys)


def _values(res: Results, finals: pd.DataFrame, label: str, objective: str) -> pd.DataFrame:
    """Per seed of a label's final runs: test accuracy and uplink (MB) at the final round for
    ``val_acc``, else read at the objective's level and ledger (runs that read it)."""
    runs = finals[finals["label"].eq(label) & finals["status"].eq("finished")]
    if objective == "val_acc":
        return pd.DataFrame(
            {"seed": runs["seed"], "acc": runs["test_acc"], "MB": runs["cum_up_restricted"] / 1e6}
        )
    f, ledger = objective_level(objective)
    lv = res.levels
    here = lv[lv["run_id"].isin(finals.loc[finals["label"].eq(label), "run_id"])]
    here = here[np.isclose(here["level"], f) & here["ledger"].eq(ledger)]
    here = here[here["status"].isin(("crossed", "cap", "over"))].drop_duplicates("run_id")
    return pd.DataFrame({"seed": here["seed"], "acc": here["test_acc"], "MB": here["cum_up"] / 1e6})


def _paired(a: pd.DataFrame, b: pd.DataFrame, col: str) -> tuple[int, float, float, float]:
    d = (a.set_index("seed")[col] - b.set_index("seed")[col]).dropna()
    lo, hi = t_ci(d.to_numpy())
    return len(d), (float(d.mean()) if len(d) else float("nan")), lo, hi


def ablation_table(res: Results, study: dict) -> pd.DataFrame:
    """One row per workload, ablation and objective (an objective whose choice is the same
    pair of labels as an earlier one is not repeated): see the module."""
    rows = []
    for workload, got in (study.get("choices") or {}).items():
        arms = got.get("arms") or {}
        finals = _all_finals(res, study, workload)
        for objectives in arms.values():
            seen = set()
            for objective, choice in objectives.items():
                parent = (arms.get(choice.get("ablation_of") or "") or {}).get(objective)
                if parent is None or (choice["label"], parent["label"]) in seen:
                    continue
                seen.add((choice["label"], parent["label"]))
                mine = _values(res, finals, choice["label"], objective)
                theirs = _values(res, finals, parent["label"], objective)
                n, acc, lo, hi = _paired(mine, theirs, "acc")
                rows.append(
                    {
                        "workload": workload,
                        "ablation": choice["label"],
                        "of": parent["label"],
                        "objective": objective,
                        "changes": _changes(choice["params"], parent["params"]),
                        "pairs": n,
                        "test acc (ablation)": float(mine["acc"].mean()),
                        "test acc (of)": float(theirs["acc"].mean()),
                        "Δ test acc": paired_text(n, acc, lo, hi),
                        "Δ uplink MB": paired_text(*_paired(mine, theirs, "MB"), digits=2),
                    }
                )
    return pd.DataFrame(rows, columns=list(COLUMNS))


INTRO = (
    "Each ablation reruns its arm's chosen configuration with one setting changed, on the "
    "same seeds: `changes` is that setting, Δ is ablation minus the arm it ablates, paired "
    "by seed (t 95 % interval from 5 pairs on; fewer: the mean and the pairs), test accuracy "
    "at the final round for `val_acc` and read at the level for a level, uplink in the "
    "restricted ledger (at a level: the ledger it names).\n"
)

__all__ = ["ablation_table"]
