"""One selection rule for a sweep's searched arm and every arm of a study (design:
Validation-only search), on validation metrics only.

Each finished search row carries two selection values: ``sel_val`` and ``sel_saving``, its own
validation accuracy and restricted uplink saving, or — for a candidate robust selection
re-evaluated on further search seeds — their means over its search run and one run per seed (a
rerun that did not finish counts as :data:`.reeval.PENALTY` accuracy and no saving: a
configuration that fails again loses). Then, per arm (a sweep has one) and objective:

* ``val_acc``: the highest ``sel_val``;
* ``retention``: among the rows whose ``sel_val`` keeps the bar (``retention`` × the reference's
  validation accuracy: a sweep's reference run, a study's reference arm's best), the largest
  ``sel_saving``, then the highest ``sel_val``. A sweep's searcher must choose even where no row
  keeps the bar (``fallback``): those rows follow, most accurate first — the order of the
  objective value its searcher maximised (:func:`.trainable.objective_value`).

Ties go to the configuration drawn first. With robust selection only its candidates are chosen
from: per arm and objective the best ``reeval_top`` distinct configurations by the same rule on
the search seed alone.

With ``uplink_levels``, per arm, level and ledger the configuration whose reading — its model at
the last validation within the level — is most accurate (:func:`select_levels`), or why none
can be; an ablation arm takes its parent's choices with its own fields on top
(:func:`ablations`). A sweep's objective ``pareto`` hands the final stage the front. What was
chosen becomes the final stage's runs here too (:func:`final_labels`): an arm's choice runs
under its name (``ARM@OBJECTIVE`` for another objective), a sweep's best under
``selected-<j>`` beside its unsearched arms.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from .reeval import PENALTY, reruns, seed_mean
from .spec import ExperimentSpec, WorkloadSpec, level_name


def values(trials: pd.DataFrame, seeds: tuple[int, ...]) -> pd.DataFrame:
    """``trials`` with ``sel_val``, ``sel_saving`` and ``selection_mean`` (the candidates'
    mean validation accuracy over the search seed and ``seeds``; NaN for the rest)."""
    out = trials.copy()
    out["sel_val"] = out["val_acc"]
    out["sel_saving"] = out["cum_saving_restricted"]
    out["selection_mean"] = float("nan")
    if "stage" not in out or not out["stage"].eq("reeval").any():
        return out
    for idx, row in out[out["stage"].eq("search")].iterrows():
        if not len(reruns(out, row)) or row["status"] != "finished" or pd.isna(row["val_acc"]):
            continue
        mean = seed_mean(row, out, seeds, "val_acc", PENALTY)
        out.loc[idx, ["sel_val", "selection_mean"]] = mean
        out.loc[idx, "sel_saving"] = seed_mean(row, out, seeds, "cum_saving_restricted", 0.0)
    return out


def eligible(trials: pd.DataFrame) -> pd.DataFrame:
    """The search rows selection may choose: finished, with a validation accuracy."""
    return trials[
        trials["stage"].eq("search") & trials["status"].eq("finished") & trials["val_acc"].notna()
    ]


def ranking(
    rows: pd.DataFrame, objective: str, bar: float | None, fallback: bool = False
) -> pd.DataFrame:
    """``rows`` best first by ``objective`` (``val_acc`` or ``retention`` against ``bar``;
    None: no row keeps it); ``fallback`` ranks the rows below the bar after the others."""
    if objective == "val_acc":
        return _first_drawn(rows, ["sel_val"])
    keep = rows[rows["sel_val"] >= bar] if bar is not None else rows.iloc[:0]
    out = _first_drawn(keep, ["sel_saving", "sel_val"])
    if fallback:
        out = pd.concat([out, _first_drawn(rows.drop(keep.index), ["sel_val"])])
    return out


def _first_drawn(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Descending by ``keys``; ties in drawn order (a study's ``trial_index``, else the rows'
    order, which is Tune's)."""
    if "trial_index" in rows:
        return rows.sort_values([*keys, "trial_index"], ascending=[False] * len(keys) + [True])
    return rows.sort_values(keys, ascending=False, kind="stable")


def _groups(rows: pd.DataFrame):
    """(arm, its rows): a study's arms in drawn order, a sweep's one arm as None."""
    if "arm" not in rows or rows["arm"].isna().all():  # a sweep's table, as read back too
        return [(None, rows)]
    return list(rows.groupby("arm", sort=False))


def candidates(
    trials: pd.DataFrame, objectives, bar: float | None, top: int, fallback: bool = False
) -> pd.DataFrame:
    """The rows robust selection re-evaluates: per arm and objective the best ``top`` distinct
    configurations on the search seed."""
    ok = eligible(values(trials, ()))
    ok = ok.drop_duplicates([c for c in ("arm", "params_json") if c in ok])
    picks = [
        ranking(g, o, bar, fallback).drop_duplicates("params_json").head(top)
        for _, g in _groups(ok)
        for o in objectives
    ]
    out = pd.concat(picks) if picks else ok.head(0)
    return out.drop_duplicates([c for c in ("arm", "params_json") if c in out])


def choose(
    trials: pd.DataFrame,
    objectives,
    bar: float | None,
    top: int = 1,
    robust: bool = False,
    fallback: bool = False,
) -> dict:
    """arm -> {objective: its best ``top`` rows} over ``trials`` with selection values
    (:func:`values`); with ``robust``, candidates only. An objective no row of an arm meets
    (retention without ``fallback``) is left out; an arm with no finished row too."""
    ok = eligible(trials)
    if robust:
        ok = ok[ok["selection_mean"].notna()]
    out: dict = {}
    for arm, g in _groups(ok):
        got = {o: ranking(g, o, bar, fallback).head(top) for o in objectives}
        got = {o: rows for o, rows in got.items() if len(rows)}
        if got:
            out[arm] = got
    return out


