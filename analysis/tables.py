"""The paper's tables as DataFrames (and Markdown), computed from Parquet rows only.

* :func:`fixed_budget` — Table 6 analogue: accuracy and cumulative restricted saving at a
  pre-set round T, mean ± SD over seeds, paired differences against a reference arm with
  paired t 95 % CIs (pairs share a seed, hence partitions and client schedules);
* :func:`downlink_table` — Table 7 analogue: the dense-downlink sensitivity beside the measured
  bidirectional ledger;
* :func:`factorial` — reuse × Top-K main effects and interaction on identical schedules;
* :func:`bytes_to_target` — bytes and rounds to a validation target fixed in advance, with
  censoring for runs that never reach it;
* :func:`gate_diagnostics` — DG-FedReuse gate firing rate, D against τ_t, reuse fraction.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .load import AnalysisError, Results
from .stats import MIN_CI_PAIRS, mean_sd, paired_text, t_ci


def common_round(res: Results) -> int:
    """The largest round every run completed (the default fixed budget T)."""
    return int(res.rounds.groupby("run_id")["round"].max().min())


def budget_rounds(res: Results) -> int | dict[str, int]:
    """The default fixed budget T: the largest round every run completed — per dataset when
    the datasets' runs end at different rounds (a study's workloads)."""
    dataset = res.runs.set_index("run_id")["dataset"]
    last = res.rounds.groupby("run_id")["round"].max()
    per = last.groupby(dataset.reindex(last.index).to_numpy()).min().astype(int).to_dict()
    values = set(per.values())
    return values.pop() if len(values) == 1 else per


def describe_rounds(T: int | dict[str, int]) -> str:
    """``30`` or ``30 (digits), 20 (synthetic)``."""
    if isinstance(T, dict):
        return ", ".join(f"{t} ({d})" for d, t in sorted(T.items()))
    return str(T)


def at_round(res: Results, T: int | dict[str, int]) -> pd.DataFrame:
    """One row per run at round T (one number, or one per dataset): validation metrics there,
    cumulative ledgers, test metrics."""
    runs = res.runs.set_index("run_id")
    if isinstance(T, dict):
        want = res.rounds["run_id"].map(runs["dataset"]).map(T)
        r = res.rounds[res.rounds["round"] == want].set_index("run_id")
    else:
        r = res.rounds[res.rounds["round"] == T].set_index("run_id")
    out = r[
        [
            "arm",
            "seed",
            "val_acc",
            "cum_saving_restricted",
            "cum_saving_bidirectional",
            "cum_up_restricted",
            "cum_down_sensitivity",
            "cum_dense_reference",
            "cum_up_measured",
            "cum_down_measured",
        ]
    ].copy()
    out["dataset"] = runs["dataset"].reindex(out.index)
    goal = out["dataset"].map(T) if isinstance(T, dict) else T
    test_ok = runs["test_round"].reindex(out.index) == goal
    out["test_acc"] = runs["test_acc"].reindex(out.index).where(test_ok)
    return out.reset_index()


def _paired(df: pd.DataFrame, value: str, arm: str, reference: str, seed: int) -> dict:
    a = df[df["arm"] == arm].set_index(["dataset", "seed"])[value]
    b = df[df["arm"] == reference].set_index(["dataset", "seed"])[value]
    d = (a - b).dropna()
    lo, hi = t_ci(d.to_numpy())
    return {
        "n_pairs": len(d),
        "mean": float(d.mean()) if len(d) else float("nan"),
        "lo": lo,
        "hi": hi,
    }


def check_results(res: Results, where: str) -> None:
    """There must be finished runs with rounds to compare; the error says what the results
    hold instead (unfinished runs, or a runs table without its rounds)."""
    if res.runs.empty:
        left = (
            f" ({res.excluded} unfinished, left out: rerun them to finish them)"
            if res.excluded
            else ""
        )
        raise AnalysisError(f"{where}: no finished run to report{left}")
    if res.rounds.empty or "run_id" not in res.rounds:
        raise AnalysisError(
            f"{where}: the runs table names {len(res.runs)} finished run(s) but "
            f"no rounds table holds their rows (expected <results>/rounds/...)"
        )


def check_round(res: Results, T: int | dict[str, int]) -> None:
    """T must be a round every run completed; the error names the rounds that exist."""
    if isinstance(T, dict):
        return  # the per-dataset default is by construction
    last = common_round(res)
    if isinstance(T, bool) or not isinstance(T, int) or not 1 <= T <= last:
        raise AnalysisError(
            f"--round {T}: every run completed rounds 1..{last} — allowed: 1 to {last}"
        )


def check_arm(res: Results, arm: str | None) -> None:
    """A reference arm must be one of the runs' arms; the error lists them."""
    arms = sorted(res.runs["arm"].unique())
    if arm is not None and arm not in arms:
        raise AnalysisError(
            f"--reference {arm!r} is not an arm of these results — allowed: " + "; ".join(arms)
        )


