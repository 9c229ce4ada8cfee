"""The trials table: one row per trial of a sweep's or a study's search, built in one place.

A row names the trial (sweep, stage, trial id, run id), how it was searched (searcher,
objective), what the runs table recorded for it (status, validation accuracy, restricted bytes,
error) and what selection made of it (objective value, Pareto membership, selected). A study's
rows add the arm and the objectives it was selected for. Written, each searched parameter gets a
``param.<name>`` column beside ``params_json``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..results import read_table, rows_to_table
from ..results.storage import Storage, join

if TYPE_CHECKING:
    from .spec import WorkloadSpec


TRIAL_COLUMNS = tuple(
    "sweep stage trial_id run_id searcher objective status val_acc cum_up_restricted "
    "cum_saving_restricted objective_value reference_val_acc on_pareto_front selected "
    "params_json error".split()
)


def trial_row(*, params: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """One trials-table row: :data:`TRIAL_COLUMNS` (None where not given; not on the Pareto
    front, not selected), ``params`` as ``params_json``, then further columns (a study's
    ``arm``, ``trial_index``, ``selected_for``; the round reached, the client-rounds)."""
    row: dict[str, Any] = dict.fromkeys(TRIAL_COLUMNS)
    row.update(on_pareto_front=False, selected=False, **fields)
    row["params_json"] = json.dumps(params, sort_keys=True, default=str)
    return row


def _plain(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


def table_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows as written: NaN as null, and a ``param.<name>`` column per searched
    parameter (from ``params_json``)."""
    rows = []
    for rec in df.to_dict("records"):
        rec = {k: _plain(v) for k, v in rec.items() if not str(k).startswith("param.")}
        params = json.loads(rec["params_json"]) if rec.get("params_json") else {}
        rows.append(dict(rec, **{f"param.{k}": v for k, v in params.items()}))
    return rows


def trials_file(name: str) -> str:
    """Where a sweep's trials table lives below its results location."""
    return f"trials/{name}.parquet"


def write_trials(location: str, name: str, df: pd.DataFrame) -> str:
    """Write sweep ``name``'s trials table below ``location``; returns its path."""
    Storage.of(location).write_parquet(trials_file(name), rows_to_table("trials", table_rows(df)))
    return join(location, trials_file(name))


def pareto_front(df: pd.DataFrame) -> pd.Series:
    """True where no other row has val_acc ≥ and cum_up_restricted ≤ with one strict."""
    acc, up = df["val_acc"].to_numpy(), df["cum_up_restricted"].to_numpy()
    out = []
    for i in range(len(df)):
        dominated = (acc >= acc[i]) & (up <= up[i]) & ((acc > acc[i]) | (up < up[i]))
        out.append(not dominated.any())
    return pd.Series(out, index=df.index)


@dataclass(frozen=True)
class Entry:
    """One trial of a stage as the trials table sees it: its configuration, its seed (a
    re-evaluation's; None: the workload's), its arm (a study's ``label``), its place in the
    arm's drawn order (a study's ``trial_index``) and the Tune result of the trial that ran it
    (None where none did: ``--final``, or a point a spent budget left untried)."""

    params: dict[str, Any]
    seed: int | None = None
    label: str | None = None
    index: int | None = None
    result: Any = None


def entries(stage: str, points: list[dict[str, Any]] | None = None, results=None) -> list[Entry]:
    """A stage's trials: its ``points`` in order (each a config with its ``label``; a
    re-evaluation's with its ``seed``) with the Tune result that ran each, where one did; or,
    for a searcher that drew its own configurations (no points), one per Tune result in
    Tune's order."""
    results, seeded = list(results or []), stage == "reeval"
    if points is None:
        return [_entry(_config(r), seeded, r) for r in results]
    by_point = {_key(_config(r)): r for r in results}
    return [_entry(dict(p), seeded, by_point.get(_key(p)), k) for k, p in enumerate(points)]


def _config(result) -> dict[str, Any]:
    config = result.config or {}
    return dict(config.get("final", config))


def _key(point: dict[str, Any]) -> str:
    return json.dumps(point, sort_keys=True, default=str)


def _entry(point: dict[str, Any], seeded: bool, result=None, index: int | None = None) -> Entry:
    label, seed = point.pop("label", None), point.pop("seed", None) if seeded else None
    return Entry(point, seed, label, index, result)


