"""Who is most accurate at equal uplink (a study with ``uplink_levels``): the level table, the
frontier and the bytes to a target fixed in advance, from the final-stage runs and the choices
``study.json`` records (which label is which arm's choice at which level).

* :func:`level_table` — per workload, level and arm: the chosen configuration's final-stage
  test accuracy (mean ± SD over the fresh seeds) and its uplink, or ``unable`` where no
  configuration of the arm stayed within the level; the paired test-accuracy difference to the
  level's most accurate arm (same seeds, paired t 95 % CI from 5 pairs on).
* :func:`frontier_points` / :func:`frontier_plot` — every tuned label's mean final-round test
  accuracy against its mean cumulative restricted uplink, the non-dominated ones named;
  validation accuracy against uplink over the rounds (mean, min–max band over seeds), the
  levels marked, the measured ledger in a second panel.
* :func:`bytes_to_reference_target` — the uplink each label spent until its validation accuracy
  first reached ``target_of_reference`` × the reference arm's mean final-stage validation
  accuracy (validation only: fixed before any test read), with paired differences against the
  study's ``compare_to`` arms.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .load import Results
from .stats import MIN_CI_PAIRS, holm, mean_sd, paired_text, t_ci, t_pvalue, with_failures
from .tables import pareto_mask

PENDING = "pending"  # chosen, no finished final run yet
UNABLE = "unable"


def _workload_runs(res: Results, study: dict, workload: str) -> pd.DataFrame:
    return _final_of(res.runs, study, workload)


def _final_of(runs: pd.DataFrame, study: dict, workload: str) -> pd.DataFrame:
    if not len(runs):
        return runs
    return runs[(runs["stage"] == "final") & (runs["sweep"] == f"{study['name']}-{workload}")]


def _diverged(res: Results, study: dict, workload: str) -> pd.Series:
    """Per final label, how many of its runs diverged (left out of every mean)."""
    bad = _final_of(res.excluded_runs, study, workload)
    if not len(bad):
        return pd.Series(dtype=int)
    return bad[bad["status"] == "diverged"].groupby("label").size()


def _final_rows(res: Results, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per final run at its last round: label, seed, test and validation accuracy,
    cumulative uplink in both ledgers."""
    last = res.rounds[res.rounds["run_id"].isin(runs["run_id"])]
    last = last.sort_values("round").groupby("run_id").tail(1).set_index("run_id")
    r = runs.set_index("run_id")
    return pd.DataFrame(
        {
            "label": r["label"],
            "seed": r["seed"],
            "test_acc": r["test_acc"],
            "val_acc": r["final_val_acc"],
            "up_restricted": last["cum_up_restricted"].reindex(r.index),
            "up_measured": last["cum_up_measured"].reindex(r.index),
        }
    ).reset_index()


def _paired(a: pd.DataFrame, b: pd.DataFrame, value: str, seed: int = 0) -> tuple:
    d = (a.set_index("seed")[value] - b.set_index("seed")[value]).dropna()
    lo, hi = t_ci(d.to_numpy())
    return len(d), (float(d.mean()) if len(d) else float("nan")), lo, hi


def _acc_text(mean: float, sd: float) -> str:
    """Mean ± SD; ``pending`` for a choice with no finished final run yet (a study still
    computing)."""
    if not np.isfinite(mean):
        return PENDING
    return f"{mean:.3f} ± {sd:.3f}" if np.isfinite(sd) else f"{mean:.3f}"


def chance(dataset: str) -> float:
    """1 / classes of a known dataset (the accuracy a diverged run is counted at); NaN else."""
    from reuse_ray.data.registry import _TV_INFO

    classes = {"digits": 10, "pathmnist": 9, **{k: v.num_classes for k, v in _TV_INFO.items()}}
    return 1.0 / classes[dataset] if dataset in classes else float("nan")


def objective_level(name: str) -> tuple[float, str]:
    """(fraction, ledger) of a level objective: ``up10`` -> (0.1, restricted),
    ``up12.5-measured`` -> (0.125, measured)."""
    head, _, ledger = name.partition("-")
    return float(head.removeprefix("up")) / 100, ledger or "restricted"