def fixed_budget(
    res: Results, T: int | None = None, reference: str | None = None, seed: int = 0
) -> pd.DataFrame:
    """Accuracy and savings at round T per (dataset, arm), with paired differences."""
    T = budget_rounds(res) if T is None else T
    check_round(res, T)
    check_arm(res, reference)
    df = at_round(res, T)
    arms = sorted(df["arm"].unique())
    reference = reference or next((a for a in arms if a.startswith("fedavg")), arms[0])
    rows = []
    for (dataset, arm), g in df.groupby(["dataset", "arm"]):
        row = {
            "dataset": dataset,
            "arm": arm,
            "round": T.get(dataset) if isinstance(T, dict) else T,
            "seeds": g["seed"].nunique(),
        }
        for col in ("val_acc", "test_acc", "cum_saving_restricted", "cum_saving_bidirectional"):
            row[f"{col}_mean"], row[f"{col}_sd"] = mean_sd(g[col])
        if arm != reference:
            sub = df[df["dataset"] == dataset]
            for col in ("val_acc", "test_acc", "cum_saving_restricted"):
                p = _paired(sub, col, arm, reference, seed)
                row[f"d_{col}"], row[f"d_{col}_lo"], row[f"d_{col}_hi"] = (
                    p["mean"],
                    p["lo"],
                    p["hi"],
                )
                row["pairs"] = p["n_pairs"]
        rows.append(row)
    out = pd.DataFrame(rows)
    if "pairs" in out:
        out["pairs"] = out["pairs"].astype("Int64")
        few = out["pairs"].notna() & (out["pairs"] < MIN_CI_PAIRS)
        ci_cols = [c for c in out.columns if c.endswith(("_lo", "_hi"))]
        out.loc[few, ci_cols] = float("nan")  # an interval from so few pairs means nothing
        out["ci"] = [
            ""
            if pd.isna(n)
            else (f"not meaningful ({n} pairs < {MIN_CI_PAIRS})" if n < MIN_CI_PAIRS else "95 %")
            for n in out["pairs"]
        ]
    out.attrs["reference"] = reference
    return out


def downlink_table(res: Results, T: int | None = None) -> pd.DataFrame:
    """Restricted uplink saving, its dense-downlink sensitivity, and the measured bytes."""
    T = budget_rounds(res) if T is None else T
    df = at_round(res, T)
    df["measured_total"] = df["cum_up_measured"] + df["cum_down_measured"]
    df["measured_vs_dense"] = df["measured_total"] / (2 * df["cum_dense_reference"])
    g = df.groupby(["dataset", "arm"])
    return pd.DataFrame(
        {
            "round": describe_rounds(T),
            "uplink_saving": g["cum_saving_restricted"].mean(),
            "bidirectional_sensitivity_saving": g["cum_saving_bidirectional"].mean(),
            "measured_up_MB": g["cum_up_measured"].mean() / 1e6,
            "measured_down_MB": g["cum_down_measured"].mean() / 1e6,
            "measured_saving_vs_dense_both_ways": 1 - g["measured_vs_dense"].mean(),
        }
    ).reset_index()


def _mean_fmt(values: pd.Series, scale: float, fmt: str) -> str:
    """The mean of a column divided by ``scale``, formatted; empty when nothing is known."""
    v = float(values.mean()) if values.notna().any() else float("nan")
    return "" if not np.isfinite(v) else format(v / scale, fmt)


