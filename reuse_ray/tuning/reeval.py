"""Robust selection's re-evaluation stage (design: Validation-only search): a sweep's or a
study arm's best few search configurations are rerun on further search seeds, validation only.

With one search seed and one validation split the best trial is partly the luckiest draw; the
study measured a selected configuration at 0.768 validation accuracy on its search seed and
0.526 on fresh seeds. ``search.reeval_top`` candidates (:func:`.selection.candidates`) each run
once more per ``search.reeval_seeds`` seed, as trials of their own stage ``reeval`` (the test
split stays unread: the stage is not ``final``); :mod:`.selection` then chooses by the means
over the search seed and those seeds (:func:`seed_mean`). A stopped, failed or diverged
re-evaluation counts as the penalty, never as a skipped seed.
"""

from __future__ import annotations

import json

import pandas as pd

from .spec import WorkloadSpec

PENALTY = -3.0  # below every objective's range (val_acc in [0, 1]; retention's penalty > -2)


def points(cands: pd.DataFrame, seeds: tuple[int, ...]) -> list[dict]:
    """One run per candidate and further seed: the candidate's parameters with that seed (and
    a study's arm as its ``label``)."""
    out = []
    for _, row in cands.iterrows():
        arm = row.get("arm")
        for s in seeds:
            point = dict(json.loads(row["params_json"]), seed=int(s))
            out.append(point if arm is None or pd.isna(arm) else dict(point, label=arm))
    return out


def reruns(trials: pd.DataFrame, row: pd.Series) -> pd.DataFrame:
    """The re-evaluation rows of a search row's configuration (of the same arm in a study; a
    sweep's rows have none, also when read back from its trials table)."""
    again = trials[trials["stage"].eq("reeval") & trials["params_json"].eq(row["params_json"])]
    arm = row.get("arm")
    return again if arm is None or pd.isna(arm) else again[again["arm"].eq(arm)]


def seed_mean(row: pd.Series, trials: pd.DataFrame, seeds, column: str, penalty: float) -> float:
    """The mean of ``column`` over a candidate's search row and its re-evaluation run on each
    of ``seeds`` (the same configuration, of the same arm in a study); a run that is missing or
    did not finish with a validation accuracy counts as ``penalty``."""
    again = reruns(trials, row)
    per_seed = {int(r["seed"]): _value(r, column, penalty) for _, r in again.iterrows()}
    values = [_value(row, column, penalty)] + [per_seed.get(int(s), penalty) for s in seeds]
    return sum(values) / len(values)


def _value(row: pd.Series, column: str, penalty: float) -> float:
    v = row[column]
    ok = row["status"] == "finished" and not pd.isna(row["val_acc"])
    return float(v) if ok and v is not None and not pd.isna(v) else penalty


def run_stage(spec: WorkloadSpec, cands: pd.DataFrame, run, what: str, **kw):
    """The re-evaluation stage of a sweep or of a study's workload: the candidates rerun on
    each ``search.reeval_seeds`` seed as Tune trials of stage ``reeval`` (validation only),
    launched by :class:`.launch.Launcher` ``run`` (``kw``: its further arguments); ``what``
    heads the console's line. Returns (the points, their Tune results), or None without
    candidates."""
    from ray import tune

    pts = points(cands, spec.search.reeval_seeds)
    if not pts:
        return None
    run.say(
        f"{what} again on search seeds {list(spec.search.reeval_seeds)} ({len(pts)} "
        "validation-only runs)"
    )
    grid = {"final": tune.grid_search(pts)}
    return pts, run(spec, "reeval", param_space=grid, total=len(pts), **kw)


def selection_gaps(
    trials: pd.DataFrame, chosen: dict[str, pd.Series], finals: pd.DataFrame
) -> dict[str, dict[str, float]]:
    """Per final label and the search row it was chosen as: search-stage minus fresh-seed
    validation accuracy, on the search seed alone and as the mean over the search seed and
    its re-evaluation runs (the accuracies they measured), with how many seeds that mean is
    over and the fresh-seed mean itself. Labels without a fresh-seed accuracy, or without a
    search accuracy (an unsearched grid point), are left out."""
    out = {}
    for label, row in chosen.items():
        fresh = finals[finals["label"].eq(label)]["final_val_acc"].mean()
        if pd.isna(fresh) or pd.isna(row["val_acc"]):
            continue
        again = reruns(trials, row)
        mean = pd.concat([pd.Series([row["val_acc"]]), again["val_acc"]]).mean()
        out[label] = {
            "search_seed": float(row["val_acc"]) - fresh,
            "mean": float(mean) - fresh,
            "seeds": 1 + len(again),
            "fresh": float(fresh),
        }
    return out


def gap_line(label: str, gap: dict[str, float]) -> str:
    """The console's line on one label's selection gap."""
    return (
        f"selection gap of {label} (search − fresh-seed validation accuracy): "
        f"{gap['search_seed']:+.4f} on the search seed"
        + (
            f", {gap['mean']:+.4f} as the mean over {gap['seeds']} search seeds"
            if gap["seeds"] > 1
            else ""
        )
        + f" (fresh: {gap['fresh']:.4f})"
    )


__all__ = [
    "PENALTY",
    "gap_line",
    "points",
    "reruns",
    "run_stage",
    "selection_gaps",
]
