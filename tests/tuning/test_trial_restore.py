"""A trial whose checkpoint Tune's saved state names is gone from storage starts its run over
from round 1 and writes the rows of an undisturbed trial (no Ray: the trial class in-process)."""

from __future__ import annotations

import pandas as pd
import pytest
from ray import tune

from reuse_ray.results import ATTEMPT_COLUMNS, TIMING_COLUMNS, read_table
from reuse_ray.tuning import load_spec
from reuse_ray.tuning.trainable import FLTrainable

pytestmark = pytest.mark.slow  # two small runs, ~10 s: beside the fast tier

POINT = {"method.name": "dg_fedreuse", "train.lr": 0.05, "label": "dg_fedreuse"}


def _trial(results, restore_from: str | None = None):
    spec = load_spec("sweeps/study.yaml", [f"results_dir={results}"], scale="small")
    trial = tune.with_parameters(FLTrainable, spec=spec.workload("digits"), stage="search")(
        config=dict(POINT)
    )
    if restore_from is not None:
        trial.restore(restore_from)  # Tune's call on a restored trial
    reports = []
    while not (reports and reports[-1].get("done")):
        reports.append(trial.train())  # what Tune calls: one step, counted
    trial.cleanup()
    return trial, reports


def _tables(results) -> dict[str, pd.DataFrame]:
    drop = TIMING_COLUMNS | ATTEMPT_COLUMNS | {"cfg.results_dir", "config_json"}
    out = {}
    for table in ("runs", "rounds", "client_events"):
        df = read_table(results, table)
        out[table] = df.drop(columns=[c for c in df.columns if c in drop]).reset_index(drop=True)
    return out


def test_a_trial_whose_checkpoint_is_gone_starts_over_and_writes_the_same_rows(tmp_path, capsys):
    _, calm = _trial(tmp_path / "calm")
    gone = tmp_path / "hit" / "_tune" / "s-search" / "trial" / "checkpoint_000001"
    trial, hit = _trial(tmp_path / "hit", restore_from=str(gone))
    assert "its run starts over from round 1" in capsys.readouterr().out
    assert [r["round"] for r in hit] == [r["round"] for r in calm] == [1, 2, 3]
    assert hit[-1]["status"] == "finished" and trial.iteration == len(calm)
    a, b = _tables(tmp_path / "calm"), _tables(tmp_path / "hit")
    for table in a:
        pd.testing.assert_frame_equal(a[table], b[table], check_exact=True)
