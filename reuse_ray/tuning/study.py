"""The study: every method tuned on the same validation budget, compared on fresh seeds.

A study file (``sweeps/study.yaml``) names workloads (base run configs), arms (a method with the
fields it fixes and the search space of its own knobs) and one budget. For each workload:

1. **Search, validation only.** Every arm draws its configurations in a fixed order, by a
   seeded random sampler, from its own registered space plus the shared knobs (``shared``: the
   local learning rate, with one range for all arms; an arm whose own space searches the Top-K
   ratio r must use the study's ``topk_range``). The budget is equal per arm: either
   ``budget.trials_per_arm`` full trials, or ``budget.client_rounds`` (selected clients x rounds
   trained) spent on at most that many configurations, with ``search.scheduler`` (ASHA or
   HyperBand, one per arm, rungs on evaluation rounds) stopping weak ones early so the budget
   buys more of them. All arms' trials run in one Tune experiment; no trial reads the test split
   (``test_reads = 0``), and a trial that diverges still counts against its arm's budget.
   ``search.reeval_top`` > 0 reruns each arm's best candidates by each objective on the further
   search seeds ``search.reeval_seeds`` (validation only) and selects by the mean.
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
import socket
import time
from typing import Any

import pandas as pd

from ..errors import UserError
from ..machine import code_commit, describe_machine
from ..results import read_table
from ..results.reader import STUDY_FILE, read_metadata
from ..results.storage import Storage, display
from . import study_select
from .spec import SweepSpec
from .study_spec import Arm, StudySpec, arm_points, is_study, load_study, parse_study
from .trials import trial_row, write_trials


def _metadata(
    spec: StudySpec, started: str, wall: float | None, status: str, attempts: list | None = None
) -> dict:
    return {
        "name": spec.name,
        "scale": spec.scale,
        "status": status,
        "started_at": started,
        "finished_at": _now() if wall is not None else None,
        "wall_s": wall,
        "host": socket.gethostname(),
        "machine": describe_machine(),
        "workloads": list(spec.workloads),
        "arms": [a.name for a in spec.arms],
        "trials_per_arm": spec.trials_per_arm,
        "client_rounds": spec.client_rounds,
        "search": {
            "scheduler": spec.search.scheduler,
            "grace_period": spec.search.grace_period,
            "reduction_factor": spec.search.reduction_factor,
            "reeval_top": spec.search.reeval_top,
            "reeval_seeds": list(spec.search.reeval_seeds),
        },
        "objectives": list(spec.objectives),
        "uplink_levels": list(spec.uplink_levels),
        "target_of_reference": spec.target_of_reference,
        "retention": spec.retention,
        "retention_reference": spec.retention_reference,
        "final_seeds": list(spec.final_seeds),
        "compare_to": list(spec.compare_to),
        "targets": spec.targets,
        "shared": {k: list(v) for k, v in spec.shared.items()},
        # every launch of the study (a resumed one continues on the machine and commit it
        # was launched from): when, where, which code
        "attempts": list(attempts or []),
    }


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def run_study(
    spec: StudySpec,
    resume: bool = False,
    say=print,
    verbose: int = 0,
    mlflow: str | None = None,
    address: str | None = None,
    final_only: bool = False,
) -> pd.DataFrame:
    """Search (unless ``final_only``: the search's runs must be in the results), select and
    rerun every arm on every workload; returns the final-stage runs."""
    from .sweep import report_at_end

    spec, started, t0, attempts = _open(spec, resume, say, address, final_only)
    final_runs, gaps, choices = [], {}, {}
    store = Storage.of(spec.results_dir)

    def chose(w: str, record: dict) -> None:
        """A workload's choices, in study.json as soon as they are made (before its final
        stage): the report of a study still computing knows which label is which level."""
        choices[w] = record
        meta = dict(_metadata(spec, started, None, "running", attempts), choices=choices)
        store.write_bytes(STUDY_FILE, json.dumps(meta, indent=2).encode())

    try:
        for w in spec.workloads:
            finals_w, gaps[w] = _workload(
                spec, w, resume or final_only, say, verbose, mlflow, chose, final_only
            )
            final_runs.append(finals_w)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the study is recorded as interrupted
        meta = dict(_metadata(spec, started, None, "interrupted", attempts), choices=choices)
        meta["wall_s"] = time.perf_counter() - t0  # what --resume's wall clock goes on from
        Storage.of(spec.results_dir).write_bytes(STUDY_FILE, json.dumps(meta, indent=2).encode())
        raise
    wall = time.perf_counter() - t0
    meta = dict(_metadata(spec, started, wall, "finished", attempts), selection_gaps=gaps)
    meta["choices"] = choices
    Storage.of(spec.results_dir).write_bytes(STUDY_FILE, json.dumps(meta, indent=2).encode())
    say(f"study {spec.name} finished in {wall / 60:.1f} min; Parquet: {display(spec.results_dir)}")
    report_at_end(spec.results_dir, say)
    return pd.concat(final_runs, ignore_index=True)


def _open(
    spec: StudySpec, resume: bool, say, address: str | None, final_only: bool = False
) -> tuple[StudySpec, str, float, list]:
    """Connect (before naming a dated folder: a cluster that does not answer leaves none), refuse
    a start over results or a resume of nothing, and record the study as running; returns the
    spec with its folder, the start date and the wall clock's origin (a resumed study's wall
    time goes on from what it had spent)."""
    from ..distributed import ensure_ray
    from .sweep import open_folder, sweep_folder

    ensure_ray(address)
    spec = sweep_folder(spec, resume or final_only, what="study")
    old = read_metadata(spec.results_dir)
    open_folder(spec, resume, final_only, "study", old is not None, say)
    store = Storage.of(spec.results_dir)
    started = (old or {}).get("started_at") or _now()
    t0 = time.perf_counter() - float((old or {}).get("wall_s") or 0.0)
    attempts = [*(old or {}).get("attempts", []), _attempt(final_only)]
    meta = _metadata(spec, started, None, "running", attempts)
    store.write_bytes(STUDY_FILE, json.dumps(meta, indent=2).encode())
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    say(
        f"study {spec.name}: {len(spec.arms)} arms x {spec.trials_per_arm} validation-only "
        f"trials on each of {len(spec.workloads)} workloads ({', '.join(spec.workloads)}), "
        f"then the selected configurations on fresh seeds {list(spec.final_seeds)}"
    )
    return spec, started, t0, attempts


def _attempt(final_only: bool) -> dict[str, Any]:
    """This launch of the study: its start, host, machine and the commit of the code."""
    return {
        "started_at": _now(),
        "host": socket.gethostname(),
        "machine": describe_machine(),
        "commit": code_commit(),
        "final_only": final_only,
    }


def _workload(
    spec: StudySpec,
    w: str,
    resume: bool,
    say,
    verbose: int,
    mlflow: str | None,
    chose=None,
    final_only: bool = False,
) -> tuple[pd.DataFrame, dict]:
    """One workload: every arm's search (unless ``final_only``), its selection (after robust
    re-evaluation, if asked), then the final stage; returns its final runs and the selection
    gaps per arm."""
    import ray

    from .launch import Launcher, derive_concurrency

    sweep = spec.sweep_spec(w)
    concurrency = derive_concurrency(sweep, ray.cluster_resources())
    points = [dict(p, label=a.name) for a in spec.arms for p in arm_points(spec, a)]
    run = Launcher(concurrency, resume, say, verbose, mlflow)
    if final_only:
        trials = _finished_search(spec, sweep, points, w)
    else:
        _search(spec, sweep, points, run, w)
        trials = _trials(spec, sweep, points)
    if spec.search.reeval_top:
        trials = study_select.reeval(spec, sweep, trials, _trials, run)
    trials = study_select.selection_values(trials, spec)
    chosen = study_select.select(trials, spec)
    levels, unable, limits = study_select.select_levels(trials, spec, chosen)
    for arm, got in levels.items():
        chosen.setdefault(arm, {}).update(got)
    trials = study_select.mark(trials, chosen)
    write_trials(spec.results_dir, sweep.name, trials.drop(columns=["trial_index"]))
    if chose is not None:
        chose(w, choices_record(spec, chosen, unable, limits))
    for line in study_select.budget_lines(trials, spec, sweep.search.client_rounds):
        say(f"[{w}] {line}")
    for line in _chosen_lines(spec, chosen, unable, limits):
        say(f"[{w}] {line}")
    finals = final_points(spec, chosen)
    say(f"[{w}] final: {len(finals)} runs on fresh seeds, test split read once")
    finals_w = run.final(sweep, finals)
    gaps = study_select.selection_gaps(trials, chosen, finals_w)
    for arm, g in gaps.items():
        say(
            f"[{w}] selection gap of {arm} (search − fresh-seed validation accuracy): "
            f"{g['search_seed']:+.4f} on the search seed"
            + (
                f", {g['mean']:+.4f} as the mean over {g['seeds']} search seeds"
                if g["seeds"] > 1
                else ""
            )
        )
    return finals_w, gaps


def _search(spec: StudySpec, sweep: SweepSpec, points: list, run, w: str) -> None:
    """The workload's validation-only search stage: every arm's points, each arm's budget."""
    per_round = sweep.run_config().fl.clients_per_round
    budget, n = sweep.search.client_rounds, spec.trials_per_arm
    run.say(
        f"[{w}] search: {len(points)} trials ({n} per arm), {run.concurrency} at a time"
        if not budget
        else f"[{w}] search: up to {n} configurations per arm, {budget} client-rounds per "
        f"arm, {run.concurrency} trials at a time"
    )
    run(
        sweep,
        "search",
        total=f"at most {len(points)}" if budget else len(points),
        **_search_args(spec, sweep, points, per_round),
    )


