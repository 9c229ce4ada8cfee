"""A study's selection (design: Validation-only search): robust selection's candidates and the
selection values their re-evaluation (:mod:`.reeval`) yields, the choice per arm, objective and
uplink level, and what the search cost.

With ``search.reeval_top``, every arm's best few search configurations (by validation accuracy,
and by the retention rule) run again on each ``search.reeval_seeds`` seed, validation only, as
trials of their own stage ``reeval``; the arm is then chosen among those candidates by the mean
over the search and re-evaluation seeds.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from .study_spec import StudySpec


def select(trials: pd.DataFrame, spec: StudySpec) -> dict[str, dict[str, Any]]:
    """arm -> {objective: trials row} chosen on validation metrics only: by ``sel_val`` and
    ``sel_saving`` (a search row's own values, or with robust selection its candidates' means
    over the search and re-evaluation seeds; then only candidates are chosen)."""
    ok = trials[
        trials["stage"].eq("search") & trials["status"].eq("finished") & trials["val_acc"].notna()
    ]
    if spec.search.reeval_top:
        ok = ok[ok["selection_mean"].notna()]
    ref = ok[ok["arm"] == spec.retention_reference]["sel_val"]
    bar = spec.retention * float(ref.max()) if len(ref) else None
    out: dict[str, dict[str, Any]] = {}
    for arm in (a.name for a in spec.arms):
        g = ok[ok["arm"] == arm]
        if not len(g):
            continue
        chosen = {
            "val_acc": g.sort_values(["sel_val", "trial_index"], ascending=[False, True]).iloc[0]
        }
        if "retention" in spec.objectives and bar is not None:
            keep = g[g["sel_val"] >= bar]
            if len(keep):
                chosen["retention"] = keep.sort_values(
                    ["sel_saving", "sel_val", "trial_index"],
                    ascending=[False, False, True],
                ).iloc[0]
        out[arm] = chosen
    return out


def select_levels(
    trials: pd.DataFrame, spec: StudySpec, chosen: dict[str, dict[str, Any]]
) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]], dict[str, float]]:
    """Selection at matched uplink (``uplink_levels``): per arm and level, the finished search
    configuration with the best validation accuracy (search seed; earliest drawn on a tie)
    among those whose cumulative restricted uplink at the final round stayed within the level
    — a fraction of the reference arm's tuned configuration's (``chosen``'s ``val_acc`` row).
    Returns (arm -> {level name: trials row}, arm -> [levels it cannot reach], level name ->
    bytes); no level is judged where the reference arm has no finished configuration."""
    if not spec.uplink_levels:
        return {}, {}, {}
    ref = chosen.get(spec.retention_reference, {}).get("val_acc")
    if ref is None or pd.isna(ref["cum_up_restricted"]):
        return {}, {}, {}
    ok = trials[
        trials["stage"].eq("search")
        & trials["status"].eq("finished")
        & trials["val_acc"].notna()
        & trials["cum_up_restricted"].notna()
    ]
    limits = {
        spec.level_name(level): level * float(ref["cum_up_restricted"])
        for level in spec.uplink_levels
    }
    picked: dict[str, dict[str, Any]] = {}
    unable: dict[str, list[str]] = {}
    for arm in (a.name for a in spec.arms):
        g = ok[ok["arm"] == arm]
        for name, limit in limits.items():
            within = g[g["cum_up_restricted"] <= limit]
            if len(within):
                best = within.sort_values(["val_acc", "trial_index"], ascending=[False, True])
                picked.setdefault(arm, {})[name] = best.iloc[0]
            else:
                unable.setdefault(arm, []).append(name)
    return picked, unable, limits


def candidates(trials: pd.DataFrame, spec: StudySpec) -> pd.DataFrame:
    """Per arm, the search rows robust selection re-evaluates: the best ``reeval_top`` by
    validation accuracy, and the best ``reeval_top`` by the retention rule on the search seed
    (largest saving keeping the bar, set by the reference arm's best)."""
    ok = trials[trials["status"].eq("finished") & trials["val_acc"].notna()]
    ok = ok.drop_duplicates(["arm", "params_json"])
    top = spec.search.reeval_top
    ref = ok[ok["arm"] == spec.retention_reference]["val_acc"]
    bar = spec.retention * float(ref.max()) if len(ref) else None
    picks = []
    for _, g in ok.groupby("arm", sort=False):
        picks.append(g.sort_values(["val_acc", "trial_index"], ascending=[False, True]).head(top))
        if "retention" in spec.objectives and bar is not None:
            keep = g[g["val_acc"] >= bar].sort_values(
                ["cum_saving_restricted", "val_acc"], ascending=False
            )
            picks.append(keep.head(top))
    if not picks:
        return ok.head(0)
    return pd.concat(picks).drop_duplicates(["arm", "params_json"])


def selection_values(trials: pd.DataFrame, spec: StudySpec) -> pd.DataFrame:
    """``sel_val`` / ``sel_saving`` per search row: its own values, or for a re-evaluated
    candidate the means over its search run and one run per re-evaluation seed (a seed whose
    run did not finish counts as the penalty: a configuration that fails again loses);
    ``selection_mean`` records the candidates' mean validation accuracy."""
    from .reeval import PENALTY, reruns, seed_mean

    out = trials.copy()
    out["sel_val"] = out["val_acc"]
    out["sel_saving"] = out["cum_saving_restricted"]
    out["selection_mean"] = float("nan")
    if "stage" not in out or not out["stage"].eq("reeval").any():
        return out
    seeds = spec.search.reeval_seeds
    for idx, row in out[out["stage"].eq("search")].iterrows():
        if not len(reruns(out, row)) or row["status"] != "finished" or pd.isna(row["val_acc"]):
            continue
        mean = seed_mean(row, out, seeds, "val_acc", PENALTY)
        out.loc[idx, ["sel_val", "selection_mean"]] = mean
        out.loc[idx, "sel_saving"] = seed_mean(row, out, seeds, "cum_saving_restricted", 0.0)
    return out


def budget_lines(trials: pd.DataFrame, spec: StudySpec, budget: int) -> list[str]:
    """Per arm: configurations tried, how many a scheduler or the budget stopped, client-rounds
    spent by the search and by robust selection, against the budget."""
    lines = []
    for arm in (a.name for a in spec.arms):
        t = trials[trials["arm"].eq(arm)]
        search = t[t["stage"].eq("search")]
        spent = int(search["client_rounds"].fillna(0).sum())
        again = int(t[t["stage"].eq("reeval")]["client_rounds"].fillna(0).sum())
        of = f" of {budget}" if budget else ""
        lines.append(
            f"{arm}: {len(search)} configurations ({int(search['status'].eq('stopped').sum())} "
            f"stopped early), {spent}{of} client-rounds"
            + (f", robust selection {again} more" if again else "")
        )
    return lines


def mark(trials: pd.DataFrame, chosen: dict[str, dict[str, Any]]) -> pd.DataFrame:
    trials = trials.copy()
    by = {}
    for objectives in chosen.values():
        for o, row in objectives.items():
            by.setdefault(int(row["trial_index"]), []).append(o)
    trials["selected_for"] = [
        (",".join(by.get(int(k), [])) or None) if pd.notna(k) else None
        for k in trials["trial_index"]
    ]
    trials["selected"] = trials["selected_for"].notna()
    return trials.drop(columns=["sel_val", "sel_saving"])


__all__ = [
    "budget_lines",
    "mark",
    "select",
    "select_levels",
    "selection_values",
]
