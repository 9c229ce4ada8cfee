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

import dataclasses
import datetime as _dt
import json
import os
import platform
import socket
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..config import ConfigError, apply_overrides
from ..errors import UserError
from ..results import read_table, rows_to_table
from ..results.reader import STUDY_FILE, read_metadata
from ..results.storage import Storage, anchored, display
from ..yamlio import load_yaml_mapping
from .spec import (
    SearchSpec,
    SweepSpec,
    TrialSpec,
    _checkpoint_every,
    _choice,
    _positive,
    _seed,
    _take,
    _validate,
)

OBJECTIVES = ("val_acc", "retention")
TOP = ("name", "kind", "workloads", "arms", "budget", "shared", "topk_range", "objectives",
       "retention", "retention_reference", "final", "compare_to", "targets", "trial",
       "checkpoint_every", "results_dir", "scales")  # fmt: skip


@dataclass(frozen=True)
class Arm:
    """One competitor: a method with the run-config fields it fixes and the space of its own
    knobs (a registered space name, or None for the shared knobs only)."""

    name: str
    fixed: dict[str, Any]
    space: str | None = None


@dataclass(frozen=True)
class StudySpec:
    name: str
    workloads: dict[str, dict[str, Any]]
    arms: tuple[Arm, ...]
    trials_per_arm: int
    sampler_seed: int
    shared: dict[str, tuple[float, float, bool]]
    topk_range: tuple[float, float, bool]
    objectives: tuple[str, ...]
    retention: float
    retention_reference: str
    final_seeds: tuple[int, ...]
    compare_to: tuple[str, ...]
    targets: dict[str, float]
    trial: TrialSpec
    checkpoint_every: int
    results_dir: str
    dated: bool = False
    scale: str | None = None

    def sweep_spec(self, workload: str) -> SweepSpec:
        """The sweep machinery's view of one workload: its base and this study's trials."""
        return SweepSpec(
            name=f"{self.name}-{workload}", base=self.workloads[workload], search=SearchSpec(),
            trial=self.trial, final=None, results_dir=self.results_dir,
            checkpoint_every=self.checkpoint_every,
        )  # fmt: skip

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)


def is_study(raw: dict[str, Any]) -> bool:
    return isinstance(raw, dict) and raw.get("kind") == "study"


def _range(path: str, value: Any) -> tuple[float, float, bool]:
    """``[low, high]`` or ``[low, high, log]``."""
    ok = isinstance(value, list | tuple) and len(value) in (2, 3)
    ok = ok and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value[:2])
    if ok and len(value) == 3:
        ok = value[2] in ("log", "linear")
    if not ok or not 0 < value[0] < value[1]:
        raise ConfigError(path, f"{value!r}; allowed: [low, high] or [low, high, log|linear] "
                          "with 0 < low < high")  # fmt: skip
    return float(value[0]), float(value[1]), len(value) == 3 and value[2] == "log"