# ---- a study: per arm and objective, per uplink level and ledger, ablations ----------------


def select_arms(trials: pd.DataFrame, spec: ExperimentSpec) -> dict[str, dict[str, Any]]:
    """arm -> {objective: trials row} chosen on validation metrics only (:mod:`.selection`'s
    rule over ``sel_val`` and ``sel_saving``; with robust selection, candidates only), the
    retention bar set by the reference arm's best."""
    ok = eligible(trials)
    if spec.search.reeval_top:
        ok = ok[ok["selection_mean"].notna()]
    bar = arm_bar(ok, spec, "sel_val")
    got = choose(ok, spec.objectives, bar)  # ok: the candidates already, with robust selection
    arms = [a.name for a in spec.arms if a.name in got]
    return {arm: {o: rows.iloc[0] for o, rows in got[arm].items()} for arm in arms}


def arm_bar(rows: pd.DataFrame, spec: ExperimentSpec, column: str) -> float | None:
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


def arm_candidates(
    trials: pd.DataFrame, spec: ExperimentSpec, readings: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per arm, the search rows robust selection re-evaluates: the best ``reeval_top`` by each
    objective on the search seed (:func:`.selection.candidates`), and with uplink levels the
    best ``reeval_top`` by their reading at each level and ledger."""
    ok = eligible(trials)
    bar = arm_bar(ok, spec, "val_acc")
    top = spec.search.reeval_top
    out = [candidates(trials, spec.objectives, bar, top)]
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


# ---- a sweep: its searcher's objective, the Pareto front, the best few -------------------


def _pareto(df: pd.DataFrame, top: int) -> pd.DataFrame:
    """Objective pareto: the front's configurations, most accurate first."""
    ok = eligible(df).drop_duplicates("run_id")
    ok = ok[ok["on_pareto_front"].fillna(False).astype(bool)]
    return ok.sort_values(["val_acc", "cum_up_restricted"], ascending=[False, True]).head(top)


def run_bar(spec: WorkloadSpec, trials: pd.DataFrame) -> float | None:
    """The retention objective's bar: ``search.retention`` × the reference run's validation
    accuracy, as the trials table recorded it (also for ``--final``)."""
    if spec.search.objective != "retention" or "reference_val_acc" not in trials:
        return None
    ref = trials["reference_val_acc"].dropna()
    return spec.search.retention * float(ref.iloc[0]) if len(ref) and ref.iloc[0] > 0 else None


def choose_searched(spec: WorkloadSpec, top: int, trials: pd.DataFrame):
    """(the configurations the final stage reruns, the trials table): every protocol point;
    the Pareto front; else the best by :mod:`.selection`'s rule (the searcher's objective,
    with a fallback below the retention bar), by the means over the further search seeds
    where robust selection re-evaluated its candidates (:func:`.pipeline.reevaluate`)."""
    s = spec.search
    if s.searcher == "none":
        return trials, trials
    if s.objective == "pareto":
        return _pareto(trials, top), trials
    bar = run_bar(spec, trials)
    rows = values(trials, s.reeval_seeds)
    once = rows.drop_duplicates("run_id")  # a searcher that repeated a point: chosen once
    got = choose(once, [s.objective], bar, top, bool(s.reeval_top), fallback=True)
    chosen = got.get(None, {}).get(s.objective, rows.head(0))
    drop = ["sel_val", "sel_saving"] + ([] if s.reeval_top else ["selection_mean"])
    return chosen.drop(columns=drop), rows.drop(columns=drop)


# ---- the final stage's runs -------------------------------------------------------------


def final_labels(spec: ExperimentSpec, chosen: dict[str, dict[str, Any]]) -> dict[tuple, str]:
    """(arm, objective) -> the label its configuration's final runs carry: the arm for the
    first objective (a study's ``val_acc``; a sweep's choices are ``selected-<j>`` already),
    ``ARM@OBJECTIVE`` otherwise (``ARM@up10`` for an uplink level); a configuration chosen by
    several objectives runs once, under the first one's label."""
    out, main = {}, spec.objectives[0]
    for arm in _order(spec, chosen):
        first: dict[str, str] = {}
        for objective, row in chosen[arm].items():
            label = arm if objective == main else f"{arm}@{objective}"
            out[(arm, objective)] = first.setdefault(row["params_json"], label)
    return out


def _order(spec: ExperimentSpec, chosen: dict) -> list[str]:
    """The chosen arms in the spec's order, then any other choice (a sweep's ``selected-<j>``)."""
    names = [a.name for a in spec.arms if a.name in chosen]
    return names + [k for k in chosen if k not in names]


def final_points(spec: ExperimentSpec, chosen: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The final stage's runs, seed by seed: every chosen configuration once, under the label
    of :func:`final_labels` (a stage cut short has each label on the same seeds, paired), then
    the references — the unsearched arms that are not ablations — on the seeds they name."""
    configs, labels = [], final_labels(spec, chosen)
    for arm in _order(spec, chosen):
        seen: set[str] = set()
        for objective, row in chosen[arm].items():
            if row["params_json"] not in seen:
                seen.add(row["params_json"])
                configs.append((labels[(arm, objective)], json.loads(row["params_json"])))
    seeds = spec.final_seeds
    points = [dict(params, seed=s, label=label) for s in seeds for label, params in configs]
    for s in seeds:
        for ref in spec.compare:
            if s in ref.get("seeds", seeds):
                points.append(dict({k: v for k, v in ref.items() if k != "seeds"}, seed=s))
    return points