def leaderboard(
    res: Results, T: int | None = None, references: tuple[str, ...] = (), seed: int = 0
) -> pd.DataFrame:
    """Per (dataset, arm) at round T, over seeds: validation and test accuracy (mean ± SD); the
    restricted ledger's uplink saving, uplink MB and dense-downlink MB; the measured MB up and
    down; server and client memory (MB) at the end; client steps per run; the clients'
    decisions (:func:`decision_shares`); for each arm of
    ``references`` the paired test-accuracy difference (same seeds) with a paired t 95 % CI
    from 5 pairs on; and whether the arm lies on the dataset's Pareto front of mean accuracy
    (test, else validation) against mean measured total bytes."""
    T = budget_rounds(res) if T is None else T
    check_round(res, T)
    for ref in references:
        check_arm(res, ref)
    df = at_round(res, T)
    runs = res.runs.set_index("run_id")
    for col in ("server_memory_bytes", "client_memory_bytes", "client_steps"):
        df[col] = runs[col].reindex(df["run_id"]).to_numpy() if col in runs else float("nan")
    rows = []
    for (dataset, arm), g in df.groupby(["dataset", "arm"]):
        row = {"dataset": dataset, "arm": arm, "seeds": g["seed"].nunique()}
        for col, name in (("val_acc", "val acc"), ("test_acc", "test acc")):
            m, s = mean_sd(g[col])
            row[name] = (
                ""
                if not np.isfinite(m)
                else (f"{m:.3f} ± {s:.3f}" if np.isfinite(s) else f"{m:.3f}")
            )
        row["uplink saving"] = f"{100 * g['cum_saving_restricted'].mean():.2f} %"
        row["up MB (restricted)"] = _mean_fmt(g["cum_up_restricted"], 1e6, ".2f")
        row["down MB (dense, restricted)"] = _mean_fmt(g["cum_down_sensitivity"], 1e6, ".1f")
        row["up MB"] = _mean_fmt(g["cum_up_measured"], 1e6, ".1f")
        row["down MB"] = _mean_fmt(g["cum_down_measured"], 1e6, ".1f")
        row["server memory MB"] = _mean_fmt(g["server_memory_bytes"], 1e6, ".2f")
        row["client memory MB"] = _mean_fmt(g["client_memory_bytes"], 1e6, ".2f")
        row["client steps"] = _mean_fmt(g["client_steps"], 1, ".0f")
        row["client decisions"] = decision_shares(res.client_events, g["run_id"])
        sub = df[df["dataset"] == dataset]
        for ref in references:
            row[f"Δ test acc vs {ref}"] = (
                ""
                if arm == ref or ref not in set(sub["arm"])
                else _paired_text(sub, arm, ref, seed)
            )
        rows.append(row)
    out = pd.DataFrame(rows)
    if len(out):
        front = pareto_points(res, T).set_index(["dataset", "arm"])["on_front"]
        on = [
            bool(front.get((d, a), False)) for d, a in zip(out["dataset"], out["arm"], strict=True)
        ]
        out.insert(out.columns.get_loc("uplink saving"), "Pareto", ["yes" if x else "" for x in on])
    return out


def decision_shares(events: pd.DataFrame, run_ids) -> str:
    """What the runs' clients did, as shares of their client events: ``all fresh``, or each
    decision's share (fresh, reused, lazy, …) and the share the fresh quota promoted to train
    — the mechanism on record: a reuse method whose choice reuses nothing says so here."""
    if not len(events) or "decision" not in events:
        return ""
    ev = events[events["run_id"].isin(set(run_ids))]
    if not len(ev):
        return ""
    shares = ev["decision"].value_counts(normalize=True)
    if set(shares.index) == {"fresh"}:
        return "all fresh"
    parts = [f"{name} {100 * v:.1f} %" for name, v in shares.items()]
    if "promoted" in ev and ev["promoted"].fillna(False).astype(bool).any():
        parts.append(f"promoted by the quota {100 * ev['promoted'].fillna(False).mean():.1f} %")
    return ", ".join(parts)


def pareto_points(res: Results, T: int | None = None) -> pd.DataFrame:
    """Per (dataset, arm) at round T: mean accuracy (test where every run has it, else
    validation), mean measured bytes up + down per run (MB), and whether the arm is on the
    dataset's Pareto front (no other arm at least as accurate for at most as many bytes)."""
    T = budget_rounds(res) if T is None else T
    df = at_round(res, T)
    df["total_MB"] = (df["cum_up_measured"] + df["cum_down_measured"]) / 1e6
    rows = []
    for (dataset, arm), g in df.groupby(["dataset", "arm"]):
        acc = g["test_acc"] if g["test_acc"].notna().all() else g["val_acc"]
        rows.append(
            {
                "dataset": dataset,
                "arm": arm,
                "acc": float(acc.mean()),
                "total_MB": float(g["total_MB"].mean()),
            }
        )
    out = pd.DataFrame(rows, columns=["dataset", "arm", "acc", "total_MB"])
    out["on_front"] = False
    for _, idx in out.groupby("dataset").groups.items():
        mask = pareto_mask(out.loc[idx, "acc"].to_numpy(), out.loc[idx, "total_MB"].to_numpy())
        out.loc[idx[mask], "on_front"] = True
    return out


