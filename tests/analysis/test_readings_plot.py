"""The figure of accuracy at matched uplink: its points by hand on a tiny study, and the file."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.load import Results
from analysis.readings_plot import reading_points, readings_plot

STUDY = {
    "name": "s",
    "choices": {
        "w": {
            "level_bytes": {"up10": 10e6, "up10-measured": 10e6},
            "arms": {
                "a": {"up10": {"label": "a@up10"}, "up10-measured": {"label": "a@up10"}},
                "b": {"up10": {"label": "b"}},  # b has no measured choice
            },
        }
    },
}


def _results() -> Results:
    runs = pd.DataFrame(
        [
            {"run_id": f"{lab}-{seed}", "label": lab, "seed": seed, "stage": "final",
             "sweep": "s-w", "status": "finished"}
            for lab in ("a@up10", "b") for seed in (1, 2, 3)
        ]
    )  # fmt: skip
    runs.loc[runs["run_id"] == "b-3", "status"] = "diverged"
    acc = {"a@up10": [0.80, 0.82, 0.84], "b": [0.70, 0.74, None]}
    rows = []
    for lab, values in acc.items():
        for seed, v in zip((1, 2, 3), values, strict=True):
            for ledger, mb in (("restricted", 8e6), ("measured", 9e6)):
                read = v is not None
                rows.append(
                    {"run_id": f"{lab}-{seed}", "seed": seed, "ledger": ledger, "level": 0.1,
                     "level_bytes": int(10e6), "status": "crossed" if read else "diverged",
                     "round": 5 if read else None, "cum_up": mb + seed * 1e6 if read else None,
                     "val_acc": v, "test_acc": v}
                )  # fmt: skip
    finished = runs[runs["status"] == "finished"]
    return Results(
        finished, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(),
        excluded=1, excluded_runs=runs[runs["status"] != "finished"], levels=pd.DataFrame(rows),
    )  # fmt: skip


def test_each_arms_choice_is_a_point_at_its_reading_with_a_t_interval():
    pts = reading_points(_results(), STUDY).set_index(["ledger", "arm"])
    a = pts.loc[("restricted", "a")]
    assert a["label"] == "a@up10" and a["read"] == 3 and a["diverged"] == 0
    assert a["test_acc"] == pytest.approx(0.82)
    # t_{2, 0.975} = 4.3027, s = 0.02, n = 3: half-width 4.3027 · 0.02 / √3 = 0.04968
    assert a["hi"] - a["test_acc"] == pytest.approx(4.302653 * 0.02 / np.sqrt(3), rel=1e-5)
    assert a["MB"] == pytest.approx(10.0)  # 8 MB + 1, 2, 3 MB by seed: mean 10
    assert pts.loc[("measured", "a"), "MB"] == pytest.approx(11.0)
    b = pts.loc[("restricted", "b")]
    assert b["read"] == 2 and b["diverged"] == 1 and b["test_acc"] == pytest.approx(0.72)
    assert ("measured", "b") not in pts.index  # no choice in that ledger: no point


def test_the_figure_is_written_with_its_axes_fitted_to_the_points(tmp_path):
    import matplotlib

    from analysis.readings_plot import _fitted

    matplotlib.use("Agg")
    [path] = readings_plot(_results(), STUDY, tmp_path)
    assert path.name == "levels_w.png" and path.stat().st_size > 10_000
    # the accuracy axis spans the points and intervals with a 5 % margin (at least the pad)
    assert _fitted(np.array([0.70, 0.90, np.nan]), 0.005) == pytest.approx((0.69, 0.91))
    assert _fitted(np.array([0.80, 0.80]), 0.005) == pytest.approx((0.795, 0.805))
