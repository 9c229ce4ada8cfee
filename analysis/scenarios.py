"""One study asked in two (or more) scenarios, side by side: per uplink level and ledger, each
arm's reading in each scenario — its choice's final runs' test accuracy at the level (mean ± SD
over the runs read), its paired difference to that scenario's leader (the arm most accurate on
the final stage's validation, t 95 % interval) and its rank — so a reader sees whether the
answer to "who is most accurate at equal uplink?" moves when participation is skewed.

``python -m analysis.scenarios NAME=FOLDER NAME=FOLDER [--ledger restricted|measured|both]``
prints the table as Markdown with one line per level naming each scenario's leader. Every
number comes from :func:`analysis.frontier.readings_table` of each study, unchanged.
"""

from __future__ import annotations

import argparse
import sys
import warnings

import pandas as pd

from reuse_ray.results.reader import read_metadata

from .frontier import readings_table
from .load import load
from .tables import markdown

KEYS = ["workload", "level", "arm"]


def scenario_table(readings: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per workload, level and arm (the first scenario's order: its leader first), for each
    scenario NAME of ``readings`` (NAME -> its readings table): ``NAME: test acc``,
    ``NAME: Δ vs leader`` (empty for the leader itself), ``NAME: rank`` (1 = the leader; ``-``
    where the arm has no reading there: ``unable``, with why, or no choice) and, from a
    readings table that has it, ``NAME: verdict`` (within, behind, …). Levels and arms of
    either scenario are kept."""
    out, order = None, []
    for name, table in readings.items():
        order += [tuple(k) for k in table[KEYS].itertuples(index=False)]
        read = table["label"].fillna("").ne("")  # an unable row has no label and no rank
        t = table.assign(rank=table[read].groupby(["workload", "level"]).cumcount() + 1)
        verdict = ["verdict"] if "verdict" in t else []  # readings_table's, where it has one
        t = t[[*KEYS, "test acc", "Δ test acc vs the leader", "rank", *verdict]].rename(
            columns={
                "test acc": f"{name}: test acc",
                "Δ test acc vs the leader": f"{name}: Δ vs leader",
                "rank": f"{name}: rank",
                "verdict": f"{name}: verdict",
            }
        )
        out = t if out is None else out.merge(t, on=KEYS, how="outer", sort=False)
    if out is None:
        return pd.DataFrame(columns=KEYS)
    # the first scenario's order (leader first, unable last), then what only others hold;
    # levels in the order the studies list them
    place = {k: j for j, k in reversed(list(enumerate(order)))}
    levels = {lv: j for j, lv in reversed(list(enumerate(k[:2] for k in order)))}
    key = [(levels[(w, lv)], place[(w, lv, a)]) for w, lv, a in out[KEYS].itertuples(index=False)]
    out = out.iloc[sorted(range(len(out)), key=key.__getitem__)]
    for name in readings:
        out[f"{name}: rank"] = [
            "-" if pd.isna(v) else str(int(v)) for v in out[f"{name}: rank"].tolist()
        ]
    return out.fillna("").reset_index(drop=True)


def leaders(readings: dict[str, pd.DataFrame]) -> list[str]:
    """One line per workload and level: each scenario's leader."""
    first: dict[tuple, dict[str, str]] = {}
    for name, table in readings.items():
        for (w, level), g in table.groupby(["workload", "level"], sort=False):
            read = g[g["label"].fillna("").ne("")]
            if len(read):
                first.setdefault((w, level), {})[name] = str(read["arm"].iloc[0])
    return [
        f"- {w}, {level}: " + "; ".join(f"{n} — {arm}" for n, arm in got.items())
        for (w, level), got in first.items()
    ]


def study_readings(folder: str) -> pd.DataFrame:
    """A study folder's readings table (its final runs read at each level)."""
    study = read_metadata(folder)
    if not study:
        raise ValueError(f"{folder}: holds no study (no study.json); allowed: a study's folder")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return readings_table(load([folder]), study)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.scenarios", description=__doc__)
    p.add_argument("scenarios", nargs="+", help="NAME=FOLDER, one per scenario")
    p.add_argument("--ledger", choices=("restricted", "measured", "both"), default="both")
    args = p.parse_args(argv)
    readings = {}
    for item in args.scenarios:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            print(f"analysis.scenarios: {item!r}: allowed: NAME=FOLDER", file=sys.stderr)
            return 2
        try:
            t = study_readings(folder)
        except ValueError as err:
            print(f"analysis.scenarios: {err}", file=sys.stderr)
            return 2
        if args.ledger != "both":
            measured = t["level"].str.endswith("-measured")
            t = t[measured if args.ledger == "measured" else ~measured]
        readings[name] = t
    print("\n".join(leaders(readings)) + "\n")
    print(markdown(scenario_table(readings)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