def parse_study(raw: dict[str, Any], source: str = "<study>") -> StudySpec:
    """Validate a study mapping; every error names the field and what is allowed."""
    raw = _take(raw, "<root>", TOP)
    name = raw.get("name") or Path(source).stem
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise ConfigError("name", f"{name!r}; allowed: letters, digits, '-' and '_'")
    workloads = raw.get("workloads")
    if not isinstance(workloads, dict) or not workloads:
        raise ConfigError("workloads", "expected a mapping of workload name -> base run config")
    for w, base in workloads.items():
        if not isinstance(base, dict):
            raise ConfigError(f"workloads.{w}", "expected a base run config (a mapping)")
        try:
            _validate(base)
        except ConfigError as err:
            raise ConfigError(f"workloads.{w}", str(err)) from None
    arms_raw = raw.get("arms")
    if not isinstance(arms_raw, dict) or not arms_raw:
        raise ConfigError("arms", "expected a mapping of arm name -> {fixed: {...}, space: ...}")
    arms = []
    for a, block in arms_raw.items():
        block = _take(block, f"arms.{a}", ("fixed", "space"))
        fixed = block.get("fixed") or {}
        if not isinstance(fixed, dict) or "method.name" not in fixed:
            raise ConfigError(f"arms.{a}.fixed", "expected a mapping of dotted run-config "
                              "fields, with method.name")  # fmt: skip
        space = block.get("space")
        if space is not None:
            from .spaces import load_space

            try:
                load_space(space)
            except ConfigError as err:
                raise ConfigError(f"arms.{a}.space", str(err).split(": ", 1)[-1]) from None
        arms.append(Arm(str(a), dict(fixed), space))
    budget = _take(raw.get("budget"), "budget", ("trials_per_arm", "seed"))
    trials_per_arm = budget.get("trials_per_arm", 6)
    _positive("budget.trials_per_arm", trials_per_arm, integer=True)
    sampler_seed = budget.get("seed", 0)
    _seed("budget.seed", sampler_seed)
    shared_raw = raw.get("shared") or {"train.lr": [0.01, 0.2, "log"]}
    if not isinstance(shared_raw, dict):
        raise ConfigError("shared", "expected a mapping of dotted field -> [low, high, log]")
    shared = {k: _range(f"shared.{k}", v) for k, v in shared_raw.items()}
    topk_range = _range("topk_range", raw.get("topk_range", [0.01, 1.0, "log"]))
    objectives = tuple(raw.get("objectives") or ("val_acc", "retention"))
    for o in objectives:
        _choice("objectives", o, OBJECTIVES)
    if objectives[0] != "val_acc":
        raise ConfigError("objectives", "the first objective names each arm's main selection; "
                          "allowed first: val_acc")  # fmt: skip
    retention = raw.get("retention", 0.98)
    if isinstance(retention, bool) or not isinstance(retention, int | float) or not (
        0 < retention <= 1
    ):  # fmt: skip
        raise ConfigError("retention", f"{retention!r}; allowed: a number in (0, 1]")
    names = [a.name for a in arms]
    ref = raw.get("retention_reference", names[0])
    _choice("retention_reference", ref, tuple(names))
    compare_to = tuple(raw.get("compare_to") or ())
    for c in compare_to:
        _choice("compare_to", c, tuple(names))
    final = _take(raw.get("final"), "final", ("seeds",))
    seeds = final.get("seeds")
    if not isinstance(seeds, list | tuple) or not seeds:
        raise ConfigError("final.seeds", "the study needs a list of fresh seeds (5 or more)")
    for s in seeds:
        _seed("final.seeds", s)
    search_seeds = {int(b.get("seed", 0)) for b in workloads.values()}
    reused = sorted(set(seeds) & search_seeds)
    if reused:
        raise ConfigError("final.seeds", f"{reused} were used by the search; allowed: seeds "
                          "the search never used")  # fmt: skip
    targets = raw.get("targets") or {}
    if not isinstance(targets, dict) or any(w not in workloads for w in targets):
        raise ConfigError("targets", f"expected workload -> validation accuracy, workloads: "
                          f"{', '.join(workloads)}")  # fmt: skip
    for w, v in targets.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 1:
            raise ConfigError(f"targets.{w}", f"{v!r}; allowed: a number in (0, 1]")
    t = _take(raw.get("trial"), "trial", tuple(TrialSpec.__dataclass_fields__))
    trial = TrialSpec(**t)
    _positive("trial.cpus", trial.cpus)
    location, relative = anchored(raw.get("results_dir") or f"studies/{name}")
    spec = StudySpec(
        name=name, workloads={str(k): v for k, v in workloads.items()}, arms=tuple(arms),
        trials_per_arm=int(trials_per_arm), sampler_seed=sampler_seed, shared=shared,
        topk_range=topk_range, objectives=objectives, retention=float(retention),
        retention_reference=ref, final_seeds=tuple(seeds), compare_to=compare_to,
        targets={str(k): float(v) for k, v in targets.items()}, trial=trial,
        checkpoint_every=_checkpoint_every(raw.get("checkpoint_every", 5)),
        results_dir=location, dated=relative,
    )  # fmt: skip
    for a in spec.arms:  # every arm's first point must be a valid run on every workload
        point = arm_points(spec, a, count=1)[0]
        for w in spec.workloads:
            try:
                spec.sweep_spec(w).run_config(point)
            except ConfigError as err:
                raise ConfigError(f"arms.{a.name}", f"on workload {w}: {err}") from None
    return spec


