"""What a study's search cost and how well its selection held (design: Validation-only search):
per workload and arm, the configurations tried, how many a scheduler stopped early, the
client-rounds spent against the arm's budget, and the selection gap (search-stage minus
fresh-seed validation accuracy of the selected configuration), on the search seed alone and as
the mean over the search and re-evaluation seeds."""

from __future__ import annotations

import pandas as pd

from . import tables
from .load import Results


def _workload(study: dict, sweep: str) -> str:
    return sweep.removeprefix(f"{study['name']}-")


def search_budget(trials: pd.DataFrame, study: dict) -> pd.DataFrame:
    """One row per (workload, arm) of a study's trials table and ``study.json``."""
    if not len(trials) or "arm" not in trials:
        return pd.DataFrame()
    budgets = study.get("client_rounds") or {}
    gaps = study.get("selection_gaps") or {}
    t = trials.copy()
    if "client_rounds" not in t:
        t["client_rounds"] = float("nan")
    # the study's workload order (the trials table holds them in the order files were read)
    order = {f"{study.get('name')}-{w}": k for k, w in enumerate(study.get("workloads") or [])}
    t = t.iloc[t["sweep"].map(order).fillna(len(order)).argsort(kind="stable")]
    rows = []
    for (sweep, arm), g in t.groupby(["sweep", "arm"], sort=False):
        w = _workload(study, sweep)
        search = g[g["stage"].eq("search")] if "stage" in g else g
        again = g[g["stage"].eq("reeval")] if "stage" in g else g.head(0)
        gap = (gaps.get(w) or {}).get(arm) or {}
        budget = budgets.get(w) if isinstance(budgets, dict) else budgets
        rows.append(
            {
                "workload": w,
                "arm": arm,
                "configurations": len(search),
                "stopped early": int(search["status"].eq("stopped").sum()),
                "client-rounds": _int(search["client_rounds"]),
                "budget": int(budget) if budget else "",
                "robust selection client-rounds": _int(again["client_rounds"])
                if len(again)
                else "",
                "gap, search seed": _signed(gap.get("search_seed")),
                "gap, mean of search seeds": _signed(gap.get("mean"))
                if gap.get("seeds", 1) > 1
                else "",
            }
        )
    return pd.DataFrame(rows)


def budget_summary(table: pd.DataFrame) -> list[str]:
    """One line per workload of :func:`search_budget`'s table: the configurations an arm's
    budget bought (median and range over arms), the share stopped early, the client-rounds."""
    lines = []
    for w, g in table.groupby("workload", sort=False):
        n = g["configurations"]
        stopped = g["stopped early"].sum() / max(1, n.sum())
        spent = pd.to_numeric(g["client-rounds"], errors="coerce")
        extra = pd.to_numeric(g["robust selection client-rounds"], errors="coerce")
        budget = g["budget"].iloc[0]
        line = (
            f"{w}: {int(n.median()) if n.median() == int(n.median()) else n.median()} "
            "configurations per arm "
            + ("(every arm)" if n.min() == n.max() else f"(median; {_span(n)})")
            + f", {100 * stopped:.0f} % of "
            f"them stopped early; {_span(spent)} client-rounds spent per arm"
            + (f" of {budget}" if budget != "" else "")
        )
        if extra.notna().any():
            line += f", robust selection {_span(extra)} more"
        lines.append(line + ".")
    return lines


def gap_summary(study: dict) -> str:
    """The mean absolute selection gap over every workload and arm, each way, as one line;
    empty when the study recorded no gaps."""
    gaps = [g for per in (study.get("selection_gaps") or {}).values() for g in per.values()]
    if not gaps:
        return ""
    one = sum(abs(g["search_seed"]) for g in gaps) / len(gaps)
    text = (
        f"Mean absolute selection gap (search-stage minus fresh-seed validation accuracy of the "
        f"selected configuration) over {len(gaps)} arm selections: {one:.4f} on the search seed"
    )
    robust = [g for g in gaps if g.get("seeds", 1) > 1]
    if robust:
        mean = sum(abs(g["mean"]) for g in robust) / len(robust)
        seeds = max(g["seeds"] for g in robust)
        text += f", {mean:.4f} as the mean over {seeds} search seeds (robust selection's value)"
    return text + ".\n"