def _finished_search(spec: StudySpec, sweep: SweepSpec, points: list, w: str) -> pd.DataFrame:
    """``--final``: the workload's search trials as its runs table records them; a search that
    has no finished run there is the user's error."""
    trials = _trials(spec, sweep, points)
    if not len(trials) or not trials["status"].eq("finished").any():
        raise UserError(
            f"--final needs a finished search: workload {w!r} has no finished search run in "
            f"{display(spec.results_dir)} — run the study (or --resume it) first"
        )
    return trials


def _chosen_lines(
    spec: StudySpec,
    chosen: dict[str, dict[str, Any]],
    unable: dict[str, list[str]] | None = None,
    limits: dict[str, float] | None = None,
) -> list[str]:
    """Per arm, what each objective (and uplink level) selected, the levels it cannot reach,
    or that no trial finished."""
    lines = []
    for arm in (a.name for a in spec.arms):
        got = chosen.get(arm, {})
        parts = [
            f"{o}: val_acc={r['val_acc']:.4f} saving={100 * (r['cum_saving_restricted'] or 0):.2f}%"
            for o, r in got.items()
        ]
        parts += [
            f"{lv}: unable (no finished configuration within {(limits or {})[lv] / 1e6:.1f} MB)"
            for lv in (unable or {}).get(arm, [])
        ]
        lines.append(f"{arm}: {'; '.join(parts) or 'no trial finished'}")
    return lines


