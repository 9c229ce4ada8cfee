"""The paper-row table, the gate diagnostics and the analysis notebook over a protocol's Parquet."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import small_config

from analysis import load
from analysis.load import Results
from analysis.paper import arm_name, gate_table, paper_table, with_protocol_arms

# the tests that share the module's protocol runs in one xdist worker: built once, not per worker
pytestmark = pytest.mark.xdist_group("paper_protocol")
ROOT = Path(__file__).resolve().parents[2]
DG = {"max_age": 2, "quota": 0.25}
ARMS = [  # (overrides, seeds): the protocol's three arms and its two controls, on digits
    ({"method": {"name": "fedavg", "topk_ratio": 0.2}}, (101, 202)),
    ({"method": {"name": "fedprox", "topk_ratio": 0.2}}, (101, 202)),
    ({"method": {"name": "dg_fedreuse", "topk_ratio": 0.2, "dg": DG}}, (101, 202)),
    ({"method": {"name": "dg_fedreuse", "topk_ratio": 0.2, "dg": {**DG, "gate": "off"}}}, (101,)),
    ({"method": {"name": "dg_fedreuse", "topk_ratio": 1.0, "dg": DG}}, (101,)),
]


@pytest.fixture(scope="module")
def protocol(tmp_path_factory):
    from reuse_ray.engine import RunHooks
    from reuse_ray.runner import run_fl

    tmp = tmp_path_factory.mktemp("protocol")
    for overrides, seeds in ARMS:
        for seed in seeds:
            cfg = small_config(
                tmp,
                seed=seed,
                fl={"num_clients": 8, "clients_per_round": 4, "rounds": 4, "eval_every": 2},
                **overrides,
            )
            run_fl(cfg, hooks=RunHooks(stage="final", tensorboard=False))
    return tmp / "results"


@pytest.mark.slow
def test_paper_table_is_the_runs_at_the_final_round(protocol):
    res = load(protocol)
    table = paper_table(res).set_index("arm")
    assert list(table.index) == [
        "FedAvg + Top-K",
        "FedProx + Top-K",
        "DG-FedReuse",
        "DG-FedReuse, gate off",
        "DG-FedReuse, reuse only (r = 1)",
    ]
    runs = with_protocol_arms(res).runs.set_index(["arm", "seed"])
    acc = runs["test_acc"] * 100
    fedavg, dg = acc.loc["FedAvg + Top-K"], acc.loc["DG-FedReuse"]
    want = f"{fedavg.mean():.2f} ± {fedavg.std(ddof=1):.2f}"
    assert table.loc["FedAvg + Top-K", "test acc @ 4 (%)"] == want
    diff = (dg - fedavg).dropna()
    want = f"{diff.mean():.2f} ± {diff.std(ddof=1):.2f} (n = 2)"
    assert table.loc["DG-FedReuse", "Δ test acc vs FedAvg + Top-K (pp)"] == want
    # one seed: no SD; Top-K's restricted saving is 1 − (1/32 + r)·… as the ledger says
    assert "±" not in table.loc["DG-FedReuse, gate off", "test acc @ 4 (%)"]
    saving = res.rounds[res.rounds["round"] == 4].set_index("run_id")["cum_saving_restricted"]
    fedavg_runs = res.runs[res.runs["method"] == "fedavg"]["run_id"]
    expect = 100 * saving.loc[fedavg_runs]
    assert table.loc["FedAvg + Top-K", "uplink saving (%)"] == (
        f"{expect.mean():.2f} ± {expect.std(ddof=1):.2f}"
    )
    assert table.loc["DG-FedReuse", "paper: uplink saving"] == "83.36 – 85.42 %"


def test_arm_names_come_from_the_configuration():
    def run(method, r, gate="proxy"):
        return pd.Series({"method": method, "cfg.method.topk_ratio": r, "cfg.method.dg.gate": gate})

    assert arm_name(run("fedavg", 0.2)) == "FedAvg + Top-K"
    assert arm_name(run("fedavg", 1.0)) == "FedAvg"
    assert arm_name(run("dg_fedreuse", 0.2, "off")) == "DG-FedReuse, gate off"
    assert arm_name(run("dg_fedreuse", 1.0, "off")) == "DG-FedReuse, reuse only (r = 1)"
    assert arm_name(run("dg_fedreuse", 0.2, "random")) == "DG-FedReuse, gate random"


def test_gate_table_counts_each_kind_of_decision():
    """Ten hand-made events with S = 3: 2 first visits, 2 at the age cap, 6 gated (scores
    against τ = 0.5: 0.9 and 0.6 fire, 0.1, 0.2, 0.3 and 0.4 do not), one of the unfired
    promoted by the quota; the 3 other unfired are reused."""
    ev = pd.DataFrame(
        {
            "run_id": ["a"] * 10,
            "round": range(10),
            "age": [None, None, 3, 4, 1, 1, 2, 1, 2, 1],
            "gate_score": [1.0, 1.0, None, None, 0.9, 0.6, 0.1, 0.2, 0.3, 0.4],
            "tau": [0.5] * 10,
            "promoted": [False] * 6 + [True, False, False, False],
            "decision": ["fresh"] * 7 + ["reused"] * 3,
        }
    )
    runs = pd.DataFrame(
        {
            "run_id": ["a"],
            "method": ["dg_fedreuse"],
            "seed": [1],
            "cfg.method.topk_ratio": [0.2],
            "cfg.method.dg.gate": ["proxy"],
            "cfg.method.dg.max_age": [3],
        }
    )
    res = Results(runs, pd.DataFrame({"run_id": ["a"]}), ev, pd.DataFrame())
    row = gate_table(res).iloc[0]
    assert row["arm"] == "DG-FedReuse" and row["client events"] == 10
    assert row["first visits (%)"] == "20.0" and row["age cap (%)"] == "20.0"
    assert row["gated (%)"] == "60.0" and row["gate fired (% of gated)"] == "33.3"
    assert row["quota promoted (%)"] == "10.0" and row["reused (%)"] == "30.0"
    assert row["D of gated (mean)"] == f"{np.mean([0.9, 0.6, 0.1, 0.2, 0.3, 0.4]):.3f}"


@pytest.mark.slow
def test_the_notebook_runs_over_a_protocols_results(protocol, monkeypatch):
    import nbclient
    import nbformat

    nb = nbformat.read(ROOT / "examples" / "analysis.ipynb", as_version=4)
    monkeypatch.setenv("REUSE_RAY_NOTEBOOK_RESULTS", str(protocol))
    nbclient.NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "examples")}},
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "\n".join(str(o.get("data", {}).get("text/plain", o.get("text", ""))) for o in outputs)
    assert "DG-FedReuse, reuse only (r = 1)" in text and "8 finished runs" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)


@pytest.mark.slow  # the module's protocol runs (10 s) are the full suite's
def test_resumed_runs_are_named_from_their_attempts_or_inferred_from_their_clocks(protocol):
    """A runs row that records ``attempts`` says so; one written before that column existed is
    inferred resumed when its rounds' own times exceed its ``wall_s``."""
    from analysis.paper import attempts_table, run_attempts

    res = load(protocol)
    assert run_attempts(res)["attempts"].eq(1).all()  # every run recorded, none resumed
    runs = res.runs.copy()
    first, second = runs.index[:2]
    runs.loc[first, "attempts"] = 3
    runs.loc[second, "attempts"] = None  # an older row: only its clocks tell
    spent = res.rounds.groupby("run_id")["round_wall_s"].sum()[runs.loc[second, "run_id"]]
    runs.loc[second, "wall_s"] = spent / 2
    got = run_attempts(Results(runs, res.rounds, res.client_events, res.trials))
    got = got.set_index("run_id")
    assert got.loc[runs.loc[first, "run_id"], "attempts"] == 3
    assert not got.loc[runs.loc[first, "run_id"], "inferred"]
    assert got.loc[runs.loc[second, "run_id"], "attempts"] == 2
    assert got.loc[runs.loc[second, "run_id"], "inferred"]
    table = attempts_table(Results(runs, res.rounds, res.client_events, res.trials))
    assert len(table) == 2 and table["attempts"].str.startswith("≥ 2").sum() == 1


def test_the_results_page_names_the_shipped_paper_rows_resumed_runs():
    from analysis.paper import attempts_table, markdown

    res = load(ROOT / "results" / "paper_fashionmnist")
    table = markdown(attempts_table(res))
    assert "FedProx + Top-K, seed 303" in table and "gate off, seed 101" in table
    assert table in (ROOT / "docs" / "results.md").read_text()
