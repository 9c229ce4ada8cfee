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
from ..results.reader import STUDY_FILE, read_metadata
from ..results.storage import Storage, display
from . import study_select
from . import trials as table
from .launch import final_points as launch_points
from .parse import arm_points
from .pipeline import Experiment, Plan, run_experiment
from .reeval import gap_line, selection_gaps
from .spec import ExperimentSpec, WorkloadSpec


def _metadata(
    spec: ExperimentSpec,
    started: str,
    wall: float | None,
    status: str,
    attempts: list | None = None,
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
            "max_concurrent_trials": spec.search.max_concurrent_trials,
        },
        # what each trial reserved: the report's core-hours are its runs' wall time × this
        "trial_cpus": spec.trial.cpus
        + (spec.trial.workers * spec.trial.cpu_per_worker if spec.trial.backend == "ray" else 0),
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


def run_study(spec: ExperimentSpec, **options: Any) -> pd.DataFrame:
    """Search (unless ``final_only``: the search's runs must be in the results), select and
    rerun every arm on every workload — the pipeline (:func:`.pipeline.run_experiment`, which
    names the ``options``) over each workload; returns the final-stage runs."""
    if spec.kind != "study":
        raise UserError(f"{spec.name!r} is a sweep file; run it with run_sweep")
    outcomes = run_experiment(StudyExperiment(spec), **options)
    finals = [f for _, _, f in outcomes if f is not None]
    return pd.concat(finals, ignore_index=True) if finals else pd.DataFrame()


class StudyExperiment(Experiment):
    """A study file as the pipeline runs it: a plan per workload, and ``study.json`` — the
    study's record, written when it opens (running, with every launch), as each workload's
    choices are made, and when it ends (finished or interrupted, with its wall time)."""

    what = "study"

    def __init__(self, spec: ExperimentSpec):
        self.spec = spec
        self.choices: dict[str, Any] = {}
        self.gaps: dict[str, Any] = {}

    def started(self, final_only: bool) -> bool:
        self.old = read_metadata(self.spec.results_dir)
        return self.old is not None

    def opened(self, final_only: bool) -> None:
        old = self.old or {}
        self.started_at = old.get("started_at") or _now()
        # a resumed study's wall time goes on from what it had spent
        self.t0 = time.perf_counter() - float(old.get("wall_s") or 0.0)
        self.attempts = [*old.get("attempts", []), _attempt(final_only)]
        self.running()

    def running(self) -> None:
        """Recorded as running, with the wall time so far: a launch killed without a word
        (its machine or session ended) loses only its own time since this record."""
        self.record("running", wall_s=time.perf_counter() - self.t0)

    def record(self, status: str, wall: float | None = None, **more) -> None:
        meta = _metadata(self.spec, self.started_at, wall, status, self.attempts)
        meta.update(more, choices=self.choices)
        Storage.of(self.spec.results_dir).write_bytes(
            STUDY_FILE, json.dumps(meta, indent=2).encode()
        )

    def header(self, run, resources) -> str:
        spec = self.spec
        return (
            f"study {spec.name}: {len(spec.arms)} arms x {spec.trials_per_arm} validation-only "
            f"trials on each of {len(spec.workloads)} workloads ({', '.join(spec.workloads)}), "
            f"then the selected configurations on fresh seeds {list(spec.final_seeds)}"
        )

    def plans(self):
        for w in self.spec.workloads:
            yield StudyPlan(self, w)

    def chose(self, w: str, record: dict) -> None:
        """A workload's choices, in study.json as soon as they are made (before its final
        stage): the report of a study still computing knows which label is which level."""
        self.choices[w] = record
        self.running()

    def interrupted(self) -> None:
        # the wall time so far: what --resume's wall clock goes on from
        self.record("interrupted", wall_s=time.perf_counter() - self.t0)

    def finished(self, outcomes: list, say) -> None:
        wall = time.perf_counter() - self.t0
        self.record("finished", wall, selection_gaps=self.gaps)
        where = display(self.spec.results_dir)
        say(f"study {self.spec.name} finished in {wall / 60:.1f} min; Parquet: {where}")


def _attempt(final_only: bool) -> dict[str, Any]:
    """This launch of the study: its start, host, machine and the commit of the code."""
    return {
        "started_at": _now(),
        "host": socket.gethostname(),
        "machine": describe_machine(),
        "commit": code_commit(),
        "final_only": final_only,
    }