def _all_finals(res: Results, study: dict, workload: str) -> pd.DataFrame:
    """Every final run of a workload, finished or not (status says which)."""
    frames = [r for r in (res.runs, res.excluded_runs) if len(r)]
    runs = pd.concat(frames, ignore_index=True) if frames else res.runs
    return _final_of(runs, study, workload).drop_duplicates("run_id", keep="last")


def readings_table(res: Results, study: dict) -> pd.DataFrame:
    """The level table of a study whose runs read their levels (the ``levels`` table): per
    workload, level and ledger (``up10``, ``up10-measured``) and arm, leader first — the arm
    whose final runs' readings are the most accurate on validation — the label its choice ran
    under, the runs read there and those that failed before (``failed``; with each at chance in
    ``with failures at chance``), the readings' test accuracy (mean ± SD), the round and the
    cumulative uplink they were read at, and the paired test-accuracy difference to the
    leader with its t 95 % interval and Holm-adjusted p-value within the level. Every arm
    without a choice at the level is a row ``unable`` with the reason."""
    rows: list[dict] = []
    for workload, got in (study.get("choices") or {}).items():
        finals = _all_finals(res, study, workload)
        base = chance(_dataset(res, finals)) if len(finals) else float("nan")
        for name, limit in (got.get("level_bytes") or {}).items():
            arms = _level_arms(res.levels, finals, got, name)
            level_rows = _reading_rows(arms, base)
            for row in level_rows:
                row.update(workload=workload, level=name, **{"limit MB": round(limit / 1e6, 3)})
            rows += [{k: r[k] for k in READING_COLUMNS} for r in level_rows] + _unable_rows(
                workload, name, round(limit / 1e6, 3), got, level_rows, "read"
            )
    table = pd.DataFrame(rows, columns=list(READING_COLUMNS))
    return table.assign(verdict=table["verdict"].astype(object).fillna(UNABLE))  # unable rows


READING_COLUMNS = (
    "workload",
    "level",
    "limit MB",
    "arm",
    "label",
    "read",
    "failed",
    "test acc",
    "with failures at chance",
    "round",
    "uplink MB",
    "Δ test acc vs the leader",
    "p (Holm)",
    "verdict",
)


def _level_arms(levels: pd.DataFrame, finals: pd.DataFrame, got: dict, name: str) -> list:
    """Per arm with a choice at level ``name``: (arm, label, its final runs' readings there,
    how many of its final runs failed before reading it, the readings' mean validation
    accuracy); the leader (most accurate on validation) first."""
    f, ledger = objective_level(name)
    here = levels[np.isclose(levels["level"], f) & levels["ledger"].eq(ledger)]
    arms = []
    for arm, objectives in (got.get("arms") or {}).items():
        choice = objectives.get(name)
        if choice is None:
            continue
        ids = set(finals.loc[finals["label"].eq(choice["label"]), "run_id"])
        r = here[here["run_id"].isin(ids)].drop_duplicates("run_id", keep="last")
        ok = r[r["status"].isin(("crossed", "cap", "over"))]
        arms.append((arm, choice["label"], ok, len(r) - len(ok), ok["val_acc"].mean()))
    return sorted(arms, key=lambda a: -a[4] if np.isfinite(a[4]) else np.inf)


