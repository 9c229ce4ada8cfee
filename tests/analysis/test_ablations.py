"""An ablation compared as an ablation: paired by seed against the arm it ablates, at the final
round and at a level, by hand on a tiny study."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.ablations import ablation_table
from analysis.load import Results

P = {"method.name": "dg_fedreuse", "train.lr": 0.05}
STUDY = {
    "name": "s",
    "choices": {
        "w": {
            "arms": {
                "dg": {"val_acc": {"label": "dg", "params": P},
                       "up10": {"label": "dg@up10", "params": {**P, "train.lr": 0.1}}},
                "off": {"val_acc": {"label": "off", "params": {**P, "method.dg.gate": "off"},
                                    "ablation_of": "dg"},
                        "up10": {"label": "off@up10", "ablation_of": "dg",
                                 "params": {**P, "train.lr": 0.1, "method.dg.gate": "off"}}},
                "tuned": {"val_acc": {"label": "tuned", "params": P}},  # not an ablation
            }
        }
    },
}  # fmt: skip
SEEDS = (1, 2, 3, 4, 5)


def _results() -> Results:
    acc = {  # final-round test accuracy per seed
        "dg": [0.80, 0.81, 0.82, 0.83, 0.84],
        "off": [0.79, 0.81, 0.80, 0.82, 0.84],
        "dg@up10": [0.70] * 5,
        "off@up10": [0.72, 0.71, 0.72, 0.73, 0.72],
        "tuned": [0.9] * 5,
    }
    runs = pd.DataFrame(
        [
            {"run_id": f"{lab}-{s}", "label": lab, "seed": s, "stage": "final", "sweep": "s-w",
             "status": "finished", "test_acc": a, "cum_up_restricted": 10e6 + s * 1e6}
            for lab, values in acc.items() for s, a in zip(SEEDS, values, strict=True)
        ]
    )  # fmt: skip
    levels = pd.DataFrame(
        [
            {"run_id": f"{lab}-{s}", "seed": s, "ledger": "restricted", "level": 0.1,
             "status": "crossed", "test_acc": a - 0.1, "cum_up": (2e6 if lab == "off@up10"
             else 3e6)}
            for lab in ("dg@up10", "off@up10") for s, a in zip(SEEDS, acc[lab], strict=True)
        ]
    )  # fmt: skip
    return Results(runs, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), levels=levels)


def test_an_ablation_is_paired_by_seed_with_the_arm_it_ablates():
    table = ablation_table(_results(), STUDY).set_index("objective")
    assert list(table["ablation"]) == ["off", "off@up10"]  # the tuned arm is no ablation
    top = table.loc["val_acc"]
    assert top["of"] == "dg" and top["changes"] == "method.dg.gate: off" and top["pairs"] == 5
    d = np.array([-0.01, 0.0, -0.02, -0.01, 0.0])  # off - dg, seed by seed
    half = 2.776445 * d.std(ddof=1) / np.sqrt(5)  # t_{4, 0.975}
    assert top["Δ test acc"] == f"{d.mean():+.3f} [{d.mean() - half:+.3f}, {d.mean() + half:+.3f}]"
    assert top["Δ uplink MB"] == "+0.00 [+0.00, +0.00]"
    lv = table.loc["up10"]  # read at the level: test accuracy there, bytes there
    assert lv["test acc (ablation)"] == pytest.approx(0.62) and lv["of"] == "dg@up10"
    assert lv["Δ test acc"].startswith("+0.020 [") and lv["Δ uplink MB"].startswith("-1.00")
