"""The study: every method tuned on the same validation budget, compared on fresh seeds.

A study file (``sweeps/study.yaml``) names workloads (base run configs), arms (a method with the
fields it fixes and the search space of its own knobs) and one budget. For each workload:

1. **Search, validation only.** Every arm gets exactly ``budget.trials_per_arm`` configurations,
   drawn by a seeded random sampler from its own registered space plus the shared knobs
   (``shared``: the local learning rate, with one range for all arms; an arm whose own space
   searches the Top-K ratio r must use the study's ``topk_range``). All arms' trials run in one
   Tune experiment; no trial reads the test split (``test_reads = 0``), and a trial that
   diverges still counts against its arm's budget. (With a handful of trials per arm, TPE would
   still be in its random start-up phase, so random search costs nothing in quality and makes
   the equal budget exact.)
2. **Selection, on validation metrics only**, per declared objective: ``val_acc`` — the best
   validation accuracy at the fixed final round; ``retention`` — the seed's rule: the largest
   restricted uplink saving whose validation accuracy keeps ≥ ``retention`` of the reference
   arm's best (tuned FedAvg's).
3. **Final stage.** Each arm's selected configuration(s) run on fresh seeds (disjoint from the
   search seeds; a file where they overlap is rejected), paired across arms, reading the test
   split once at the fixed final round.

The trials table holds every search trial with its arm and what selected it; ``study.json``
records the budget, the machine, the dates and the wall time, and the report turns the Parquet
into the leaderboard (``reuse-ray report RESULTS --leaderboard``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
import time
from typing import Any

import pandas as pd

from ..errors import UserError
from ..results import read_table
from ..results.reader import STUDY_FILE, read_metadata
from ..results.storage import Storage, display
from .spec import (
    SweepSpec,
)
from .study_spec import Arm, StudySpec, arm_points, is_study, load_study, parse_study
from .trials import trial_row, write_trials


def _metadata(spec: StudySpec, started: str, wall: float | None, status: str) -> dict:
    return {
        "name": spec.name,
        "scale": spec.scale,
        "status": status,
        "started_at": started,
        "finished_at": _now() if wall is not None else None,
        "wall_s": wall,
        "host": socket.gethostname(),
        "machine": _machine(),
        "workloads": list(spec.workloads),
        "arms": [a.name for a in spec.arms],
        "trials_per_arm": spec.trials_per_arm,
        "objectives": list(spec.objectives),
        "retention": spec.retention,
        "retention_reference": spec.retention_reference,
        "final_seeds": list(spec.final_seeds),
        "compare_to": list(spec.compare_to),
        "targets": spec.targets,
        "shared": {k: list(v) for k, v in spec.shared.items()},
    }


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _machine() -> str:
    from ..machine import cpu_info

    cpu = cpu_info()["model name"] or platform.processor() or platform.machine()
    mem = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        mem = f", {pages / 2**30:.0f} GiB"
    except (ValueError, OSError):
        pass
    return f"{os.cpu_count()} CPUs ({cpu}){mem}, {platform.system()}"


def _select(trials: pd.DataFrame, spec: StudySpec) -> dict[str, dict[str, Any]]:
    """arm -> {objective: trials row} chosen on validation metrics only."""
    ok = trials[trials["status"].eq("finished") & trials["val_acc"].notna()]
    ref = ok[ok["arm"] == spec.retention_reference]["val_acc"]
    bar = spec.retention * float(ref.max()) if len(ref) else None
    out: dict[str, dict[str, Any]] = {}
    for arm in (a.name for a in spec.arms):
        g = ok[ok["arm"] == arm]
        if not len(g):
            continue
        chosen = {
            "val_acc": g.sort_values(["val_acc", "trial_index"], ascending=[False, True]).iloc[0]
        }
        if "retention" in spec.objectives and bar is not None:
            keep = g[g["val_acc"] >= bar]
            if len(keep):
                chosen["retention"] = keep.sort_values(
                    ["cum_saving_restricted", "val_acc", "trial_index"],
                    ascending=[False, False, True],
                ).iloc[0]
        out[arm] = chosen
    return out


def run_study(
    spec: StudySpec,
    resume: bool = False,
    say=print,
    verbose: int = 0,
    mlflow: str | None = None,
    address: str | None = None,
) -> pd.DataFrame:
    """Search, select and rerun every arm on every workload; returns the final-stage runs."""
    from ray import tune

    from ..distributed import ensure_ray
    from .launch import derive_concurrency, launch
    from .sweep import report_at_end, sweep_folder

    # connect first: a cluster that does not answer leaves no (dated) folder behind
    ensure_ray(address)
    spec = sweep_folder(spec, resume, what="study")
    store = Storage.of(spec.results_dir)
    where = display(spec.results_dir)
    say(f"results root: {where}")
    old = read_metadata(spec.results_dir)
    if old is not None and not resume:
        raise UserError(
            f"study {spec.name!r} already has results in {where}; pass --resume to "
            "continue it, or --results DIR for a new one"
        )
    if old is None and resume:
        raise UserError(
            f"--resume: nothing to resume in {where} (no study {spec.name!r} was started "
            "there) — run it without --resume to start one there, or give the folder of the "
            "interrupted study with --results"
        )
    store.check_writable(keep=True)
    started = (old or {}).get("started_at") or _now()
    t0 = time.perf_counter() - float((old or {}).get("wall_s") or 0.0)
    store.write_bytes(
        STUDY_FILE, json.dumps(_metadata(spec, started, None, "running"), indent=2).encode()
    )
    import optuna
    import ray

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    n_arms, n = len(spec.arms), spec.trials_per_arm
    say(
        f"study {spec.name}: {n_arms} arms x {n} validation-only trials on each of "
        f"{len(spec.workloads)} workloads ({', '.join(spec.workloads)}), then the selected "
        f"configurations on fresh seeds {list(spec.final_seeds)}"
    )
    final_runs = []
    for w in spec.workloads:
        sweep = spec.sweep_spec(w)
        concurrency = derive_concurrency(sweep, ray.cluster_resources())
        points = [dict(p, label=a.name) for a in spec.arms for p in arm_points(spec, a)]
        say(f"[{w}] search: {len(points)} trials ({n} per arm), {concurrency} at a time")
        launch(
            sweep,
            "search",
            param_space={"final": tune.grid_search(points)},
            concurrency=concurrency,
            resume=resume,
            say=say,
            verbose=verbose,
            total=len(points),
            mlflow=mlflow,
        )
        trials = _trials(spec, sweep, points)
        chosen = _select(trials, spec)
        trials = _mark(trials, chosen)
        write_trials(spec.results_dir, sweep.name, trials.drop(columns=["trial_index"]))
        for arm in (a.name for a in spec.arms):
            got = chosen.get(arm, {})
            text = (
                "; ".join(
                    f"{o}: val_acc={r['val_acc']:.4f} saving="
                    f"{100 * (r['cum_saving_restricted'] or 0):.2f}%"
                    for o, r in got.items()
                )
                or "no trial finished"
            )
            say(f"[{w}] {arm}: {text}")
        finals = []
        for arm in (a.name for a in spec.arms):
            got = chosen.get(arm, {})
            seen: dict[str, str] = {}
            for objective, row in got.items():
                if row["params_json"] in seen:
                    continue  # the same configuration serves both objectives
                label = arm if objective == "val_acc" else f"{arm}@{objective}"
                seen[row["params_json"]] = label
                params = json.loads(row["params_json"])
                finals += [dict(params, seed=s, label=label) for s in spec.final_seeds]
        say(f"[{w}] final: {len(finals)} runs on fresh seeds, test split read once")
        launch(
            sweep,
            "final",
            param_space={"final": tune.grid_search(finals)},
            concurrency=concurrency,
            resume=resume,
            say=say,
            verbose=verbose,
            total=len(finals),
            mlflow=mlflow,
        )
        runs = read_table(spec.results_dir, "runs")
        final_runs.append(runs[(runs["stage"] == "final") & (runs["sweep"] == sweep.name)])
    wall = time.perf_counter() - t0
    store.write_bytes(
        STUDY_FILE, json.dumps(_metadata(spec, started, wall, "finished"), indent=2).encode()
    )
    say(f"study {spec.name} finished in {wall / 60:.1f} min; Parquet: {where}")
    report_at_end(spec.results_dir, say)
    return pd.concat(final_runs, ignore_index=True)


def _trials(spec: StudySpec, sweep: SweepSpec, points: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per search trial, read from the runs table (the record), in point order."""
    runs = read_table(spec.results_dir, "runs").drop_duplicates("run_id", keep="last")
    runs = runs.set_index("run_id")
    rows = []
    for k, point in enumerate(points):
        params = {key: v for key, v in point.items() if key != "label"}
        run_id = sweep.run_config(params).run_id
        r = runs.loc[run_id] if run_id in runs.index else None
        val = None if r is None or pd.isna(r["final_val_acc"]) else float(r["final_val_acc"])
        rows.append(
            trial_row(
                sweep=sweep.name,
                stage="search",
                run_id=run_id,
                searcher="random",
                objective=",".join(spec.objectives),
                params=params,
                status="missing" if r is None else str(r["status"]),
                trial_id=None if r is None else r["trial_id"],
                val_acc=val,
                cum_up_restricted=None if r is None else _num(r["cum_up_restricted"]),
                cum_saving_restricted=None if r is None else _num(r["cum_saving_restricted"]),
                error=None if r is None else r["error"],
                round_reached=None if r is None else int(r["rounds_completed"]),
                arm=point["label"],
                trial_index=k,
            )
        )
    return pd.DataFrame(rows)


def _num(v: Any) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


def _mark(trials: pd.DataFrame, chosen: dict[str, dict[str, Any]]) -> pd.DataFrame:
    trials = trials.copy()
    by = {}
    for objectives in chosen.values():
        for o, row in objectives.items():
            by.setdefault(int(row["trial_index"]), []).append(o)
    trials["selected_for"] = [",".join(by.get(k, [])) or None for k in trials["trial_index"]]
    trials["selected"] = trials["selected_for"].notna()
    return trials


__all__ = [
    "Arm",
    "StudySpec",
    "arm_points",
    "is_study",
    "load_study",
    "parse_study",
    "read_metadata",
    "run_study",
]
