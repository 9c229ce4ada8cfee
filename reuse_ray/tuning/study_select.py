"""A study's selection (design: Validation-only search): per arm and objective by the one rule
(:mod:`.selection`; the retention bar set by the reference arm's best), per arm and uplink
level, what the search cost, and the trials table marked with what was chosen.

With ``search.reeval_top``, every arm's best few search configurations (by validation accuracy,
and by the retention rule) run again on each ``search.reeval_seeds`` seed, validation only, as
trials of their own stage ``reeval``; the arm is then chosen among those candidates by the means
over the search and re-evaluation seeds.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from . import selection
from .selection import choose, eligible
from .spec import ExperimentSpec, level_name


def select(trials: pd.DataFrame, spec: ExperimentSpec) -> dict[str, dict[str, Any]]:
    """arm -> {objective: trials row} chosen on validation metrics only (:mod:`.selection`'s
    rule over ``sel_val`` and ``sel_saving``; with robust selection, candidates only), the
    retention bar set by the reference arm's best."""
    ok = eligible(trials)
    if spec.search.reeval_top:
        ok = ok[ok["selection_mean"].notna()]
    bar = _bar(ok, spec, "sel_val")
    got = choose(ok, spec.objectives, bar)  # ok: the candidates already, with robust selection
    arms = [a.name for a in spec.arms if a.name in got]
    return {arm: {o: rows.iloc[0] for o, rows in got[arm].items()} for arm in arms}


def _bar(rows: pd.DataFrame, spec: ExperimentSpec, column: str) -> float | None:
    """The retention bar: ``retention`` × the reference arm's best (None without one)."""
    ref = rows[rows["arm"] == spec.retention_reference][column]
    return spec.retention * float(ref.max()) if len(ref) else None


def select_levels(
    trials: pd.DataFrame, spec: ExperimentSpec, chosen: dict[str, dict[str, Any]]
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
        level_name(level): level * float(ref["cum_up_restricted"]) for level in spec.uplink_levels
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


def candidates(trials: pd.DataFrame, spec: ExperimentSpec) -> pd.DataFrame:
    """Per arm, the search rows robust selection re-evaluates: the best ``reeval_top`` by each
    objective on the search seed (:func:`.selection.candidates`)."""
    ok = eligible(trials)
    bar = _bar(ok, spec, "val_acc")
    return selection.candidates(trials, spec.objectives, bar, spec.search.reeval_top)


def selection_values(trials: pd.DataFrame, spec: ExperimentSpec) -> pd.DataFrame:
    """``sel_val`` / ``sel_saving`` / ``selection_mean`` per search row
    (:func:`.selection.values` over the study's re-evaluation seeds)."""
    return selection.values(trials, spec.search.reeval_seeds)


def budget_lines(trials: pd.DataFrame, spec: ExperimentSpec, budget: int) -> list[str]:
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
