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
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..results import read_table, rows_to_table
from ..results.storage import Storage, join

if TYPE_CHECKING:
    from .spec import SweepSpec


def trial_row(
    *,
    sweep: str,
    stage: str,
    run_id: str | None,
    searcher: str,
    objective: str,
    params: dict[str, Any],
    status: str,
    trial_id: str | None = None,
    val_acc: float | None = None,
    cum_up_restricted: float | None = None,
    cum_saving_restricted: float | None = None,
    objective_value: float | None = None,
    reference_val_acc: float | None = None,
    on_pareto_front: bool = False,
    selected: bool = False,
    error: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One trials-table row (``extra``: a study's ``arm``, ``trial_index``, ``selected_for``)."""
    return {
        "sweep": sweep,
        "stage": stage,
        "trial_id": trial_id,
        "run_id": run_id,
        "searcher": searcher,
        "objective": objective,
        "status": status,
        "val_acc": val_acc,
        "cum_up_restricted": cum_up_restricted,
        "cum_saving_restricted": cum_saving_restricted,
        "objective_value": objective_value,
        "reference_val_acc": reference_val_acc,
        "on_pareto_front": on_pareto_front,
        "selected": selected,
        "params_json": json.dumps(params, sort_keys=True, default=str),
        "error": error,
        **extra,
    }


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


def search_trials(
    spec: SweepSpec, results, reference: float | None, stage: str = "search"
) -> pd.DataFrame:
    """One row per Tune result of a sweep stage (``search`` or ``reeval``), the runs table's
    record taking precedence over what the trial reported; Pareto membership over the finished
    rows."""
    from .trainable import objective_value

    runs, per_round = _safe_runs(spec.results_dir), spec.run_config().fl.clients_per_round
    rows = []
    for r in results:
        metrics = r.metrics or {}
        if metrics.get("status") == "budget spent":
            continue  # started after the client-round budget was spent: no configuration tried
        params = dict((r.config or {}).get("final", r.config or {}))
        seed = params.pop("seed", None) if stage == "reeval" else None
        try:
            run_id = spec.run_config(params if seed is None else {**params, "seed": seed}).run_id
        except Exception:  # noqa: BLE001 - a bad parameter combination is reported as an error
            run_id = None
        status, val, saving, reached = _recorded(r, metrics, run_id, runs)
        known = val is not None and not math.isnan(val)
        value = objective_value(
            spec.search.objective, val, saving, reference, spec.search.retention
        )
        rows.append(
            trial_row(
                sweep=spec.name,
                stage=stage,
                trial_id=metrics.get("trial_id"),
                run_id=run_id,
                searcher=spec.search.searcher,
                objective=spec.search.objective,
                params=params,
                status=str(status),
                val_acc=val,
                cum_up_restricted=metrics.get("cum_up_restricted"),
                cum_saving_restricted=saving,
                reference_val_acc=reference,
                objective_value=value if known else None,
                error=_error_text(r.error) if r.error else metrics.get("error"),
                round_reached=reached,
                client_rounds=None if reached is None else int(reached) * per_round,
                seed=seed,
            )
        )
    df = pd.DataFrame(rows)
    if len(df):
        ok = df["status"].eq("finished") & df["val_acc"].notna()
        if ok.any():
            df.loc[ok, "on_pareto_front"] = pareto_front(df[ok]).to_numpy()
    return df


def _recorded(result, metrics: dict, run_id: str | None, runs) -> tuple:
    """(status, val_acc, saving, round reached) of a trial: the runs table's record where it has
    the run, else what the trial reported; a trial that raised or that a user error ended is
    ``error`` either way."""
    # a trial that raised (Tune's error), or one a user error ended (its last report)
    failed = result.error is not None or metrics.get("status") == "error"
    status = "error" if failed else metrics.get("status", "unknown")
    val, saving = metrics.get("val_acc"), metrics.get("cum_saving_restricted")
    reached = metrics.get("round")
    if run_id is not None and runs is not None and run_id in runs.index:
        # the runs table is the record: a run that diverged before its first evaluation has
        # no validation accuracy there (NaN), whatever Tune was told to keep its searcher going
        status = runs.loc[run_id, "status"] if not failed else "error"
        val = _float_or_nan(runs.loc[run_id, "final_val_acc"])
        saving = _float_or_nan(runs.loc[run_id, "cum_saving_restricted"])
        reached = int(runs.loc[run_id, "rounds_completed"])
    return status, val, saving, reached


def _error_text(err: BaseException) -> str:
    """One line naming what failed in a trial: the original exception, not Ray's wrapper."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException) and cause is not err:
        return f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}"
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in str(err).splitlines()]
    lines = [ln for ln in lines if ln]
    return lines[-1] if lines else type(err).__name__


def _float_or_nan(v: Any) -> float:
    return float("nan") if v is None or pd.isna(v) else float(v)


def _safe_runs(results_dir: str) -> pd.DataFrame | None:
    try:
        runs = read_table(results_dir, "runs")
    except Exception:  # noqa: BLE001 - no runs yet
        return None
    return runs.drop_duplicates("run_id", keep="last").set_index("run_id")
