"""Figures as PNG files with labelled axes and units (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .load import Results


def pyplot():
    """matplotlib's pyplot on the Agg backend, imported on first use (~0.6 s that reading
    tables, a leaderboard or a report without figures never needs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _integer_ticks(axis) -> None:
    """Whole numbers only on ``axis`` (rounds)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _bands(ax, df: pd.DataFrame, x: str, y: str, logx: bool = False) -> None:
    """Per arm: the mean over seeds as a line, min–max over seeds as a band."""
    for arm, g in df.groupby("arm"):
        per = g.groupby("round").agg(x=(x, "mean"), mean=(y, "mean"), lo=(y, "min"), hi=(y, "max"))
        per = per.dropna()
        ax.plot(per["x"], per["mean"], marker="o", ms=3, label=f"{arm} (n={g['seed'].nunique()})")
        ax.fill_between(per["x"], per["lo"], per["hi"], alpha=0.2)
    if logx:
        ax.set_xscale("log")
    elif x == "round":
        _integer_ticks(ax.xaxis)
    ax.grid(alpha=0.3)
    _legend(ax)


def accuracy_curves(res: Results, out: Path) -> list[Path]:
    """Validation accuracy against round and against cumulative restricted uplink (log); one
    pair of figures per dataset when the results hold several."""
    rounds = res.rounds[res.rounds["val_acc"].notna()]
    dataset = res.runs.set_index("run_id")["dataset"]
    rounds = rounds.assign(dataset=rounds["run_id"].map(dataset))
    names = sorted(rounds["dataset"].dropna().unique())
    paths = []
    for name in names:
        df = rounds[rounds["dataset"] == name]
        tag = f"_{name}" if len(names) > 1 else ""
        on = f" ({name})" if len(names) > 1 else ""
        fig, ax = pyplot().subplots(figsize=(6.4, 4.2))
        _bands(ax, df, "round", "val_acc")
        ax.set_xlabel("round")
        ax.set_ylabel("validation accuracy (fraction)")
        ax.set_title(f"Validation accuracy by round{on} (mean, min-max over seeds)")
        paths.append(_save(fig, out / f"val_acc_vs_round{tag}.png"))
        fig, ax = pyplot().subplots(figsize=(6.4, 4.2))
        _bands(ax, df.assign(MB=df["cum_up_restricted"] / 1e6), "MB", "val_acc", logx=True)
        ax.set_xlabel("cumulative restricted uplink (MB, log scale)")
        ax.set_ylabel("validation accuracy (fraction)")
        ax.set_title(f"Validation accuracy against uplink bytes{on}")
        paths.append(_save(fig, out / f"val_acc_vs_uplink{tag}.png"))
    return paths


def pareto_arms(points: pd.DataFrame, out: Path) -> Path | None:
    """Arms in (mean measured total MB, mean accuracy), one panel per dataset, the Pareto
    front joined. ``points``: dataset, arm, acc, total_MB, on_front."""
    if not len(points):
        return None
    names = sorted(points["dataset"].unique())
    fig, axes = pyplot().subplots(1, len(names), figsize=(6.4 * len(names), 4.8), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        p = points[points["dataset"] == name]
        ax.scatter(p["total_MB"], p["acc"], c="0.5", s=22)
        for _, r in p.iterrows():
            ax.annotate(
                _wrap(str(r["arm"]), 28),
                (r["total_MB"], r["acc"]),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
        f = p[p["on_front"]].sort_values("total_MB")
        ax.plot(f["total_MB"], f["acc"], "o-", c="C3", label="Pareto front")
        ax.set_xscale("log")
        ax.set_xlabel("measured bytes, up + down, per run (MB, log scale)")
        ax.set_ylabel("test accuracy (fraction, mean over seeds)")
        ax.set_title(f"Accuracy against measured bytes: {name}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, out / "pareto_arms.png")


def pareto_plot(trials: pd.DataFrame, out: Path) -> Path | None:
    """Search trials in (cumulative uplink, validation accuracy), the Pareto front highlighted."""
    t = trials[trials["val_acc"].notna() & trials["cum_up_restricted"].notna()]
    if not len(t):
        return None
    fig, ax = pyplot().subplots(figsize=(6.4, 4.2))
    ax.scatter(t["cum_up_restricted"] / 1e6, t["val_acc"], c="0.6", s=18, label="trial")
    f = t[t["on_pareto_front"].astype(bool)].sort_values("cum_up_restricted")
    ax.plot(f["cum_up_restricted"] / 1e6, f["val_acc"], "o-", c="C3", label="Pareto front")
    ax.set_xscale("log")
    ax.set_xlabel("cumulative restricted uplink (MB, log scale)")
    ax.set_ylabel("validation accuracy (fraction)")
    ax.set_title("Search trials: accuracy vs uplink bytes")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out / "pareto_front.png")


def gate_scores(res: Results, out: Path) -> Path | None:
    """Distribution of the gate distance D of gated events, fresh vs reused, with τ_t's range."""
    ev = res.client_events
    if not len(ev):
        return None
    ev = ev[ev["gate_score"].notna() & ev["age"].notna() & ev["tau"].notna()]
    if not len(ev):
        return None
    fig, ax = pyplot().subplots(figsize=(6.4, 4.2))
    for decision, g in ev.groupby("decision"):
        ax.hist(
            g["gate_score"], bins=30, range=(0, 1), alpha=0.55, label=f"{decision} (n={len(g)})"
        )
    ax.axvspan(ev["tau"].min(), ev["tau"].max(), color="k", alpha=0.1, label="τ_t range")
    ax.set_xlabel("gate distance D (clipped cosine distance, unitless)")
    ax.set_ylabel("client events (count)")
    ax.set_title("Gate scores of cacheful clients below the age cap")
    ax.legend(fontsize=8)
    return _save(fig, out / "gate_scores.png")


def _legend(ax) -> None:
    """The legend below the axes, where it covers no curve; labels kept short."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        labels = [_wrap(lb) for lb in labels]
        ax.legend(
            handles,
            labels,
            fontsize=7,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.18),
            ncol=1,
            frameon=False,
        )


def _wrap(label: str, width: int = 70) -> str:
    """A legend label on as many lines as it needs, broken after a comma or at a space, never
    inside a number (``dg.tau_min=0.81``)."""
    import textwrap

    return "\n".join(
        textwrap.wrap(label.replace(",", ", "), width, break_long_words=False)
    ).replace(", ", ",")


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    pyplot().close(fig)
    return path


def firing_rate(rates: pd.DataFrame, out: Path) -> Path | None:
    """The DG gate's firing rate per round (share of gated events with D ≥ τ_t), per arm."""
    if not len(rates):
        return None
    fig, ax = pyplot().subplots(figsize=(6.4, 4.2))
    for arm, g in rates.groupby("arm"):
        ax.plot(g["round"], g["firing_rate"], marker=".", label=str(arm))
    ax.set_xlabel("round")
    _integer_ticks(ax.xaxis)
    ax.set_ylabel("gate firing rate (fraction of gated events)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("DG-FedReuse gate firing rate per round")
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, out / "gate_firing_rate.png")