def build(
    spec: WorkloadSpec,
    stage: str,
    trials: list[Entry],
    *,
    searcher: str,
    objective: str,
    missing: str = "missing",
) -> pd.DataFrame:
    """One row per trial of a sweep's or a study's ``stage``: what the runs table recorded
    for its run (the record), else what its trial reported, else ``missing`` (a point that
    never ran). In a budgeted search, a point no trial ran (its arm's budget was spent) tried no
    configuration and has no row."""
    runs, per_round = _safe_runs(spec.results_dir), spec.run_config().fl.clients_per_round
    budgeted = stage == "search" and spec.search.client_rounds
    rows = []
    for e in trials:
        run_id = _run_id(spec, e.params, e.seed)
        rec = _recorded(e.result, run_id, runs)
        if budgeted and (rec is None or rec.get("round_reached") is None):
            continue  # no run: the budget was spent before it started
        rec = rec or {"status": missing}
        reached = rec.get("round_reached")
        extra = {} if e.label is None else {"arm": e.label}
        if e.index is not None and stage == "search":
            extra["trial_index"] = e.index
        rows.append(
            trial_row(
                sweep=spec.name,
                stage=stage,
                run_id=run_id,
                searcher=searcher,
                objective=objective,
                params=e.params,
                round_reached=reached,
                client_rounds=None if reached is None else int(reached) * per_round,
                seed=e.seed,
                **extra,
                **{k: v for k, v in rec.items() if k != "round_reached"},
            )
        )
    return pd.DataFrame(rows)


def _run_id(spec: WorkloadSpec, params: dict[str, Any], seed: int | None) -> str | None:
    try:
        return spec.run_config(params if seed is None else {**params, "seed": seed}).run_id
    except Exception:  # noqa: BLE001 - a bad parameter combination is reported as an error
        return None


def score(df: pd.DataFrame, spec: WorkloadSpec, reference: float | None) -> pd.DataFrame:
    """A sweep's rows with the searcher's objective value (``reference``: the retention
    objective's reference accuracy) and Pareto membership over the finished rows."""
    from .trainable import objective_value

    df = df.copy()
    if not len(df):
        return df
    s = spec.search
    df["reference_val_acc"] = reference
    df["objective_value"] = [
        objective_value(s.objective, v, saving, reference, s.retention)
        if v is not None and not math.isnan(v)
        else None
        for v, saving in zip(df["val_acc"], df["cum_saving_restricted"], strict=True)
    ]
    ok = df["status"].eq("finished") & df["val_acc"].notna()
    if ok.any():
        df.loc[ok, "on_pareto_front"] = pareto_front(df[ok]).to_numpy()
    return df


def _recorded(result, run_id: str | None, runs) -> dict[str, Any] | None:
    """(status, trial id, validation accuracy, bytes, saving, round reached, error) of a
    trial: the runs table's record where it has the run, else what the trial reported; a
    trial that raised or that a user error ended is ``error`` — unless the runs table records
    its run finished (Tune's error came after the run's end, e.g. restoring a trial whose
    run finished after Tune's last saved state from a checkpoint pruned since: the run, its
    rows and its values are whole); None: neither."""
    metrics = (result.metrics or {}) if result is not None else {}
    failed = result is not None and (result.error is not None or metrics.get("status") == "error")
    error = _error_text(result.error) if failed and result.error else metrics.get("error")
    rec, finished = None, False
    if run_id is not None and runs is not None and run_id in runs.index:
        r = runs.loc[run_id]
        finished = str(r["status"]) == "finished"
        # the runs table is the record: a run that diverged before its first evaluation has
        # no validation accuracy there, whatever Tune was told to keep its searcher going
        rec = {
            "status": str(r["status"]),
            "trial_id": r["trial_id"],
            "val_acc": _num(r["final_val_acc"]),
            "cum_up_restricted": _num(r["cum_up_restricted"]),
            "cum_saving_restricted": _num(r["cum_saving_restricted"]),
            "round_reached": int(r["rounds_completed"]),
            "error": r["error"] if finished else error or r["error"],
        }
    elif result is not None:
        rec = {
            "status": str(metrics.get("status", "unknown")),
            "val_acc": metrics.get("val_acc"),
            "cum_up_restricted": metrics.get("cum_up_restricted"),
            "cum_saving_restricted": metrics.get("cum_saving_restricted"),
            "round_reached": metrics.get("round"),
            "error": error,
        }
    if rec is not None and result is not None:
        rec["trial_id"] = metrics.get("trial_id")
        if failed and not finished:
            rec["status"] = "error"
    return rec


def _error_text(err: BaseException) -> str:
    """One line naming what failed in a trial: the original exception, not Ray's wrapper."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException) and cause is not err:
        return f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}"
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in str(err).splitlines()]
    lines = [ln for ln in lines if ln]
    return lines[-1] if lines else type(err).__name__


def _num(v: Any) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


def _safe_runs(results_dir: str) -> pd.DataFrame | None:
    try:
        runs = read_table(results_dir, "runs")
    except Exception:  # noqa: BLE001 - no runs yet
        return None
    return runs.drop_duplicates("run_id", keep="last").set_index("run_id")