def load_study(path: str | Path, overrides: list[str] | None = None,
               scale: str | None = None) -> StudySpec:  # fmt: skip
    """Read a study file, apply a named scale (``scales.<name>``: dotted overrides) and
    ``--set`` overrides, and validate it."""
    raw = load_yaml_mapping(path, "study file")
    scales = raw.pop("scales", None) or {}
    if scale is not None:
        if scale not in scales:
            raise ConfigError("--scale", f"{scale!r}; allowed: {', '.join(scales) or 'none'}")
        block = scales[scale]
        if not isinstance(block, dict):
            raise ConfigError(f"scales.{scale}", "expected a mapping of dotted overrides")
        apply_overrides(raw, [f"{k}={json.dumps(v)}" for k, v in block.items()])
    apply_overrides(raw, overrides or [])
    spec = parse_study(raw, str(path))
    return dataclasses.replace(spec, scale=scale)


def arm_points(spec: StudySpec, arm: Arm, count: int | None = None) -> list[dict[str, Any]]:
    """The arm's search configurations: a seeded random draw from its own space and the shared
    knobs, the arm's fixed fields on top. The same for every workload and every rerun."""
    import optuna

    from .spaces import load_space

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seed = (spec.sampler_seed * 1_000_003 + zlib.crc32(arm.name.encode())) % 2**32
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    space = load_space(arm.space) if arm.space else None
    out = []
    for _ in range(count or spec.trials_per_arm):
        t = study.ask()
        if space is not None:
            space(t)
        for key, (lo, hi, log) in spec.shared.items():
            if key not in arm.fixed:
                t.suggest_float(key, lo, hi, log=log)
        dist = t.distributions.get("method.topk_ratio")
        if dist is not None and "method.topk_ratio" not in arm.fixed:
            got = (float(dist.low), float(dist.high), bool(getattr(dist, "log", False)))
            if got != spec.topk_range:
                raise ConfigError(f"arms.{arm.name}.space", f"searches method.topk_ratio over "
                                  f"{got}, the study's topk_range is {spec.topk_range}; every "
                                  "arm searches shared knobs over the same range")  # fmt: skip
        params = {k: v for k, v in t.params.items() if k not in arm.fixed}
        out.append({**params, **arm.fixed})
    return out


def _metadata(spec: StudySpec, started: str, wall: float | None, status: str) -> dict:
    return {
        "name": spec.name, "scale": spec.scale, "status": status, "started_at": started,
        "finished_at": _now() if wall is not None else None, "wall_s": wall,
        "host": socket.gethostname(), "machine": _machine(),
        "workloads": list(spec.workloads), "arms": [a.name for a in spec.arms],
        "trials_per_arm": spec.trials_per_arm, "objectives": list(spec.objectives),
        "retention": spec.retention, "retention_reference": spec.retention_reference,
        "final_seeds": list(spec.final_seeds), "compare_to": list(spec.compare_to),
        "targets": spec.targets, "shared": {k: list(v) for k, v in spec.shared.items()},
    }  # fmt: skip


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
        chosen = {"val_acc": g.sort_values(["val_acc", "trial_index"],
                                           ascending=[False, True]).iloc[0]}  # fmt: skip
        if "retention" in spec.objectives and bar is not None:
            keep = g[g["val_acc"] >= bar]
            if len(keep):
                chosen["retention"] = keep.sort_values(
                    ["cum_saving_restricted", "val_acc", "trial_index"],
                    ascending=[False, False, True]).iloc[0]  # fmt: skip
        out[arm] = chosen
    return out