class StudyPlan(Plan):
    """One workload of a study: every arm's drawn points searched under the arm's budget,
    selected per arm by each objective and uplink level (after robust re-evaluation, if
    asked), each choice on the fresh seeds."""

    def __init__(self, exp: StudyExperiment, w: str):
        study = exp.spec
        self.exp, self.study, self.w = exp, study, w
        self.spec, self.reference = study.workload(w), None
        self.points = [
            dict(p, label=a.name) for a in study.arms if a.searched for p in arm_points(study, a)
        ]

    def search(self, run) -> pd.DataFrame:
        return self.rows(
            "search", self.points, _search(self.study, self.spec, self.points, run, self.w)
        )

    def finished_search(self) -> pd.DataFrame:
        trials = self.rows("search", self.points, None)
        if not len(trials) or not trials["status"].eq("finished").any():
            raise UserError(
                f"--final needs a finished search: workload {self.w!r} has no finished search "
                f"run in {display(self.study.results_dir)} — run the study (or --resume it) first"
            )
        return trials

    def search_finished(self) -> bool:
        return self.w in ((self.exp.old or {}).get("choices") or {})

    def rows(self, stage: str, points, results) -> pd.DataFrame:
        """One row per point of ``stage`` (its Tune result, where the stage ran), in point
        order; with a client-round budget, a point its arm's budget left untried has no row."""
        entries = table.entries(stage, points, results)
        objective = ",".join(self.study.objectives)
        return table.build(self.spec, stage, entries, searcher="random", objective=objective)

    def readings(self) -> pd.DataFrame | None:
        """The runs' readings at the uplink levels (the ``levels`` table), None without."""
        if not self.study.uplink_levels:
            return None
        from ..results.reader import read_table_if_any

        return read_table_if_any(self.study.results_dir, "levels")

    def candidates(self, trials: pd.DataFrame) -> pd.DataFrame:
        return study_select.candidates(trials, self.study, self.readings())

    def reeval_line(self, n: int) -> str:
        return f"[{self.w}] robust selection: {n} candidate configurations"

    def choose(self, trials: pd.DataFrame):
        study = self.study
        trials = study_select.selection_values(trials, study)
        chosen = study_select.select(trials, study)
        levels, self.unable, self.limits, self.why = study_select.select_levels(
            trials, study, self.readings()
        )
        for arm, got in levels.items():
            chosen.setdefault(arm, {}).update(got)
        marked = study_select.mark(trials, chosen).drop(columns=["trial_index"])
        return study_select.ablations(chosen, study), marked

    def said_choice(self, chosen, trials: pd.DataFrame, say) -> None:
        study, w = self.study, self.w
        self.exp.chose(w, choices_record(study, chosen, self.unable, self.limits, self.why))
        for line in study_select.budget_lines(trials, study, self.spec.search.client_rounds):
            say(f"[{w}] {line}")
        for line in _chosen_lines(study, chosen, self.unable, self.limits, self.why):
            say(f"[{w}] {line}")

    def finals(self, chosen) -> list[dict[str, Any]]:
        return final_points(self.study, chosen)

    def final_line(self, n: int) -> str:
        return f"[{self.w}] final: {n} runs on fresh seeds, test split read once"

    def after_final(self, chosen, trials, finals: pd.DataFrame, say) -> None:
        searched = {a.name for a in self.study.arms if a.searched}
        rows = {
            arm: got["val_acc"]
            for arm, got in chosen.items()
            if "val_acc" in got and arm in searched
        }
        gaps = self.exp.gaps[self.w] = selection_gaps(trials, rows, finals)
        for arm, gap in gaps.items():
            say(f"[{self.w}] {gap_line(arm, gap)}")


def _search(spec: ExperimentSpec, sweep: WorkloadSpec, points: list, run, w: str):
    """The workload's validation-only search stage: every arm's points, each arm's budget;
    its Tune results."""
    budget, n = sweep.search.client_rounds, spec.trials_per_arm
    run.say(
        f"[{w}] search: {len(points)} trials ({n} per arm), {run.concurrency} at a time"
        if not budget
        else f"[{w}] search: up to {n} configurations per arm, {budget} client-rounds per "
        f"arm, {run.concurrency} trial{'s' if run.concurrency != 1 else ''} at a time"
    )
    return run(
        sweep,
        "search",
        total=f"at most {len(points)}" if budget else len(points),
        **_search_args(spec, sweep, points),
    )


