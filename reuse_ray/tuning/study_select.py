"""A study's selection (design: Validation-only search): per arm and objective by the one rule
(:mod:`.selection`; the retention bar set by the reference arm's best), per arm and uplink
level, what the search cost, and the trials table marked with what was chosen.

With ``search.reeval_top``, every arm's best few search configurations (by validation accuracy,
and by the retention rule) run again on each ``search.reeval_seeds`` seed, validation only, as
trials of their own stage ``reeval``; the arm is then chosen among those candidates by the means
over the search and re-evaluation seeds.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from . import selection
from .reeval import PENALTY, reruns
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


READ = ("crossed", "cap")  # a reading the selection may use (design: Readings at uplink levels)
LEDGERS = ("restricted", "measured")


def level_objective(level: float, ledger: str) -> str:
    """The objective name of a level in a ledger: ``up10`` (restricted), ``up10-measured``."""
    return level_name(level) + ("" if ledger == "restricted" else f"-{ledger}")


def readings_of(trials: pd.DataFrame, readings: pd.DataFrame | None, level: float, ledger: str):
    """Per trials row (aligned to ``trials``' index): its run's reading at ``level`` in
    ``ledger`` (columns status, round, cum_up, val_acc, level_bytes); NaN without one."""
    cols = ["status", "round", "cum_up", "val_acc", "level_bytes"]
    if readings is None or not len(readings) or "run_id" not in trials:
        return pd.DataFrame(index=trials.index, columns=cols, dtype=object)
    r = readings[readings["level"].eq(level) & readings["ledger"].eq(ledger)]
    r = r.drop_duplicates("run_id", keep="last").set_index("run_id")[cols]
    out = r.reindex(trials["run_id"].to_numpy())
    out.index = trials.index
    return out


def _reading_mean(row, trials, readings, level, ledger, seeds) -> float:
    """A candidate's reading at (level, ledger) averaged over its search run and its
    re-evaluation run on each of ``seeds``; a missing or unread one counts as the penalty."""
    again = reruns(trials, row)
    rd = readings_of(again, readings, level, ledger)
    per_seed = {
        int(again.loc[i, "seed"]): float(rd.loc[i, "val_acc"])
        for i in again.index
        if rd.loc[i, "status"] in READ and pd.notna(rd.loc[i, "val_acc"])
    }
    values = [float(row["reading"])] + [per_seed.get(int(s), PENALTY) for s in seeds]
    return sum(values) / len(values)


def select_levels(
    trials: pd.DataFrame, spec: ExperimentSpec, readings: pd.DataFrame | None
) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]], dict[str, float], dict]:
    """Selection at matched uplink (``uplink_levels``), from the runs' readings (the
    ``levels`` table): per arm, level and ledger, the search configuration whose reading —
    the model at the last round within the level — has the best validation accuracy (with
    robust selection: the best mean over the search and re-evaluation seeds, among the
    candidates; earliest drawn on a tie). Returns (arm -> {objective: trials row with its
    ``reading``}, arm -> [objectives it cannot reach], objective -> bytes, arm -> {objective:
    why it cannot}): ``over`` — one round of every configuration spends more than the level;
    else no configuration was read there (each stopped, failed or diverged first)."""
    if not spec.uplink_levels:
        return {}, {}, {}, {}
    search = trials[trials["stage"].eq("search")]
    robust = bool(spec.search.reeval_top) and trials["stage"].eq("reeval").any()
    picked: dict[str, dict[str, Any]] = {}
    unable: dict[str, list[str]] = {}
    why: dict[str, dict[str, str]] = {}
    limits: dict[str, float] = {}
    for level in spec.uplink_levels:
        for ledger in LEDGERS:
            name = level_objective(level, ledger)
            rd = readings_of(search, readings, level, ledger)
            if rd["level_bytes"].notna().any():
                limits[name] = float(rd["level_bytes"].dropna().iloc[0])
            rows = search.assign(reading=rd["val_acc"], reading_status=rd["status"])
            rows = rows.assign(reading_round=rd["round"], reading_cum_up=rd["cum_up"])
            for arm in (a.name for a in spec.arms if a.searched):
                g = rows[rows["arm"].eq(arm)]
                ok = g[g["reading_status"].isin(READ) & g["reading"].notna()]
                if robust and len(ok):
                    ok = ok[[len(reruns(trials, r)) > 0 for _, r in ok.iterrows()]]
                    means = [
                        _reading_mean(r, trials, readings, level, ledger, spec.search.reeval_seeds)
                        for _, r in ok.iterrows()
                    ]
                    ok = ok.assign(reading_mean=means, reading=means)
                if len(ok):
                    best = ok.sort_values(["reading", "trial_index"], ascending=[False, True])
                    picked.setdefault(arm, {})[name] = best.iloc[0]
                    continue
                unable.setdefault(arm, []).append(name)
                over = len(g) and g["reading_status"].eq("over").all()
                why.setdefault(arm, {})[name] = (
                    "one round of every configuration spends more than the level"
                    if over
                    else "no configuration was read there (each stopped, failed or diverged first)"
                )
    return picked, unable, limits, why


def candidates(
    trials: pd.DataFrame, spec: ExperimentSpec, readings: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per arm, the search rows robust selection re-evaluates: the best ``reeval_top`` by each
    objective on the search seed (:func:`.selection.candidates`), and with uplink levels the
    best ``reeval_top`` by their reading at each level and ledger."""
    ok = eligible(trials)
    bar = _bar(ok, spec, "val_acc")
    top = spec.search.reeval_top
    out = [selection.candidates(trials, spec.objectives, bar, top)]
    search = trials[trials["stage"].eq("search")]
    for level in spec.uplink_levels:
        for ledger in LEDGERS:
            rd = readings_of(search, readings, level, ledger)
            rows = search.assign(reading=rd["val_acc"])[rd["status"].isin(READ)]
            rows = rows[rows["reading"].notna()]
            for _, g in rows.groupby("arm", sort=False):
                g = g.sort_values(["reading", "trial_index"], ascending=[False, True])
                out.append(g.drop_duplicates("params_json").head(top).drop(columns="reading"))
    both = pd.concat([o for o in out if len(o)]) if any(len(o) for o in out) else out[0]
    return both.drop_duplicates(["arm", "params_json"])


