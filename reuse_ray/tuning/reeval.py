"""Robust selection (design: Validation-only search): a sweep's best few search configurations
are rerun on further search seeds, validation only, and chosen by their mean objective.

With one search seed and one validation split the best trial is partly the luckiest draw; the
study measured a selected configuration at 0.768 validation accuracy on its search seed and
0.526 on fresh seeds. ``search.reeval_top`` candidates (the best distinct finished
configurations by objective) each run once more per ``search.reeval_seeds`` seed, as trials of
their own stage ``reeval`` (the test split stays unread: the stage is not ``final``); the
choice is by the mean of the objective over the search seed and those seeds. A stopped,
failed or diverged re-evaluation counts as the objective's penalty, never as a skipped seed.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from .spec import SweepSpec

PENALTY = -3.0  # below every objective's range (val_acc in [0, 1]; retention's penalty > -2)


def candidates(trials: pd.DataFrame, top: int) -> pd.DataFrame:
    """The ``top`` best distinct finished search configurations, by objective then accuracy."""
    ok = trials[
        trials["stage"].eq("search") & trials["status"].eq("finished") & trials["val_acc"].notna()
    ]
    ok = ok.sort_values(["objective_value", "val_acc"], ascending=False)
    return ok.drop_duplicates("params_json").head(top)


def points(cands: pd.DataFrame, seeds: tuple[int, ...]) -> list[dict]:
    """One run per candidate and further seed: the candidate's parameters with that seed."""
    return [dict(json.loads(p), seed=int(s)) for p in cands["params_json"] for s in seeds]


def _objective(row: pd.Series) -> float:
    value = row["objective_value"]
    ok = row["status"] == "finished" and value is not None and not math.isnan(float(value))
    return float(value) if ok else PENALTY


def choose(trials: pd.DataFrame, spec: SweepSpec, top: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the chosen search rows, best mean first; ``trials`` with ``selection_mean`` set on every
    candidate's search row). A candidate's mean is over its search run and one run per
    re-evaluation seed; a seed whose run is missing counts as the penalty."""
    cands = candidates(trials, spec.search.reeval_top)
    again = trials[trials["stage"].eq("reeval")]
    out = trials.copy()
    means = {}
    for idx, row in cands.iterrows():
        runs = again[again["params_json"].eq(row["params_json"])]
        per_seed = {int(r["seed"]): _objective(r) for _, r in runs.iterrows()}
        values = [_objective(row)] + [per_seed.get(s, PENALTY) for s in spec.search.reeval_seeds]
        means[idx] = sum(values) / len(values)
        out.loc[idx, "selection_mean"] = means[idx]
    order = sorted(means, key=lambda i: (-means[i], -float(cands.loc[i, "val_acc"])))
    return out.loc[order[:top]], out


def run_stage(spec: SweepSpec, trials: pd.DataFrame, reference, table, run) -> pd.DataFrame:
    """The re-evaluation stage: the candidates rerun on each ``search.reeval_seeds`` seed as
    Tune trials of stage ``reeval``, launched by the sweep's :class:`.launch.Launcher` ``run``;
    returns ``trials`` with their rows (``table`` builds them from Tune's results, as for the
    search stage)."""
    from ray import tune

    cands = candidates(trials, spec.search.reeval_top)
    pts = points(cands, spec.search.reeval_seeds)
    if not pts:
        return trials
    run.say(
        f"robust selection: the best {len(cands)} configurations again on search seeds "
        f"{list(spec.search.reeval_seeds)} ({len(pts)} validation-only runs)"
    )
    results = run(
        spec,
        "reeval",
        param_space={"final": tune.grid_search(pts)},
        reference=reference,
        total=len(pts),
    )
    return pd.concat([trials, table(spec, results, reference, "reeval")], ignore_index=True)


def gap_lines(trials: pd.DataFrame, chosen: pd.DataFrame, final_runs: pd.DataFrame) -> list[str]:
    """Per selected configuration: search-stage minus fresh-seed validation accuracy, with one
    search seed and with the mean over the search and re-evaluation seeds."""
    again = trials[trials["stage"].eq("reeval")]
    lines = []
    for j, (_, row) in enumerate(chosen.iterrows()):
        fresh = final_runs[final_runs["label"].eq(f"selected-{j}")]["final_val_acc"].mean()
        seeds = again[again["params_json"].eq(row["params_json"])]["val_acc"]
        mean_val = pd.concat([pd.Series([row["val_acc"]]), seeds]).mean()
        if pd.isna(fresh):
            continue
        lines.append(
            f"selection gap of selected-{j} (search − fresh-seed validation accuracy): "
            f"{row['val_acc'] - fresh:+.4f} on the search seed, {mean_val - fresh:+.4f} as the "
            f"mean over {1 + len(seeds)} search seeds (fresh: {fresh:.4f})"
        )
    return lines


__all__ = ["PENALTY", "candidates", "choose", "gap_lines", "points", "run_stage"]