def run_study(spec: StudySpec, resume: bool = False, say=print, verbose: int = 0,
              mlflow: str | None = None, address: str | None = None) -> pd.DataFrame:  # fmt: skip
    """Search, select and rerun every arm on every workload; returns the final-stage runs."""
    from ray import tune

    from ..distributed import ensure_ray
    from .sweep import _tune_run, derive_concurrency, report_at_end, sweep_folder, trials_file

    spec = sweep_folder(spec, resume, what="study")
    store = Storage.of(spec.results_dir)
    where = display(spec.results_dir)
    say(f"results root: {where}")
    store.check_writable()
    old = read_metadata(spec.results_dir)
    if old is not None and not resume:
        raise UserError(f"study {spec.name!r} already has results in {where}; pass --resume to "
                        "continue it, or --results DIR for a new one")  # fmt: skip
    started = (old or {}).get("started_at") or _now()
    t0 = time.perf_counter() - float((old or {}).get("wall_s") or 0.0)
    store.write_bytes(STUDY_FILE, json.dumps(_metadata(spec, started, None, "running"),
                                             indent=2).encode())  # fmt: skip
    ensure_ray(address)
    import optuna
    import ray

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    n_arms, n = len(spec.arms), spec.trials_per_arm
    say(f"study {spec.name}: {n_arms} arms x {n} validation-only trials on each of "
        f"{len(spec.workloads)} workloads ({', '.join(spec.workloads)}), then the selected "
        f"configurations on fresh seeds {list(spec.final_seeds)}")  # fmt: skip
    final_runs = []
    for w in spec.workloads:
        sweep = spec.sweep_spec(w)
        concurrency = derive_concurrency(sweep, ray.cluster_resources())
        points = [dict(p, label=a.name) for a in spec.arms for p in arm_points(spec, a)]
        say(f"[{w}] search: {len(points)} trials ({n} per arm), {concurrency} at a time")
        _tune_run(sweep, "search", {"final": tune.grid_search(points)}, None, None, None, 1,
                  concurrency, resume, None, say, verbose, total=len(points),
                  mlflow=mlflow)  # fmt: skip
        trials = _trials(spec, sweep, points)
        chosen = _select(trials, spec)
        trials = _mark(trials, chosen)
        store.write_parquet(trials_file(sweep), rows_to_table("trials", _trial_rows(trials)))
        for arm in (a.name for a in spec.arms):
            got = chosen.get(arm, {})
            text = "; ".join(f"{o}: val_acc={r['val_acc']:.4f} saving="
                             f"{100 * (r['cum_saving_restricted'] or 0):.2f}%"
                             for o, r in got.items()) or "no trial finished"  # fmt: skip
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
        _tune_run(sweep, "final", {"final": tune.grid_search(finals)}, None, None, None, 1,
                  concurrency, resume, None, say, verbose, total=len(finals),
                  mlflow=mlflow)  # fmt: skip
        runs = read_table(spec.results_dir, "runs")
        final_runs.append(runs[(runs["stage"] == "final") & (runs["sweep"] == sweep.name)])
    wall = time.perf_counter() - t0
    store.write_bytes(STUDY_FILE, json.dumps(_metadata(spec, started, wall, "finished"),
                                             indent=2).encode())  # fmt: skip
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
        rows.append({
            "sweep": sweep.name, "stage": "search", "trial_id": None if r is None
            else r["trial_id"], "run_id": run_id, "searcher": "random",
            "objective": ",".join(spec.objectives),
            "status": "missing" if r is None else str(r["status"]), "val_acc": val,
            "cum_up_restricted": None if r is None else _num(r["cum_up_restricted"]),
            "cum_saving_restricted": None if r is None else _num(r["cum_saving_restricted"]),
            "error": None if r is None else r["error"], "arm": point["label"],
            "trial_index": k, "params_json": json.dumps(params, sort_keys=True),
        })  # fmt: skip
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


def _trial_rows(trials: pd.DataFrame) -> list[dict[str, Any]]:
    rows = []
    for rec in trials.to_dict("records"):
        rec = {k: None if isinstance(v, float) and v != v else v for k, v in rec.items()}
        params = json.loads(rec["params_json"])
        rows.append({
            "sweep": rec["sweep"], "stage": rec["stage"], "trial_id": rec["trial_id"],
            "run_id": rec["run_id"], "searcher": rec["searcher"], "objective": rec["objective"],
            "status": rec["status"], "val_acc": rec["val_acc"],
            "cum_up_restricted": rec["cum_up_restricted"],
            "cum_saving_restricted": rec["cum_saving_restricted"], "objective_value": None,
            "reference_val_acc": None, "on_pareto_front": False, "selected": rec["selected"],
            "params_json": rec["params_json"], "error": rec["error"], "arm": rec["arm"],
            "selected_for": rec["selected_for"],
            **{f"param.{k}": v for k, v in params.items()},
        })  # fmt: skip
    return rows


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