def _span(values: pd.Series) -> str:
    """``lo–hi`` of integer values, or the one value where they are all equal."""
    lo, hi = int(values.min()), int(values.max())
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def _int(values: pd.Series) -> int | str:
    return int(values.fillna(0).sum()) if values.notna().any() else ""


def _signed(v) -> str:
    return "" if v is None else f"{v:+.3f}"


__all__ = ["budget_summary", "gap_summary", "search_budget"]


def study_header(study: dict, res: Results) -> str:
    """One paragraph saying what produced a study's numbers: date, machine, budget, wall time."""
    wall = study.get("wall_s")
    trials = res.trials
    if len(trials) and "stage" in trials:
        trials = trials[trials["stage"].eq("search")]
    per_arm = ""
    if len(trials) and "arm" in trials:
        counts = trials.groupby(["sweep", "arm"]).size()
        per_arm = (
            f" (every arm: {counts.min()})"
            if counts.min() == counts.max()
            else f" (per arm from {counts.min()} to {counts.max()})"
        )
    budgets = {k: v for k, v in (study.get("client_rounds") or {}).items() if v}
    search = study.get("search") or {}
    if budgets:
        each = ", ".join(f"{w} {v}" for w, v in budgets.items())
        budget = (
            f"an equal budget per arm and workload of {each} client-rounds, spent on at most "
            f"{study['trials_per_arm']} validation-only configurations{per_arm}"
        )
    else:
        n = study["trials_per_arm"]
        budget = f"{n} validation-only search trial{'' if n == 1 else 's'} per arm and workload"
        if per_arm:
            budget += per_arm[:-1] + (" trial)" if per_arm.endswith(" 1)") else " trials)")
    if search.get("scheduler", "none") != "none":
        budget += (
            f", each arm with its own {search['scheduler'].upper()} scheduler (grace period "
            f"{search['grace_period']} rounds, reduction factor {search['reduction_factor']})"
        )
    if search.get("reeval_top"):
        budget += (
            f"; robust selection: each arm's best {search['reeval_top']} by each objective "
            f"rerun on search seeds {search['reeval_seeds']}, chosen by the mean"
        )
    return (
        f"Study `{study['name']}`"
        + (f" (scale `{study['scale']}`)" if study.get("scale") else "")
        + f": {len(study['arms'])} arms on {', '.join(study['workloads'])}; {budget}; "
        f"{_selection(study)}; final seeds {study['final_seeds']}. {_when(study, wall)}\n"
    )


def _selection(study: dict) -> str:
    """How the header says the study selected: its objectives (the retention rule's bar only
    where it is one) and its uplink levels."""
    ref = f"tuned `{study['retention_reference']}`'s"
    out = f"selected by {' and '.join(study['objectives'])}"
    if "retention" in study["objectives"]:
        out += f" (retention: ≥ {study['retention']:g} of {ref} validation accuracy)"
    levels = study.get("uplink_levels") or []
    if levels:
        pct = ", ".join(f"{100 * v:g} %" for v in levels)
        out += f" and at uplink levels {pct} of {ref} cumulative restricted uplink"
    return out


