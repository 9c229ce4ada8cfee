"""One selection rule for a sweep's searched arm and every arm of a study (design:
Validation-only search), on validation metrics only.

Each finished search row carries two selection values: ``sel_val`` and ``sel_saving``, its own
validation accuracy and restricted uplink saving, or — for a candidate robust selection
re-evaluated on further search seeds — their means over its search run and one run per seed (a
rerun that did not finish counts as :data:`.reeval.PENALTY` accuracy and no saving: a
configuration that fails again loses). Then, per arm (a sweep has one) and objective:

* ``val_acc``: the highest ``sel_val``;
* ``retention``: among the rows whose ``sel_val`` keeps the bar (``retention`` × the reference's
  validation accuracy: a sweep's reference run, a study's reference arm's best), the largest
  ``sel_saving``, then the highest ``sel_val``. A sweep's searcher must choose even where no row
  keeps the bar (``fallback``): those rows follow, most accurate first — the order of the
  objective value its searcher maximised (:func:`.trainable.objective_value`).

Ties go to the configuration drawn first. With robust selection only its candidates are chosen
from: per arm and objective the best ``reeval_top`` distinct configurations by the same rule on
the search seed alone.
"""

from __future__ import annotations

import pandas as pd

from .reeval import PENALTY, reruns, seed_mean


def values(trials: pd.DataFrame, seeds: tuple[int, ...]) -> pd.DataFrame:
    """``trials`` with ``sel_val``, ``sel_saving`` and ``selection_mean`` (the candidates'
    mean validation accuracy over the search seed and ``seeds``; NaN for the rest)."""
    out = trials.copy()
    out["sel_val"] = out["val_acc"]
    out["sel_saving"] = out["cum_saving_restricted"]
    out["selection_mean"] = float("nan")
    if "stage" not in out or not out["stage"].eq("reeval").any():
        return out
    for idx, row in out[out["stage"].eq("search")].iterrows():
        if not len(reruns(out, row)) or row["status"] != "finished" or pd.isna(row["val_acc"]):
            continue
        mean = seed_mean(row, out, seeds, "val_acc", PENALTY)
        out.loc[idx, ["sel_val", "selection_mean"]] = mean
        out.loc[idx, "sel_saving"] = seed_mean(row, out, seeds, "cum_saving_restricted", 0.0)
    return out


def eligible(trials: pd.DataFrame) -> pd.DataFrame:
    """The search rows selection may choose: finished, with a validation accuracy."""
    return trials[
        trials["stage"].eq("search") & trials["status"].eq("finished") & trials["val_acc"].notna()
    ]


def ranking(
    rows: pd.DataFrame, objective: str, bar: float | None, fallback: bool = False
) -> pd.DataFrame:
    """``rows`` best first by ``objective`` (``val_acc`` or ``retention`` against ``bar``;
    None: no row keeps it); ``fallback`` ranks the rows below the bar after the others."""
    if objective == "val_acc":
        return _first_drawn(rows, ["sel_val"])
    keep = rows[rows["sel_val"] >= bar] if bar is not None else rows.iloc[:0]
    out = _first_drawn(keep, ["sel_saving", "sel_val"])
    if fallback:
        out = pd.concat([out, _first_drawn(rows.drop(keep.index), ["sel_val"])])
    return out


def _first_drawn(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Descending by ``keys``; ties in drawn order (a study's ``trial_index``, else the rows'
    order, which is Tune's)."""
    if "trial_index" in rows:
        return rows.sort_values([*keys, "trial_index"], ascending=[False] * len(keys) + [True])
    return rows.sort_values(keys, ascending=False, kind="stable")


def _groups(rows: pd.DataFrame):
    """(arm, its rows): a study's arms in drawn order, a sweep's one arm as None."""
    if "arm" not in rows or rows["arm"].isna().all():  # a sweep's table, as read back too
        return [(None, rows)]
    return list(rows.groupby("arm", sort=False))


def candidates(
    trials: pd.DataFrame, objectives, bar: float | None, top: int, fallback: bool = False
) -> pd.DataFrame:
    """The rows robust selection re-evaluates: per arm and objective the best ``top`` distinct
    configurations on the search seed."""
    ok = eligible(values(trials, ()))
    ok = ok.drop_duplicates([c for c in ("arm", "params_json") if c in ok])
    picks = [
        ranking(g, o, bar, fallback).drop_duplicates("params_json").head(top)
        for _, g in _groups(ok)
        for o in objectives
    ]
    out = pd.concat(picks) if picks else ok.head(0)
    return out.drop_duplicates([c for c in ("arm", "params_json") if c in out])


def choose(
    trials: pd.DataFrame,
    objectives,
    bar: float | None,
    top: int = 1,
    robust: bool = False,
    fallback: bool = False,
) -> dict:
    """arm -> {objective: its best ``top`` rows} over ``trials`` with selection values
    (:func:`values`); with ``robust``, candidates only. An objective no row of an arm meets
    (retention without ``fallback``) is left out; an arm with no finished row too."""
    ok = eligible(trials)
    if robust:
        ok = ok[ok["selection_mean"].notna()]
    out: dict = {}
    for arm, g in _groups(ok):
        got = {o: ranking(g, o, bar, fallback).head(top) for o in objectives}
        got = {o: rows for o, rows in got.items() if len(rows)}
        if got:
            out[arm] = got
    return out


__all__ = ["candidates", "choose", "eligible", "ranking", "values"]