def _reading_rows(arms: list, base: float) -> list[dict]:
    """One row per arm of :func:`_level_arms`, each against the leader (the first): paired
    test-accuracy differences over the seeds both read, their t intervals, Holm's p-values."""
    if not arms:
        return []
    lead = arms[0][2].set_index("seed")["test_acc"]
    diffs = [(ok.set_index("seed")["test_acc"] - lead).dropna() for _, _, ok, _, _ in arms]
    pvals = [np.nan] + [t_pvalue(d) if len(d) >= MIN_CI_PAIRS else np.nan for d in diffs[1:]]
    rows = []
    for k, ((arm, label, ok, failed, _), d, p) in enumerate(
        zip(arms, diffs, holm(pvals), strict=True)
    ):
        m, sd = mean_sd(ok["test_acc"])
        rounds = ok["round"].dropna().astype(int)
        mean = float(d.mean()) if len(d) else np.nan
        lo, hi = t_ci(d) if len(d) >= MIN_CI_PAIRS else (np.nan, np.nan)
        rows.append(
            {
                "arm": arm,
                "label": label,
                "read": len(ok),
                "failed": failed,
                "test acc": _acc_text(m, sd),
                "with failures at chance": f"{with_failures(ok['test_acc'], failed, base):.3f}"
                if failed
                else "",
                "round": _span_text(rounds) if len(rounds) else "",
                "uplink MB": round(float(ok["cum_up"].mean()) / 1e6, 3) if len(ok) else "",
                "Δ test acc vs the leader": "" if k == 0 else paired_text(len(d), mean, lo, hi),
                "p (Holm)": "" if not np.isfinite(p) else f"{p:.3f}",
                "verdict": LEADER if k == 0 else verdict(len(d), lo, hi, p),
            }
        )
    return rows


LEADER = "leader"


def verdict(pairs: int, lo: float, hi: float, p_holm: float, alpha: float = 0.05) -> str:
    """A paired difference to a level's leader in words: ``within`` where its t 95 % interval
    holds 0; ``behind`` (``ahead``) where the whole interval is below (above) 0 and the
    Holm-adjusted p-value is below ``alpha`` too; ``behind before Holm`` where only the
    interval says so (the level's several comparisons leave it undecided); with fewer than
    ``MIN_CI_PAIRS`` pairs, no interval and no verdict."""
    if pairs < MIN_CI_PAIRS or not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{pairs} pairs: undecided"
    if lo <= 0 <= hi:
        return "within"
    side = "behind" if hi < 0 else "ahead"
    return side if np.isfinite(p_holm) and p_holm < alpha else f"{side} before Holm"


def verdict_lines(table: pd.DataFrame) -> list[str]:
    """The readings table (:func:`readings_table`) in words, one line per workload and level:
    the leader, then the arms by verdict — ``within`` its interval, ``ahead``/``behind`` (each
    with its paired difference), ``… before Holm``, undecided and ``unable`` — so a sentence
    that quotes a comparison quotes the interval that decides it."""
    lines = []
    for (workload, level), g in table.groupby(["workload", "level"], sort=False):
        lead = g[g["verdict"].eq(LEADER)]
        if not len(lead):
            lines.append(f"{workload} {level}: no arm was read ({', '.join(g['arm'])} unable)")
            continue
        parts = [f"{workload} {level}: {lead['arm'].iloc[0]} leads ({lead['test acc'].iloc[0]})"]
        for word in ("within", "ahead", "behind", "ahead before Holm", "behind before Holm"):
            rows = g[g["verdict"].eq(word)]
            if not len(rows):
                continue
            delta = word != "within"
            names = [
                r["arm"] + (f" {r['Δ test acc vs the leader']}" if delta else "")
                for _, r in rows.iterrows()
            ]
            parts.append(f"{word}{' its interval' if word == 'within' else ''}: {', '.join(names)}")
        rest = g[g["verdict"].str.endswith("undecided", na=False)]
        if len(rest):
            parts.append(f"undecided (too few pairs): {', '.join(rest['arm'])}")
        unable = g[g["verdict"].eq(UNABLE)]
        if len(unable):
            parts.append(f"unable: {', '.join(unable['arm'])}")
        lines.append("; ".join(parts))
    return lines