def selection_values(trials: pd.DataFrame, spec: ExperimentSpec) -> pd.DataFrame:
    """``sel_val`` / ``sel_saving`` / ``selection_mean`` per search row
    (:func:`.selection.values` over the study's re-evaluation seeds)."""
    return selection.values(trials, spec.search.reeval_seeds)


def budget_lines(trials: pd.DataFrame, spec: ExperimentSpec, budget: int) -> list[str]:
    """Per arm: configurations tried, how many a scheduler or the budget stopped, client-rounds
    spent by the search and by robust selection, against the budget."""
    lines = []
    for arm in (a.name for a in spec.arms if a.searched):
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


def ablations(chosen: dict[str, dict[str, Any]], spec: ExperimentSpec) -> dict:
    """``chosen`` with each ablation arm's choices: every objective its parent chose, the
    parent's configuration with the ablation's fields on top (its final runs share every
    other setting, so the two compare as an ablation)."""
    out = dict(chosen)
    for a in spec.arms:
        if not a.ablation_of:
            continue
        got = {}
        for objective, row in chosen.get(a.ablation_of, {}).items():
            params = {**json.loads(row["params_json"]), **a.fixed}
            got[objective] = row.copy()
            got[objective]["params_json"] = json.dumps(params, sort_keys=True)
        if got:
            out[a.name] = got
    return out


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
    "ablations",
    "level_objective",
    "readings_of",
    "budget_lines",
    "mark",
    "select",
    "select_levels",
    "selection_values",
]
