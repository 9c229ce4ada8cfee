"""An experiment's record and its console lines: ``study.json`` for a study file — written when
it opens (running, with every launch: when, where, which commit), as each workload's choices are
made, and when it ends (finished or interrupted, with its wall time) — and the lines that say
what was chosen. A sweep file keeps no record of its own: its trials table is its record. The
file's kind is read here only to name the record and the header.
"""

from __future__ import annotations

import datetime as _dt
import json
import socket
import threading
import time
from typing import Any

import pandas as pd

from ..errors import UserError
from ..machine import code_commit, describe_machine
from ..results.reader import STUDY_FILE, read_arrow_if_any, read_metadata
from ..results.storage import Storage, display, join
from .selection import final_labels
from .spec import STUDY_SEARCH_KEYS, ExperimentSpec, WorkloadSpec
from .trials import trials_file


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
        "search": {k: getattr(spec.search, k) for k in STUDY_SEARCH_KEYS},
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


def _attempt(final_only: bool) -> dict[str, Any]:
    """This launch of the study: its start, host, machine and the commit of the code."""
    return {
        "started_at": _now(),
        "host": socket.gethostname(),
        "machine": describe_machine(),
        "commit": code_commit(),
        "final_only": final_only,
    }


class Record:
    """An experiment's record (``spec``: a sweep's or a study's): whether its folder holds it
    already, what the console says when it opens and ends, and for a study ``study.json`` —
    rewritten every ``heartbeat_s`` seconds while it runs, so a launch that is killed (its
    machine or session ended) loses at most that much of its wall time."""

    heartbeat_s = 300.0

    def __init__(self, spec: ExperimentSpec):
        self.spec = spec
        self.what = spec.kind  # how the console and the errors name it
        self.choices: dict[str, Any] = {}
        self.gaps: dict[str, Any] = {}
        self.old: dict | None = None
        self._lock, self._ended = threading.Lock(), threading.Event()

    def started(self, continuing: bool) -> bool:
        """The folder holds it: its record, a workload's Tune experiments or its trials table
        (a copied folder). To be continued (``--resume``, ``--final``), its runs alone count
        too: a folder expanded from a compacted copy has no Tune state, and a sweep killed in
        its search no record. A plain start over runs alone keeps them (shipped results)."""
        self.old = read_metadata(self.spec.results_dir)
        store = Storage.of(self.spec.results_dir)
        names = [self.spec.workload(w).name for w in self.spec.workloads]
        tune = any(store.is_dir("_tune", f"{n}-{s}") for n in names for s in ("search", "final"))
        if self.old is not None or tune or any(store.is_file(trials_file(n)) for n in names):
            return True
        runs = read_arrow_if_any(self.spec.results_dir, "runs") if continuing else None
        return runs is not None and bool(set(runs["sweep"].to_pylist()) & set(names))

    def opened(self, final_only: bool) -> None:
        """Recorded as running, with this launch added to the earlier ones; from here on the
        record is rewritten every ``heartbeat_s`` until :meth:`closed`."""
        old = self.old or {}
        self.started_at = old.get("started_at") or _now()
        # a resumed study's wall time goes on from what it had spent
        self.t0 = time.perf_counter() - float(old.get("wall_s") or 0.0)
        self.attempts = [*old.get("attempts", []), _attempt(final_only)]
        self.running()
        if self.what == "study":
            beat = threading.Thread(target=self._beat, name="study-record", daemon=True)
            beat.start()

    def _beat(self) -> None:
        while not self._ended.wait(self.heartbeat_s):
            self.running()

    def closed(self) -> None:
        """No more running records (the experiment ended, was interrupted or failed)."""
        self._ended.set()

    def running(self) -> None:
        """Recorded as running, with the wall time so far (not once the experiment ended: a
        heartbeat never overwrites its end)."""
        with self._lock:
            if not self._ended.is_set():
                self._write("running", wall_s=time.perf_counter() - self.t0)

    def write(self, status: str, wall: float | None = None, **more) -> None:
        with self._lock:
            self._write(status, wall, **more)

    def _write(self, status: str, wall: float | None = None, **more) -> None:
        if self.what != "study":
            return  # a sweep's trials table is its record
        meta = _metadata(self.spec, self.started_at, wall, status, self.attempts)
        meta.update(more, choices=self.choices)
        Storage.of(self.spec.results_dir).write_bytes(
            STUDY_FILE, json.dumps(meta, indent=2).encode()
        )

    def chose(self, w: str, record: dict) -> None:
        """A workload's choices, in study.json as soon as they are made (before its final
        stage): the report of a study still computing knows which label is which level."""
        self.choices[w] = record
        self.running()

    def interrupted(self) -> None:
        # the wall time so far: what --resume's wall clock goes on from
        self.closed()
        self.write("interrupted", wall_s=time.perf_counter() - self.t0)

    def header(self, run, resources: dict[str, float]) -> str:
        s = self.spec
        if self.what == "study":
            return (
                f"study {s.name}: {len(s.arms)} arms x {s.trials_per_arm} validation-only "
                f"trials on each of {len(s.workloads)} workloads ({', '.join(s.workloads)}), "
                f"then the selected configurations on fresh seeds {list(s.final_seeds)}"
            )
        return (
            f"sweep {s.name}: {s.search.searcher} over "
            f"{s.search.space or list(s.search.grid)} ({s.search.objective}), "
            f"{s.search.num_samples} samples, {run.concurrency} concurrent "
            f"trial{'s' if run.concurrency != 1 else ''} of "
            f"{s.trial.bundles()} on {resources.get('CPU', 0):g} CPUs / "
            f"{resources.get('GPU', 0):g} GPUs; "
            f"results in {display(s.results_dir)}"
        )

    def finished(self, outcomes: list, say) -> None:
        self.closed()
        wall = time.perf_counter() - self.t0
        self.write("finished", wall, selection_gaps=self.gaps)
        where = display(self.spec.results_dir)
        if self.what == "study":
            say(f"study {self.spec.name} finished in {wall / 60:.1f} min; Parquet: {where}")
        else:
            say(f"Parquet: {where}  (pandas.read_parquet(DIR/'rounds'))")


def chosen_lines(
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


def say_choice(spec: WorkloadSpec, chosen: dict, trials, say) -> None:
    """A searcher's choice on the console (``chosen``: ``selected-<j>`` -> {objective: row});
    no finished trial is the user's error, with every trial's error listed."""
    rows = [row for got in chosen.values() for row in got.values()]
    trials_path = join(spec.results_dir, trials_file(spec.name))
    if spec.search.searcher == "none":
        say(f"protocol: {len(rows)} grid configurations go straight to the final stage")
        return
    if rows:
        best = rows[0]
        say(
            f"best configuration (validation only): val_acc={best.val_acc:.4f} "
            f"cum_saving={100 * (best.cum_saving_restricted or 0):.2f}% params={best.params_json}"
        )
        return
    say(f"no search trial finished ({len(trials)} trials); trials table: {trials_path}")
    for _, t in trials.iterrows():
        say(
            f"  trial {t['trial_id'] or '?'} {t['status']}: {t['error'] or 'no error text'} "
            f"params={t['params_json']}"
        )
    raise UserError(
        f"sweep {spec.name!r}: no search trial finished — every trial's error "
        f"is listed above and in {trials_path}"
    )


def _num(v: Any) -> float | None:
    return None if v is None or pd.isna(v) else float(v)
