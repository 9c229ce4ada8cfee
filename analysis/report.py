"""``reuse-ray report``: a Markdown (and HTML) report of tables and figures from Parquet rows."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd

from reuse_ray.results.reader import read_metadata
from reuse_ray.results.storage import Storage, join

from . import frontier, plots, tables
from .html import page as _html
from .load import AnalysisError, Results, load
from .studies import budget_section, study_header


def report_line(md_path) -> str:
    """The console's line for a written report: the HTML page first, the page to open."""
    md, q, query = str(md_path).partition("?")  # a URI may carry its endpoint's query
    html = (md[: -len(".md")] + ".html" if md.endswith(".md") else md) + q + query
    return f"report: {html}  (open it in a browser; report.md and the PNG figures beside it)"


def write_report(
    locations,
    out: str | Path | None = None,
    T: int | None = None,
    reference: str | None = None,
    target: float | None = None,
) -> Path | str:
    """Write ``report.md`` and ``report.html`` with PNGs into ``out`` (default: the first
    location's ``report/``; a local folder or a URI); returns the .md path (a URI when remote).

    The comparison uses the final-stage runs when the results hold any (the paired, test-split
    stage of a sweep), else every finished run. ``T`` defaults to the last round all runs of a
    dataset completed (per dataset when they differ, as in a study); ``target`` (a validation
    accuracy fixed before looking at test results) adds the bytes-to-target table.
    """
    if isinstance(locations, str | Path):
        locations = [locations]
    res_all = load(locations)
    res = _final_or_all(res_all)
    tables.check_results(res, ", ".join(str(x) for x in locations))
    T = tables.budget_rounds(res) if T is None else T
    tables.check_round(res, T)  # every argument checked before anything is written
    tables.check_arm(res, reference)
    if target is not None and not 0.0 < target <= 1.0:
        raise AnalysisError(f"--target {target}: a validation accuracy — allowed: (0, 1]")
    target_loc = str(out) if out else join(str(locations[0]), "report")
    store = Storage.of(target_loc)
    local = store.local_path
    if local is None:  # a remote location: render here, then write each file once
        with tempfile.TemporaryDirectory() as tmp:
            _write(res_all, res, T, reference, target, locations, Path(tmp))
            for f in sorted(Path(tmp).iterdir()):
                store.write_bytes(f.name, f.read_bytes())
        return join(target_loc, "report.md")
    try:
        local.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AnalysisError(
            f"--out: cannot create {str(local)!r} ({err.strerror or err}) — give a writable folder"
        ) from None
    return _write(res_all, res, T, reference, target, locations, local)


def _write(
    res_all: Results,
    res: Results,
    T: int | dict[str, int],
    reference: str | None,
    target: float | None,
    locations: list,
    out: Path,
) -> Path:
    which = "final stage" if _has_final(res_all) else "all stages"
    md = [
        f"# reuse_ray report\n\nSources: {', '.join(str(x) for x in locations)}\n",
        f"Runs compared: {len(res.runs)} finished ({which}); excluded unfinished runs: "
        f"{res_all.excluded}. Fixed budget T = round "
        f"{tables.describe_rounds(T)}.\n",
    ]
    fb = tables.fixed_budget(res, T, reference)
    md += [
        f"## Fixed-budget comparison at round {tables.describe_rounds(T)}\n",
        f"Mean ± SD over seeds; Δ are paired differences against "
        f"`{fb.attrs['reference']}` (same seed, same partitions and schedules) with paired t "
        "95 % CIs (shown from 5 pairs on). Test accuracy is read once, at the final "
        "round.\n",
        *_fixed_budget_md(fb),
    ]
    study = read_metadata(str(locations[0]))
    references = tuple(r for r in (study or {}).get("compare_to", ()) if r in set(res.runs["arm"]))
    md += [
        "## Leaderboard\n",
        *([study_header(study, res_all)] if study else []),
        LEADERBOARD_TEXT.format(T=tables.describe_rounds(T)),
        tables.markdown(tables.leaderboard(res, T, references)),
    ]
    if study:
        md += budget_section(study, res_all)
        md += frontier.sections(res_all, study, out)
    md += [
        "## Dense-downlink sensitivity and measured bytes\n",
        "Restricted uplink saving, its sensitivity with one dense download per selected client "
        "(the seed's Table 7), and the measured bidirectional ledger.\n",
        tables.markdown(tables.downlink_table(res, T)),
    ]
    try:
        md += ["## Reuse × Top-K factorial\n", tables.markdown(tables.factorial(res, T=T))]
    except ValueError:
        pass
    goal = target if target is not None else (study or {}).get("targets") or None
    md += _target_section(res, goal)
    md += _gate_sections(res_all)
    md += _figures_section(res, res_all, T, out)
    if len(res_all.trials):
        md += ["## Search trials\n", *search_section(res_all.trials)]
    text = "\n".join(md)
    path = out / "report.md"
    path.write_text(text)
    (out / "report.html").write_text(_html(text, out))
    return path