def final_labels(spec: StudySpec, chosen: dict[str, dict[str, Any]]) -> dict[tuple, str]:
    """(arm, objective) -> the label its configuration's final runs carry: the arm for
    ``val_acc``, ``ARM@OBJECTIVE`` otherwise (``ARM@up10`` for an uplink level); a
    configuration chosen by several objectives runs once, under the first one's label."""
    out = {}
    for arm in (a.name for a in spec.arms):
        first: dict[str, str] = {}
        for objective, row in chosen.get(arm, {}).items():
            label = arm if objective == "val_acc" else f"{arm}@{objective}"
            out[(arm, objective)] = first.setdefault(row["params_json"], label)
    return out


def final_points(spec: StudySpec, chosen: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The final stage's runs: each arm's selected configurations on every final seed, under
    the labels of :func:`final_labels` (each configuration once)."""
    finals, labels = [], final_labels(spec, chosen)
    for arm in (a.name for a in spec.arms):
        seen: set[str] = set()
        for objective, row in chosen.get(arm, {}).items():
            if row["params_json"] in seen:
                continue
            seen.add(row["params_json"])
            params = json.loads(row["params_json"])
            label = labels[(arm, objective)]
            finals += [dict(params, seed=s, label=label) for s in spec.final_seeds]
    return finals


def choices_record(spec: StudySpec, chosen, unable, limits) -> dict[str, Any]:
    """What study.json keeps of a workload's selection: per arm and objective the chosen
    configuration, its search values and its final runs' label; the levels an arm cannot
    reach; each level's uplink limit in bytes."""
    labels = final_labels(spec, chosen)
    arms = {
        arm: {
            o: {
                "label": labels[(arm, o)],
                "params": json.loads(r["params_json"]),
                "trial_id": r["trial_id"],
                "search_val_acc": _num(r["val_acc"]),
                "search_cum_up_restricted": _num(r["cum_up_restricted"]),
            }
            for o, r in got.items()
        }
        for arm, got in chosen.items()
    }
    return {"arms": arms, "unable": unable, "level_bytes": limits}


def _trials(
    spec: StudySpec,
    sweep: SweepSpec,
    points: list[dict[str, Any]],
    stage: str = "search",
) -> pd.DataFrame:
    """One row per trial of ``stage``, read from the runs table (the record), in point order.
    With a client-round budget, a point its arm's budget left untried has no row."""
    runs = read_table(spec.results_dir, "runs").drop_duplicates("run_id", keep="last")
    runs = runs.set_index("run_id")
    per_round = sweep.run_config().fl.clients_per_round
    rows = []
    for k, point in enumerate(points):
        params = {key: v for key, v in point.items() if key not in ("label", "seed")}
        seed = point.get("seed")
        run_id = sweep.run_config(params if seed is None else {**params, "seed": seed}).run_id
        r = runs.loc[run_id] if run_id in runs.index else None
        if r is None and sweep.search.client_rounds and stage == "search":
            continue
        val = None if r is None or pd.isna(r["final_val_acc"]) else float(r["final_val_acc"])
        reached = None if r is None else int(r["rounds_completed"])
        rows.append(
            trial_row(
                sweep=sweep.name,
                stage=stage,
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
                round_reached=reached,
                client_rounds=None if reached is None else reached * per_round,
                arm=point["label"],
                seed=seed,
                trial_index=k if stage == "search" else None,
            )
        )
    return pd.DataFrame(rows)


def _search_args(spec: StudySpec, sweep: SweepSpec, points: list, per_round: int) -> dict:
    """How Tune gets the search's points: a plain grid, or (with a scheduler or a client-round
    budget) :class:`.study_search.ArmPoints` with a scheduler per arm and a budget per arm."""
    s = sweep.search
    if not s.client_rounds and s.scheduler == "none":
        from ray import tune

        return {"param_space": {"final": tune.grid_search(points)}}
    from .budget import ClientRoundBudget
    from .study_search import ArmPoints, MakeScheduler, PerArm

    make = MakeScheduler(
        s.scheduler, sweep.run_config().fl.rounds, s.grace_period, s.reduction_factor
    )
    return {
        "param_space": {},
        "search_alg": ArmPoints(points, s.client_rounds, per_round),
        "num_samples": len(points),
        "scheduler": None
        if s.scheduler == "none"
        else PerArm(make, spec.uplink_levels, route_at=s.grace_period),
        "stop": ClientRoundBudget(s.client_rounds, per_round, per_label=True)
        if s.client_rounds
        else None,
    }


def _num(v: Any) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


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