def _span_text(values: pd.Series) -> str:
    lo, hi = int(values.min()), int(values.max())
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def level_table(res: Results, study: dict) -> pd.DataFrame:
    """Per workload, level and arm (most accurate on the final stage's validation first, so
    the leader is never picked by its test accuracy): the label its choice ran under, seeds,
    test accuracy (mean ± SD over the finished runs), the ``diverged`` final runs and the
    mean with each counted at chance accuracy, mean cumulative uplink (MB) in both ledgers and
    how many runs' measured uplink exceeds the level's limit, and the paired test-accuracy
    difference (t 95 % interval) to the level's leader, over the seeds both labels finished;
    an arm no configuration of which stayed within the level is a row marked ``unable``."""
    rows = []
    for workload, got in (study.get("choices") or {}).items():
        finals = _final_rows(res, _workload_runs(res, study, workload))
        diverged = _diverged(res, study, workload)
        for level, limit in (got.get("level_bytes") or {}).items():
            arms = []
            for arm, objectives in (got.get("arms") or {}).items():
                choice = objectives.get(level)
                if choice is None:
                    continue
                runs = finals[finals["label"] == choice["label"]]
                m, s = mean_sd(runs["test_acc"])
                v = float(runs["val_acc"].mean()) if runs["val_acc"].notna().any() else np.nan
                arms.append((arm, choice["label"], runs, m, s, v))
            arms.sort(key=lambda a: -a[5] if np.isfinite(a[5]) else np.inf)
            best = arms[0] if arms else None
            for arm, label, runs, m, s, _ in arms:
                diff = "" if arm == best[0] else paired_text(*_paired(runs, best[2], "test_acc"))
                failed = int(diverged.get(label, 0))
                at_chance = with_failures(runs["test_acc"], failed, chance(_dataset(res, runs)))
                rows.append(
                    {
                        "workload": workload,
                        "level": level,
                        "limit MB": round(limit / 1e6, 2),
                        "arm": arm,
                        "label": label,
                        "seeds": runs["seed"].nunique(),
                        "diverged": failed,
                        "test acc": _acc_text(m, s),
                        "with diverged at chance": f"{at_chance:.3f}"
                        if failed and np.isfinite(at_chance)
                        else "",
                        "uplink MB": round(float(runs["up_restricted"].mean()) / 1e6, 2),
                        "measured MB": round(float(runs["up_measured"].mean()) / 1e6, 2),
                        "over in measured": f"{int((runs['up_measured'] > limit).sum())} of "
                        f"{len(runs)}",
                        "Δ test acc vs the level's best": diff,
                    }
                )
            rows += _unable_rows(workload, level, round(limit / 1e6, 2), got, rows, "seeds")
    return pd.DataFrame(rows)


def _unable_rows(workload, level: str, limit_mb, got: dict, rows: list, count: str) -> list:
    """The rows of a level's arms that have no choice there: ``unable`` and, where the study
    recorded it, why; every other column of ``rows`` empty (``count`` 0)."""
    out = []
    columns = list(rows[0]) if rows else []
    for arm in sorted(got.get("unable") or {}):
        if level not in got["unable"][arm]:
            continue
        why = ((got.get("unable_why") or {}).get(arm) or {}).get(level, "")
        row = dict.fromkeys(columns, "")
        row.update(
            {"workload": workload, "level": level, "limit MB": limit_mb, "arm": arm, count: 0}
        )
        row["test acc"] = f"{UNABLE}: {why}" if why else UNABLE
        out.append(row)
    return out


def _dataset(res: Results, runs: pd.DataFrame) -> str:
    """The dataset of a label's final runs."""
    if "dataset" not in res.runs:
        return ""
    names = res.runs.set_index("run_id")["dataset"].reindex(runs["run_id"]).dropna()
    return str(names.iloc[0]) if len(names) else ""