def cost_line(study: dict, res: Results) -> str:
    """What the study cost, as a person pays it: the calendar span from its first launch to
    its end (or to now's record), the core-hours of its runs (Σ wall_s × the CPUs a trial
    reserved; 1 where study.json predates the record), every launch with its commit, and
    the runs resumed from a checkpoint; empty without a record of launches."""
    import datetime as dt

    attempts = study.get("attempts") or []
    start, end = study.get("started_at"), study.get("finished_at")
    if not start:
        return ""
    t0 = dt.datetime.fromisoformat(start)
    t1 = dt.datetime.fromisoformat(end) if end else None
    frames = [r for r in (res.runs, res.excluded_runs) if len(r) and "wall_s" in r]
    runs = pd.concat(frames).drop_duplicates("run_id", keep="last") if frames else pd.DataFrame()
    cpus = float(study.get("trial_cpus") or 1.0)
    core_h = float(runs["wall_s"].fillna(0).sum()) * cpus / 3600 if len(runs) else 0.0
    resumed = int((runs["attempts"].fillna(1) > 1).sum()) if "attempts" in runs else 0
    commits = ", ".join(
        f"{(a.get('started_at') or '')[:16]} at {str(a.get('commit') or 'unknown')[:10]}"
        + (" (final only)" if a.get("final_only") else "")
        for a in attempts
    )
    span = f"{(t1 - t0).total_seconds() / 3600:.1f} h" if t1 else "not finished"
    return (
        f"Cost: calendar span {span}, runs {core_h:.1f} core-hours ({len(runs)} runs, "
        f"{resumed} resumed from a checkpoint); {len(attempts)} launch"
        f"{'es' if len(attempts) != 1 else ''}: {commits or 'not recorded'}.\n"
    )


def convergence_line(res: Results, study: dict) -> str:
    """Whether the regime has converged, measured: per workload, the reference arm's final
    runs' mean validation accuracy gained over the last quarter of the rounds (from the last
    validation at or before 3T/4 to T), against 0.3 pp."""
    ref = study.get("retention_reference")
    runs = res.runs
    if not ref or not len(runs) or "label" not in runs:
        return ""
    parts = []
    for w in study.get("workloads") or []:
        mine = runs[runs["stage"].eq("final") & runs["label"].eq(ref)]
        mine = mine[mine["sweep"].eq(f"{study['name']}-{w}")]
        r = res.rounds[res.rounds["run_id"].isin(mine["run_id"]) & res.rounds["val_acc"].notna()]
        if not len(r):
            continue
        T = int(r["round"].max())
        early = r[r["round"] <= 3 * T / 4]
        if not len(early):
            continue
        t = int(early["round"].max())
        gain = r[r["round"] == T]["val_acc"].mean() - r[r["round"] == t]["val_acc"].mean()
        verdict = "converged" if gain < 0.003 else "not converged"
        parts.append(
            f"{w}: `{ref}` gains {100 * gain:+.2f} pp of validation accuracy from round {t} "
            f"to {T} ({verdict}: the bar is 0.3 pp)"
        )
    return ("Convergence: " + "; ".join(parts) + ".\n") if parts else ""


def _when(study: dict, wall) -> str:
    """When and where: the dates, every machine a launch ran on, the wall time (so far, and
    how it stands, for a study not finished)."""
    days = sorted({d[:10] for d in (study.get("started_at"), study.get("finished_at")) if d})
    attempts = study.get("attempts") or []
    machines = list(dict.fromkeys([a["machine"] for a in attempts if a.get("machine")]))
    machines = machines or [study["machine"]]
    out = f"Run {' to '.join(days)} on {' and '.join(machines)}"
    status = study.get("status", "finished")
    if not wall:
        return out + " (not finished)."
    if status != "finished":
        return out + f", wall time so far {wall / 60:.0f} min ({status})."
    return out + f", wall time {wall / 60:.0f} min."


def budget_section(study: dict, res: Results, full: bool = True) -> list[str]:
    """The study's search budget per workload and arm, and its selection gaps (``full``: the
    table per arm, else one line per workload)."""
    from .studies import budget_summary, gap_summary, search_budget

    table = search_budget(res.trials, study)
    if not len(table):
        return []
    more = [x for x in (cost_line(study, res), convergence_line(res, study)) if x]
    if not full:
        return [
            *budget_summary(table),
            *([gap_summary(study)] if gap_summary(study) else []),
            *more,
        ]
    return [
        "## Search budget and selection gap per arm\n",
        "Configurations tried in the search stage, how many the scheduler (or the spent "
        "budget) stopped early, client-rounds spent (selected clients × rounds reached) "
        "against the arm's budget, those robust selection added, and the selected "
        "configuration's validation accuracy on the search seed(s) minus its mean on the "
        "fresh final seeds.\n",
        *([gap_summary(study)] if gap_summary(study) else []),
        *more,
        tables.markdown(table),
    ]
