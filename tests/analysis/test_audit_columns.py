"""What an audit of the shipped Fashion-MNIST study asked the report to show, checked against
the study's own Parquet by hand: the reuse shares, failures counted at chance, the measured
ledger against each level, censored runs as censored."""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd
import pytest

from analysis.frontier import bytes_to_reference_target, level_table
from analysis.load import load
from analysis.tables import decision_shares, leaderboard
from reuse_ray.results.reader import read_metadata

STUDY = Path(__file__).resolve().parents[2] / "results" / "study_fashionmnist"


# the module fixture is built once: every test here on one xdist worker (conftest.py)
pytestmark = pytest.mark.xdist_group("shipped_study")


@pytest.fixture(scope="module")
def shipped():
    return load(STUDY), read_metadata(str(STUDY))


@functools.cache
def _runs() -> pd.DataFrame:
    """The shipped study's runs table, read once for the module (a read of its many files
    takes seconds)."""
    return pd.read_parquet(STUDY / "runs")


def _finals(label: str) -> pd.DataFrame:
    runs = _runs()
    return runs[runs["stage"].eq("final") & runs["label"].eq(label)]


def test_the_reuse_shares_name_a_choice_that_reuses_nothing(shipped):
    res, _ = shipped
    ev = pd.read_parquet(STUDY / "client_events", columns=["run_id", "decision", "promoted"])
    up10 = _finals("dg_fedreuse@up10")
    assert decision_shares(ev, up10["run_id"]) == "all fresh"
    off = _finals("dg_gate_off@up10")
    mine = ev[ev["run_id"].isin(off["run_id"])]
    reused = 100 * mine["decision"].eq("reused").mean()
    text = decision_shares(ev, off["run_id"])
    assert f"reused {reused:.1f} %" in text and "promoted by the quota" in text
    board = leaderboard(res).set_index("arm")["client decisions"]
    assert board["dg_fedreuse@up10"] == "all fresh" and board["laq@up10"].startswith("lazy")


def test_diverged_runs_count_at_chance_and_the_measured_ledger_is_checked(shipped):
    res, study = shipped
    table = level_table(res, study)
    row = table[(table["level"] == "up10") & (table["label"] == "fedluar@up10")].iloc[0]
    finished = _finals("fedluar@up10")
    ok = finished[finished["status"].eq("finished")]["test_acc"]
    assert row["diverged"] == 2 and len(ok) == 3
    # Fashion-MNIST has 10 classes: (Σ finished + 2 × 0.1) / 5
    assert row["with diverged at chance"] == f"{(ok.sum() + 0.2) / 5:.3f}"
    dg = table[(table["level"] == "up10") & (table["label"] == "dg_fedreuse@up10")].iloc[0]
    assert dg["over in measured"] == "5 of 5"  # 30.2 MB measured against a 29.5 MB limit
    # the leader of a level is the most accurate on the final stage's validation
    for _, g in table[table["label"].ne("")].groupby("level"):
        vals = {lab: _finals(lab)["final_val_acc"].mean() for lab in g["label"]}
        assert g.iloc[0]["label"] == max(vals, key=vals.get)


def test_censored_labels_show_a_lower_bound_and_no_interval(shipped):
    res, study = shipped
    btt = bytes_to_reference_target(res, study).set_index("label")
    laq = btt.loc["laq@up10"]
    assert laq["censored"] == 5 and laq["uplink to target MB"].startswith("≥ ")
    assert laq["Δ MB vs topk_fedavg"] == "censored"
    assert isinstance(btt.loc["dg_fedreuse@up10", "uplink to target MB"], float)


def test_the_cost_and_the_convergence_are_measured_from_the_record(shipped):
    from analysis.studies import convergence_line, cost_line

    res, study = shipped
    runs = _runs()
    rounds = pd.read_parquet(STUDY / "rounds")
    core_h = runs["wall_s"].fillna(0).sum() / 3600  # one CPU a trial
    line = cost_line(study, res)
    assert "calendar span 16.1 h" in line and f"runs {core_h:.1f} core-hours" in line
    assert f"({len(runs)} runs" in line and line.count(" at ") == len(study["attempts"])
    ref = runs[runs["stage"].eq("final") & runs["label"].eq("fedavg")]["run_id"]
    r = rounds[rounds["run_id"].isin(ref)].groupby("round")["val_acc"].mean()
    gain = 100 * (r[40] - r[30])  # the last quarter of 40 rounds: from round 30
    assert f"gains {gain:+.2f} pp" in convergence_line(res, study) and "not converged" in (
        convergence_line(res, study)
    )