def _chosen_lines(
    spec: ExperimentSpec,
    chosen: dict[str, dict[str, Any]],
    unable: dict[str, list[str]] | None = None,
    limits: dict[str, float] | None = None,
    why: dict[str, dict[str, str]] | None = None,
) -> list[str]:
    """Per arm, what each objective (and uplink level) selected, the levels it cannot reach,
    or that no trial finished."""
    lines = []
    for arm in (a.name for a in spec.arms):
        got = chosen.get(arm, {})
        parts = [
            f"{o}: val_acc={_search_value(r):.4f}"
            + (
                f" at round {int(r['reading_round'])}"
                if pd.notna(r.get("reading_round"))
                else f" saving={100 * (r['cum_saving_restricted'] or 0):.2f}%"
            )
            for o, r in got.items()
        ]
        parts += [
            f"{lv}: unable ({(why or {}).get(arm, {}).get(lv, 'no reading')}; "
            f"{(limits or {}).get(lv, float('nan')) / 1e6:.1f} MB)"
            for lv in (unable or {}).get(arm, [])
        ]
        lines.append(f"{arm}: {'; '.join(parts) or 'no trial finished'}")
    return lines


def final_labels(spec: ExperimentSpec, chosen: dict[str, dict[str, Any]]) -> dict[tuple, str]:
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


def final_points(spec: ExperimentSpec, chosen: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The final stage's runs (:func:`.launch.final_points`): each arm's selected
    configurations under the labels of :func:`final_labels`, each configuration once."""
    configs, labels = [], final_labels(spec, chosen)
    for arm in (a.name for a in spec.arms):
        seen: set[str] = set()
        for objective, row in chosen.get(arm, {}).items():
            if row["params_json"] not in seen:
                seen.add(row["params_json"])
                configs.append((labels[(arm, objective)], json.loads(row["params_json"])))
    return launch_points(configs, spec.final_seeds)


def _search_value(row) -> float:
    """The validation accuracy a choice was made on: a level's reading (its mean over the
    search seeds with robust selection), else the run's own."""
    v = row.get("reading")
    return float(row["val_acc"] if v is None or pd.isna(v) else v)


def choices_record(spec: ExperimentSpec, chosen, unable, limits, why=None) -> dict[str, Any]:
    """What study.json keeps of a workload's selection: per arm and objective the chosen
    configuration, its search values (at a level: its reading's) and its final runs' label;
    the levels an arm cannot reach and why; each level's uplink limit in bytes."""
    labels = final_labels(spec, chosen)
    arms = {
        arm: {
            o: {
                "label": labels[(arm, o)],
                "params": json.loads(r["params_json"]),
                "trial_id": r["trial_id"],
                **({"ablation_of": spec.arm(arm).ablation_of} if spec.arm(arm).ablation_of else {}),
                "search_val_acc": _num(_search_value(r)),
                "search_cum_up_restricted": _num(r["cum_up_restricted"]),
                **(
                    {
                        "reading_round": int(r["reading_round"]),
                        "reading_cum_up": _num(r["reading_cum_up"]),
                    }
                    if pd.notna(r.get("reading_round"))
                    else {}
                ),
            }
            for o, r in got.items()
        }
        for arm, got in chosen.items()
    }
    return {"arms": arms, "unable": unable, "unable_why": why or {}, "level_bytes": limits}


def _search_args(spec: ExperimentSpec, sweep: WorkloadSpec, points: list) -> dict:
    """How Tune gets the search's points: a plain grid, or (with a scheduler or a client-round
    budget) :class:`.study_search.ArmPoints` with a scheduler per arm and a budget per arm."""
    s = sweep.search
    if not s.client_rounds and s.scheduler == "none":
        from ray import tune

        return {"param_space": {"final": tune.grid_search(points)}}
    from .budget import ClientRoundBudget
    from .study_search import ArmPoints, MakeScheduler, PerArm

    ledger = ClientRoundBudget.of(sweep, [a.name for a in spec.arms if a.searched])
    return {
        "param_space": {},
        "search_alg": ArmPoints(points, ledger),
        "num_samples": len(points),
        "scheduler": None
        if s.scheduler == "none"
        else PerArm(MakeScheduler.of(sweep), spec.uplink_levels, route_at=s.grace_period),
        "stop": ledger,
    }


def _num(v: Any) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


__all__ = ["StudyExperiment", "run_study"]
