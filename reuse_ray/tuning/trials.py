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
from typing import Any

import pandas as pd

from ..results import rows_to_table
from ..results.storage import Storage, join


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