def _target_section(res: Results, goal) -> list[str]:
    """Bytes to a validation target fixed in advance (one number, or one per dataset)."""
    if goal is None:
        return []
    btt = tables.bytes_to_target(res, goal)
    what = goal if not isinstance(goal, dict) else ", ".join(f"{k} {v}" for k, v in goal.items())
    return [
        f"## Bytes to validation accuracy {what}\n",
        "Rounds and bytes until a run's validation accuracy first reaches the target "
        "(fixed before the runs); `censored` counts runs that never reached it "
        "(medians over the runs that did).\n",
        tables.markdown(tables.bytes_to_target_summary(btt)),
    ]


def _gate_sections(res_all: Results) -> list[str]:
    """DG-FedReuse's gate diagnostics per stage, and the gate against its controls where the
    runs hold one; search and final runs are never mixed in one table."""
    md: list[str] = []
    for stage, sub in _stages(res_all):
        sgd = tables.gate_diagnostics(sub)
        if not len(sgd):
            continue
        md += [
            f"## DG-FedReuse gate diagnostics ({stage} runs)\n",
            "Firing rate = share of gated events (cacheful, below the age cap) with D ≥ τ_t.\n",
            tables.markdown(sgd),
        ]
        gc = tables.gate_controls(sub)
        if len(gc) and gc["gate"].nunique() > 1:  # only when the runs hold a control
            md += [
                f"### The gate against its controls ({stage} runs)\n",
                "Firing rate here = share of cacheful clients below the age cap that the gate "
                "(or its random or disabled control) sent fresh without quota promotion; "
                "`rate_gap_vs_proxy` is a random control's probability minus the real "
                "gate's rate (0 = matched).\n",
                tables.markdown(gc),
            ]
    return md


def _figures_section(res: Results, res_all: Results, T, out: Path) -> list[str]:
    """The figures, drawn into ``out``: accuracy curves, the arms' Pareto points, a search's
    Pareto front, the gate's scores and firing rate."""
    figs = plots.accuracy_curves(res, out)
    figs.append(plots.pareto_arms(tables.pareto_points(res, T), out))
    pf = plots.pareto_plot(res_all.trials, out) if len(res_all.trials) else None
    gs = plots.gate_scores(res_all, out)
    gd = tables.gate_diagnostics(res_all)
    fr = plots.firing_rate(tables.firing_rate_per_round(res_all), out) if len(gd) else None
    return ["## Figures\n"] + [f"![{p.stem}]({p.name})\n" for p in [*figs, pf, gs, fr] if p]


def search_section(trials: pd.DataFrame) -> list[str]:
    """The report's search trials: a line counting them by status (trials a scheduler stopped
    early named as such, with the round each reached), then the table, stopped trials marked
    and each configuration's parameters as one unwrapped line of code."""
    t = trials.copy()
    counts = t["status"].value_counts()
    said = ", ".join(f"{n} {status}" for status, n in counts.items())
    lines = [f"{len(t)} trials: {said}."]
    stopped = t["status"].eq("stopped")
    if stopped.any():
        rungs = t.loc[stopped, "round_reached"] if "round_reached" in t else pd.Series(dtype=float)
        reached = [str(int(r)) for r in sorted(rungs.dropna().unique())]
        where = (
            f" at round{'s' if len(reached) > 1 else ''} {', '.join(reached)}" if reached else ""
        )
        lines.append(
            f"**{int(stopped.sum())} stopped early by the scheduler**{where} (their rows are "
            "a prefix of the full run's; a stopped trial is never selected)."
        )
    t["status"] = t["status"].where(~stopped, "**stopped**")
    t["params_json"] = t["params_json"].map(lambda v: f"`{v}`" if isinstance(v, str) else v)
    cols = [
        "trial_id",
        *(["stage", "seed"] if t["stage"].nunique() > 1 and "seed" in t else []),
        "status",
        "round_reached",
        "val_acc",
        "cum_saving_restricted",
        "objective_value",
        "on_pareto_front",
        "selected",
        *(
            ["selection_mean"]
            if "selection_mean" in t and t["selection_mean"].notna().any()
            else []
        ),
        "params_json",
    ]
    lines += ["", tables.markdown(t[[c for c in cols if c in t]])]
    return lines


