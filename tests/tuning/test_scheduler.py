"""Trial schedulers over FL rounds: ASHA stops weak trials on evaluation rounds, and a stopped
trial's rows are a prefix, bit for bit, of the same configuration's full run."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
import ray

from reuse_ray.config import ConfigError
from reuse_ray.results import TIMING_COLUMNS, read_table
from reuse_ray.runner import run_fl
from reuse_ray.tuning import parse_experiment, run_sweep

pytestmark = [pytest.mark.ray, pytest.mark.slow]

BASE = {
    "seed": 5,
    "data": {"name": "digits"},
    "model": {"name": "cnn", "hidden": 16},
    "train": {"epochs": 1, "batch_size": 32},
    "fl": {"num_clients": 10, "clients_per_round": 4, "rounds": 6, "eval_every": 1},
    "method": {"name": "fedavg", "topk_ratio": 0.2},
}
# two good learning rates first (they set the bar at each rung), then four that barely move
LRS = [0.1, 0.08, 1e-5, 2e-5, 3e-5, 4e-5]


def sweep(tmp_path, **search) -> dict:
    return {
        "name": "asha",
        "base": copy.deepcopy(BASE),
        "search": {"searcher": "grid", "grid": {"train.lr": LRS}, "num_samples": 1, **search},
        "trial": {"backend": "local", "cpus": 1},
        "results_dir": str(tmp_path / "sweep"),
        "checkpoint_every": 2,
    }


@pytest.fixture(scope="module", autouse=True)
def ray_runtime():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize(
    ("search", "field", "fragment"),
    [
        ({"scheduler": "median"}, "search.scheduler", "none, asha, hyperband"),
        ({"scheduler": "asha", "grace_period": 0}, "search.grace_period", "> 0"),
        ({"scheduler": "asha", "grace_period": 7}, "search.grace_period", "1 to 6"),
        ({"scheduler": "asha", "reduction_factor": 1}, "search.reduction_factor", "≥ 2"),
        ({"scheduler": "asha", "objective": "pareto"}, "search.scheduler", "pareto"),
    ],
)
def test_bad_scheduler_settings_name_the_field(tmp_path, search, field, fragment):
    with pytest.raises(ConfigError) as exc:
        parse_experiment(sweep(tmp_path, **search))
    assert exc.value.field == field and fragment in str(exc.value)


def _metrics(df: pd.DataFrame) -> pd.DataFrame:
    keep = [c for c in df.columns if c not in TIMING_COLUMNS and c != "run_id"]
    return df[keep].sort_values([c for c in ("round", "client_id") if c in keep])


def test_asha_stops_weak_trials_and_their_rows_are_prefixes_of_full_runs(tmp_path):
    lines: list[str] = []
    spec = parse_experiment(sweep(tmp_path, scheduler="asha", grace_period=1, reduction_factor=2))
    run_sweep(spec, say=lines.append)
    trials = read_table(spec.results_dir, "trials")
    runs = read_table(spec.results_dir, "runs").set_index("run_id")
    stopped = trials[trials["status"] == "stopped"]
    assert len(stopped) >= 1, trials[["status", "round_reached", "params_json"]]
    assert (stopped["round_reached"] < 6).all() and not stopped["selected"].any()
    done = trials[trials["status"] == "finished"]
    assert len(done) >= 1 and (done["round_reached"] == 6).all()
    best = json.loads(trials[trials["selected"]].iloc[0]["params_json"])
    assert best["train.lr"] in (0.1, 0.08)  # a finished trial, never a stopped one
    assert any("stopped by the scheduler" in line for line in lines)
    assert (runs.loc[stopped["run_id"], "test_reads"] == 0).all()
    rounds = read_table(spec.results_dir, "rounds")
    events = read_table(spec.results_dir, "client_events")
    for _, trial in stopped.iterrows():
        # the same configuration run to the end, alone: the stopped trial's rows are its prefix
        cfg = spec.workload(spec.name).run_config(json.loads(trial["params_json"]))
        cfg = cfg.replace(results_dir=str(tmp_path / "full" / trial["run_id"]))
        cfg = cfg.replace(engine=cfg.engine.__class__(backend="local"))
        assert cfg.run_id == trial["run_id"]
        run_fl(cfg)
        reached = int(trial["round_reached"])
        assert runs.loc[trial["run_id"], "rounds_completed"] == reached
        for name, table in (("rounds", rounds), ("client_events", events)):
            full = read_table(cfg.results_dir, name)
            mine = table[table["run_id"] == trial["run_id"]]
            assert sorted(mine["round"].unique()) == list(range(1, reached + 1))
            want = full[full["round"] <= reached]
            pd.testing.assert_frame_equal(
                _metrics(mine).reset_index(drop=True),
                _metrics(want).reset_index(drop=True),
                check_exact=True,
            )


def test_a_client_round_budget_ends_the_search_and_asha_buys_more_configurations(tmp_path):
    # 6 rounds x 4 clients a round: a full trial costs 24 client-rounds; the budget is two.
    # One trial at a time, so what each search spends is its configurations' and not the
    # order two concurrent trials happen to report in: the plain search trains the first two
    # configurations fully; ASHA (one rung, at round 3, where the good rate has moved off
    # chance and the tiny ones have not) stops the weak ones after the first at half their
    # cost, and buys more configurations.
    budget = 48
    # 6 configurations on offer, 144 client-rounds in full
    grid = {"train.lr": [0.1, 1e-5, 2e-5, 3e-5, 0.08, 4e-5]}
    one = {"grid": grid, "client_rounds": budget, "max_concurrent_trials": 1}
    plain = parse_experiment(sweep(tmp_path / "plain", **one))
    asha = parse_experiment(
        sweep(tmp_path / "asha", **one, scheduler="asha", grace_period=3, reduction_factor=2)
    )
    said: list[str] = []
    tried = {}
    for name, spec in (("plain", plain), ("asha", asha)):
        run_sweep(spec, say=said.append)
        trials = read_table(spec.results_dir, "trials")
        runs = read_table(spec.results_dir, "runs")
        spent = int(runs["rounds_completed"].sum()) * 4
        # spent, give or take the round a trial trained before it heard
        assert budget <= spent <= budget + 4, (name, spent)
        assert set(trials["status"]) <= {"finished", "stopped"}, trials["status"]
        assert (trials["client_rounds"] == trials["round_reached"] * 4).all()
        tried[name] = len(trials)
    assert tried["plain"] == 2  # the budget, not the grid, ended the plain search
    assert tried["asha"] > tried["plain"], tried
    assert sum(m.startswith("client-round budget: ") for m in said) == 2, said
    assert any(m.startswith("  search: 1 of at most 6 trials finished") for m in said), said


def _study(tmp_path, budget: int) -> dict:
    base = copy.deepcopy(BASE)
    base["seed"] = 101
    base.pop("method")
    return {
        "name": "budget",
        "kind": "study",
        "budget": {"trials_per_arm": 12, "client_rounds": budget, "seed": 0},
        "search": {
            "scheduler": "asha",
            "grace_period": 1,
            "reduction_factor": 2,
            "reeval_top": 1,
            "reeval_seeds": [202],
        },
        "shared": {"train.lr": [1e-5, 0.2, "log"]},
        "objectives": ["val_acc"],
        "final": {"seeds": [1001, 1002]},
        "trial": {"backend": "local", "cpus": 1},
        "checkpoint_every": 2,
        "results_dir": str(tmp_path / "study"),
        "workloads": {"digits": base},
        "arms": {
            "fedavg": {"fixed": {"method.name": "fedavg", "method.topk_ratio": 1.0}},
            "topk": {"fixed": {"method.name": "fedavg", "method.topk_ratio": 0.2}},
            "lossy": {"fixed": {"method.name": "fedavg", "method.topk_ratio": 0.01}},
        },
    }


def test_a_study_gives_every_arm_its_own_budget_and_scheduler_and_selects_robustly(tmp_path):
    from reuse_ray.tuning import parse_experiment, run_study

    budget = 2 * 24  # two full runs' worth per arm (6 rounds x 4 clients)
    spec = parse_experiment(_study(tmp_path, budget))
    said: list[str] = []
    run_study(spec, say=said.append)
    out = spec.results_dir
    trials = read_table(out, "trials")
    runs = read_table(out, "runs").set_index("run_id")
    search = trials[trials["stage"] == "search"]
    for arm, g in search.groupby("arm"):
        spent = int(g["client_rounds"].sum())
        # each arm's own budget, give or take what its running trials trained before they heard
        assert budget <= spent <= budget + 2 * 24, (arm, spent)
        assert len(g) < 12  # the budget, not the draw, ended the arm's search
        assert (runs.loc[g["run_id"], "test_reads"] == 0).all()
    assert search["status"].eq("stopped").any(), search[["arm", "status", "round_reached"]]
    assert len(search) > 3 * 2  # ASHA bought more than two full runs' configurations per arm
    # robust selection: each arm's best finished configuration again on seed 202, validation only
    again = trials[trials["stage"] == "reeval"]
    assert set(again["arm"]) == {"fedavg", "topk", "lossy"} and set(again["seed"]) == {202}
    assert (runs.loc[again["run_id"], "test_reads"] == 0).all()
    chosen = trials[trials["selected"]]
    assert len(chosen) == 3 and chosen["status"].eq("finished").all()
    for _, row in chosen.iterrows():
        twin = again[(again["arm"] == row["arm"]) & (again["params_json"] == row["params_json"])]
        assert row["selection_mean"] == pytest.approx(
            (row["val_acc"] + twin["val_acc"].iloc[0]) / 2
        )
    final = read_table(out, "runs")
    final = final[final["stage"] == "final"]
    assert set(final["label"]) == {"fedavg", "topk", "lossy"} and set(final["seed"]) == {1001, 1002}
    meta = json.loads((tmp_path / "study" / "study.json").read_text())
    assert set(meta["selection_gaps"]["digits"]) == {"fedavg", "topk", "lossy"}
    assert meta["client_rounds"] == {"digits": budget} and meta["search"]["scheduler"] == "asha"
    assert any(m.startswith("[digits] topk: ") and "stopped early" in m for m in said), said
    assert any("selection gap of topk" in m and "mean over 2 search seeds" in m for m in said)
    # --final, as for a sweep: no search stage; the choice made again from the search's runs
    # (the robust re-evaluation's runs kept, each already finished) and the final stage's runs
    # kept: the same runs, the same rows, the same trials table
    before = _tables(out)
    again: list[str] = []
    run_study(spec, final_only=True, say=again.append)
    assert not any("search:" in m for m in again), again
    assert any("runs already finished here; rows kept" in m for m in again), again
    _assert_same_tables(before, _tables(out))
    # --resume without Tune's state (a copied folder, as results/ ship): the search study.json
    # records as chosen from is not searched again; the same runs and rows
    (tmp_path / "study" / "_tune").rename(tmp_path / "tune_set_aside")
    resumed: list[str] = []
    run_study(spec, resume=True, say=resumed.append)
    assert not any("search:" in m for m in resumed), resumed
    # (the re-evaluation stage is a new Tune experiment: its kept runs' trials table rows name
    # this launch's trials; the runs table keeps the trials that computed them)
    after = _tables(out)
    _assert_same_tables(before, after, ignore=["trial_id"])
    assert after["runs"]["trial_id"].equals(before["runs"]["trial_id"])
    # every launch on the record: the study, its --final, its --resume
    meta = json.loads((tmp_path / "study" / "study.json").read_text())
    assert [a["final_only"] for a in meta["attempts"]] == [False, True, False]
    assert meta["status"] == "finished"


def _tables(out) -> dict[str, pd.DataFrame]:
    return {
        "runs": read_table(out, "runs").sort_values("run_id").reset_index(drop=True),
        "trials": read_table(out, "trials"),
    }


def _assert_same_tables(a: dict, b: dict, ignore: list[str] | None = None) -> None:
    for name in a:
        x, y = (t[name].drop(columns=ignore or []) for t in (a, b))
        pd.testing.assert_frame_equal(x, y, check_exact=True)


def test_hyperband_pauses_trials_and_a_resumed_one_equals_an_uninterrupted_run(tmp_path):
    """HyperBand fills its brackets (every trial created at once), pauses trials at their
    milestones with their checkpoints saved, stops the weak ones and resumes the others from
    their checkpoints: a resumed trial that finished has the rows of the same configuration run
    alone, bit for bit, and its runs row says it was resumed."""
    lrs = [0.1, 0.08, 0.06, 1e-5, 2e-5, 3e-5, 4e-5, 5e-5, 6e-5]
    raw = sweep(tmp_path, scheduler="hyperband", reduction_factor=3)
    raw["search"]["grid"] = {"train.lr": lrs}
    raw["checkpoint_every"] = 1
    spec = parse_experiment(raw)
    run_sweep(spec, say=lambda line: None)
    trials = read_table(spec.results_dir, "trials")
    runs = read_table(spec.results_dir, "runs").set_index("run_id")
    assert (trials["status"] == "stopped").any(), trials[["status", "round_reached"]]
    done = trials[trials["status"] == "finished"]
    resumed = runs.loc[done["run_id"], "attempts"] > 1
    assert resumed.any(), runs[["status", "attempts", "rounds_completed"]]
    rounds = read_table(spec.results_dir, "rounds")
    for run_id in done.loc[resumed.to_numpy(), "run_id"]:
        params = json.loads(trials.set_index("run_id").loc[run_id, "params_json"])
        cfg = spec.workload(spec.name).run_config(params)
        cfg = cfg.replace(results_dir=str(tmp_path / "alone" / run_id))
        cfg = cfg.replace(engine=cfg.engine.__class__(backend="local"))
        run_fl(cfg)
        alone = read_table(cfg.results_dir, "rounds")
        mine = rounds[rounds["run_id"] == run_id]
        pd.testing.assert_frame_equal(
            _metrics(mine).reset_index(drop=True),
            _metrics(alone).reset_index(drop=True),
            check_exact=True,
        )


def test_hyperband_over_a_random_searcher_on_a_sweep_file_stops_and_pauses_trials(tmp_path):
    """HyperBand over Optuna's random searcher, read from a sweep file: the searcher's trials
    are created at once (Tune otherwise keeps one pending trial for a searcher), so brackets
    fill, trials pause at their milestones and resume from checkpoints, and weak ones stop."""
    import yaml

    raw = sweep(tmp_path, scheduler="hyperband", reduction_factor=3)
    raw["base"]["fl"].update(rounds=12, eval_every=2)
    raw["search"] = {
        "searcher": "random",
        "space": "fedavg",
        "num_samples": 9,
        "seed": 0,
        "scheduler": "hyperband",
        "grace_period": 2,
        "reduction_factor": 3,
    }
    raw["checkpoint_every"] = 2
    path = tmp_path / "hb.yaml"
    path.write_text(yaml.safe_dump(raw))
    spec = parse_experiment(yaml.safe_load(path.read_text()), str(path))
    said: list[str] = []
    run_sweep(spec, say=said.append)
    trials = read_table(spec.results_dir, "trials")
    runs = read_table(spec.results_dir, "runs").set_index("run_id")
    assert len(trials) == 9, trials[["status", "round_reached"]]
    assert (trials["status"] == "stopped").any(), trials[["status", "round_reached"]]
    assert (runs["attempts"] > 1).any(), runs[["status", "attempts", "rounds_completed"]]
