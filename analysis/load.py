"""Loading results directories into pandas, with clear errors for missing or corrupt files."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from reuse_ray.errors import UserError
from reuse_ray.results.reader import ResultsError, is_results_root, read_table_if_any

TABLES = ("runs", "rounds", "client_events", "trials", "levels")


class AnalysisError(UserError):
    """A results location is missing, empty or holds a file that is not valid Parquet."""


@dataclass
class Results:
    """The tables of one or more results directories; unfinished runs excluded by default."""

    runs: pd.DataFrame
    rounds: pd.DataFrame
    client_events: pd.DataFrame
    trials: pd.DataFrame
    excluded: int = 0  # runs left out because they crashed, diverged or were interrupted
    # their runs rows (status says which), for tables that must say what did not finish
    excluded_runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    # every run's readings at its uplink levels (the levels table), unfinished runs' included:
    # their status says which levels they never read
    levels: pd.DataFrame = field(default_factory=pd.DataFrame)


def load(locations: str | Path | list[str | Path], include_unfinished: bool = False) -> Results:
    """Load one or many results directories (a run's, a sweep's) into one :class:`Results`."""
    if isinstance(locations, str | Path):
        locations = [locations]
    frames: dict[str, list[pd.DataFrame]] = {t: [] for t in TABLES}
    for loc in locations:
        if not is_results_root(loc):
            raise AnalysisError(f"no results directory at {loc}")
        try:
            got = {t: read_table_if_any(loc, t) for t in TABLES}
        except ResultsError as err:
            raise AnalysisError(str(err)) from None
        if got["runs"] is None:
            raise AnalysisError(f"{loc} holds no runs table (expected {loc}/runs/...)")
        for t, df in got.items():
            if df is not None:
                frames[t].append(df)
    out = {t: pd.concat(v, ignore_index=True) if v else pd.DataFrame() for t, v in frames.items()}
    runs = out["runs"].drop_duplicates("run_id", keep="last")
    excluded, bad = 0, runs.iloc[:0]
    if not include_unfinished:
        bad = runs[runs["status"] != "finished"]
        excluded = len(bad)
        if excluded:
            counts = bad["status"].value_counts().to_dict()
            warnings.warn(
                f"excluded {excluded} unfinished runs {counts}; pass "
                "include_unfinished=True to keep them",
                stacklevel=2,
            )
        keep = set(runs.loc[runs["status"] == "finished", "run_id"])
        runs = runs[runs["run_id"].isin(keep)]
        for t in ("rounds", "client_events"):
            if len(out[t]):
                out[t] = out[t][out[t]["run_id"].isin(keep)]
    runs = runs.assign(arm=_arm(runs))
    arms = runs.set_index("run_id")["arm"]
    for t in ("rounds", "client_events"):
        if len(out[t]):
            out[t] = out[t].assign(arm=out[t]["run_id"].map(arms))
    return Results(
        runs.reset_index(drop=True),
        out["rounds"].reset_index(drop=True),
        out["client_events"].reset_index(drop=True),
        out["trials"],
        excluded,
        bad.reset_index(drop=True),
        out["levels"].reset_index(drop=True),
    )


IGNORED_CFG = ("cfg.seed", "cfg.results_dir", "cfg.data.root")


def _short(v) -> str:
    """A config value in an arm label: floats to 3 significant digits."""
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _arm(runs: pd.DataFrame) -> pd.Series:
    """What a comparison groups by: the method, the final-stage label when there is one (a
    study's arm name alone), and the config fields that tell apart runs sharing both on one
    dataset and stage (seeds aside), e.g. ``dg_fedreuse (method.dg.gate=off)``."""
    arm = runs["method"].astype(str)
    if "label" in runs:
        label = runs["label"].astype(str)
        # a sweep's final-stage labels (selected-k, compare-k) qualify the method; a study's
        # labels are arm names and stand alone
        generic = label.str.match(r"^(selected|compare)-\d+$")
        arm = arm.where(runs["label"].isna(), label.where(~generic, arm + " [" + label + "]"))
    cfg_cols = [
        c
        for c in runs.columns
        if c.startswith("cfg.") and c not in IGNORED_CFG and not c.startswith("cfg.engine.")
    ]
    out = arm.copy()
    # runs of one arm on another dataset or in another stage are told apart by those columns
    keys = [arm] + [runs[c].astype(str) for c in ("dataset", "stage") if c in runs]
    group = arm.groupby(keys).ngroup()
    # every group's distinct values per column, in one pass over the table
    counts = runs[cfg_cols].astype(str).groupby(group).nunique()
    for g, n in counts.iterrows():
        idx = group.index[group == g]
        varying = [c for c in cfg_cols if n[c] > 1]
        if varying:
            suffix = runs.loc[idx, varying].apply(
                lambda r: ", ".join(
                    f"{c[4:].removeprefix('method.')}={_short(v)}" for c, v in r.items()
                ),
                axis=1,
            )
            out.loc[idx] = arm.loc[idx] + " (" + suffix + ")"
    return out