def pareto_mask(acc: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """True where no other point has accuracy ≥ and cost ≤ with one of them strict."""
    out = np.zeros(len(acc), dtype=bool)
    for i in range(len(acc)):
        if not (np.isfinite(acc[i]) and np.isfinite(cost[i])):
            continue
        dominated = (acc >= acc[i]) & (cost <= cost[i]) & ((acc > acc[i]) | (cost < cost[i]))
        out[i] = not dominated.any()
    return out


def _paired_text(df: pd.DataFrame, arm: str, reference: str, seed: int) -> str:
    """A paired difference of test accuracy as text (:func:`.stats.paired_text`)."""
    p = _paired(df, "test_acc", arm, reference, seed)
    return paired_text(p["n_pairs"], p["mean"], p["lo"], p["hi"])


def factorial(
    res: Results, outcome: str = "val_acc", T: int | None = None, seed: int = 0
) -> pd.DataFrame:
    """Reuse (DG-FedReuse vs FedAvg) × Top-K (r < 1 vs r = 1) (× error feedback, when runs
    with and without it are present): effects paired by seed, on identical schedules.

    With factors coded ±1 and k factors, the effect of a factor set S, per seed, is
    Σ_cells Π_{f∈S} s_f · y / 2^(k−|S|): a main effect is mean(on) − mean(off), a two-way
    interaction is the difference of differences (A1B1 − A1B0) − (A0B1 − A0B0), averaged over the
    other factor. Reported as the mean over seeds with paired t 95 % CIs.
    """
    import itertools

    T = budget_rounds(res) if T is None else T
    df = at_round(res, T)
    runs = res.runs.set_index("run_id")
    df["reuse"] = runs["method"].reindex(df["run_id"]).eq("dg_fedreuse").to_numpy()
    df["topk"] = (runs["cfg.method.topk_ratio"].reindex(df["run_id"]) < 1.0).to_numpy()
    factors = ["reuse", "topk"]
    if "cfg.method.error_feedback" in runs:
        ef = runs["cfg.method.error_feedback"].reindex(df["run_id"]).fillna(False).astype(bool)
        df["ef"] = ef.to_numpy()
        if df["ef"].nunique() > 1:
            factors.append("ef")
    cells = df.pivot_table(index=["dataset", "seed"], columns=factors, values=outcome)
    needed = list(itertools.product([False, True], repeat=len(factors)))
    missing = [c for c in needed if c not in cells.columns]
    if missing:
        raise ValueError(f"factorial needs every cell of {' x '.join(factors)}; missing {missing}")
    k = len(factors)
    rows = []
    for size in range(1, k + 1):
        for subset in itertools.combinations(range(k), size):
            e = sum(
                np.prod([1 if cell[f] else -1 for f in subset]) * cells[cell] for cell in needed
            ) / 2 ** (k - size)
            e = e.dropna()
            lo, hi = t_ci(e.to_numpy())
            rows.append(
                {
                    "effect": " x ".join(factors[f] for f in subset),
                    "outcome": outcome,
                    "round": describe_rounds(T),
                    "seeds": len(e),
                    "estimate": float(e.mean()),
                    "ci_lo": lo,
                    "ci_hi": hi,
                }
            )
    return pd.DataFrame(rows)


def bytes_to_target(res: Results, target: float | dict[str, float]) -> pd.DataFrame:
    """Per run: rounds and bytes until validation accuracy first reaches ``target`` (one
    number, or one per dataset: runs of a dataset without a target are left out).

    Runs that never reach it are kept and marked ``censored`` with their totals at the end.
    """
    dataset = res.runs.set_index("run_id")["dataset"]
    rows = []
    for run_id, g in res.rounds.sort_values("round").groupby("run_id"):
        ds = dataset.get(run_id)
        goal = target.get(ds) if isinstance(target, dict) else target
        if goal is None:
            continue
        hit = g[g["val_acc"] >= goal]
        r = hit.iloc[0] if len(hit) else g.iloc[-1]
        rows.append(
            {
                "run_id": run_id,
                "dataset": ds,
                "arm": r["arm"],
                "seed": r["seed"],
                "target": goal,
                "censored": not len(hit),
                "rounds": int(r["round"]),
                "up_restricted": int(r["cum_up_restricted"]),
                "up_measured": int(r["cum_up_measured"]),
                "down_measured": int(r["cum_down_measured"]),
                "total_measured": int(r["cum_up_measured"] + r["cum_down_measured"]),
            }
        )
    return pd.DataFrame(rows)


def bytes_to_target_summary(btt: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, arm): runs, how many never reached the target (censored), and the medians
    over the runs that reached it."""
    keys = ["dataset", "arm"] if "dataset" in btt else ["arm"]
    g = btt.groupby(keys)
    reached = btt[~btt["censored"]].groupby(keys)
    return pd.DataFrame(
        {
            "target": g["target"].first(),
            "runs": g.size(),
            "censored": g["censored"].sum(),
            "median_rounds": reached["rounds"].median(),
            "median_total_MB": reached["total_measured"].median() / 1e6,
            "median_up_restricted_MB": reached["up_restricted"].median() / 1e6,
        }
    ).reset_index()


def gate_diagnostics(res: Results) -> pd.DataFrame:
    """Per arm of a reuse method: gated events, firing rate, reuse fraction, D summary."""
    ev = res.client_events
    if not len(ev) or ev["tau"].isna().all():
        return pd.DataFrame()
    ev = ev[ev["tau"].notna()]
    rows = []
    for arm, g in ev.groupby("arm"):
        gated = g[g["gate_score"].notna() & g["age"].notna()]
        fired = (gated["gate_score"] >= gated["tau"]).mean() if len(gated) else float("nan")
        rows.append(
            {
                "arm": arm,
                "events": len(g),
                "gated_events": len(gated),
                "firing_rate": float(fired),
                "reused_fraction": float((g["decision"] == "reused").mean()),
                "promoted_fraction": float(g["promoted"].fillna(False).astype(bool).mean()),
                "D_mean": float(gated["gate_score"].mean()) if len(gated) else float("nan"),
                "D_minus_tau_mean": float((gated["gate_score"] - gated["tau"]).mean())
                if len(gated)
                else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def gate_controls(res: Results, T: int | None = None) -> pd.DataFrame:
    """The real gate against its controls at matched firing rate (methods: DG-FedReuse).

    One row per DG-FedReuse gate setting (proxy, off, random with its probability): realised
    firing rate, reused fraction, validation accuracy and restricted saving at round T (means over
    seeds), and for random gates the gap between their probability and the proxy gate's rate.
    """
    ev, runs = res.client_events, res.runs
    dg = runs[runs["method"] == "dg_fedreuse"]
    if not len(dg) or not len(ev):
        return pd.DataFrame()
    T = budget_rounds(res) if T is None else T
    at = at_round(res, T).set_index("run_id")
    rows = []
    keys = ["cfg.method.dg.gate", "cfg.method.dg.gate_prob", "cfg.method.topk_ratio"]
    for (gate, prob, r), g in dg.groupby(keys):
        e = ev[ev["run_id"].isin(g["run_id"])]
        gated = e[e["gate_score"].notna() & e["age"].notna()]
        # the gate fired on a cacheful client below the age cap that went fresh unpromoted
        young = e["age"].notna() & (e["age"] < g["cfg.method.dg.max_age"].iloc[0])
        fired = e["decision"].eq("fresh") & ~e["promoted"].fillna(False).astype(bool)
        rate = float((fired & young).sum() / young.sum()) if young.sum() else float("nan")
        a = at.reindex(g["run_id"])
        rows.append(
            {
                "gate": gate,
                "gate_prob": prob if gate == "random" else None,
                "topk_ratio": r,
                "runs": len(g),
                "firing_rate": rate,
                "reused_fraction": float(e["decision"].eq("reused").mean()),
                "val_acc_mean": float(a["val_acc"].mean()),
                "cum_saving_restricted_mean": float(a["cum_saving_restricted"].mean()),
                "D_gated_mean": float(gated["gate_score"].mean()) if len(gated) else float("nan"),
            }
        )
    out = pd.DataFrame(rows)
    proxy = out[out["gate"] == "proxy"]
    if len(proxy):
        out["rate_gap_vs_proxy"] = out["gate_prob"].astype(float) - float(
            proxy["firing_rate"].mean()
        )
    return out


def firing_rate_per_round(res: Results) -> pd.DataFrame:
    ev = res.client_events
    ev = ev[ev["gate_score"].notna() & ev["age"].notna() & ev["tau"].notna()]
    return (
        ev.assign(fired=ev["gate_score"] >= ev["tau"])
        .groupby(["arm", "round"])["fired"]
        .mean()
        .reset_index(name="firing_rate")
    )


def markdown(df: pd.DataFrame, digits: int = 4) -> str:
    """A GitHub-flavoured Markdown table (no extra dependency)."""
    if df is None or not len(df):
        return "_(no rows)_\n"

    def fmt(v) -> str:
        if v is None or v is pd.NA:
            return ""
        if isinstance(v, float | np.floating):
            return "" if not np.isfinite(v) else f"{v:.{digits}f}"
        return str(v)

    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"