def frontier_points(res: Results, study: dict) -> pd.DataFrame:
    """Per workload and final label: mean final-round test accuracy and mean cumulative
    restricted and measured uplink (MB), and whether it is non-dominated (no other label at
    least as accurate for at most as many restricted uplink bytes)."""
    rows = []
    for workload in study.get("choices") or {}:
        finals = _final_rows(res, _workload_runs(res, study, workload))
        for label, g in finals.groupby("label"):
            rows.append(
                {
                    "workload": workload,
                    "label": label,
                    "seeds": g["seed"].nunique(),
                    "test_acc": float(g["test_acc"].mean()),
                    "up_restricted_MB": float(g["up_restricted"].mean()) / 1e6,
                    "up_measured_MB": float(g["up_measured"].mean()) / 1e6,
                }
            )
    out = pd.DataFrame(rows)
    if not len(out):
        return out
    out["on_front"] = False
    for _, idx in out.groupby("workload").groups.items():
        mask = pareto_mask(
            out.loc[idx, "test_acc"].to_numpy(), out.loc[idx, "up_restricted_MB"].to_numpy()
        )
        out.loc[idx[mask], "on_front"] = True
    return out


def reference_target(res: Results, study: dict, workload: str) -> float | None:
    """``target_of_reference`` × the reference arm's mean final-stage validation accuracy
    (validation only), or None where the study sets none."""
    ratio = float(study.get("target_of_reference") or 0)
    ref = study.get("retention_reference")
    if not ratio or not ref:
        return None
    runs = _workload_runs(res, study, workload)
    val = runs[runs["label"] == ref]["final_val_acc"]
    return ratio * float(val.mean()) if val.notna().any() else None


def bytes_to_reference_target(res: Results, study: dict) -> pd.DataFrame:
    """Per workload and final label: the target, runs, how many never reached it (censored:
    their uplink at the end counts, a lower bound), the mean cumulative restricted uplink
    until the first validation at or above it (MB), and for each ``compare_to`` arm the
    paired difference of that uplink (same seeds; MB)."""
    rows = []
    for workload in study.get("choices") or {}:
        goal = reference_target(res, study, workload)
        if goal is None:
            continue
        runs = _workload_runs(res, study, workload)
        rounds = res.rounds[res.rounds["run_id"].isin(runs["run_id"])].sort_values("round")
        label = runs.set_index("run_id")["label"]
        spent = []
        for run_id, g in rounds[rounds["val_acc"].notna()].groupby("run_id"):
            hit = g[g["val_acc"] >= goal]
            r = hit.iloc[0] if len(hit) else g.iloc[-1]
            spent.append(
                {
                    "label": label[run_id],
                    "seed": int(r["seed"]),
                    "censored": not len(hit),
                    "up_MB": float(r["cum_up_restricted"]) / 1e6,
                }
            )
        df = pd.DataFrame(spent)
        refs = [r for r in study.get("compare_to") or () if r in set(df["label"])]
        for name, g in df.groupby("label"):
            censored = int(g["censored"].sum())
            mean = float(g["up_MB"].mean())
            row = {
                "workload": workload,
                "label": name,
                "target val acc": round(goal, 4),
                "runs": len(g),
                "censored": censored,
                # a run that never reached the target spent at least its total: the mean is a
                # lower bound, and no difference is computed from it
                "uplink to target MB": f"≥ {mean:.2f} ({censored} censored)"
                if censored
                else round(mean, 2),
            }
            for ref in refs:
                other = df[df["label"] == ref]
                cens = censored or bool(other["censored"].any())
                row[f"Δ MB vs {ref}"] = (
                    ""
                    if name == ref
                    else "censored"
                    if cens
                    else paired_text(*_paired(g, other, "up_MB"), digits=2)
                )
            rows.append(row)
    return pd.DataFrame(rows)


