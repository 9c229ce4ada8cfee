"""Accuracy at matched uplink, drawn: a study's runs read at its uplink levels (the ``levels``
table), one point per arm and level — the arm's choice at that level, its final runs' test
accuracy there (mean, t 95 % interval over the fresh seeds) at the bytes they had spent when
read — with each level's budget as a line, the restricted ledger left and the measured right.

* :func:`reading_points` — the points, one row per workload, ledger, level and arm: the label
  its choice ran under, the mean bytes at the reading, the mean test accuracy and its interval,
  the runs read and those that diverged (or failed) before reading.
* :func:`readings_plot` — the figure: one marker and colour per arm, an arm's levels joined,
  intervals as error bars, the legend naming each arm's runs read and diverged, the axes fitted
  to the points and intervals (not to round 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .frontier import _all_finals, _level_arms, objective_level
from .load import Results
from .stats import t_ci

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "*", "p", "d", "8")
LEDGERS = ("restricted", "measured")


def reading_points(res: Results, study: dict) -> pd.DataFrame:
    """One row per workload, ledger, level and arm with a choice there whose final runs read
    it: ``label``, ``MB`` (mean cumulative uplink in that ledger at the reading), ``test_acc``
    (mean over the runs read), ``lo``/``hi`` (its t 95 % interval; NaN under two runs),
    ``read`` and ``diverged`` (runs that ended before reading the level)."""
    rows = []
    for workload, got in (study.get("choices") or {}).items():
        finals = _all_finals(res, study, workload)
        for name, limit in (got.get("level_bytes") or {}).items():
            f, ledger = objective_level(name)
            for arm, label, ok, failed, _ in _level_arms(res.levels, finals, got, name):
                acc = ok["test_acc"].dropna().to_numpy(dtype=float)
                if not len(acc):
                    continue
                lo, hi = t_ci(acc)
                rows.append(
                    {
                        "workload": workload,
                        "ledger": ledger,
                        "level": f,
                        "limit_MB": limit / 1e6,
                        "arm": arm,
                        "label": label,
                        "MB": float(ok["cum_up"].mean()) / 1e6,
                        "test_acc": float(acc.mean()),
                        "lo": lo,
                        "hi": hi,
                        "read": len(acc),
                        "diverged": int(failed),
                    }
                )
    return pd.DataFrame(rows)


def _fitted(values: np.ndarray, pad: float) -> tuple[float, float]:
    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    margin = max(pad, 0.05 * (hi - lo))
    return lo - margin, hi + margin


def readings_plot(res: Results, study: dict, out: Path) -> list[Path]:
    """Per workload, the figure of :func:`reading_points` (``levels_<workload>.png``)."""
    from .plots import _save, pyplot

    plt = pyplot()

    points, paths = reading_points(res, study), []
    if not len(points):
        return paths
    for workload, pts in points.groupby("workload"):
        arms = sorted(pts["arm"].unique())
        style = {
            a: (plt.cm.tab20.colors[k % 20], MARKERS[k % len(MARKERS)]) for k, a in enumerate(arms)
        }
        fig, axes = plt.subplots(1, 2, figsize=(12.8, 5.6), sharey=True)
        for ax, ledger in zip(axes, LEDGERS, strict=True):
            here = pts[pts["ledger"] == ledger]
            for arm, g in here.groupby("arm"):
                g = g.sort_values("MB")
                colour, marker = style[arm]
                below = (g["test_acc"] - g["lo"]).fillna(0).to_numpy()
                above = (g["hi"] - g["test_acc"]).fillna(0).to_numpy()
                read, lost = int(g["read"].max()), int(g["diverged"].sum())
                name = f"{arm} (n = {read}" + (f", {lost} diverged)" if lost else ")")
                ax.errorbar(
                    g["MB"], g["test_acc"], yerr=[below, above], color=colour, marker=marker,
                    ms=6, lw=0.8, capsize=3, label=name,
                )  # fmt: skip
            for limit in here["limit_MB"].unique():
                ax.axvline(limit, color="grey", ls=":", lw=1)
                share = here.loc[here["limit_MB"] == limit, "level"].iloc[0]
                ax.text(limit, 0.01, f" {100 * share:g} %", color="grey", fontsize=8,
                        transform=ax.get_xaxis_transform())  # fmt: skip
            if len(here):
                xs = np.concatenate([here["MB"].to_numpy(), here["limit_MB"].to_numpy()])
                ax.set_xlim(float(np.nanmin(xs)) * 0.8, float(np.nanmax(xs)) * 1.25)
            ax.set_xscale("log")
            ax.set_xlabel(f"cumulative {ledger} uplink when read (MB, log scale)")
            ax.set_title(f"{ledger} ledger", fontsize=9)
            ax.grid(alpha=0.3)
        ys = np.concatenate([pts["test_acc"], pts["lo"].dropna(), pts["hi"].dropna()])
        axes[0].set_ylim(*_fitted(ys, 0.005))
        axes[0].set_ylabel("test accuracy at the level (mean, t 95 % interval over seeds)")
        handles: dict[str, object] = {}
        for ax in axes:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                handles.setdefault(lab, h)
        fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=4,
                   fontsize=7, frameon=False)  # fmt: skip
        fig.suptitle(
            f"{workload}: each arm's choice per uplink level, read at the level", fontsize=10
        )
        fig.subplots_adjust(bottom=0.12 + 0.028 * -(-len(handles) // 4))
        paths.append(_save(fig, out / f"levels_{workload}.png"))
    return paths


__all__ = ["reading_points", "readings_plot"]
