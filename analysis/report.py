"""``reuse-ray report``: a Markdown (and HTML) report of tables and figures from Parquet rows."""

from __future__ import annotations

import html
from pathlib import Path

from . import plots, tables
from .load import AnalysisError, Results, load


def write_report(
    locations, out: str | Path | None = None, T: int | None = None,
    reference: str | None = None, target: float | None = None,
) -> Path:  # fmt: skip
    """Write ``report.md`` and ``report.html`` with PNGs into ``out``; returns the .md path.

    The comparison uses the final-stage runs when the results hold any (the paired, test-split
    stage of a sweep), else every finished run. ``T`` defaults to the last round all runs
    completed; ``target`` (a validation accuracy fixed before looking at test results) adds the
    bytes-to-target table.
    """
    if isinstance(locations, str | Path):
        locations = [locations]
    res_all = load(locations)
    res = _final_or_all(res_all)
    T = T or tables.common_round(res)
    tables.check_round(res, T)  # every argument checked before anything is written
    tables.check_arm(res, reference)
    if target is not None and not 0.0 < target <= 1.0:
        raise AnalysisError(f"--target {target}: a validation accuracy — allowed: (0, 1]")
    out = Path(out) if out else Path(str(locations[0])) / "report"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AnalysisError(f"--out: cannot create {str(out)!r} ({err.strerror or err}) — "
                            "give a writable folder") from None  # fmt: skip
    which = "final stage" if _has_final(res_all) else "all stages"
    md = [f"# reuse_ray report\n\nSources: {', '.join(str(x) for x in locations)}\n",
          f"Runs compared: {len(res.runs)} finished ({which}); excluded unfinished runs: "
          f"{res_all.excluded}. Fixed budget T = round {T}.\n"]  # fmt: skip
    fb = tables.fixed_budget(res, T, reference)
    md += [f"## Fixed-budget comparison at round {T}\n",
           f"Mean ± SD over seeds; `d_*` are paired differences against "
           f"`{fb.attrs['reference']}` (same seed, same partitions and schedules) with bootstrap "
           "95 % CIs. Test accuracy is read once, at the final round.\n",
           tables.markdown(fb)]  # fmt: skip
    md += ["## Dense-downlink sensitivity and measured bytes\n",
           "Restricted uplink saving, its sensitivity with one dense download per selected client "
           "(the seed's Table 7), and the measured bidirectional ledger.\n",
           tables.markdown(tables.downlink_table(res, T))]  # fmt: skip
    try:
        md += ["## Reuse × Top-K factorial\n", tables.markdown(tables.factorial(res, T=T))]
    except ValueError:
        pass
    if target is not None:
        btt = tables.bytes_to_target(res, target)
        md += [f"## Bytes to validation accuracy {target}\n",
               tables.markdown(tables.bytes_to_target_summary(btt))]  # fmt: skip
    gd = tables.gate_diagnostics(res_all)
    if len(gd):
        md += ["## DG-FedReuse gate diagnostics\n",
               "Firing rate = share of gated events (cacheful, below the age cap) with D ≥ τ_t.\n",
               tables.markdown(gd)]  # fmt: skip
        gc = tables.gate_controls(res_all)
        if len(gc) > 1:
            md += ["### The gate against its controls\n",
                   "Firing rate here = share of cacheful clients below the age cap that the gate "
                   "(or its random or disabled control) sent fresh without quota promotion; "
                   "`rate_gap_vs_proxy` is a random control's probability minus the real "
                   "gate's rate (0 = matched).\n", tables.markdown(gc)]  # fmt: skip
    figs = plots.accuracy_curves(res, out)
    pf = plots.pareto_plot(res_all.trials, out) if len(res_all.trials) else None
    gs = plots.gate_scores(res_all, out)
    fr = plots.firing_rate(tables.firing_rate_per_round(res_all), out) if len(gd) else None
    md.append("## Figures\n")
    for p in [*figs, pf, gs, fr]:
        if p is not None:
            md.append(f"![{p.stem}]({p.name})\n")
    if len(res_all.trials):
        t = res_all.trials
        md += ["## Search trials\n", tables.markdown(
            t[["trial_id", "status", "val_acc", "cum_saving_restricted", "objective_value",
               "on_pareto_front", "selected", "params_json"]])]  # fmt: skip
    text = "\n".join(md)
    path = out / "report.md"
    path.write_text(text)
    (out / "report.html").write_text(_html(text))
    return path


def _has_final(res: Results) -> bool:
    return "stage" in res.runs and (res.runs["stage"] == "final").any()


def _final_or_all(res: Results) -> Results:
    if not _has_final(res):
        return res
    keep = set(res.runs.loc[res.runs["stage"] == "final", "run_id"])
    return Results(
        res.runs[res.runs["run_id"].isin(keep)], res.rounds[res.rounds["run_id"].isin(keep)],
        res.client_events[res.client_events["run_id"].isin(keep)]
        if len(res.client_events) else res.client_events, res.trials, res.excluded,
    )  # fmt: skip


def _html(md: str) -> str:
    """A plain HTML rendering: tables, headings and images; enough to open in a browser."""
    body, in_table = [], False
    for line in md.splitlines():
        if line.startswith("|"):
            cells = [html.escape(c.strip()) for c in line.strip("|").split("|")]
            if set(line.replace("|", "").strip()) <= {"-"}:
                continue
            if not in_table:
                body.append("<table border=1 cellspacing=0 cellpadding=3>")
                in_table = True
                body.append("<tr>" + "".join(f"<th>{c}</th>" for c in cells) + "</tr>")
                continue
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            continue
        if in_table:
            body.append("</table>")
            in_table = False
        if line.startswith("!["):
            src = line[line.index("(") + 1 : line.rindex(")")]
            body.append(f'<p><img src="{html.escape(src)}" width="640"></p>')
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            body.append(f"<h{level}>{html.escape(line.lstrip('#').strip())}</h{level}>")
        elif line.strip():
            body.append(f"<p>{html.escape(line)}</p>")
    if in_table:
        body.append("</table>")
    return "<!doctype html><meta charset=utf-8><title>reuse_ray report</title>\n" + "\n".join(body)