def _styles(labels) -> dict[str, tuple]:
    """(colour, line style) per final label: one colour per arm, one style per selection (the
    arm's most accurate configuration solid, each uplink level's choice its own dash)."""
    from .plots import pyplot

    plt = pyplot()

    arms = sorted({label.split("@")[0] for label in labels})
    colour = {a: plt.cm.tab20.colors[(2 * i) % 20 + (2 * i) // 20] for i, a in enumerate(arms)}
    dashes = ["--", ":", "-.", (0, (5, 1, 1, 1, 1, 1))]
    levels = sorted({label.split("@")[1] for label in labels if "@" in label})
    style = {lv: dashes[i % len(dashes)] for i, lv in enumerate(levels)}
    return {
        label: (colour[label.split("@")[0]], style.get(label.partition("@")[2], "-"))
        for label in labels
    }


def frontier_plot(res: Results, study: dict, out: Path) -> list[Path]:
    """Per workload: validation accuracy against cumulative uplink for every final label
    (mean over seeds, min–max band), final-round test accuracy as points, the uplink levels
    as vertical lines, the non-dominated labels named; restricted ledger left, measured
    right. One colour per arm, one line style per selection (a level's choice dashed); the
    accuracy axis starts 0.25 below the lowest final point, where the early rounds leave it."""
    from .plots import _save, pyplot

    plt = pyplot()

    paths = []
    points = frontier_points(res, study)
    for workload, got in (study.get("choices") or {}).items():
        runs = _workload_runs(res, study, workload)
        if not len(runs):
            continue
        rounds = res.rounds[
            res.rounds["run_id"].isin(runs["run_id"]) & res.rounds["val_acc"].notna()
        ]
        rounds = rounds.assign(label=rounds["run_id"].map(runs.set_index("run_id")["label"]))
        pts = points[points["workload"] == workload]
        styles = _styles(rounds["label"].unique())
        fig, axes = plt.subplots(1, 2, figsize=(12.8, 5.6), sharey=True)
        limits = got.get("level_bytes") or {}
        for ax, ledger in zip(axes, ("restricted", "measured"), strict=True):
            mine = {k: v for k, v in limits.items() if objective_level(k)[1] == ledger}
            _panel(ax, rounds, pts, styles, ledger, mine)
        axes[0].set_ylabel("validation accuracy (lines), final test accuracy (stars)")
        if len(pts) and pts["test_acc"].notna().any():  # the frontier's end, not round 1's
            axes[0].set_ylim(bottom=max(0.0, float(pts["test_acc"].min()) - 0.25))
        front = ", ".join(pts[pts["on_front"]].sort_values("up_restricted_MB")["label"])
        fig.suptitle(f"{workload}: accuracy against uplink; non-dominated: {front}", fontsize=10)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7, frameon=False)
        fig.subplots_adjust(bottom=0.12 + 0.028 * -(-len(labels) // 4))
        paths.append(_save(fig, out / f"frontier_{workload}.png"))
    return paths


def _panel(ax, rounds, pts, styles, ledger: str, level_bytes: dict) -> None:
    """One ledger's panel of :func:`frontier_plot`: per label the mean validation curve over
    seeds with its min–max band, the final test accuracy as a star, the levels' limits."""
    col = f"cum_up_{ledger}"
    for label, g in rounds.groupby("label"):
        per = g.groupby("round").agg(
            x=(col, "mean"), mean=("val_acc", "mean"), lo=("val_acc", "min"), hi=("val_acc", "max")
        )
        colour, style = styles[label]
        ax.plot(per["x"] / 1e6, per["mean"], ls=style, lw=1.2, color=colour, label=label)
        ax.fill_between(per["x"] / 1e6, per["lo"], per["hi"], color=colour, alpha=0.1)
        p = pts[pts["label"] == label]
        ax.scatter(p[f"up_{ledger}_MB"], p["test_acc"], color=colour, marker="*", s=60, zorder=3)
    for level, limit in level_bytes.items():
        ax.axvline(limit / 1e6, color="grey", ls=":", lw=1)
        ax.text(
            limit / 1e6,
            0.01,
            f" {level}",
            color="grey",
            fontsize=8,
            transform=ax.get_xaxis_transform(),
        )
    ax.set_xscale("log")
    ax.set_xlabel(f"cumulative {ledger} uplink (MB, log scale)")
    ax.grid(alpha=0.3)


def has_levels(study: dict | None) -> bool:
    return any((c or {}).get("level_bytes") for c in ((study or {}).get("choices") or {}).values())


READINGS_INTRO = (
    "Every run is read at each uplink level (a fraction of dense FedAvg's uplink over "
    "the planned rounds, one byte budget for every arm) at the last round whose "
    "cumulative uplink stays within it, in the restricted ledger (`up10`) and the "
    "measured one (`up10-measured`). Per level, each arm's configuration chosen on its "
    "search readings, rerun on the fresh seeds: the readings' test accuracy (mean ± SD "
    "over the runs `read` there; `failed`: runs that diverged or failed before it, and "
    "the mean with each at chance accuracy), the rounds and uplink read at, and the "
    "paired difference to the level's leader — the most accurate on the readings' "
    "validation — with its t 95 % interval (from 5 pairs on), Holm-adjusted "
    "p-value over the level's comparisons and the `verdict` they give. `unable`: no "
    "configuration of the arm was read at the level, and why.\n"
)
SEARCH_LEVELS_INTRO = (
    "Per uplink level (a fraction of the reference arm's tuned cumulative restricted "
    "uplink), each arm's most accurate search configuration within it, rerun on the "
    "fresh seeds: final-round test accuracy (mean ± SD over the finished runs; `with "
    "diverged at chance`: the mean with each diverged run at chance accuracy), its "
    "uplink in the restricted and measured ledgers (`over in measured`: runs whose "
    "measured uplink exceeds the limit), and the paired difference to the level's "
    "leader, the arm most accurate on the final stage's validation (paired t 95 % "
    "interval from 5 pairs on, each comparison on its own). `unable`: no finished "
    "configuration of the arm stayed within the level; `pending`: chosen, its final "
    "runs not finished yet.\n"
)


def sections(res: Results, study: dict, out: Path | None = None) -> list[str]:
    """The report's (and ``report --leaderboard``'s) Markdown of a study with uplink levels:
    the level table, the frontier's points and, where ``out`` is given, its figures; the bytes
    to the reference target."""
    from .tables import markdown

    if not has_levels(study):
        return []
    if len(res.levels):
        md = [
            "## Accuracy at matched uplink\n",
            READINGS_INTRO,
            markdown(table := readings_table(res, study), digits=3),
            "\nIn words (the `verdict` column; `within`: the t interval holds 0; "
            "`behind`/`ahead`: the interval and the Holm-adjusted p-value agree):\n",
            *(f"- {line}" for line in verdict_lines(table)),
        ]
        if out is not None:
            from .readings_plot import readings_plot

            md += [f"\n![{p.stem}]({p.name})\n" for p in readings_plot(res, study, out)]
    else:
        md = [
            "## Accuracy at matched uplink\n",
            SEARCH_LEVELS_INTRO,
            markdown(level_table(res, study), digits=3),
        ]
    from .ablations import INTRO, ablation_table

    ablations = ablation_table(res, study)
    if len(ablations):
        md += ["\n## Ablations\n", INTRO, markdown(ablations, digits=3)]
    md += [
        "\n## The frontier\n",
        "Every final label's mean test accuracy against its mean cumulative uplink; "
        "`on_front`: no other label is at least as accurate for at most as many restricted "
        "uplink bytes.\n",
        markdown(frontier_points(res, study), digits=3),
    ]
    if out is not None:
        md += [f"\n![{p.stem}]({p.name})\n" for p in frontier_plot(res, study, out)]
    btt = bytes_to_reference_target(res, study)
    if len(btt):
        ratio = study.get("target_of_reference")
        md += [
            f"\n## Uplink to {ratio:g} × the reference's validation accuracy\n",
            f"The target is {ratio:g} × `{study.get('retention_reference')}`'s mean "
            "final-stage validation accuracy (validation only, fixed before any test read); "
            "per label the mean cumulative restricted uplink until a run's validation "
            "accuracy first reached it, and the paired differences (same seeds). A label with "
            "censored runs (never reached the target) shows a lower bound and no difference.\n",
            markdown(btt, digits=3),
        ]
    return md


__all__ = [
    "has_levels",
    "sections",
    "bytes_to_reference_target",
    "frontier_plot",
    "frontier_points",
    "level_table",
    "reference_target",
]