LEADERBOARD_TEXT = (
    "Per arm at round {T}: accuracy mean ± SD over seeds; the restricted ledger's uplink "
    "saving, uplink MB and dense-downlink MB; the measured MB up and down per run; memory held "
    "at the end of a run (MB); client steps per run; paired test-accuracy differences against "
    "the reference arms (same seeds, paired t 95 % CI from 5 pairs on); `Pareto`: on the "
    "dataset's front of accuracy against measured total bytes.\n"
)


def _pm(mean, sd) -> str:
    if mean is None or pd.isna(mean):
        return ""
    return f"{mean:.4f}" if sd is None or pd.isna(sd) else f"{mean:.4f} ± {sd:.4f}"


def _ci(mean, lo, hi) -> str:
    if mean is None or pd.isna(mean):
        return ""
    if lo is None or pd.isna(lo):
        return f"{mean:+.4f}"
    return f"{mean:+.4f} [{lo:+.4f}, {hi:+.4f}]"


def _fixed_budget_md(fb: pd.DataFrame) -> list[str]:
    """The fixed-budget table as two narrow tables: levels (mean ± SD) and paired differences."""
    levels = pd.DataFrame(
        {
            "dataset": fb["dataset"],
            "arm": fb["arm"],
            "seeds": fb["seeds"],
            "val acc": [
                _pm(m, s) for m, s in zip(fb["val_acc_mean"], fb["val_acc_sd"], strict=True)
            ],
            "test acc": [
                _pm(m, s) for m, s in zip(fb["test_acc_mean"], fb["test_acc_sd"], strict=True)
            ],
            "uplink saving": [
                _pm(m, s)
                for m, s in zip(
                    fb["cum_saving_restricted_mean"], fb["cum_saving_restricted_sd"], strict=True
                )
            ],
        }
    )
    out = [tables.markdown(levels)]
    if "pairs" in fb:
        d = fb[fb["pairs"].notna()]
        diffs = pd.DataFrame(
            {
                "dataset": d["dataset"],
                "arm": d["arm"],
                "pairs": d["pairs"],
                **{
                    f"Δ {name}": [
                        _ci(*v)
                        for v in zip(d[f"d_{col}"], d[f"d_{col}_lo"], d[f"d_{col}_hi"], strict=True)
                    ]
                    for name, col in (
                        ("val acc", "val_acc"),
                        ("test acc", "test_acc"),
                        ("saving", "cum_saving_restricted"),
                    )
                },
                "CI": d["ci"],
            }
        )
        out += [f"Paired differences against `{fb.attrs['reference']}`:\n", tables.markdown(diffs)]
    return out


def _runs_of(res: Results, stage: str) -> Results:
    """The results of one stage's runs only."""
    keep = set(res.runs.loc[res.runs["stage"] == stage, "run_id"])
    return Results(
        res.runs[res.runs["run_id"].isin(keep)],
        res.rounds[res.rounds["run_id"].isin(keep)],
        res.client_events[res.client_events["run_id"].isin(keep)]
        if len(res.client_events)
        else res.client_events,
        res.trials,
        res.excluded,
        res.excluded_runs[res.excluded_runs["stage"] == stage]
        if len(res.excluded_runs)
        else res.excluded_runs,
    )


def _stages(res: Results):
    """(stage, the results of that stage's runs) for every stage present, in a fixed order."""
    stages = res.runs["stage"].dropna().unique() if "stage" in res.runs else []
    for stage in [s for s in ("run", "search", "final") if s in stages]:
        yield stage, _runs_of(res, stage)


def _has_final(res: Results) -> bool:
    return "stage" in res.runs and (res.runs["stage"] == "final").any()


def _final_or_all(res: Results) -> Results:
    return _runs_of(res, "final") if _has_final(res) else res
